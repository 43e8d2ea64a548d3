package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/internal/gittest"
)

func TestParsePRURL(t *testing.T) {
	gh := func(owner, repo string, n int) PullRequest {
		return PullRequest{Forge: "https://github.com", Owner: owner, Repo: repo, Number: n}
	}
	good := []struct {
		in, forge string
		want      PullRequest
	}{
		{"https://github.com/o/r/pull/7", "", gh("o", "r", 7)},
		{"https://github.com/o/r/pull/7/", "", gh("o", "r", 7)},
		{"https://github.com/o/r/pull/7/files", "", gh("o", "r", 7)},
		{"https://github.com/o/r/pull/7/commits/0123abc", "", gh("o", "r", 7)},
		{"https://github.com/o/r/pull/7?diff=split#discussion_r1", "", gh("o", "r", 7)},
		{"https://github.com/o/r/pull/7#issuecomment-1", "", gh("o", "r", 7)},
		{"https://github.com/o/r.git/pull/7", "", gh("o", "r", 7)},
		{"https://github.com/o/r/pull/7.diff", "", gh("o", "r", 7)},
		{"https://github.com/o/r/pull/7.patch", "", gh("o", "r", 7)},
		{"https://github.com/o/r/pull/007", "", gh("o", "r", 7)},
		{"https://github.com//o/r//pull/12", "", gh("o", "r", 12)},
		{"https://github.com/o/r/pull/2147483647", "", gh("o", "r", 2147483647)},
		{"http://github.com/o/r/pull/7", "", gh("o", "r", 7)},
		{"https://GitHub.COM:443/o/r/pull/7", "https://github.com/", gh("o", "r", 7)},
		{"https://github.com/my-org_emu/.github/pull/3", "", gh("my-org_emu", ".github", 3)},
		{"https://github.com/o/r/pull/7/files", "https://github.com", gh("o", "r", 7)},
		{"https://u:tok@github.com/o/r/pull/7", "", PullRequest{Forge: "https://u:tok@github.com", Owner: "o", Repo: "r", Number: 7}},
		{"http://127.0.0.1:8080/o/r/pull/1", "http://127.0.0.1:8080", PullRequest{Forge: "http://127.0.0.1:8080", Owner: "o", Repo: "r", Number: 1}},
		{"http://ghe.example.test/git/o/r/pull/1", "http://ghe.example.test/git/", PullRequest{Forge: "http://ghe.example.test/git", Owner: "o", Repo: "r", Number: 1}},
	}
	for _, tt := range good {
		got, err := ParsePRURL(tt.in, tt.forge)
		if err != nil || got != tt.want {
			t.Errorf("ParsePRURL(%q, %q) = %+v, %v; want %+v", tt.in, tt.forge, got, err, tt.want)
		}
	}

	notPR := []struct{ in, forge string }{
		{"https://github.com/o/r", ""},
		{"https://github.com/o/r.git", ""},
		{"https://github.com/o/r/tree/main", ""},
		{"https://github.com/o", ""},
		{"https://github.com/", ""},
		{"git@github.com:o/r.git", ""},
		{"ssh://git@github.com/o/r/pull/7", ""},
		{"file:///srv/o/r/pull/7", ""},
		{"./o/r/pull/7", ""},
		{"https://git.example.test/o/r.git", ""},
		{"https://git.example.test/pull/7", ""},
		{"http://127.0.0.1:8080/o/r/pull/1", "http://127.0.0.1:8080/git"},
		{"%zz://x", ""},
	}
	for _, tt := range notPR {
		if _, err := ParsePRURL(tt.in, tt.forge); !errors.Is(err, ErrNotPullRequest) {
			t.Errorf("ParsePRURL(%q, %q) error = %v; want ErrNotPullRequest", tt.in, tt.forge, err)
		}
	}

	bad := []struct{ in, forge, want string }{
		{"https://github.com/o/r/pull", "", "no pull request number"},
		{"https://github.com/o/r/pull/", "", "no pull request number"},
		{"https://github.com/o/r/pull/abc", "", `"abc" is not a number`},
		{"https://github.com/o/r/pull/-1", "", "is not a number"},
		{"https://github.com/o/r/pull/7x", "", "is not a number"},
		{"https://github.com/o/r/pull/99999999999", "", "is not a number"},
		{"https://github.com/o/r/pull/0", "", "out of range"},
		{"https://github.com/o/r/pull/2147483648", "", "out of range"},
		{"https://github.com/o/r/pulls", "", "is a list of pull requests"},
		{"https://github.com/o/r/pulls/7", "", "https://github.com/o/r/pull/NUMBER"},
		{"https://github.com/-o/r/pull/1", "", `"-o" is not a valid owner`},
		{"https://github.com/o..x/r/pull/1", "", "is not a valid owner"},
		{"https://github.com/o/r%20x/pull/1", "", "is not a valid repository name"},
		{"https://github.com/o/../pull/1", "", "is not a valid repository name"},
		{"https://github.com/o/.git/pull/1", "", "is not a valid repository name"},
		{"https://ghe.example.test/o/r/pull/7", "", "set the forge URL (--forge-url) to https://ghe.example.test"},
		{"https://github.com:8443/o/r/pull/7", "", "on github.com:8443"},
		{"http://127.0.0.1:9999/o/r/pull/7", "http://127.0.0.1:8080", "http://127.0.0.1:9999"},
		{"https://gitlab.example.test/o/r/-/merge_requests/3", "https://gitlab.example.test", "GitLab merge requests are not supported"},
		{"https://u:s3cret@ghe.example.test/o/r/pull/7", "", "https://ghe.example.test/o/r/pull/7 looks like"},
		{"https://u:s3cret@github.com/o/r/pull/x", "", "https://github.com/o/r/pull/x: "},
		{"https://github.com/o/r/pull/1", "ftp://github.com", "use an http or https URL"},
		{"https://github.com/o/r/pull/1", "github.com", "use an http or https URL"},
		{"https://github.com/o/r/pull/1", "https://", "no host"},
		{"https://github.com/o/r/pull/1", "https://github.com/?x=1", "query or fragment"},
		{"https://github.com/o/r/pull/1", "https://u:pw@h/%zz", "forge URL"},
	}
	for _, tt := range bad {
		_, err := ParsePRURL(tt.in, tt.forge)
		if err == nil || errors.Is(err, ErrNotPullRequest) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParsePRURL(%q, %q) error = %v; want %q", tt.in, tt.forge, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParsePRURL(%q) error shows the password: %v", tt.in, err)
		}
	}
	if err := ValidateForgeURL("https://u:pw@h/%zz"); err == nil || strings.Contains(err.Error(), "pw") {
		t.Errorf("ValidateForgeURL with a bad escape = %v; want an error without the password", err)
	}
}

