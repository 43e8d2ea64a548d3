package source

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/internal/gittest"
)

func TestIsGitURL(t *testing.T) {
	for in, want := range map[string]bool{
		"https://git.example.test/o/r.git": true,
		"ssh://git@git.example.test/o/r":   true,
		"git://git.example.test/o/r":       true,
		"file:///srv/git/r.git":            true,
		"git@git.example.test:o/r.git":     true,
		"./repo":                           false,
		"/abs/repo":                        false,
		"repo":                             false,
		"../x":                             false,
	} {
		if got := IsGitURL(in); got != want {
			t.Errorf("IsGitURL(%q) = %v; want %v", in, got, want)
		}
	}
}

func TestResolveSourceErrors(t *testing.T) {
	ctx := context.Background()
	empty := t.TempDir()
	file := filepath.Join(empty, "f")
	gittest.WriteFile(t, file, "x")
	noCommits := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", noCommits).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	tests := []struct{ in, ref, want string }{
		{"", "", "no repository given"},
		{filepath.Join(empty, "missing"), "", "does not exist"},
		{file, "", "is not a directory"},
		{empty, "", "is not a git repository"},
		{noCommits, "", "has no commits yet"},
		{"ftp://host/x.git", "", "unsupported git URL scheme"},
		{"https:///x.git", "", "no host"},
		{"https://host/", "", "no usable repository name"},
		{"https://h/org/...git", "", "no usable repository name"},
		{"h:..", "", "no usable repository name"},
		{"ext::sh -c touch% /tmp/pwned", "", "transport syntax"},
		{"https::x", "", "transport syntax"},
		{"https://user:s3cret@host/", "", "https://host/"},
		{"%zz://x", "", "malformed"},
		{gittest.Repo(t), "main", "--ref applies to git URLs"},
	}
	for _, tt := range tests {
		_, err := Resolve(ctx, tt.in, Options{Ref: tt.ref})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ResolveSource(%q) error = %v; want %q", tt.in, err, tt.want)
		}
	}
}

