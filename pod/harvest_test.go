package pod

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/internal/gittest"
	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/pod/source"
)

// plantTraps makes repo's git run a program that leaves a marker in
// markers wherever it can: hooks, fsmonitor, a filter and a diff driver
// that .gitattributes names, a nested repository with its own fsmonitor
// staged as a gitlink.
func plantTraps(t *testing.T, repo, markers string) {
	t.Helper()
	trap := func(name string) string {
		script := filepath.Join(markers, "..", "trap-"+name)
		gittest.WriteFile(t, script, "#!/bin/sh\ntouch "+filepath.Join(markers, name)+"\ncat\n")
		os.Chmod(script, 0o755)
		return script
	}
	for _, hook := range []string{"post-checkout", "post-commit", "reference-transaction", "pre-commit", "post-merge", "fsmonitor-watchman"} {
		gittest.WriteFile(t, filepath.Join(repo, ".git", "hooks", hook), "#!/bin/sh\ntouch "+filepath.Join(markers, "hook-"+hook)+"\n")
		os.Chmod(filepath.Join(repo, ".git", "hooks", hook), 0o755)
	}
	gittest.Git(t, repo,
		[]string{"config", "core.fsmonitor", trap("fsmonitor")},
		[]string{"config", "filter.evil.clean", trap("clean")},
		[]string{"config", "filter.evil.smudge", trap("smudge")},
		[]string{"config", "diff.evil.textconv", trap("textconv")},
		[]string{"config", "diff.evil.command", trap("diffcmd")})
	gittest.WriteFile(t, filepath.Join(repo, ".gitattributes"), "* filter=evil diff=evil\n")
	sub := filepath.Join(repo, "sub")
	os.MkdirAll(sub, 0o755)
	gittest.Git(t, sub, []string{"init", "-q"})
	gittest.WriteFile(t, filepath.Join(sub, "x"), "x\n")
	gittest.Git(t, sub, []string{"add", "x"}, []string{"commit", "-q", "-m", "x"},
		[]string{"config", "core.fsmonitor", trap("sub-fsmonitor")})
}

func runScript(t *testing.T, dir, script string, stdin []byte, env []string, args ...string) ([]byte, string) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", script, "test"}, args...)...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("script: %v\n%s", err, stderr.String())
	}
	return stdout.Bytes(), stderr.String()
}