func FuzzParsePRURL(f *testing.F) {
	for _, s := range []string{"https://github.com/o/r/pull/7", "https://github.com/o/r.git/pull/7/files?x#y",
		"http://u:p@github.com:443/o/r/pull/1.diff", "https://github.com/o/r/pulls", "https://ghe.test/o/r/pull/3",
		"https://github.com/o/r/pull/0", "https://github.com//a/b//pull//9", "https://github.com/o/%2e%2e/pull/1",
		"https://127.0.0.1:8080/base/o/r/pull/5"} {
		f.Add(s, "")
		f.Add(s, "https://127.0.0.1:8080/base")
	}
	f.Fuzz(func(t *testing.T, in, forge string) {
		pr, err := ParsePRURL(in, forge)
		if err != nil {
			if u, perr := url.Parse(in); perr == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok && len(pw) > 3 && strings.Count(in, pw) == 1 && strings.Contains(err.Error(), pw) {
					t.Fatalf("ParsePRURL(%q) error shows the password: %v", in, err)
				}
			}
			return
		}
		if pr.Number < 1 || !validOwner.MatchString(pr.Owner) || !validRepo.MatchString(pr.Repo) ||
			pr.Repo == "." || pr.Repo == ".." || strings.Contains(pr.Owner, "..") {
			t.Fatalf("ParsePRURL(%q, %q) = %+v", in, forge, pr)
		}
		// The clone URL stays on the forge's host, whatever the input.
		fu, _ := parseForgeURL(cmp.Or(forge, DefaultForgeURL))
		ru, err := url.Parse(pr.RepoURL())
		if err != nil || ru.Host != fu.Host || ru.Scheme != fu.Scheme {
			t.Fatalf("ParsePRURL(%q, %q).RepoURL() = %q (%v); forge host %q", in, forge, pr.RepoURL(), err, fu.Host)
		}
		again, err := ParsePRURL(pr.URL(), forge)
		if err != nil || again != pr {
			t.Fatalf("ParsePRURL(%q) = %+v; its URL %q parses as %+v, %v", in, pr, pr.URL(), again, err)
		}
		src, err := resolvePR(context.Background(), in, pr, Options{})
		if err != nil || !validProject.MatchString(src.Project) {
			t.Fatalf("resolvePR(%q) = %+v, %v", in, src, err)
		}
	})
}

