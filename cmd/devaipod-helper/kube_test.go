package main

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devaipod/devaipod/internal/helperargs"
)

// TestKubeHelperArgsRoundTrip: what pod/kube writes for the init
// container, the engine's untar and the umask wrapper is what the helper
// reads.
func TestKubeHelperArgsRoundTrip(t *testing.T) {
	t.Run("kube-init", func(t *testing.T) {
		x := helperargs.KubeInit{Install: "/opt/install", Chowns: []string{helperargs.Chown("/volumes/ws", 1000, 1000), helperargs.Chown("/volumes/p", 1100, 1100)},
			Secrets: []string{helperargs.SecretCopy("/secrets/proxy", "/secret-copies/proxy", 1100)}, Wait: "/volumes/host-share/.seeded", Timeout: time.Minute,
			SubPathProbe: "/volumes/host-share/.probe", SubPathCheck: "/probe"}
		var o kubeInitOptions
		parseAs(t, newKubeInitFlagSet(&o), x.Args(), "kube-init")
		if o.install != x.Install || !slices.Equal(o.chowns, x.Chowns) || !slices.Equal(o.secrets, x.Secrets) || o.wait != x.Wait || o.timeout != x.Timeout ||
			o.subPathProbe != x.SubPathProbe || o.subPathCheck != x.SubPathCheck {
			t.Errorf("%+v", o)
		}
		if c, err := parseSecretCopy(o.secrets[0]); err != nil || c != (secretCopy{"/secrets/proxy", "/secret-copies/proxy", 1100}) {
			t.Errorf("%+v %v", c, err)
		}
		if c, err := parseChown(o.chowns[1]); err != nil || c != (chownSpec{"/volumes/p", 1100, 1100}) {
			t.Errorf("%+v %v", c, err)
		}
	})
	t.Run("untar", func(t *testing.T) {
		x := helperargs.Untar{Dir: "/volumes/workspace", Done: "/volumes/host-share/.seeded"}
		var o untarOptions
		parseAs(t, newUntarFlagSet(&o), x.Args(), "untar")
		if o.dir != x.Dir || o.done != x.Done {
			t.Errorf("%+v", o)
		}
	})
	t.Run("umask", func(t *testing.T) {
		x := helperargs.Umask{Mask: "0002", Command: []string{"/opt/devaipod/devaipod-helper", "init", "--", "sh"}}
		rest := parseAs(t, newUmaskFlagSet(), x.Args(), "umask")
		if !slices.Equal(rest, append([]string{"0002", "--"}, x.Command...)) {
			t.Errorf("%q", rest)
		}
	})
}

func tarOf(t *testing.T, entries ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = "content of " + h.Name
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	return &buf
}

func TestUntar(t *testing.T) {
	dir := t.TempDir()
	mtime := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	in := tarOf(t,
		&tar.Header{Typeflag: tar.TypeDir, Name: ".", Mode: 0o755},
		&tar.Header{Typeflag: tar.TypeDir, Name: "demo/", Mode: 0o2775, ModTime: mtime},
		&tar.Header{Typeflag: tar.TypeReg, Name: "demo/run.sh", Mode: 0o755, ModTime: mtime},
		&tar.Header{Typeflag: tar.TypeDir, Name: "demo/ro/", Mode: 0o555},
		&tar.Header{Typeflag: tar.TypeReg, Name: "demo/ro/f", Mode: 0o644},
		&tar.Header{Typeflag: tar.TypeSymlink, Name: "demo/link", Linkname: "run.sh"},
	)
	if err := untar(in, dir, false); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "demo/run.sh"))
	if err != nil || st.Mode().Perm() != 0o755 || !st.ModTime().Equal(mtime) {
		t.Errorf("run.sh: %v %v", st, err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "demo")); st.Mode()&os.ModeSetgid == 0 {
		t.Errorf("demo lost its setgid bit: %v", st.Mode())
	}
	if st, _ := os.Stat(filepath.Join(dir, "demo/ro")); st.Mode().Perm() != 0o555 {
		t.Errorf("demo/ro: %v", st.Mode())
	}
	os.Chmod(filepath.Join(dir, "demo/ro"), 0o755) // for TempDir's cleanup
	if l, _ := os.Readlink(filepath.Join(dir, "demo/link")); l != "run.sh" {
		t.Errorf("link -> %q", l)
	}

	// Nothing lands outside the directory: not through "..", not through a
	// symlink the stream made first.
	outside := t.TempDir()
	for name, stream := range map[string]*bytes.Buffer{
		"dotdot": tarOf(t, &tar.Header{Typeflag: tar.TypeReg, Name: "../" + filepath.Base(outside) + "/escaped", Mode: 0o644}),
		"symlink": tarOf(t,
			&tar.Header{Typeflag: tar.TypeSymlink, Name: "out", Linkname: outside},
			&tar.Header{Typeflag: tar.TypeReg, Name: "out/escaped", Mode: 0o644}),
	} {
		if err := untar(stream, t.TempDir(), false); err == nil {
			t.Errorf("%s: extracted without error", name)
		}
		if _, err := os.Stat(filepath.Join(outside, "escaped")); err == nil {
			t.Fatalf("%s: a file landed outside the directory", name)
		}
	}
}

