package pod

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/plan"
)

func TestTarShare(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "data")
	os.MkdirAll(filepath.Join(data, "sub"), 0o755)
	os.WriteFile(filepath.Join(data, "a.txt"), []byte("hello"), 0o664)
	os.WriteFile(filepath.Join(data, "sub", "run.sh"), []byte("#!/bin/sh\n"), 0o775)
	os.Symlink("/etc/passwd", filepath.Join(data, "out"))
	link := filepath.Join(root, "link")
	os.Symlink(data, link)

	for _, rw := range []bool{false, true} {
		sh := &Shared{Path: link, Resolved: data, RW: rw}
		var buf bytes.Buffer
		if err := tarShare(&buf, sh); err != nil {
			t.Fatal(err)
		}
		entries := map[string]*tar.Header{}
		tr := tar.NewReader(&buf)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			entries[h.Name] = h
		}
		rel := func(p string) string { return p[1:] }
		file := entries[rel(data)+"/a.txt"]
		script := entries[rel(data)+"/sub/run.sh"]
		if file == nil || script == nil || sh.Files != 5 || sh.Bytes != 15 {
			t.Fatalf("rw=%v: entries %v, %d files %d bytes", rw, entries, sh.Files, sh.Bytes)
		}
		wantUID, wantFile, wantScript := 0, int64(0o444), int64(0o555)
		if rw {
			wantUID, wantFile, wantScript = plan.AgentUID, 0o644, 0o755
		}
		if file.Uid != wantUID || file.Mode != wantFile || script.Mode != wantScript {
			t.Errorf("rw=%v: a.txt uid %d mode %o, run.sh mode %o", rw, file.Uid, file.Mode, script.Mode)
		}
		// The parents are root's and read-only, whatever the share.
		if p := entries[rel(filepath.Dir(data))+"/"]; p == nil || p.Uid != 0 || p.Mode != 0o755 {
			t.Errorf("rw=%v: parent %+v", rw, p)
		}
		// A symlink inside stays a symlink (to the agent's own /etc).
		if out := entries[rel(data)+"/out"]; out == nil || out.Typeflag != tar.TypeSymlink || out.Linkname != "/etc/passwd" {
			t.Errorf("rw=%v: the symlink inside: %+v", rw, out)
		}
		// The path as asked leads to the copy of what it resolved to.
		if l := entries[rel(link)]; l == nil || l.Typeflag != tar.TypeSymlink || l.Linkname != plan.HostShareDir+data {
			t.Errorf("rw=%v: the asked path: %+v", rw, l)
		}
	}
}

// TestShareTooLargeSendsNothing: what would stop the copy half-way (here,
// more than the bound) is found before a byte reaches the pod, so no
// partial copy is left in the agent's /host.
func TestShareTooLargeSendsNothing(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("first"), 0o644)
	big, err := os.Create(filepath.Join(dir, "z.bin"))
	if err != nil {
		t.Fatal(err)
	}
	big.Truncate(maxShareBytes) // sparse: costs no disk
	big.Close()
	f := runningPodFake("s")
	_, err = Share(context.Background(), f, "s", dir, ShareOptions{})
	if !errors.Is(err, ErrShareTooLarge) {
		t.Fatalf("share of more than the bound: %v", err)
	}
	if f.copied != 0 || slices.Contains(f.calls, "copy") {
		t.Errorf("%d bytes went into the pod before the refusal", f.copied)
	}
}

// TestTarShareLeavesOut: a share keeps the pod's masks and leaves git
// directories out unless asked; a masked file alone is refused.
func TestTarShareLeavesOut(t *testing.T) {
	data := t.TempDir()
	for name, content := range map[string]string{".env": "SECRET=1", "keys/id_ed25519": "key", "src/main.go": "package main",
		".git/config": "[core]", "sub/.git/HEAD": "ref", "wt/.git": "gitdir: ../x"} {
		os.MkdirAll(filepath.Join(data, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(data, name), []byte(content), 0o644)
	}
	mask := []string{".env", ".env.*", "*.pem", "*.key", "id_*"}
	for _, git := range []bool{false, true} {
		sh := &Shared{Path: data, Resolved: data, mask: mask, git: git}
		var buf bytes.Buffer
		if err := tarShare(&buf, sh); err != nil {
			t.Fatal(err)
		}
		var names []string
		tr := tar.NewReader(&buf)
		for h, err := tr.Next(); err == nil; h, err = tr.Next() {
			names = append(names, strings.TrimPrefix(h.Name, strings.TrimPrefix(data, "/")))
		}
		joined := strings.Join(names, " ")
		if strings.Contains(joined, ".env") || strings.Contains(joined, "id_ed25519") || !strings.Contains(joined, "/src/main.go") || sh.Masked != 2 {
			t.Errorf("git %v: masked files shared, or too much left out (%d masked): %s", git, sh.Masked, joined)
		}
		if hasGit := strings.Contains(joined, ".git"); hasGit != git || (!git && sh.GitDirs != 3) {
			t.Errorf("git %v: %d git directories left out; shared: %s", git, sh.GitDirs, joined)
		}
	}
	f := runningPodFake("s")
	if _, err := Share(context.Background(), f, "s", filepath.Join(data, ".env"), ShareOptions{Mask: mask}); err == nil || !strings.Contains(err.Error(), "credentials") && !strings.Contains(err.Error(), "masks") || f.copied != 0 {
		t.Errorf("a masked file alone: %v (%d bytes copied)", err, f.copied)
	}
}

// runningPodFake is a fake engine with pod short and its agent running.
func runningPodFake(short string) *fakeEngine {
	f := newFake()
	f.add(KindPod, plan.PodName(short), short, map[string]string{plan.LabelPod: short})
	f.add(KindContainer, plan.ContainerName(short, plan.RoleAgent), short, map[string]string{plan.LabelPod: short, plan.LabelRole: plan.RoleAgent})
	for k, o := range f.objects {
		o.State = "running"
		f.objects[k] = o
	}
	return f
}