func TestResolvePRSource(t *testing.T) {
	ctx := context.Background()
	src, err := Resolve(ctx, "https://github.com/o/my.repo/pull/7/files", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := Source{Input: "https://github.com/o/my.repo/pull/7/files", Display: "https://github.com/o/my.repo/pull/7",
		Project: "my.repo", Remote: "https://github.com/o/my.repo.git", Upstream: "https://github.com/o/my.repo.git",
		Branch: "pr-7", PR: 7, PRURL: "https://github.com/o/my.repo/pull/7", fetchURL: "https://github.com/o/my.repo.git"}
	if fmt.Sprintf("%+v", *src) != fmt.Sprintf("%+v", want) {
		t.Errorf("source = %+v\nwant     %+v", *src, want)
	}
	// Credentials reach the clone on the host, and nothing else.
	src, err = Resolve(ctx, "https://user:s3cret@ghe.example.test/o/.dots/pull/2", Options{ForgeURL: "https://ghe.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	if src.fetchURL != "https://user:s3cret@ghe.example.test/o/.dots.git" || src.Project != "dots" {
		t.Errorf("fetchURL = %q, project = %q", src.fetchURL, src.Project)
	}
	if shown := strings.Join([]string{src.Display, src.PRURL, src.Remote, src.Upstream}, " "); strings.Contains(shown, "s3cret") || strings.Contains(shown, "user") {
		t.Errorf("credentials shown: %s", shown)
	}

	for _, tt := range []struct {
		in   string
		o    Options
		want string
	}{
		{"https://github.com/o/r/pull/7", Options{Ref: "main"}, "--ref does not apply to a pull request"},
		{"https://github.com/o/r/pull/nope", Options{}, "is not a number"},
		{"https://ghe.example.test/o/r/pull/7", Options{}, "--forge-url"},
		{"github.com/o/r/pull/7", Options{}, "pass its full URL: https://github.com/o/r/pull/7"},
		{".", Options{ForgeURL: "ssh://github.com"}, "forge URL"},
	} {
		if _, err := Resolve(ctx, tt.in, tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Resolve(%q, %+v) error = %v; want %q", tt.in, tt.o, err, tt.want)
		}
	}
	// A plain repository URL on the forge is an ordinary git URL.
	if src, err := Resolve(ctx, "https://github.com/o/r.git", Options{Ref: "main"}); err != nil || src.PR != 0 || src.Ref != "main" {
		t.Errorf("repository URL: %+v, %v", src, err)
	}
}

// prForge is a forge served over git's smart HTTP on loopback: a base
// repository owner/repo with main, a fork forker/repo with branch feature,
// and refs/pull/7/head in the base pointing at the fork's commit, which no
// branch of the base holds (as GitHub does for a pull request from a fork).
type prForge struct {
	URL      string // the forge's web base, http://127.0.0.1:PORT
	base     string // bare repositories on disk
	fork     string
	work     string // a checkout to make commits in
	head     string // the pull request's head commit
	mainHead string
}

func newPRForge(t *testing.T) *prForge {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Fatalf("git's smart HTTP server is needed for this test: %v", err)
	}
	root := t.TempDir()
	srv := httptest.NewServer(&cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	t.Cleanup(srv.Close)
	f := &prForge{URL: srv.URL, base: filepath.Join(root, "owner", "repo.git"), fork: filepath.Join(root, "forker", "repo.git"), work: gittest.Repo(t)}
	gitT(t, "", "init", "-q", "--bare", "-b", "main", f.base)
	gitT(t, f.work, "push", "-q", f.base, "main")
	gitT(t, "", "clone", "-q", "--bare", f.base, f.fork)
	gitT(t, f.work, "checkout", "-q", "-b", "feature")
	gittest.WriteFile(t, filepath.Join(f.work, "fix.txt"), "the fix\n")
	gitT(t, f.work, "add", "fix.txt")
	gitT(t, f.work, "commit", "-q", "-m", "fix")
	gitT(t, f.work, "push", "-q", f.fork, "feature")
	f.head = gitT(t, f.work, "rev-parse", "HEAD")
	f.mainHead = gitT(t, f.work, "rev-parse", "main")
	gitT(t, f.base, "fetch", "-q", f.fork, "refs/heads/feature:refs/pull/7/head")
	if branches := gitT(t, f.base, "branch", "--contains", f.head); branches != "" {
		t.Fatalf("the pull request's head is on base branches %q", branches)
	}
	return f
}

// gitT runs git in dir (a work tree or a bare repository) with an identity
// for commits and returns its trimmed output.
func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t",
		"GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, stderr)
	}
	return strings.TrimSpace(string(out))
}

