// Package gittest makes throwaway git repositories for the tests of the
// packages that read them (pod, pod/source).
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