func TestResolveAndCheckoutLocal(t *testing.T) {
	ctx := context.Background()
	repo := gittest.Repo(t)
	if out, err := exec.Command("git", "-C", repo, "remote", "add", "origin", "https://git.example.test/o/r.git").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	// A private branch must not reach the workspace.
	for _, args := range [][]string{{"branch", "private-wip"}, {"remote", "set-url", "origin", "https://user:ghp_secret@git.example.test/o/r.git"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	gittest.WriteFile(t, filepath.Join(repo, "dirty.txt"), "uncommitted")
	gittest.WriteFile(t, filepath.Join(repo, "README.md"), "changed, not staged")
	src, err := Resolve(ctx, repo, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !src.Local || src.Remote != "https://git.example.test/o/r.git" || len(src.Commit) != 40 {
		t.Errorf("source = %+v", src)
	}
	if strings.Contains(src.Remote+src.Display, "ghp_secret") {
		t.Errorf("credentials kept: %+v", src)
	}
	if strings.Join(src.LeftOut, ",") != "README.md,dirty.txt" {
		t.Errorf("LeftOut = %v; want [README.md dirty.txt]", src.LeftOut)
	}
	dir := filepath.Join(t.TempDir(), "co")
	if err := src.Checkout(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dirty.txt")); err == nil {
		t.Error("uncommitted file was copied")
	}
	origin, _ := git(ctx, dir, "remote", "get-url", "origin")
	head, _ := git(ctx, dir, "rev-parse", "HEAD")
	branch, _ := git(ctx, dir, "symbolic-ref", "--short", "HEAD")
	if origin != src.Remote || head != src.Commit || branch != "main" {
		t.Errorf("checkout origin=%q head=%q branch=%q", origin, head, branch)
	}
	if refs, _ := git(ctx, dir, "for-each-ref", "--format=%(refname)"); strings.Contains(refs, "private-wip") || strings.Contains(refs, "refs/remotes/") {
		t.Errorf("checkout has other refs:\n%s", refs)
	}
	if cfg, _ := os.ReadFile(filepath.Join(dir, ".git", "config")); strings.Contains(string(cfg), "ghp_secret") {
		t.Errorf(".git/config holds the credential:\n%s", cfg)
	}

	got, _ := readTar(t, ctx, dir, "proj")
	for name, h := range got {
		if h.Uid != 1000 || h.Gid != 1000 || !strings.HasPrefix(name, "proj/") {
			t.Errorf("entry %s uid %d gid %d", name, h.Uid, h.Gid)
		}
	}
	if got["proj/README.md"] == nil || got["proj/.git/HEAD"] == nil {
		t.Errorf("archive lacks README.md or .git: %v", got)
	}
}

func TestCheckoutURL(t *testing.T) {
	ctx := context.Background()
	repo := gittest.Repo(t)
	src, err := Resolve(ctx, "file://"+repo, Options{Ref: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if src.Project != filepath.Base(repo) || src.Local {
		t.Errorf("source = %+v", src)
	}
	dir := filepath.Join(t.TempDir(), "co")
	if err := src.Checkout(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if len(src.Commit) != 40 || !slices.Equal(src.RemoteCommits, []string{src.Commit}) {
		t.Errorf("commit after clone = %q, remote commits %q", src.Commit, src.RemoteCommits)
	}
	bad, _ := Resolve(ctx, "file://"+filepath.Join(t.TempDir(), "nope.git"), Options{})
	if err := bad.Checkout(ctx, filepath.Join(t.TempDir(), "x")); err == nil || !strings.Contains(err.Error(), "clone") {
		t.Errorf("clone of a missing repo: %v", err)
	}
}

// TestRemoteCommits: a local checkout's RemoteCommits are where HEAD's
// history meets its remote-tracking branches of the remote it names.
func TestRemoteCommits(t *testing.T) {
	ctx := context.Background()
	upstream := gittest.Repo(t)
	repo := filepath.Join(t.TempDir(), "repo")
	gitT(t, "", "clone", "-q", upstream, repo)
	tip := gitT(t, repo, "rev-parse", "HEAD")
	resolve := func() []string {
		t.Helper()
		src, err := Resolve(ctx, repo, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src.RemoteCommits
	}
	if got := resolve(); !slices.Equal(got, []string{tip}) {
		t.Errorf("HEAD at origin/main: %q; want %s", got, tip)
	}
	gittest.WriteFile(t, filepath.Join(repo, "mine.txt"), "not pushed")
	gitT(t, repo, "add", "mine.txt")
	gitT(t, repo, "commit", "-qm", "mine")
	gitT(t, repo, "commit", "-q", "--allow-empty", "-m", "mine too")
	if got := resolve(); !slices.Equal(got, []string{tip}) {
		t.Errorf("two commits on top of origin/main: %q; want %s", got, tip)
	}
	// Another remote's branches count only when it is the one used.
	gitT(t, repo, "remote", "rename", "origin", "fork")
	gitT(t, repo, "remote", "add", "origin", upstream)
	if got := resolve(); got != nil {
		t.Errorf("origin without remote-tracking branches: %q; want none", got)
	}
	gitT(t, repo, "remote", "remove", "origin")
	if got := resolve(); !slices.Equal(got, []string{tip}) {
		t.Errorf("the first remote, fork: %q; want %s", got, tip)
	}
	// A ref git cannot walk costs the hint, not the pod.
	gittest.WriteFile(t, filepath.Join(repo, ".git", "refs", "remotes", "fork", "broken"), strings.Repeat("ab", 20)+"\n")
	src, err := Resolve(ctx, repo, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if src.RemoteCommits != nil || len(src.Warnings) != 1 || !strings.Contains(src.Warnings[0], "could not tell which commits fork has") {
		t.Errorf("a remote-tracking ref to a missing commit: %q, warnings %q", src.RemoteCommits, src.Warnings)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:tok@h/o/r.git": "https://h/o/r.git",
		"https://ghp_tok@h/o/r.git":  "https://h/o/r.git",
		"ssh://git@h/o/r.git":        "ssh://git@h/o/r.git",
		"ssh://git:pw@h/o/r.git":     "ssh://h/o/r.git",
		"git@h:o/r.git":              "git@h:o/r.git",
		"/local/path":                "/local/path",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q; want %q", in, got, want)
		}
	}
}

func FuzzResolveURL(f *testing.F) {
	for _, s := range []string{"https://h/o/r.git", "git@h:o/r", "file:///x/y.git", "ssh://u@h:22/o/r", "https://h/", "::", "a@b:", "h:..", "https://u:p@h/r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if !IsGitURL(in) {
			return
		}
		src, err := resolveURL(in, "")
		if err != nil {
			return
		}
		if src.Project == "" || strings.ContainsAny(src.Project, "/") || strings.HasPrefix(src.Project, ".") {
			t.Fatalf("resolveURL(%q).Project = %q", in, src.Project)
		}
		if u, err := url.Parse(src.Remote); err == nil && u.User != nil {
			if _, ok := u.User.Password(); ok {
				t.Fatalf("resolveURL(%q).Remote = %q keeps a password", in, src.Remote)
			}
		}
	})
}

// TestTarTreeKeepsEveryFile: what git archive would hide or rewrite
// (export-ignore, export-subst) reaches the workspace as committed, with
// modes and symlinks; directories are group-shared.
func TestTarTreeKeepsEveryFile(t *testing.T) {
	ctx := context.Background()
	repo := gittest.Repo(t)
	os.MkdirAll(filepath.Join(repo, "sub"), 0o755)
	gittest.WriteFile(t, filepath.Join(repo, ".gitattributes"), "hidden.txt export-ignore\nsubst.txt export-subst\n")
	gittest.WriteFile(t, filepath.Join(repo, "hidden.txt"), "still here\n")
	gittest.WriteFile(t, filepath.Join(repo, "subst.txt"), "$Format:%H$\n")
	gittest.WriteFile(t, filepath.Join(repo, "sub", "run.sh"), "#!/bin/sh\n")
	os.Chmod(filepath.Join(repo, "sub", "run.sh"), 0o755)
	os.Symlink("sub/run.sh", filepath.Join(repo, "link"))
	gittest.Git(t, repo, []string{"add", "-A"}, []string{"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "more"})
	dir := checkOut(t, repo)
	got, content := readTar(t, ctx, dir, "p")
	if content["p/hidden.txt"] != "still here\n" || content["p/subst.txt"] != "$Format:%H$\n" {
		t.Errorf("export attributes applied: hidden=%q subst=%q", content["p/hidden.txt"], content["p/subst.txt"])
	}
	if h := got["p/sub/run.sh"]; h == nil || h.Mode&0o111 == 0 {
		t.Errorf("run.sh lost its mode: %+v", h)
	}
	if h := got["p/link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "sub/run.sh" {
		t.Errorf("link = %+v", h)
	}
	if h := got["p/sub/"]; h == nil || h.Mode&0o2070 != 0o2070 {
		t.Errorf("sub/ is not group-shared: %+v", h)
	}
	if got["p/.git/HEAD"] == nil || got["p/.git/index"] == nil || got["p/.git/info/attributes"] != nil {
		t.Errorf(".git entries: HEAD %v index %v info/attributes %v", got["p/.git/HEAD"] != nil, got["p/.git/index"] != nil, got["p/.git/info/attributes"] != nil)
	}
	for name, h := range got {
		if h.Uid != 1000 || h.Gid != 1000 || !strings.HasPrefix(name, "p/") {
			t.Errorf("entry %s uid %d gid %d", name, h.Uid, h.Gid)
		}
	}
}

// readTar runs TarTree on dir and returns its entries and file contents by
// name.
func readTar(t *testing.T, ctx context.Context, dir, prefix string, placeholders ...string) (map[string]*tar.Header, map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	if err := TarTree(ctx, &buf, dir, prefix, 1000, 1000, placeholders); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	headers, content := map[string]*tar.Header{}, map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return headers, content
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		headers[h.Name], content[h.Name] = h, string(b)
	}
}

// TestTarTreePlaceholders: the copy creates the placeholders of absent
// protected paths, and git does not report them.
func TestTarTreePlaceholders(t *testing.T) {
	ctx := context.Background()
	src, err := Resolve(ctx, gittest.Repo(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "co")
	if err := src.Checkout(ctx, dir); err != nil {
		t.Fatal(err)
	}
	// The copy creates the placeholders, and git does not report them.
	got, _ := readTar(t, ctx, dir, "p", ".envrc", "new/dir/")
	for _, name := range []string{"p/.envrc", "p/new/", "p/new/dir/"} {
		if got[name] == nil {
			t.Errorf("placeholder %s missing from the copy", name)
		}
	}
	if status, err := git(ctx, dir, "status", "--porcelain", "--ignored"); err != nil {
		t.Fatal(err)
	} else if exclude, _ := os.ReadFile(filepath.Join(dir, ".git", "info", "exclude")); !strings.Contains(string(exclude), "/.envrc") {
		t.Errorf("info/exclude lacks the placeholder:\n%s\n%s", exclude, status)
	}
}

// checkOut checks repo's HEAD out the way up does and returns where.
func checkOut(t *testing.T, repo string) string {
	t.Helper()
	ctx := context.Background()
	src, err := Resolve(ctx, repo, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "co")
	if err := src.Checkout(ctx, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestAgentGitDir: the agent's git directory has the clone's history and
// refs, but no masked file's content at any commit, and git treats the
// left-out blobs as not fetched (an error), not as corruption.
func TestAgentGitDir(t *testing.T) {
	ctx := context.Background()
	repo := gittest.Repo(t)
	gittest.WriteFile(t, filepath.Join(repo, ".env"), "TOKEN=old-hush42\n")
	gittest.WriteFile(t, filepath.Join(repo, "certs", "server.key"), "KEY\n")
	gittest.Git(t, repo, []string{"add", "-A"}, []string{"commit", "-qm", "secrets"})
	gittest.WriteFile(t, filepath.Join(repo, ".env"), "TOKEN=new-hush42\n")
	gittest.WriteFile(t, filepath.Join(repo, "main.go"), "package main\n")
	gittest.Git(t, repo, []string{"add", "-A"}, []string{"commit", "-qm", "more"}, []string{"tag", "v1"})
	src, err := Resolve(ctx, repo, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "co")
	if err := src.Checkout(ctx, dir); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "agent.git")
	if err := AgentGitDir(ctx, dir, out, []string{".env", "*.key"}); err != nil {
		t.Fatal(err)
	}
	agentGit := func(args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"--git-dir=" + out}, args...)...)
		cmd.Env = append(cmd.Environ(), "GIT_NO_LAZY_FETCH=0")
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	if got, err := agentGit("log", "--format=%s", "HEAD"); err != nil || got != "more\nsecrets\ninit\n" {
		t.Errorf("history = %q, %v", got, err)
	}
	if got, err := agentGit("show", "HEAD:main.go"); err != nil || got != "package main\n" {
		t.Errorf("an unmasked file: %q, %v", got, err)
	}
	for _, rev := range []string{"HEAD:.env", "HEAD~1:.env", "HEAD:certs/server.key"} {
		if got, err := agentGit("show", rev); err == nil || strings.Contains(got, "hush42") || strings.Contains(got, "KEY") {
			t.Errorf("git show %s in the agent's repository = %q, %v; want an error and no content", rev, got, err)
		}
	}
	if got, err := agentGit("rev-parse", "v1^{commit}", "refs/heads/main"); err != nil || len(strings.Fields(got)) != 2 {
		t.Errorf("refs: %q, %v", got, err)
	}
	// The agent can commit in a tree with masked files (a partial
	// clone's commit would fetch every blob it lacks but skip-worktree
	// ones), and its status does not report what stands in for them.
	wt := filepath.Join(t.TempDir(), "wt")
	os.MkdirAll(wt, 0o755)
	if err := os.Rename(out, filepath.Join(wt, ".git")); err != nil {
		t.Fatal(err)
	}
	out = filepath.Join(wt, ".git")
	archive := exec.Command("sh", "-c", "git -C "+dir+" archive HEAD | tar -x -C "+wt+" && : > "+wt+"/.env")
	if msg, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, msg)
	}
	gittest.WriteFile(t, filepath.Join(wt, "main.go"), "package main // changed\n")
	gittest.Git(t, wt, []string{"add", "main.go"}, []string{"commit", "-qm", "agent"})
	if got, err := exec.Command("git", "-C", wt, "status", "--porcelain").CombinedOutput(); err != nil || len(got) != 0 {
		t.Errorf("status after the agent's commit = %q, %v; want clean", got, err)
	}
	// The whole object store, not only what HEAD names (packs are
	// compressed: git reads them out).
	if got, err := agentGit("cat-file", "--batch-all-objects", "--batch"); err != nil || strings.Contains(got, "hush42") || !strings.Contains(got, "package main") {
		t.Errorf("the agent's object store (%v) holds a masked value, or not the others:\n%s", err, got)
	}
}

func TestPorcelainPaths(t *testing.T) {
	got := porcelainPaths(" M main.py\x00R  new name.txt\x00old.txt\x00 R src/new.txt\x00src/orig.txt\x00?? dir/un\ttracked\x00")
	if strings.Join(got, "|") != "main.py|new name.txt|src/new.txt|dir/un\ttracked" {
		t.Errorf("%q", got)
	}
}
