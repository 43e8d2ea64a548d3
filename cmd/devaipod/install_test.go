package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// TestMakeInstall runs `make install` into a staging directory, as a
// package build would, and checks what it put there; then `make uninstall`.
// It installs what `make build` made (bin/devaipod, _output's man pages and
// completions): make -o bin/devaipod keeps make from regenerating them, so
// that the test user of `make test` (who cannot write the tree) can run it.
func TestMakeInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make: skipped with -short")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"bin/devaipod", "_output/man/devaipod.1", "_output/completions/devaipod.bash"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is missing under CI: `make build` makes it", f)
			}
			t.Skipf("%s is missing: run `make build` first", f)
		}
	}
	if _, err := exec.LookPath("make"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("make is not installed under CI")
		}
		t.Skip("make is not installed")
	}
	dest := t.TempDir()
	mk := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", "-C", root, "-o", "bin/devaipod"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	mk("install", "DESTDIR="+dest, "PREFIX=/usr")

	want := []string{
		"usr/bin/devaipod",
		"usr/share/bash-completion/completions/devaipod",
		"usr/share/zsh/site-functions/_devaipod",
		"usr/share/fish/vendor_completions.d/devaipod.fish",
		"usr/share/man/man1/devaipod.1",
		"usr/share/man/man1/devaipod-up.1",
		"usr/share/man/man1/devaipod-doctor.1",
		"usr/share/man/man1/devaipod-version.1",
	}
	for _, f := range want {
		fi, err := os.Stat(filepath.Join(dest, f))
		if err != nil {
			t.Errorf("make install did not install %s: %v", f, err)
			continue
		}
		if fi.Size() == 0 {
			t.Errorf("%s is empty", f)
		}
	}
	if fi, err := os.Stat(filepath.Join(dest, "usr/bin/devaipod")); err == nil && fi.Mode().Perm() != 0o755 {
		t.Errorf("usr/bin/devaipod has mode %v, want 0755", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dest, "usr/share/man/man1/devaipod-__gen-man.1")); err == nil {
		t.Error("the hidden __gen-man command has a man page")
	}
	page, _ := os.ReadFile(filepath.Join(dest, "usr/share/man/man1/devaipod.1"))
	for _, s := range []string{".TH \"DEVAIPOD\" \"1\"", "devaipod-up(1)", "devaipod-doctor(1)"} {
		if !bytes.Contains(page, []byte(s)) {
			t.Errorf("devaipod.1 lacks %q:\n%s", s, page)
		}
	}
	up, _ := os.ReadFile(filepath.Join(dest, "usr/share/man/man1/devaipod-up.1"))
	if !bytes.Contains(up, []byte("devaipod up")) || !bytes.Contains(up, []byte("--pull")) {
		t.Errorf("devaipod-up.1 does not document up and its flags:\n%s", up)
	}
	bash, _ := os.ReadFile(filepath.Join(dest, "usr/share/bash-completion/completions/devaipod"))
	if !bytes.Contains(bash, []byte("__start_devaipod")) {
		t.Errorf("the bash completion is not devaipod's:\n%.300s", bash)
	}
	// The installed binary answers --version as `devaipod version`.
	ver, err := exec.Command(filepath.Join(dest, "usr/bin/devaipod"), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	ver2, err := exec.Command(filepath.Join(dest, "usr/bin/devaipod"), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(ver), "devaipod ") || string(ver) != string(ver2) {
		t.Errorf("--version printed %q, version %q", ver, ver2)
	}

	mk("uninstall", "DESTDIR="+dest, "PREFIX=/usr")
	var left []string
	filepath.WalkDir(dest, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("make uninstall left %q", left)
	}
}

// TestManGeneratorNotLinked: the man pages come from a build with the tag
// genman (genman.go); the CLI itself must not link cobra/doc's markdown
// converter. The test binary's build info is the CLI's (without its test
// files).
func TestManGeneratorNotLinked(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info in the test binary")
	}
	for _, d := range bi.Deps {
		if strings.HasPrefix(d.Path, "github.com/cpuguy83/go-md2man") || strings.HasPrefix(d.Path, "github.com/russross/blackfriday") {
			t.Errorf("devaipod links %s %s; only the genman build should", d.Path, d.Version)
		}
	}
	for _, c := range newRootCommand(streams{}).Commands() {
		if c.Name() == "__gen-man" {
			t.Error("the CLI has the __gen-man command; only the genman build should")
		}
	}
}
