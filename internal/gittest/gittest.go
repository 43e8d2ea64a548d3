// Package gittest makes throwaway git repositories, and parts of git's
// formats, for the tests of the packages that read them (pod, pod/source,
// gator, internal/gitpack).
package gittest

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// ServeCompare answers GitHub's "compare two commits" (GET
// /repos/OWNER/REPO/compare/BASE...HEAD) for basehead, the path's last
// part, from the bare repository bare, as the fake forges of the tests
// need it: 404 for a commit it does not have, else the status and
// ahead_by/behind_by counts (no commits or files listed).
func ServeCompare(w http.ResponseWriter, bare, basehead string) {
	base, head, ok := strings.Cut(basehead, "...")
	count := func(rng string) (int, bool) {
		out, err := exec.Command("git", "-C", bare, "rev-list", "--count", rng, "--").Output()
		n, cerr := strconv.Atoi(strings.TrimSpace(string(out)))
		return n, err == nil && cerr == nil
	}
	for _, c := range []string{base, head} {
		if ok && exec.Command("git", "-C", bare, "rev-parse", "--verify", "--quiet", c+"^{commit}").Run() != nil {
			ok = false
		}
	}
	ahead, okA := count(base + ".." + head)
	behind, okB := count(head + ".." + base)
	w.Header().Set("Content-Type", "application/json")
	if !ok || !okA || !okB {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"message":"Not Found"}`)
		return
	}
	status := "diverged"
	switch {
	case ahead == 0 && behind == 0:
		status = "identical"
	case behind == 0:
		status = "ahead"
	case ahead == 0:
		status = "behind"
	}
	json.NewEncoder(w).Encode(map[string]any{"status": status, "ahead_by": ahead, "behind_by": behind, "total_commits": ahead})
}