func TestCheckoutPR(t *testing.T) {
	ctx := context.Background()
	f := newPRForge(t)
	src, err := Resolve(ctx, f.URL+"/owner/repo/pull/7/files?w=1", Options{ForgeURL: f.URL})
	if err != nil {
		t.Fatal(err)
	}
	baseURL := f.URL + "/owner/repo.git"
	if src.PR != 7 || src.Project != "repo" || src.Upstream != baseURL || src.Remote != baseURL || src.Branch != "pr-7" ||
		src.PRURL != f.URL+"/owner/repo/pull/7" || src.Commit != "" || len(src.Warnings) != 0 {
		t.Errorf("source = %+v", src)
	}
	dir := filepath.Join(t.TempDir(), "co")
	if err := src.Checkout(ctx, dir); err != nil {
		t.Fatal(err)
	}
	// The head is a commit on main: main's is where they meet.
	if !slices.Equal(src.RemoteCommits, []string{f.mainHead}) {
		t.Errorf("RemoteCommits = %q; want main's %s", src.RemoteCommits, f.mainHead)
	}
	for what, want := range map[string]string{
		"HEAD":          f.head,
		"Commit":        src.Commit,
		"branch":        "pr-7",
		"upstream":      baseURL,
		"origin":        baseURL,
		"tracking":      "upstream/pull/7",
		"merge":         "refs/pull/7/head",
		"upstream/main": f.mainHead,
		"local":         "refs/heads/pr-7",
		"ahead":         "1",
	} {
		var got string
		switch what {
		case "HEAD":
			got = gitT(t, dir, "rev-parse", "HEAD")
		case "Commit":
			got = f.head
		case "branch":
			got = gitT(t, dir, "symbolic-ref", "--short", "HEAD")
		case "upstream", "origin":
			got = gitT(t, dir, "remote", "get-url", what)
		case "tracking":
			got = gitT(t, dir, "rev-parse", "--abbrev-ref", "@{upstream}")
		case "merge":
			got = gitT(t, dir, "config", "branch.pr-7.merge")
		case "upstream/main":
			got = gitT(t, dir, "rev-parse", "upstream/main")
		case "local":
			got = gitT(t, dir, "for-each-ref", "--format=%(refname)", "refs/heads")
		case "ahead":
			got = gitT(t, dir, "rev-list", "--count", "upstream/main..HEAD")
		}
		if got != want {
			t.Errorf("%s = %q; want %q", what, got, want)
		}
	}
	if push, err := exec.Command("git", "-C", dir, "config", "--get-regexp", `^(remote\.origin\.push|branch\.pr-7\.pushremote)$`).Output(); len(push) > 0 || err == nil {
		t.Errorf("push target set without the API: %s (%v)", push, err)
	}
	_, content := readTar(t, ctx, dir, "repo")
	if content["repo/fix.txt"] != "the fix\n" || content["repo/README.md"] != "hello\n" {
		t.Errorf("workspace files: fix.txt %q, README.md %q", content["repo/fix.txt"], content["repo/README.md"])
	}

	// The branch follows the pull request: a new commit on it arrives with
	// git pull.
	gittest.WriteFile(t, filepath.Join(f.work, "fix.txt"), "a better fix\n")
	gitT(t, f.work, "commit", "-q", "-am", "better")
	gitT(t, f.work, "push", "-q", f.fork, "feature")
	gitT(t, f.base, "fetch", "-q", f.fork, "+refs/heads/feature:refs/pull/7/head")
	gitT(t, dir, "reset", "-q", "--hard")
	gitT(t, dir, "pull", "-q", "--ff-only")
	if got, want := gitT(t, dir, "rev-parse", "HEAD"), gitT(t, f.work, "rev-parse", "HEAD"); got != want {
		t.Errorf("after git pull HEAD = %s; want the pull request's new head %s", got, want)
	}

	missing, err := Resolve(ctx, f.URL+"/owner/repo/pull/8", Options{ForgeURL: f.URL})
	if err != nil {
		t.Fatal(err)
	}
	err = missing.Checkout(ctx, filepath.Join(t.TempDir(), "co"))
	if want := "pull request #8 not found: " + baseURL + " has no refs/pull/8/head"; err == nil || err.Error() != want {
		t.Errorf("checkout of a missing pull request: %v; want %q", err, want)
	}
	nobase, _ := Resolve(ctx, f.URL+"/owner/nope/pull/1", Options{ForgeURL: f.URL})
	if err := nobase.Checkout(ctx, filepath.Join(t.TempDir(), "co")); err == nil || !strings.Contains(err.Error(), "clone "+f.URL+"/owner/nope.git") {
		t.Errorf("checkout from a missing repository: %v", err)
	}
}

