package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// gitRun runs git in dir as a test's setup.
func gitRun(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
}

// TestInspectGit: a clone as up makes it has nothing to report; each way
// of making the trusted side's git run a program is reported by name.
func TestInspectGit(t *testing.T) {
	repo := t.TempDir()
	gitRun(t, repo, "init", "-q", "--template=")
	os.WriteFile(filepath.Join(repo, "f"), []byte("x"), 0o644)
	gitRun(t, repo, "add", "f")
	gitRun(t, repo, "commit", "-qm", "init")
	if got := inspectGit(repo); len(got) != 0 {
		t.Fatalf("a clean repository: %q", got)
	}
	// A nested repository with a program in its config, staged as a
	// gitlink; the top repository's config, hooks and modules planted.
	sub := filepath.Join(repo, "sub")
	os.MkdirAll(sub, 0o755)
	gitRun(t, sub, "init", "-q", "--template=")
	gitRun(t, sub, "commit", "-q", "--allow-empty", "-m", "s")
	gitRun(t, sub, "config", "core.fsmonitor", "/tmp/trap")
	gitRun(t, repo, "add", "sub")
	gitRun(t, repo, "config", "core.fsmonitor", "false") // not a program
	gitRun(t, repo, "config", "filter.evil.clean", "/tmp/trap")
	gitRun(t, repo, "config", "core.hooksPath", "/tmp/hooks")
	os.MkdirAll(filepath.Join(repo, ".git", "hooks"), 0o755)
	os.WriteFile(filepath.Join(repo, ".git", "hooks", "pre-commit"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(repo, ".git", "hooks", "pre-push.sample"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(repo, ".git", "commondir"), []byte("../evil\n"), 0o644)
	os.MkdirAll(filepath.Join(repo, ".git", "modules", "m", "hooks"), 0o755)
	os.WriteFile(filepath.Join(repo, ".git", "modules", "m", "hooks", "post-checkout"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(repo, ".git", "modules", "m", "config"), []byte("[include]\n\tpath = /tmp/x\n"), 0o644)

	got := strings.Join(inspectGit(repo), "\n")
	for _, want := range []string{
		".git/commondir exists",
		".git/config sets filter.*.clean",
		".git/config sets core.hookspath",
		".git/hooks/pre-commit is a hook",
		".git/modules/m/hooks/post-checkout is a hook",
		".git/modules/m/config sets include.path",
		"sub/.git/config (a gitlink of the index) sets core.fsmonitor",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	// A config git reads whole, with a line longer than a scan takes
	// before the key: the key is not missed.
	os.WriteFile(filepath.Join(sub, ".git", "config"), []byte("[core]\n\t# "+strings.Repeat("x", 100<<10)+"\n\tsshCommand = /tmp/trap\n"), 0o644)
	if got := strings.Join(inspectGit(repo), "\n"); !strings.Contains(got, "sub/.git/config (a gitlink of the index) sets core.sshcommand") {
		t.Errorf("a config with a long line:\n%s", got)
	}
	// A FIFO in its place: reported, nothing waits for a writer.
	os.Remove(filepath.Join(sub, ".git", "config"))
	if err := syscall.Mkfifo(filepath.Join(sub, ".git", "config"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(inspectGit(repo), "\n"); !strings.Contains(got, "sub/.git/config (a gitlink of the index): not a regular file") {
		t.Errorf("a FIFO for a config:\n%s", got)
	}
	// The gitlink's folder a file now: no nested repository, nothing to
	// report of it.
	os.RemoveAll(sub)
	os.WriteFile(sub, []byte("x"), 0o644)
	if got := strings.Join(inspectGit(repo), "\n"); strings.Contains(got, "sub/") {
		t.Errorf("a gitlink whose folder is a file:\n%s", got)
	}
	os.Remove(sub)

	// A gitlink whose folder the agent made a symlink out of the tree:
	// nothing is read through it, and it is reported.
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(outside, ".git"), 0o755)
	os.WriteFile(filepath.Join(outside, ".git", "config"), []byte("[core]\n\tsshCommand = /tmp/outside\n"), 0o644)
	os.RemoveAll(sub)
	os.Symlink(outside, sub)
	got = strings.Join(inspectGit(repo), "\n")
	if strings.Contains(got, "sub/.git/config") || !strings.Contains(got, "sub/.git, a gitlink of the index:") {
		t.Errorf("a gitlink's folder symlinked out of the tree:\n%s", got)
	}
	for _, not := range []string{"pre-push.sample", ".git/config sets core.fsmonitor"} {
		if strings.Contains(got+"\n", not) {
			t.Errorf("reported %q, which runs nothing:\n%s", not, got)
		}
	}

	os.Remove(filepath.Join(repo, ".git", "commondir"))
	os.Rename(filepath.Join(repo, ".git"), filepath.Join(repo, "real.git"))
	os.WriteFile(filepath.Join(repo, ".git"), []byte("gitdir: real.git\n"), 0o644)
	if got := inspectGit(repo); len(got) != 1 || !strings.Contains(got[0], "not a directory") {
		t.Errorf("a gitfile: %q", got)
	}
}

// TestVerifyMaskedGit: the row finds a masked blob loose or packed, and
// passes when the object store lacks it.
func TestVerifyMaskedGit(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "workspaces", "p")
	os.MkdirAll(repo, 0o755)
	gitRun(t, repo, "init", "-q", "--template=")
	hash := func(content string) string {
		cmd := exec.Command("git", "-C", repo, "hash-object", "-w", "--stdin")
		cmd.Stdin = strings.NewReader(content)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	secret := hash("TOKEN=hush\n")
	absent := strings.Repeat("ab", 20)
	check := func(ids ...string) (verifyResult, string) {
		args := []string{"--workspace", "/workspaces/p"}
		for _, id := range ids {
			args = append(args, "--masked-object", id)
		}
		v, _ := testVerifier(t, root, testOptions(t, args...))
		return v.maskedGit(context.Background())
	}
	res, detail := check(absent, secret)
	wantResult(t, "loose", res, detail, verifyFail, secret[:12]+" (loose)")
	pack := exec.Command("git", "-C", repo, "pack-objects", "-q", ".git/objects/pack/pack")
	pack.Stdin = strings.NewReader(secret + "\n")
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("pack-objects: %v %s", err, out)
	}
	os.Remove(filepath.Join(repo, ".git", "objects", secret[:2], secret[2:]))
	res, detail = check(absent, secret)
	wantResult(t, "packed", res, detail, verifyFail, secret[:12]+" (in pack-")
	res, detail = check(absent)
	wantResult(t, "absent", res, detail, verifyPass, "none of 1 masked blobs in 1 pack(s)")
	res, detail = check()
	wantResult(t, "nothing masked", res, detail, verifyNA)
}

// TestInspectConfigAsGitReadsIt: the forms of config that git reads and
// an earlier line-by-line reading missed, each making git run a program.
func TestInspectConfigAsGitReadsIt(t *testing.T) {
	for text, want := range map[string]string{
		"\xef\xbb\xbf[core]\n\thooksPath = /tmp/h\n":                        "sets core.hookspath",
		"\xef\xbb\xbf[core]\n\tfsmonitor = /tmp/f\n":                        "sets core.fsmonitor",
		"[remote \"x\"]\n\turl = ext::sh -c touch% /tmp/p\n":                "sets remote.*.url",
		"[protocol \"ext\"]\n\tallow = always\n":                            "sets protocol.*.allow",
		"[pager]\n\tlog = \"sh -c id\"\n":                                   "sets pager.log",
		"[credential \"https://example.test\"]\n\thelper = !touch /tmp/p\n": "sets credential.*.helper",
		"[core]\n\tpager = a\\\n b\n":                                       "sets core.pager",
		"[core] sshCommand = x\n":                                           "sets core.sshcommand",
		"[url \"ext::sh -c id\"]\n\tinsteadOf = https://\n":                 "sets url.*.insteadof",
		"[hook \"x\"]\n\tcommand = id\n\tevent = pre-commit\n":              "sets hook.*.command",
		"[a]\n\tk = \"unterminated\n":                                       "git refuses this configuration",
	} {
		var got []string
		inspectConfigText([]byte(text), nil, "cfg", func(f string, a ...any) { got = append(got, fmt.Sprintf(f, a...)) })
		if !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("%q: %q; want %q", text, got, want)
		}
	}
	for _, text := range []string{"[core]\n\tfsmonitor = false\n", "[pager]\n\tlog = false\n\tdiff = true\n", "[protocol \"file\"]\n\tallow = user\n",
		"[remote \"origin\"]\n\turl = https://git.example.test/o/r\n"} {
		var got []string
		inspectConfigText([]byte(text), nil, "cfg", func(f string, a ...any) { got = append(got, fmt.Sprintf(f, a...)) })
		if len(got) > 0 {
			t.Errorf("%q: %q; want nothing", text, got)
		}
	}
}