// runExportMasked runs exportScript in the agent's repository at dir as up
// makes the agent's view of it: each of masked (names without spaces) is
// /dev/null bound read-only over its path, in a mount namespace of its own
// (unshare, as the tests' unprivileged user).
func runExportMasked(t *testing.T, dir string, masked []string, env []string, args ...string) []byte {
	t.Helper()
	mount := `for f in $DEVAIPOD_TEST_MASKED; do : > "$f" && mount --bind -o ro /dev/null "$f" || exit 1; done; exec sh -c "$0" test "$@"`
	cmd := exec.Command("unshare", append([]string{"-rm", "sh", "-c", mount, exportScript}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(slices.Clone(env), "DEVAIPOD_TEST_MASKED="+strings.Join(masked, " "))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("exportScript under unshare: %v\n%s", err, stderr.String())
	}
	return stdout.Bytes()
}

// TestTakeWorkRunsNothingTheAgentPlanted plays both sides on this host:
// the agent's repository, full of traps, packs its work with exportScript
// (its traps may fire there: that is the agent's side); then the trusted
// side diffs it with diffScript and fetches it with FetchWork, and no
// trap fires.
func TestTakeWorkRunsNothingTheAgentPlanted(t *testing.T) {
	trusted := gittest.Repo(t)
	gittest.WriteFile(t, filepath.Join(trusted, ".env"), "SECRET=masked\n")
	for _, f := range []string{"hidden.txt", "assumed.txt", "linked.txt"} {
		gittest.WriteFile(t, filepath.Join(trusted, f), "as committed\n")
	}
	gittest.Git(t, trusted, []string{"add", "."}, []string{"commit", "-q", "-m", "env"})
	base := strings.TrimSpace(string(must(exec.Command("git", "-C", trusted, "rev-parse", "HEAD").Output())))
	// The agent's git directory as up makes it: without the masked
	// file's blob, which is skip-worktree and absent from the work tree.
	agent := filepath.Join(t.TempDir(), "agent")
	if err := source.AgentGitDir(context.Background(), trusted, filepath.Join(agent, ".git"), []string{".env"}); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, agent, []string{"checkout", "-q", "--", "."}, []string{"checkout", "-q", "-b", "agent/fix"})
	if _, err := os.Stat(filepath.Join(agent, ".env")); err == nil {
		t.Fatal("the masked file is in the agent's work tree")
	}
	gittest.WriteFile(t, filepath.Join(agent, "fix.go"), "package fix\n")
	gittest.Git(t, agent, []string{"add", "fix.go"}, []string{"commit", "-q", "-m", "fix"})
	markers := filepath.Join(t.TempDir(), "markers")
	os.MkdirAll(markers, 0o755)
	plantTraps(t, agent, markers)
	gittest.Git(t, agent, []string{"add", "sub"}) // staged as a gitlink
	gittest.WriteFile(t, filepath.Join(agent, "README.md"), "hello, edited\n")
	gittest.WriteFile(t, filepath.Join(agent, "new.txt"), "new file\n")
	gittest.WriteFile(t, filepath.Join(agent, ".envrc"), "") // a protected path's placeholder, as up makes it
	// A change the agent hides from its own index, and one it replaces
	// by a link to /dev/null, which is no masked file.
	gittest.WriteFile(t, filepath.Join(agent, "hidden.txt"), "changed in secret\n")
	gittest.Git(t, agent, []string{"update-index", "--skip-worktree", "hidden.txt"})
	gittest.WriteFile(t, filepath.Join(agent, "assumed.txt"), "changed too\n")
	gittest.Git(t, agent, []string{"update-index", "--assume-unchanged", "assumed.txt"})
	os.Remove(filepath.Join(agent, "linked.txt"))
	os.Symlink("/dev/null", filepath.Join(agent, "linked.txt"))

	os.RemoveAll(markers) // the setup's own git sprang some
	os.MkdirAll(markers, 0o755)

	env := append([]string{"PATH=" + os.Getenv("PATH")}, source.TrustedGitEnv...)
	bundle := runExportMasked(t, agent, []string{".env"}, env, base, ":(exclude,literal).envrc")
	patch, _ := runScript(t, trusted, diffScript, bundle, env, trusted, base, "patch", "", "0")
	for _, want := range []string{"+package fix", "-hello", "+hello, edited", "+new file", "diff --git a/.gitattributes b/.gitattributes",
		"+changed in secret", "+changed too", "+/dev/null"} {
		if !strings.Contains(string(patch), want) {
			t.Errorf("diff lacks %q:\n%s", want, patch)
		}
	}
	if strings.Contains(string(patch), ".env") { // nor .envrc, which is protected
		t.Errorf("the diff takes the masked file for changed:\n%s", patch)
	}
	stat, _ := runScript(t, trusted, diffScript, bundle, env, trusted, base, "stat", "", "0", "new.txt")
	if !strings.Contains(string(stat), "new.txt") || strings.Contains(string(stat), "fix.go") {
		t.Errorf("diff --stat -- new.txt:\n%s", stat)
	}
	// The hidden-files command: HEAD's work's paths on its standard input,
	// the pathspecs after its words.
	lister := []string{"sh", "-c", `tr '\0' '\n'; echo "pathspecs: $*"`, "lister", "--"}
	listed, _ := runScript(t, trusted, diffScript, bundle, env, append([]string{trusted, base, "stat", "", strconv.Itoa(len(lister))}, append(lister, "new.txt")...)...)
	if !strings.Contains(string(listed), "\nfix.go\nhidden.txt\n") || !strings.Contains(string(listed), "pathspecs: -- new.txt\n") || strings.Contains(string(listed), "fix.go |") {
		t.Errorf("diff --stat -- new.txt, with a hidden-files command:\n%s", listed)
	}
	// One commit: the agent's HEAD, without its uncommitted work.
	head := strings.TrimSpace(string(must(exec.Command("git", "-C", agent, "rev-parse", "HEAD").Output())))
	one, _ := runScript(t, trusted, diffScript, bundle, env, trusted, base, "patch", head, "0")
	if !strings.Contains(string(one), "+package fix") || strings.Contains(string(one), "+new file") || strings.Contains(string(one), "hello, edited") {
		t.Errorf("diff --commit %s:\n%s", head, one)
	}

	path := filepath.Join(t.TempDir(), "work.bundle")
	os.WriteFile(path, bundle, 0o600)
	refs, uncommitted, err := source.FetchWork(context.Background(), trusted, path, "devaipod-p", worktreeRef)
	if err != nil {
		t.Fatal(err)
	}
	agentHead := strings.TrimSpace(string(must(exec.Command("git", "-C", agent, "rev-parse", "HEAD").Output())))
	if refs["refs/remotes/devaipod-p/agent/fix"] != agentHead || refs["refs/remotes/devaipod-p/HEAD"] != agentHead || !uncommitted {
		t.Errorf("fetched %v, uncommitted %v; want agent/fix and HEAD at %s, and uncommitted work", refs, uncommitted, agentHead)
	}
	if out, err := exec.Command("git", "-C", trusted, "log", "--format=%s", "devaipod-p").Output(); err != nil || !strings.HasPrefix(string(out), "fix\n") {
		t.Errorf("git log devaipod-p: %v %q", err, out)
	}
	if left, _ := exec.Command("git", "-C", trusted, "for-each-ref", "refs/devaipod/").Output(); len(left) > 0 {
		t.Errorf("scratch refs left: %s", left)
	}
	if fired, _ := os.ReadDir(markers); len(fired) > 0 {
		var names []string
		for _, f := range fired {
			names = append(names, f.Name())
		}
		t.Errorf("traps fired: %v", names)
	}
	// The traps are live: a plain git in the agent's repository springs them.
	cmd := exec.Command("sh", "-c", "git status >/dev/null; git add -A; git commit -qm x")
	cmd.Dir = agent
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	cmd.Run()
	for _, m := range []string{"fsmonitor", "clean", "hook-pre-commit", "sub-fsmonitor"} {
		if _, err := os.Stat(filepath.Join(markers, m)); err != nil {
			t.Errorf("the %s trap does not work, so the test proves nothing about it", m)
		}
	}
}