func TestCheckoutPRKeepsNoCredentials(t *testing.T) {
	ctx := context.Background()
	f := newPRForge(t)
	u, _ := url.Parse(f.URL)
	src, err := Resolve(ctx, "http://user:s3cret@"+u.Host+"/owner/repo/pull/7", Options{ForgeURL: f.URL})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "co")
	if err := src.Checkout(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if head := gitT(t, dir, "rev-parse", "HEAD"); head != f.head {
		t.Errorf("HEAD = %s; want %s", head, f.head)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, ".git", "config"))
	if err != nil || strings.Contains(string(cfg), "s3cret") || strings.Contains(string(cfg), "user@") {
		t.Errorf(".git/config holds the credentials (%v):\n%s", err, cfg)
	}
}

// fakePRAPI answers GitHub's GET /repos/OWNER/REPO/pulls/N for PR 7 with
// body, and 404 for anything else.
func fakePRAPI(t *testing.T, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v3/repos/owner/repo/pulls/7" || r.Header.Get("Authorization") != "Bearer tok" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestCheckoutPRWithAPI: with the forge's API, origin is the fork and a
// plain git push updates the pull request's branch there.
func TestCheckoutPRWithAPI(t *testing.T) {
	ctx := context.Background()
	f := newPRForge(t)
	api := fakePRAPI(t, fmt.Sprintf(`{"number":7,"title":"Fix it","head":{"ref":"feature","sha":%q,"repo":{"full_name":"forker/repo","clone_url":"https://elsewhere.example.test/x.git"}},"base":{"ref":"main"}}`, f.head))
	src, err := Resolve(ctx, f.URL+"/owner/repo/pull/7", Options{ForgeURL: f.URL, APIURL: api.URL + "/api/v3/", APIToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	forkURL := f.URL + "/forker/repo.git"
	if src.Remote != forkURL || src.Upstream != f.URL+"/owner/repo.git" || src.HeadBranch != "feature" || src.PRTitle != "Fix it" || len(src.Warnings) != 0 {
		t.Fatalf("source = %+v", src)
	}
	dir := filepath.Join(t.TempDir(), "co")
	if err := src.Checkout(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if origin := gitT(t, dir, "remote", "get-url", "origin"); origin != forkURL {
		t.Errorf("origin = %q; want the fork %q", origin, forkURL)
	}
	gitT(t, f.fork, "config", "http.receivepack", "true")
	gitT(t, dir, "reset", "-q", "--hard")
	gittest.WriteFile(t, filepath.Join(dir, "more.txt"), "more\n")
	gitT(t, dir, "add", "more.txt")
	gitT(t, dir, "commit", "-q", "-m", "more")
	gitT(t, dir, "push", "-q")
	if got, want := gitT(t, f.fork, "rev-parse", "refs/heads/feature"), gitT(t, dir, "rev-parse", "HEAD"); got != want {
		t.Errorf("fork's feature = %s after git push; want %s", got, want)
	}
}

func TestResolvePRAPIFallback(t *testing.T) {
	ctx := context.Background()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	tests := []struct{ name, body, apiURL, token, want string }{
		{name: "unreachable", apiURL: closed.URL, want: "forge API"},
		{name: "not found", body: `{}`, token: "wrong", want: "404"},
		{name: "bad JSON", body: `{"head":`, token: "tok", want: "read the pull request"},
		{name: "deleted fork", body: `{"head":{"ref":"x","repo":null}}`, token: "tok", want: "head repository was deleted"},
		{name: "odd repository", body: `{"head":{"ref":"x","repo":{"full_name":"../../etc"}}}`, token: "tok", want: "not OWNER/REPO"},
		{name: "odd branch", body: `{"head":{"ref":"a..b","repo":{"full_name":"forker/repo"}}}`, token: "tok", want: "not a valid branch name"},
		{name: "option branch", body: `{"head":{"ref":"-x","repo":{"full_name":"forker/repo"}}}`, token: "tok", want: "not a valid branch name"},
		{name: "bad API URL", apiURL: "ftp://h", want: "not an http or https URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			apiURL := tt.apiURL
			if apiURL == "" {
				apiURL = fakePRAPI(t, tt.body).URL + "/api/v3"
			}
			src, err := Resolve(ctx, "http://127.0.0.1:1/owner/repo/pull/7", Options{ForgeURL: "http://127.0.0.1:1", APIURL: apiURL, APIToken: tt.token})
			if err != nil {
				t.Fatal(err)
			}
			if len(src.Warnings) != 1 || !strings.Contains(src.Warnings[0], tt.want) || src.HeadBranch != "" {
				t.Errorf("warnings = %q, head branch %q; want one warning with %q", src.Warnings, src.HeadBranch, tt.want)
			}
			if tt.name != "odd branch" && tt.name != "option branch" && src.Remote != src.Upstream {
				t.Errorf("origin = %q; want the base repository %q", src.Remote, src.Upstream)
			}
		})
	}
}