func TestKubeInit(t *testing.T) {
	src := t.TempDir()
	defer func(r string) { installRoot = r }(installRoot)
	installRoot = src
	os.WriteFile(filepath.Join(src, "devaipod-helper"), []byte("helper"), 0o755)
	os.WriteFile(filepath.Join(src, "devaipod-gator"), []byte("gator"), 0o755)
	os.WriteFile(filepath.Join(src, "opencode-gator.json"), []byte("{}"), 0o644)
	os.MkdirAll(filepath.Join(src, "bin"), 0o755)
	os.WriteFile(filepath.Join(src, "bin/oc"), []byte("#!/bin/sh"), 0o755)

	secrets := t.TempDir()
	os.WriteFile(filepath.Join(secrets, "TOKEN"), []byte("s3cret"), 0o444)
	os.Symlink("..2024", filepath.Join(secrets, "..data"))

	install, copies, marker := t.TempDir(), filepath.Join(t.TempDir(), "proxy"), filepath.Join(t.TempDir(), "seeded")
	o := kubeInitOptions{install: install, secrets: []string{helperargs.SecretCopy(secrets, copies, os.Getuid())},
		chowns: []string{helperargs.Chown(install, os.Getuid(), os.Getgid())}, wait: marker, timeout: 5 * time.Second}
	t.Cleanup(func() { os.Chmod(copies, 0o700) }) // 0500 after the copy
	go func() {
		time.Sleep(300 * time.Millisecond)
		os.WriteFile(marker, nil, 0o644)
	}()
	var log strings.Builder
	for range 2 { // a restarted pod runs it again
		if err := kubeInit(context.Background(), o, &log); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"devaipod-helper": "helper", "bin/oc": "#!/bin/sh", "opencode-gator.json": "{}"} {
		if b, err := os.ReadFile(filepath.Join(install, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", name, b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(install, "devaipod-gator")); err == nil {
		t.Error("the gator's binary was installed: only the gator runs it, from its image")
	}
	if st, err := os.Stat(filepath.Join(install, "devaipod-helper")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("helper mode: %v %v", st, err)
	}
	entries, _ := os.ReadDir(copies)
	if len(entries) != 1 || entries[0].Name() != "TOKEN" {
		t.Fatalf("secret copies: %v", entries)
	}
	if st, _ := os.Stat(filepath.Join(copies, "TOKEN")); st.Mode().Perm() != 0o400 {
		t.Errorf("secret copy mode %v, want 0400", st.Mode())
	}

	// In place already and not writable (the agent's uid, under podman
	// 4.3's kube play): left alone.
	os.Chmod(install, 0o555)
	if err := kubeInit(context.Background(), kubeInitOptions{install: install}, &log); err != nil && os.Getuid() != 0 {
		t.Errorf("an install in place, unwritable: %v", err)
	}
	os.Chmod(install, 0o755)

	// The subPath probe: the directory itself passes, the volume it lies in
	// (what a runtime that ignores subPath mounts) does not. A volume root
	// that all may write (a local-path provisioner's) is made the owner's
	// alone, and what the agent left at the probe's path is replaced, not
	// followed.
	vol, elsewhere := t.TempDir(), t.TempDir()
	os.Chmod(vol, 0o777)
	probe := filepath.Join(vol, ".probe")
	os.Symlink(elsewhere, probe)
	if err := kubeInit(context.Background(), kubeInitOptions{chowns: []string{helperargs.Chown(vol, os.Getuid(), os.Getgid())},
		subPathProbe: probe, subPathCheck: probe}, &log); err != nil {
		t.Errorf("subPath honoured: %v", err)
	}
	if st, err := os.Stat(vol); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("a volume root of mode 0777: now %v (%v); want 0755", st.Mode(), err)
	}
	if st, err := os.Lstat(probe); err != nil || !st.IsDir() {
		t.Errorf("the probe: %v %v; want a directory of its own", st, err)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "ok")); err == nil {
		t.Error("the probe followed a symlink the agent left")
	}
	if err := kubeInit(context.Background(), kubeInitOptions{subPathCheck: vol}, &log); err == nil || !strings.Contains(err.Error(), "ignores subPath") {
		t.Errorf("subPath ignored: %v", err)
	}

	os.Remove(marker)
	o = kubeInitOptions{wait: marker, timeout: 300 * time.Millisecond}
	if err := kubeInit(context.Background(), o, &log); err == nil || !strings.Contains(err.Error(), "did not appear") {
		t.Errorf("no marker: %v", err)
	}
}