func TestFetchWorkWithoutTheBase(t *testing.T) {
	agent := gittest.Repo(t)
	base := strings.TrimSpace(string(must(exec.Command("git", "-C", agent, "rev-parse", "HEAD").Output())))
	gittest.WriteFile(t, filepath.Join(agent, "a"), "a\n")
	gittest.Git(t, agent, []string{"add", "a"}, []string{"commit", "-q", "-m", "a"})
	bundle, _ := runScript(t, agent, exportScript, nil, append([]string{"PATH=" + os.Getenv("PATH")}, source.TrustedGitEnv...), base)
	path := filepath.Join(t.TempDir(), "work.bundle")
	os.WriteFile(path, bundle, 0o600)
	other := t.TempDir() // another history: no base
	gittest.Git(t, other, []string{"init", "-q"})
	gittest.WriteFile(t, filepath.Join(other, "b"), "b\n")
	gittest.Git(t, other, []string{"add", "b"}, []string{"commit", "-q", "-m", "b"})
	_, _, err := source.FetchWork(context.Background(), other, path, "devaipod-p", worktreeRef)
	if err == nil || !strings.Contains(err.Error(), "lacks the commit the pod started from") {
		t.Errorf("FetchWork into a repository without the base: %v", err)
	}
	if _, _, err := source.FetchWork(context.Background(), t.TempDir(), path, "devaipod-p", worktreeRef); err == nil || !strings.Contains(err.Error(), "not a git repository") {
		t.Errorf("FetchWork into a folder that is no repository: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// An agent that committed nothing: nothing to fetch but the news of its
// uncommitted work.
func TestFetchWorkWithoutCommits(t *testing.T) {
	trusted := gittest.Repo(t)
	base := strings.TrimSpace(string(must(exec.Command("git", "-C", trusted, "rev-parse", "HEAD").Output())))
	agent := filepath.Join(t.TempDir(), "agent")
	gittest.Git(t, "", []string{"clone", "-q", trusted, agent})
	env := append([]string{"PATH=" + os.Getenv("PATH")}, source.TrustedGitEnv...)
	for _, dirty := range []bool{false, true} {
		if dirty {
			gittest.WriteFile(t, filepath.Join(agent, "README.md"), "edited\n")
		}
		bundle, _ := runScript(t, agent, exportScript, nil, env, base)
		path := filepath.Join(t.TempDir(), "work.bundle")
		os.WriteFile(path, bundle, 0o600)
		refs, uncommitted, err := source.FetchWork(context.Background(), trusted, path, "devaipod-p", worktreeRef)
		if err != nil || len(refs) != 0 || uncommitted != dirty {
			t.Errorf("dirty=%v: refs %v, uncommitted %v, %v", dirty, refs, uncommitted, err)
		}
	}
}

// TestFetchWorkRefusesHiddenRefNames: a branch whose name hides what it
// is (a zero-width space after main, a right-to-left override) brings
// nothing into the user's repository.
func TestFetchWorkRefusesHiddenRefNames(t *testing.T) {
	for _, branch := range []string{"main\u200b", "agent/\u202eexe.txt", "x\x1b[31m", "main\U000e0100"} {
		agent := gittest.Repo(t)
		base := strings.TrimSpace(string(must(exec.Command("git", "-C", agent, "rev-parse", "HEAD").Output())))
		trusted := t.TempDir()
		gittest.Git(t, trusted, []string{"clone", "-q", agent, "."})
		if out, err := exec.Command("git", "-C", agent, "checkout", "-q", "-b", branch).CombinedOutput(); err != nil {
			if strings.ContainsRune(branch, 0x1b) {
				continue // git refuses control characters in ref names itself
			}
			t.Fatalf("git checkout -b %q: %v %s", branch, err, out)
		}
		gittest.WriteFile(t, filepath.Join(agent, "a"), "a\n")
		gittest.Git(t, agent, []string{"add", "a"}, []string{"commit", "-q", "-m", "a"})
		bundle, _ := runScript(t, agent, exportScript, nil, append([]string{"PATH=" + os.Getenv("PATH")}, source.TrustedGitEnv...), base)
		path := filepath.Join(t.TempDir(), "work.bundle")
		os.WriteFile(path, bundle, 0o600)
		_, _, err := source.FetchWork(context.Background(), trusted, path, "devaipod-p", worktreeRef)
		var he *source.HiddenRefError
		if !errors.As(err, &he) || strings.ContainsFunc(err.Error(), safetext.Hidden) {
			t.Errorf("branch %q: FetchWork = %v; want a HiddenRefError, printable", branch, err)
		}
		if refs, _ := exec.Command("git", "-C", trusted, "for-each-ref", "refs/remotes/devaipod-p/", "refs/devaipod/").Output(); len(refs) > 0 {
			t.Errorf("branch %q: refs were written: %s", branch, refs)
		}
	}
}

// TestFetchWorkRefusesTooManyRefs: the agent decides how many branches
// its bundle names, and each becomes a ref (and a reflog) in the user's
// repository: past MaxAgentRefs, nothing is fetched.
func TestFetchWorkRefusesTooManyRefs(t *testing.T) {
	agent := gittest.Repo(t)
	base := strings.TrimSpace(string(must(exec.Command("git", "-C", agent, "rev-parse", "HEAD").Output())))
	trusted := t.TempDir()
	gittest.Git(t, trusted, []string{"clone", "-q", agent, "."})
	gittest.WriteFile(t, filepath.Join(agent, "a"), "a\n")
	gittest.Git(t, agent, []string{"add", "a"}, []string{"commit", "-q", "-m", "a"})
	head := strings.TrimSpace(string(must(exec.Command("git", "-C", agent, "rev-parse", "HEAD").Output())))
	var refs strings.Builder
	for i := range source.MaxAgentRefs + 1 {
		fmt.Fprintf(&refs, "create refs/heads/b%d %s\n", i, head)
	}
	cmd := exec.Command("git", "-C", agent, "update-ref", "--stdin")
	cmd.Stdin = strings.NewReader(refs.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("update-ref: %v %s", err, out)
	}
	bundle, _ := runScript(t, agent, exportScript, nil, append([]string{"PATH=" + os.Getenv("PATH")}, source.TrustedGitEnv...), base)
	path := filepath.Join(t.TempDir(), "work.bundle")
	os.WriteFile(path, bundle, 0o600)
	_, _, err := source.FetchWork(context.Background(), trusted, path, "devaipod-p", worktreeRef)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("has %d branches, more than", source.MaxAgentRefs+2)) {
		t.Errorf("FetchWork of %d branches: %v; want a refusal", source.MaxAgentRefs+2, err)
	}
	if out, _ := exec.Command("git", "-C", trusted, "for-each-ref", "refs/remotes/devaipod-p/", "refs/devaipod/").Output(); len(out) > 0 {
		t.Errorf("refs were written: %.200s", out)
	}
}

// bulkExec is an engine whose Exec writes n bytes of output, in pieces, as
// the podman engine does, and stops at the first failed write.
type bulkExec struct {
	Engine
	n int
}

func (b bulkExec) Exec(_ context.Context, _ string, spec ExecSpec) (int, string, error) {
	piece := make([]byte, 32<<10)
	for left := b.n; left > 0; left -= len(piece) {
		if _, err := spec.Output.Write(piece[:min(left, len(piece))]); err != nil {
			return 0, "", err
		}
	}
	return 0, "", nil
}

// TestExportWorkIsBounded: the agent decides how large its work's bundle
// is; the host keeps at most the bound of it, and says so.
func TestExportWorkIsBounded(t *testing.T) {
	const max = 100 << 10
	var got bytes.Buffer
	err := exportWork(context.Background(), bulkExec{n: max + 1}, "demo", work{}, &got, max)
	var te *WorkTooLargeError
	if !errors.As(err, &te) || te.Max != max {
		t.Errorf("a bundle one byte over the bound: %v", err)
	}
	if got.Len() > max {
		t.Errorf("%d bytes kept; the bound is %d", got.Len(), max)
	}
	got.Reset()
	if err := exportWork(context.Background(), bulkExec{n: max}, "demo", work{}, &got, max); err != nil || got.Len() != max {
		t.Errorf("a bundle of exactly the bound: %v, %d bytes", err, got.Len())
	}
}
