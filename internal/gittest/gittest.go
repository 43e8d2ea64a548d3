// Package gittest makes throwaway git repositories, and parts of git's
// formats, for the tests of the packages that read them (pod, pod/source,
// gator, internal/gitpack).
package gittest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// identity lets commits be made on a machine without a git user.
var identity = []string{"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t"}

// Repo makes a repository on branch main with one commit (README.md).
func Repo(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	Git(t, dir, []string{"init", "-q", "-b", "main"})
	WriteFile(t, filepath.Join(dir, "README.md"), "hello\n")
	Git(t, dir, []string{"add", "."}, []string{"commit", "-q", "-m", "init"})
	return dir
}

// Git runs each git command in repo and fails the test on the first error.
func Git(t testing.TB, repo string, cmds ...[]string) {
	t.Helper()
	for _, args := range cmds {
		cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
		cmd.Env = append(cmd.Environ(), identity...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// WriteFile writes content to path, creating its directory.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// DeltaHeader is the start of a git delta: its base's size, then the size
// of what it makes, 7 bits a byte, least significant first.
func DeltaHeader(base, made int64) []byte {
	var b []byte
	for _, n := range []int64{base, made} {
		for n >= 0x80 {
			b = append(b, byte(n&0x7f)|0x80)
			n >>= 7
		}
		b = append(b, byte(n))
	}
	return b
}
