package gator

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devaipod/devaipod/gator/policy"
	"github.com/devaipod/devaipod/internal/gittest"
	"github.com/devaipod/devaipod/pod/source"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// testToken is what the fake servers demand. It also appears in an issue
// body the fake API serves, to check that the gator scrubs it.
const testToken = "ghp_TESTtokenNEVERshownTOtheAGENT0123456789"

// fakeGitHub serves the REST endpoints the tools use, for octo/app, and
// records what it was asked.
type fakeGitHub struct {
	t    *testing.T
	bare string // octo/app's repository, for compare
	mu   sync.Mutex
	// requests are "METHOD PATH" of every request that carried the token.
	requests []string
	// bodies are the JSON bodies of POST requests, by path.
	bodies map[string]map[string]any
	// unauthorized counts requests without the right Authorization header.
	unauthorized int
}

func (f *fakeGitHub) posted(path string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[path]
}

func (f *fakeGitHub) requested() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		f.unauthorized++
		f.mu.Unlock()
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
		return
	}
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	if r.Method == http.MethodPost {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			f.t.Errorf("fake GitHub: %s %s: body: %v", r.Method, r.URL.Path, err)
		}
		if f.bodies == nil {
			f.bodies = map[string]map[string]any{}
		}
		f.bodies[r.URL.Path] = body
	}
	f.mu.Unlock()

	const api = "/api/v3/repos/octo/app"
	send := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	user := map[string]any{"login": "octocat"}
	if basehead, ok := strings.CutPrefix(r.Method+" "+r.URL.Path, "GET "+api+"/compare/"); ok {
		gittest.ServeCompare(w, f.bare, basehead)
		return
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /api/v3/repos/octo/app":
		send(200, map[string]any{"full_name": "octo/app", "default_branch": "main"})
	case "GET /api/v3/repos/octo/old": // git's side redirects it (gitServer)
		send(200, map[string]any{"full_name": "octo/old", "default_branch": "main"})
	case "GET /api/v3/repos/octo/agentdefault":
		send(200, map[string]any{"full_name": "octo/agentdefault", "default_branch": "agent/main"})
	case "GET " + api + "/contents/README.md":
		if ref := r.URL.Query().Get("ref"); ref != "v1" {
			f.t.Errorf("fake GitHub: contents ref %q, want v1", ref)
		}
		send(200, map[string]any{"type": "file", "name": "README.md", "path": "README.md", "sha": "abc", "size": 12,
			"encoding": "base64", "content": base64.StdEncoding.EncodeToString([]byte("# app\nhello\n"))})
	case "GET " + api + "/contents/docs":
		send(200, []map[string]any{
			{"type": "file", "name": "a.md", "path": "docs/a.md", "size": 3},
			{"type": "dir", "name": "img", "path": "docs/img"},
		})
	case "GET " + api + "/issues":
		if s := r.URL.Query().Get("state"); s != "open" {
			f.t.Errorf("fake GitHub: issues state %q, want open", s)
		}
		send(200, []map[string]any{
			{"number": 1, "title": "Crash on start", "state": "open", "user": user, "labels": []map[string]any{{"name": "bug"}}, "html_url": "https://gh.test/octo/app/issues/1"},
			{"number": 2, "title": "Fix crash", "state": "open", "user": user, "pull_request": map[string]any{"url": "x"}},
		})
	case "GET " + api + "/issues/1":
		send(200, map[string]any{"number": 1, "title": "Crash on start", "state": "open", "user": user,
			"body": "it crashes; my token is " + testToken + " oops", "comments": 1})
	case "GET " + api + "/issues/1/comments", "GET " + api + "/issues/2/comments":
		send(200, []map[string]any{{"id": 11, "user": map[string]any{"login": "hubot"}, "body": "same here"}})
	case "GET " + api + "/pulls":
		send(200, []map[string]any{{"number": 2, "title": "Fix crash", "state": "open", "draft": true, "user": user,
			"head": map[string]any{"label": "octo:agent/fix", "ref": "agent/fix", "sha": "def"}, "base": map[string]any{"ref": "main"}}})
	case "GET " + api + "/pulls/2":
		if strings.Contains(r.Header.Get("Accept"), "diff") {
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "diff --git a/main.go b/main.go\n+fixed\n")
			return
		}
		send(200, map[string]any{"number": 2, "title": "Fix crash", "state": "open", "draft": true, "user": user, "body": "fixes #1",
			"head": map[string]any{"label": "octo:agent/fix", "ref": "agent/fix", "sha": "def"}, "base": map[string]any{"ref": "main"},
			"additions": 1, "changed_files": 1})
	case "POST " + api + "/pulls":
		send(201, map[string]any{"number": 3, "html_url": "https://gh.test/octo/app/pull/3", "draft": true})
	case "POST " + api + "/issues/1/comments":
		send(201, map[string]any{"id": 12, "html_url": "https://gh.test/octo/app/issues/1#issuecomment-12"})
	case "POST " + api + "/pulls/2/reviews":
		send(200, map[string]any{"id": 13, "state": "PENDING", "html_url": "https://gh.test/octo/app/pull/2#review-13"})
	default:
		send(404, map[string]any{"message": "Not Found"})
	}
}

// gitEnv makes git runs independent of the machine's configuration.
func gitEnv() []string {
	return append(os.Environ(),
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Agent", "GIT_AUTHOR_EMAIL=agent@example.test",
		"GIT_COMMITTER_NAME=Agent", "GIT_COMMITTER_EMAIL=agent@example.test",
	)
}

func gitRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func commit(t *testing.T, dir, file, content string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, dir, "add", file)
	gitRun(t, dir, "commit", "-q", "-m", "change "+file)
	return gitRun(t, dir, "rev-parse", "HEAD")
}

// gitServer serves the bare repositories under root over smart HTTP with
// git http-backend, demanding the token as the basic-auth password.
func gitServer(t *testing.T, root string) *httptest.Server {
	t.Helper()
	execPath := gitRun(t, root, "--exec-path")
	backend := &cgi.Handler{
		Path: filepath.Join(execPath, "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// octo/old is octo/app's former name: redirected, as GitHub does.
		if rest, ok := strings.CutPrefix(r.URL.Path, "/octo/old.git/"); ok {
			http.Redirect(w, r, "/octo/app.git/"+rest+"?"+r.URL.RawQuery, http.StatusMovedPermanently)
			return
		}
		if _, pass, ok := r.BasicAuth(); !ok || pass != testToken {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// testRig is a gator wired to a fake API and a git server, with a
// workspace one commit ahead of the bare repository's main.
type testRig struct {
	server    *Server
	session   *mcp.ClientSession
	api       *fakeGitHub
	audit     *syncBuffer
	bare      string // octo/app.git
	workspace string
	other     string // a second clone, to push history the workspace lacks
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newTestRig(t *testing.T, scopes ...string) *testRig {
	t.Helper()
	return newTestRigWith(t, nil, scopes...)
}

// newTestRigWith is newTestRig with the gator's protected paths (nil: the
// defaults).
func newTestRigWith(t *testing.T, protected []string, scopes ...string) *testRig {
	t.Helper()
	return newRig(t, func(o *Options) { o.ProtectedPaths = protected }, scopes...)
}

// newRig is newTestRig with edit applied to the gator's options.
func newRig(t *testing.T, edit func(*Options), scopes ...string) *testRig {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("these tests need git (its http-backend serves the push target): %v", err)
	}
	tmp := t.TempDir()
	gitRoot := filepath.Join(tmp, "git")
	bare := filepath.Join(gitRoot, "octo", "app.git")
	if err := os.MkdirAll(bare, 0o755); err != nil {
		t.Fatal(err)
	}
	gitRun(t, bare, "init", "-q", "--bare", "-b", "main")
	gitRun(t, bare, "config", "http.receivepack", "true")

	workspace := filepath.Join(tmp, "workspace")
	gitRun(t, tmp, "init", "-q", "-b", "main", workspace)
	commit(t, workspace, "README.md", "# app\n")
	gitRun(t, workspace, "push", "-q", bare, "main")
	other := filepath.Join(tmp, "other")
	gitRun(t, tmp, "clone", "-q", bare, other)

	api := &fakeGitHub{t: t, bare: bare}
	apiSrv := httptest.NewServer(api)
	t.Cleanup(apiSrv.Close)
	gitSrv := gitServer(t, gitRoot)

	sc, err := policy.ParseScopes(scopes)
	if err != nil {
		t.Fatal(err)
	}
	audit := &syncBuffer{}
	o := Options{
		Scopes:    sc,
		Token:     testToken,
		APIURL:    apiSrv.URL + "/api/v3/",
		GitURL:    gitSrv.URL + "/",
		Workspace: workspace,
		Audit:     audit,
		Pod:       "test",
		Version:   "test",
	}
	if edit != nil {
		edit(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return &testRig{server: s, session: connect(t, s), api: api, audit: audit, bare: bare, workspace: workspace, other: other}
}

// connect connects the SDK's client to s over the in-memory transport.
func connect(t *testing.T, s *Server) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	serverSide, clientSide := mcp.NewInMemoryTransports()
	ss, err := s.mcp.Connect(ctx, serverSide, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v0"}, nil).Connect(ctx, clientSide, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and returns its text and whether it is an error.
func (r *testRig) call(t *testing.T, tool string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := r.session.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		tc, ok := c.(*mcp.TextContent)
		if !ok {
			t.Fatalf("%s: content %T, want text", tool, c)
		}
		text.WriteString(tc.Text)
	}
	if strings.Contains(text.String(), testToken) {
		t.Errorf("%s: the token is in the result: %s", tool, text.String())
	}
	return text.String(), res.IsError
}

// mustCall calls a tool that must succeed and decodes its JSON result.
func (r *testRig) mustCall(t *testing.T, tool string, args map[string]any, out any) string {
	t.Helper()
	text, isErr := r.call(t, tool, args)
	if isErr {
		t.Fatalf("%s: error result: %s", tool, text)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(text), out); err != nil {
			t.Fatalf("%s: result %q: %v", tool, text, err)
		}
	}
	return text
}

func (r *testRig) records(t *testing.T) []policy.Record {
	t.Helper()
	var recs []policy.Record
	sc := bufio.NewScanner(strings.NewReader(r.audit.String()))
	for sc.Scan() {
		rec, err := policy.ParseRecord(sc.Bytes())
		if err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		recs = append(recs, rec)
	}
	return recs
}

func repoArgs(kv ...any) map[string]any {
	m := map[string]any{"owner": "octo", "repo": "app"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func TestToolsList(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/app")
	var names []string
	for tool, err := range r.session.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
		schema, _ := json.Marshal(tool.InputSchema)
		if tool.Name != policy.ToolStatus && (!strings.Contains(string(schema), `"owner"`) || !strings.Contains(string(schema), `"repo"`)) {
			t.Errorf("%s: schema %s lacks owner and repo", tool.Name, schema)
		}
		if tool.Description == "" {
			t.Errorf("%s: no description", tool.Name)
		}
	}
	want := append(slices.Collect(maps.Keys(policy.ToolPermissions)), policy.ToolStatus)
	slices.Sort(want)
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("tools %q, want %q", names, want)
	}
}

// TestToolsAgainstFakeGitHub calls every tool, allowed, against the fake
// API and git server, then checks the audit log.
func TestToolsAgainstFakeGitHub(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/app:read,comment,create-draft,push-branch,pending-review", "github:octo/agentdefault:push-branch")

	var status statusResult
	r.mustCall(t, policy.ToolStatus, nil, &status)
	if !slices.Equal(status.Scopes, []string{"github:octo/agentdefault:push-branch", "github:octo/app:read,comment,create-draft,push-branch,pending-review"}) {
		t.Errorf("status scopes %q", status.Scopes)
	}
	if status.Tools[policy.ToolPushBranch] != "push-branch" || status.Tools[policy.ToolStatus] != "none" || len(status.Tools) != 10 {
		t.Errorf("status tools %v", status.Tools)
	}

	var file fileResult
	r.mustCall(t, policy.ToolGetFileContents, repoArgs("path", "README.md", "ref", "v1"), &file)
	if file.Type != "file" || file.Content != "# app\nhello\n" || file.SHA != "abc" {
		t.Errorf("get_file_contents file: %+v", file)
	}
	var dir fileResult
	r.mustCall(t, policy.ToolGetFileContents, repoArgs("path", "docs/"), &dir)
	if dir.Type != "dir" || len(dir.Entries) != 2 || dir.Entries[1].Path != "docs/img" || dir.Entries[1].Type != "dir" {
		t.Errorf("get_file_contents dir: %+v", dir)
	}

	var issues []issueResult
	r.mustCall(t, policy.ToolListIssues, repoArgs(), &issues)
	if len(issues) != 1 || issues[0].Number != 1 || !slices.Equal(issues[0].Labels, []string{"bug"}) {
		t.Errorf("list_issues (pull requests left out): %+v", issues)
	}

	var issue issueResult
	text := r.mustCall(t, policy.ToolGetIssue, repoArgs("number", 1), &issue)
	if issue.Title != "Crash on start" || len(issue.Thread) != 1 || issue.Thread[0].Body != "same here" || issue.Thread[0].User != "hubot" {
		t.Errorf("get_issue: %+v", issue)
	}
	if strings.Contains(text, testToken) || !strings.Contains(issue.Body, "my token is [redacted] oops") {
		t.Errorf("get_issue did not scrub the token from the body: %q", issue.Body)
	}

	var pulls []pullResult
	r.mustCall(t, policy.ToolListPullRequests, repoArgs(), &pulls)
	if len(pulls) != 1 || pulls[0].Number != 2 || !pulls[0].Draft || pulls[0].Head != "octo:agent/fix" || pulls[0].Base != "main" {
		t.Errorf("list_pull_requests: %+v", pulls)
	}

	var pull pullResult
	r.mustCall(t, policy.ToolGetPullRequest, repoArgs("number", 2), &pull)
	if pull.Body != "fixes #1" || !strings.Contains(pull.Diff, "+fixed") || pull.HeadSHA != "def" || len(pull.Thread) != 1 || pull.DiffTruncated {
		t.Errorf("get_pull_request: %+v", pull)
	}

	// push_branch, then a draft pull request from the pushed branch.
	head := commit(t, r.workspace, "fix.txt", "fixed\n")
	var pushed pushResult
	r.mustCall(t, policy.ToolPushBranch, repoArgs("branch", "agent/fix"), &pushed)
	if pushed.Action != "created" || pushed.Commit != head || pushed.Branch != "agent/fix" {
		t.Errorf("push_branch: %+v", pushed)
	}
	if got := gitRun(t, r.bare, "rev-parse", "refs/heads/agent/fix"); got != head {
		t.Errorf("agent/fix in the bare repository is %s, want the workspace's HEAD %s", got, head)
	}

	var pr createdResult
	r.mustCall(t, policy.ToolCreateDraftPullRequest, repoArgs("title", "Fix crash", "body", "Fixes #1", "head", "agent/fix"), &pr)
	if pr.Number != 3 || !pr.Draft {
		t.Errorf("create_draft_pull_request: %+v", pr)
	}
	body := r.api.posted("/api/v3/repos/octo/app/pulls")
	if body["draft"] != true || body["base"] != "main" || body["head"] != "agent/fix" || body["title"] != "Fix crash" {
		t.Errorf("create_draft_pull_request sent %v; want a draft onto the default branch", body)
	}
	// The agent cannot ask for a non-draft: unknown fields are ignored and
	// draft is always true.
	r.mustCall(t, policy.ToolCreateDraftPullRequest, repoArgs("title", "T", "head", "agent/fix", "base", "main", "draft", false), nil)
	if body := r.api.posted("/api/v3/repos/octo/app/pulls"); body["draft"] != true || body["base"] != "main" {
		t.Errorf("create_draft_pull_request with draft=false sent %v", body)
	}

	var comment createdResult
	r.mustCall(t, policy.ToolAddIssueComment, repoArgs("number", 1, "body", "Working on it"), &comment)
	if comment.ID != 12 {
		t.Errorf("add_issue_comment: %+v", comment)
	}
	if body := r.api.posted("/api/v3/repos/octo/app/issues/1/comments"); body["body"] != "Working on it" {
		t.Errorf("add_issue_comment sent %v", body)
	}

	var review createdResult
	r.mustCall(t, policy.ToolCreatePendingReview, repoArgs("number", 2, "body", "Looks fine",
		"comments", []map[string]any{{"path": "main.go", "line": 3, "body": "nit"}, {"path": "main.go", "line": 9, "start_line": 7, "side": "left", "body": "why?"}}), &review)
	if review.ID != 13 || review.State != "PENDING" {
		t.Errorf("create_pending_review: %+v", review)
	}
	rb := r.api.posted("/api/v3/repos/octo/app/pulls/2/reviews")
	if _, ok := rb["event"]; ok {
		t.Errorf("create_pending_review sent an event (it would submit the review): %v", rb)
	}
	comments, _ := rb["comments"].([]any)
	if len(comments) != 2 {
		t.Fatalf("create_pending_review sent %v", rb)
	}
	if c := comments[1].(map[string]any); c["side"] != "LEFT" || c["start_line"] != float64(7) || c["line"] != float64(9) {
		t.Errorf("create_pending_review comment 2: %v", c)
	}

	if r.api.unauthorized != 0 {
		t.Errorf("%d API requests without the token", r.api.unauthorized)
	}

	// The audit: a start record, then one allowed call record per call.
	recs := r.records(t)
	if len(recs) != 13 {
		t.Fatalf("%d audit records, want 13:\n%s", len(recs), r.audit.String())
	}
	if recs[0].Event != policy.EventStart || len(recs[0].Scopes) != 2 || recs[0].Pod != "test" {
		t.Errorf("start record %+v", recs[0])
	}
	for _, rec := range recs[1:] {
		if rec.Event != policy.EventCall || rec.Decision != policy.DecisionAllow || rec.Error != "" || rec.Kind != policy.KindGator {
			t.Errorf("record %+v", rec)
		}
		if rec.Tool != policy.ToolStatus && (rec.Repo != "octo/app" || rec.Permission == "") {
			t.Errorf("record %+v: repo or permission missing", rec)
		}
	}
	byTool := map[string]policy.Record{}
	for _, rec := range recs[1:] {
		byTool[rec.Tool] = rec
	}
	if rec := byTool[policy.ToolAddIssueComment]; rec.Args["body"] != "13 bytes" || rec.Args["number"] != "1" || rec.Result == "" {
		t.Errorf("comment record %+v: want the body's size, not the body", rec)
	}
	if rec := byTool[policy.ToolCreatePendingReview]; rec.Args["comments"] != "2 items" {
		t.Errorf("review record %+v", rec)
	}
	if rec := byTool[policy.ToolPushBranch]; rec.Args["branch"] != "agent/fix" || !strings.Contains(rec.Result, head) {
		t.Errorf("push record %+v", rec)
	}
	if strings.Contains(r.audit.String(), testToken) {
		t.Errorf("the token is in the audit log:\n%s", r.audit.String())
	}
	for _, s := range []string{"Working on it", "Looks fine"} {
		if strings.Contains(r.audit.String(), s) {
			t.Errorf("the audit log holds the body %q", s)
		}
	}
}

// TestDeniedCallsMakeNoRequests checks that a denied call reaches neither
// GitHub nor git, and says how to grant it.
func TestDeniedCallsMakeNoRequests(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/app:read")
	before := gitRun(t, r.bare, "for-each-ref")
	cases := []struct {
		tool string
		args map[string]any
		want string
	}{
		{policy.ToolCreateDraftPullRequest, repoArgs("title", "x", "head", "agent/x"), "denied: create_draft_pull_request on octo/app needs scope create-draft; grant it with `devaipod up ... --gator github:octo/app:read,create-draft`"},
		{policy.ToolAddIssueComment, repoArgs("number", 1, "body", "hi"), "needs scope comment"},
		{policy.ToolPushBranch, repoArgs("branch", "agent/x"), "needs scope push-branch"},
		{policy.ToolCreatePendingReview, repoArgs("number", 2, "body", "x"), "needs scope pending-review"},
		{policy.ToolGetIssue, map[string]any{"owner": "evil", "repo": "app", "number": 1}, "denied: get_issue on evil/app needs scope read"},
		{policy.ToolGetIssue, map[string]any{"owner": "octo", "repo": "app/../../evil", "number": 1}, "not allowed"},
		{policy.ToolGetIssue, map[string]any{"number": 1}, "want OWNER/REPO"},
		{policy.ToolGetIssue, map[string]any{"owner": "octo", "repo": "app", "number": "one"}, "bad arguments"},
	}
	for _, c := range cases {
		text, isErr := r.call(t, c.tool, c.args)
		if !isErr || !strings.Contains(text, c.want) {
			t.Errorf("%s %v: %q (error %v), want an error containing %q", c.tool, c.args, text, isErr, c.want)
		}
	}
	if got := r.api.requested(); len(got) != 0 {
		t.Errorf("denied calls made API requests: %q", got)
	}
	if after := gitRun(t, r.bare, "for-each-ref"); after != before {
		t.Errorf("denied push changed the bare repository:\n%s\n->\n%s", before, after)
	}
	// An unknown tool is refused by the SDK, and audited all the same.
	if res, err := r.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "delete_repository", Arguments: repoArgs()}); err == nil && !res.IsError {
		t.Errorf("unknown tool: %+v", res)
	}
	recs := r.records(t)
	if len(recs) != len(cases)+2 {
		t.Fatalf("%d audit records, want %d:\n%s", len(recs), len(cases)+2, r.audit.String())
	}
	for _, rec := range recs[1:] {
		if rec.Decision != policy.DecisionDeny || !strings.HasPrefix(rec.Reason, "denied: ") {
			t.Errorf("record %+v, want a deny with its reason", rec)
		}
	}
	if last := recs[len(recs)-1]; last.Tool != "delete_repository" {
		t.Errorf("last record %+v, want the unknown tool", last)
	}
}

func TestPushBranchRefusals(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/app:push-branch", "github:octo/agentdefault:push-branch")
	mainBefore := gitRun(t, r.bare, "rev-parse", "refs/heads/main")
	commit(t, r.workspace, "a.txt", "a\n")

	for _, branch := range []string{"main", "refs/heads/main", "feature/x", "agent/", "agent/../main", "agent/\u202efix", "agent/a b"} {
		text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", branch))
		if !isErr || !strings.HasPrefix(text, "denied: ") {
			t.Errorf("push to %q: %q, want a denial", branch, text)
		}
	}
	if got := gitRun(t, r.bare, "rev-parse", "refs/heads/main"); got != mainBefore {
		t.Errorf("main moved from %s to %s", mainBefore, got)
	}

	// A default branch named agent/... is still the default branch.
	text, isErr := r.call(t, policy.ToolPushBranch, map[string]any{"owner": "octo", "repo": "agentdefault", "branch": "agent/main"})
	if !isErr || !strings.Contains(text, "is the default branch") {
		t.Errorf("push to the default branch: %q", text)
	}

	// Someone else's history on an agent/ branch: never overwritten.
	theirs := commit(t, r.other, "theirs.txt", "theirs\n")
	gitRun(t, r.other, "push", "-q", r.bare, "HEAD:refs/heads/agent/shared")
	text, isErr = r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/shared"))
	if !isErr || !strings.Contains(text, "never force-pushes") {
		t.Errorf("push over someone else's commits: %q", text)
	}
	if got := gitRun(t, r.bare, "rev-parse", "refs/heads/agent/shared"); got != theirs {
		t.Errorf("agent/shared is %s, want their %s", got, theirs)
	}

	// Fast-forwards and repeats are fine.
	var res pushResult
	r.mustCall(t, policy.ToolPushBranch, repoArgs("branch", "agent/mine"), &res)
	if res.Action != "created" {
		t.Errorf("first push: %+v", res)
	}
	first := res.Commit
	second := commit(t, r.workspace, "b.txt", "b\n")
	r.mustCall(t, policy.ToolPushBranch, repoArgs("branch", "agent/mine"), &res)
	if res.Action != "updated" || res.Commit != second || res.PreviousCommit != first {
		t.Errorf("fast-forward push: %+v", res)
	}
	r.mustCall(t, policy.ToolPushBranch, repoArgs("branch", "agent/mine"), &res)
	if res.Action != "up-to-date" {
		t.Errorf("repeated push: %+v", res)
	}
	if got := gitRun(t, r.bare, "rev-parse", "refs/heads/agent/mine"); got != second {
		t.Errorf("agent/mine is %s, want %s", got, second)
	}

	// History rewritten in the workspace (amend): refused, not forced.
	gitRun(t, r.workspace, "commit", "-q", "--amend", "-m", "rewritten")
	text, isErr = r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/mine"))
	if !isErr || !strings.Contains(text, "never force-pushes") {
		t.Errorf("push of rewritten history: %q", text)
	}
	if got := gitRun(t, r.bare, "rev-parse", "refs/heads/agent/mine"); got != second {
		t.Errorf("agent/mine moved to %s after a refused push", got)
	}

	for _, rec := range r.records(t)[1:] {
		if rec.Tool != policy.ToolPushBranch {
			t.Errorf("record %+v", rec)
		}
	}
	if strings.Contains(r.audit.String(), testToken) {
		t.Error("the token is in the audit log")
	}
}

// TestPushWorkspaceSymlinks checks that the workspace's repository is read
// through a filesystem bound to the workspace: symlinks the agent plants
// (.git itself, or HEAD, refs and objects inside it) do not lead the gator
// to a repository, or any file, outside.
// TestDraftPullRequestRefusals: a draft pull request goes from an agent/
// branch of the scoped repository to its default branch, nothing else.
func TestDraftPullRequestRefusals(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/app:create-draft")
	// Only the default branch as base, only an agent/ branch of this
	// repository as head.
	for _, args := range []map[string]any{
		repoArgs("title", "T", "head", "agent/fix", "base", "dev"),
		repoArgs("title", "T", "head", "someone:agent/fix"),
		repoArgs("title", "T", "head", "feature/x"),
		repoArgs("title", "T", "head", "agent/\u202efix"),
	} {
		if text, isErr := r.call(t, policy.ToolCreateDraftPullRequest, args); !isErr || !strings.HasPrefix(text, "refused: ") {
			t.Errorf("create_draft_pull_request %v: %q; want a refusal", args, text)
		}
	}
	if got := r.api.posted("/api/v3/repos/octo/app/pulls"); got != nil {
		t.Errorf("a refused pull request reached the API: %v", got)
	}
}

// TestPushProtectedPaths: commits that touch CI definitions are not
// pushed, also when a later commit removes the file again; the user's
// protected paths replace the defaults.
func TestPushProtectedPaths(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/app:push-branch")
	os.MkdirAll(filepath.Join(r.workspace, ".github", "workflows"), 0o755)
	commit(t, r.workspace, ".github/workflows/ci.yml", "on: push\n")
	gitRun(t, r.workspace, "rm", "-q", ".github/workflows/ci.yml")
	gitRun(t, r.workspace, "commit", "-qm", "gone again")
	text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/ci"))
	if !isErr || !strings.Contains(text, "refused: the commits to push change .github/workflows/ci.yml") {
		t.Errorf("push of a commit that touched a workflow: %q", text)
	}
	if out := gitRun(t, r.bare, "for-each-ref", "refs/heads/agent"); out != "" {
		t.Errorf("the push went through: %s", out)
	}
	// Work elsewhere on top of the same history is still refused: the
	// workflow commit would be pushed with it.
	os.MkdirAll(filepath.Join(r.workspace, "src"), 0o755)
	commit(t, r.workspace, "src/a.go", "package a\n")
	if text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/ci")); !isErr || !strings.Contains(text, "workflows/ci.yml") {
		t.Errorf("push of history that contains the workflow commit: %q", text)
	}

	custom := newTestRigWith(t, []string{"Makefile"}, "github:octo/app:push-branch")
	os.MkdirAll(filepath.Join(custom.workspace, ".github", "workflows"), 0o755)
	commit(t, custom.workspace, ".github/workflows/ci.yml", "on: push\n")
	var res pushResult
	custom.mustCall(t, policy.ToolPushBranch, repoArgs("branch", "agent/ok"), &res)
	commit(t, custom.workspace, "Makefile", "all:\n")
	if text, isErr := custom.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/ok")); !isErr || !strings.Contains(text, "Makefile") {
		t.Errorf("push touching a configured protected path: %q", text)
	}
}

// TestPushChecksCommitsOfPullRequestRefs: a fork's pull request is a ref
// of the repository (refs/pull/N/head), but its commits are anyone's: a
// push of one, or on top of one, is checked like the agent's own.
func TestPushChecksCommitsOfPullRequestRefs(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/app:push-branch")
	gitRun(t, r.other, "checkout", "-q", "-b", "fork")
	os.MkdirAll(filepath.Join(r.other, ".github", "workflows"), 0o755)
	evil := commit(t, r.other, ".github/workflows/ci.yml", "on: push\n")
	gitRun(t, r.other, "push", "-q", "origin", "fork:refs/pull/1/head")
	gitRun(t, r.workspace, "fetch", "-q", r.bare, "refs/pull/1/head")
	gitRun(t, r.workspace, "checkout", "-q", evil)
	for _, branch := range []string{"agent/docs", "agent/fix"} {
		if branch == "agent/fix" {
			commit(t, r.workspace, "fix.txt", "x\n")
		}
		if text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", branch)); !isErr || !strings.Contains(text, "workflows/ci.yml") {
			t.Errorf("push of %s, on a pull request's head: %q; want it refused for the workflow", branch, text)
		}
	}
	if out := gitRun(t, r.bare, "for-each-ref", "refs/heads/agent"); out != "" {
		t.Errorf("the push went through: %s", out)
	}
}

// TestPushWorkspaceFIFO: a FIFO the agent puts in place of a file of .git
// is refused, not opened: the open would wait for a writer for ever.
func TestPushWorkspaceFIFO(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/app:push-branch")
	head := filepath.Join(r.workspace, ".git", "HEAD")
	os.Remove(head)
	if err := syscall.Mkfifo(head, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/fix"))
		if !isErr {
			text = "no error: " + text
		}
		done <- text
	}()
	select {
	case text := <-done:
		if !strings.Contains(text, "push_branch failed") {
			t.Errorf("push with a FIFO for HEAD: %q; want it to fail", text)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("push with a FIFO for HEAD still waits after 10 s")
	}
}

// TestPushWorkspaceHugeHEAD: a sparse HEAD of a gigabyte (no disk) is
// refused by its size, not read whole.
func TestPushWorkspaceHugeHEAD(t *testing.T) {
	// Not parallel: it measures what the process allocates.
	r := newTestRig(t, "github:octo/app:push-branch")
	if err := os.Truncate(filepath.Join(r.workspace, ".git", "HEAD"), 1<<30); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/fix"))
	runtime.ReadMemStats(&after)
	if !isErr {
		t.Errorf("push with a 1 GiB HEAD: %q; want it to fail", text)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 256<<20 {
		t.Errorf("push with a 1 GiB HEAD allocated %d MiB", grew>>20)
	}
}

// commitTree makes a tree of entries (git mktree's input) in repo and a
// commit of it on HEAD, which it moves there.
func commitTree(t *testing.T, repo, entries, message string) {
	t.Helper()
	cmd := exec.Command("git", "-C", repo, "mktree")
	cmd.Stdin = strings.NewReader(entries)
	tree, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	head := gitRun(t, repo, "commit-tree", strings.TrimSpace(string(tree)), "-p", "HEAD", "-m", message)
	gitRun(t, repo, "update-ref", "HEAD", head)
}

// TestPushWorkspaceHugeObject: a blob of a gigabyte of zeros, a loose
// object of a megabyte, is refused by its header's size, not read whole.
func TestPushWorkspaceHugeObject(t *testing.T) {
	// Not parallel: it measures what the process allocates.
	r := newTestRig(t, "github:octo/app:push-branch")
	const size = 1 << 30
	parts := [][]byte{fmt.Appendf(nil, "blob %d\x00", size)}
	zeros := make([]byte, 1<<20)
	for range size / len(zeros) {
		parts = append(parts, zeros)
	}
	sum := sha1.New()
	for _, p := range parts {
		sum.Write(p)
	}
	oid := hex.EncodeToString(sum.Sum(nil))
	putLoose(t, r.workspace, oid, parts...)
	commitTree(t, r.workspace, "100644 blob "+oid+"\tzeros.bin\n", "zeros")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/zeros"))
	runtime.ReadMemStats(&after)
	if !isErr || !strings.Contains(text, "1024 MiB") {
		t.Errorf("push of a 1 GiB blob: %q; want it refused by its size", text)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 256<<20 {
		t.Errorf("push of a 1 GiB blob allocated %d MiB", grew>>20)
	}
}

// TestPushWorkspaceInflateBomb: a loose object whose header says 5
// bytes and that inflates to 256 MiB is refused once it passes 5 bytes
// (go-git took it whole, then found it did not match its id).
func TestPushWorkspaceInflateBomb(t *testing.T) {
	// Not parallel: it measures what the process allocates.
	r := newTestRig(t, "github:octo/app:push-branch")
	os.WriteFile(filepath.Join(r.workspace, "hello.txt"), []byte("hello"), 0o644)
	gitRun(t, r.workspace, "add", "hello.txt")
	gitRun(t, r.workspace, "commit", "-q", "-m", "hello")
	const oid = "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0"
	putLoose(t, r.workspace, oid, []byte("blob 5\x00hello"), make([]byte, 256<<20))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/bomb"))
	runtime.ReadMemStats(&after)
	if !isErr || !strings.Contains(text, oid+": malformed git data: an object is not the size its header says") {
		t.Errorf("push of an inflate bomb: %q; want it refused as such", text)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("push of an inflate bomb allocated %d MiB", grew>>20)
	}
	if out := gitRun(t, r.bare, "for-each-ref", "refs/heads/agent"); out != "" {
		t.Errorf("pushed: %s", out)
	}
}

// TestPushReadIsBounded: a push whose objects add up to more than the
// gator would hold at once (go-git's packing keeps them all) is refused,
// each object under the bound as it is.
func TestPushReadIsBounded(t *testing.T) {
	// Not parallel: it takes some 300 MiB.
	r := newTestRig(t, "github:octo/app:push-branch")
	var entries strings.Builder
	for i := range 3 {
		content := make([]byte, 90<<20)
		content[0] = byte(i)
		oid := plumbing.ComputeHash(plumbing.BlobObject, content).String()
		putLoose(t, r.workspace, oid, fmt.Appendf(nil, "blob %d\x00", len(content)), content)
		fmt.Fprintf(&entries, "100644 blob %s\tpart%d.bin\n", oid, i)
	}
	commitTree(t, r.workspace, entries.String(), "parts")
	text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/parts"))
	if !isErr || !strings.Contains(text, "the push needs more than 256 MiB of the workspace's files, commits and trees") {
		t.Errorf("push of 270 MiB: %q; want it refused", text)
	}
	if out := gitRun(t, r.bare, "for-each-ref", "refs/heads/agent"); out != "" {
		t.Errorf("pushed: %s", out)
	}
}

// TestPushReadCountsNewTrees: the new commits' trees count against the
// bound too (go-git's packing holds them with the files): a tree of 2 MiB,
// of entries naming one small file, passes no bound of 1 MiB.
func TestPushReadCountsNewTrees(t *testing.T) {
	// Not parallel: it lowers maxPushRead.
	defer func(n int64) { maxPushRead = n }(maxPushRead)
	maxPushRead = 1 << 20
	r := newTestRig(t, "github:octo/app:push-branch")
	blob := gitRun(t, r.workspace, "hash-object", "-w", "--stdin")
	var entries strings.Builder
	for i := range 60000 {
		fmt.Fprintf(&entries, "100644 blob %s\tfile-%06d\n", blob, i)
	}
	commitTree(t, r.workspace, entries.String(), "many")
	text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/many"))
	if !isErr || !strings.Contains(text, "the push needs more than 1 MiB of the workspace's files, commits and trees") {
		t.Errorf("push of a 2 MiB tree against a bound of 1 MiB: %q; want it refused", text)
	}
}

func TestPushWorkspaceSymlinks(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/app:push-branch")
	outside := filepath.Join(t.TempDir(), "outside")
	gitRun(t, filepath.Dir(outside), "init", "-q", outside)
	commit(t, outside, "x.txt", "x\n")
	dotgit := filepath.Join(r.workspace, ".git")
	if err := os.Rename(dotgit, filepath.Join(r.workspace, "moved.git")); err != nil {
		t.Fatal(err)
	}

	// .git itself a symlink.
	if err := os.Symlink(filepath.Join(outside, ".git"), dotgit); err != nil {
		t.Fatal(err)
	}
	text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/x"))
	if !isErr || !strings.Contains(text, ".git is not a directory") {
		t.Errorf("push from a workspace whose .git is a symlink: %q", text)
	}

	// A real .git whose contents are symlinks to the outside repository:
	// unbounded, go-git would push the outside commit.
	if err := os.Remove(dotgit); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dotgit, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"HEAD", "refs", "objects", "config"} {
		if err := os.Symlink(filepath.Join(outside, ".git", name), filepath.Join(dotgit, name)); err != nil {
			t.Fatal(err)
		}
	}
	text, isErr = r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/x"))
	if !isErr || !strings.Contains(text, "resolve the workspace's HEAD") {
		t.Errorf("push from a .git of symlinks to outside: %q", text)
	}
	if out := gitRun(t, r.bare, "for-each-ref", "refs/heads/agent"); out != "" {
		t.Errorf("something was pushed: %s", out)
	}
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	base := Options{Token: testToken, Audit: io.Discard}
	cases := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"no token", func(o *Options) { o.Token = "" }, "no GitHub token"},
		{"short token", func(o *Options) { o.Token = "abc" }, "no GitHub token"},
		{"token with newline", func(o *Options) { o.Token = "ghp_abcdefgh\nX" }, "characters other than"},
		{"no audit", func(o *Options) { o.Audit = nil }, "no audit writer"},
		{"bad API URL", func(o *Options) { o.APIURL = "ftp://x/" }, "want https://HOST/"},
		{"API URL with credentials", func(o *Options) { o.APIURL = "https://u:p@ghe.test/api/v3/" }, "no user"},
		{"underivable git URL", func(o *Options) { o.APIURL = "https://ghe.test/api/"; o.Workspace = "/w" }, "give the git URL"},
		{"git URL with credentials", func(o *Options) { o.GitURL = "https://u:p@ghe.test/"; o.Workspace = "/w" }, "without credentials"},
		{"bad known commit", func(o *Options) { o.Workspace = "/w"; o.KnownCommits = []string{"octo/app@main"} }, `known commit "octo/app@main"`},
	}
	for _, c := range cases {
		o := base
		c.edit(&o)
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	o := base
	o.Workspace, o.KnownCommits = "/w", []string{"Octo/App@" + strings.Repeat("ab", 20), "octo/app@" + strings.Repeat("cd", 20)}
	if s, err := New(o); err != nil || len(s.pusher.known["octo/app"]) != 2 {
		t.Errorf("New with two known commits of octo/app: %v", err)
	}
	for _, c := range []struct{ api, git string }{
		{"https://api.github.com/", "https://github.com/"},
		{"https://api.github.com", "https://github.com/"},
		{"https://ghe.example.test/api/v3", "https://ghe.example.test/"},
		{"http://ghe.example.test:8080/prefix/api/v3/", "http://ghe.example.test:8080/prefix/"},
	} {
		api, err := parseAPIURL(c.api)
		if err != nil {
			t.Fatal(err)
		}
		got, err := gitURLFor(api)
		if err != nil || got.String() != c.git {
			t.Errorf("gitURLFor(%s) = %v, %v; want %s", c.api, got, err, c.git)
		}
	}
}

// TestAuthTransport checks that the token goes to the API's host only,
// and that no redirect is followed: neither to another host nor to
// another repository's name on the API (a renamed repository's).
func TestAuthTransport(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]string{}
	record := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[name] = r.Header.Get("Authorization")
			mu.Unlock()
		})
	}
	elsewhere := httptest.NewServer(record("elsewhere"))
	defer elsewhere.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(r.URL.Path).ServeHTTP(w, r)
		if r.URL.Path == "/api/v3/repos/octo/old" {
			http.Redirect(w, r, "/api/v3/repos/other/app", http.StatusTemporaryRedirect)
			return
		}
		http.Redirect(w, r, elsewhere.URL+"/x", http.StatusFound)
	}))
	defer api.Close()
	u, err := parseAPIURL(api.URL + "/api/v3/")
	if err != nil {
		t.Fatal(err)
	}
	c := newGitHubClient(u, testToken, nil, "test")
	for _, path := range []string{"repos/octo/app", "repos/octo/old"} {
		req, err := c.NewRequest("GET", path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Do(context.Background(), req, nil); err == nil || !strings.Contains(err.Error(), "refused: the server redirected") {
			t.Errorf("GET %s, redirected: %v; want a refusal", path, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["/api/v3/repos/octo/app"] != "Bearer "+testToken {
		t.Errorf("API got Authorization %q", seen["/api/v3/repos/octo/app"])
	}
	for _, target := range []string{"elsewhere", "/api/v3/repos/other/app"} {
		if a, ok := seen[target]; ok {
			t.Errorf("the redirect to %s was followed (Authorization %q)", target, a)
		}
	}
}

// TestPushFollowsNoRedirect: a push to a repository's former name, which
// the git server redirects to its current one, is refused, not made there.
func TestPushFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/*:push-branch")
	text, isErr := r.call(t, policy.ToolPushBranch, map[string]any{"owner": "octo", "repo": "old", "branch": "agent/fix"})
	if !isErr || !strings.Contains(text, "redirected") {
		t.Errorf("push to a renamed repository's old name: %q; want a refusal", text)
	}
	if out := gitRun(t, r.bare, "for-each-ref", "refs/heads/agent"); out != "" {
		t.Errorf("the push went through to the new name: %s", out)
	}
}

func TestSummarizeArgs(t *testing.T) {
	t.Parallel()
	got := summarizeArgs(map[string]any{
		"owner": "octo", "repo": "app", "number": float64(7), "body": "hello", "title": strings.Repeat("é", 100),
		"comments": []any{1, 2, 3}, "draft": false, "ref": "", "labels": []any{},
	})
	want := map[string]string{"number": "7", "body": "5 bytes", "title": strings.Repeat("é", 60) + "...", "comments": "3 items", "draft": "false"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("summarizeArgs = %v, want %v", got, want)
	}
}

// TestSessionCap: the agent cannot open MCP sessions without bound; ending
// one makes room.
func TestSessionCap(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/app:read")
	srv := httptest.NewServer(r.server.Handler())
	t.Cleanup(srv.Close)
	initialize := func() (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+MCPPath, strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
	}
	// The rig's own in-memory session counts too.
	var ids []string
	for len(ids) < maxSessions-1 {
		code, id := initialize()
		if code != http.StatusOK || id == "" {
			t.Fatalf("session %d: status %d, id %q", len(ids)+1, code, id)
		}
		ids = append(ids, id)
	}
	if code, _ := initialize(); code != http.StatusServiceUnavailable {
		t.Fatalf("session %d: status %d; want 503", maxSessions+1, code)
	}
	del, _ := http.NewRequest(http.MethodDelete, srv.URL+MCPPath, nil)
	del.Header.Set("Mcp-Session-Id", ids[0])
	if resp, err := http.DefaultClient.Do(del); err != nil || resp.StatusCode >= 300 {
		t.Fatalf("DELETE a session: %v %v", resp, err)
	}
	if code, _ := initialize(); code != http.StatusOK {
		t.Errorf("after one session ended: status %d; want 200", code)
	}
}

// TestAuditRecordsAreBounded: what the agent sends cannot make one audit
// line large (a megabyte owner, thousands of arguments).
func TestAuditRecordsAreBounded(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/app:read")
	args := map[string]any{"owner": strings.Repeat("o", 1<<20), "repo": "app", "number": 1}
	for i := range 5000 {
		args["k"+strconv.Itoa(i)] = strings.Repeat("v", 100)
	}
	r.call(t, policy.ToolGetIssue, args)
	for _, line := range strings.Split(strings.TrimSpace(r.audit.String()), "\n") {
		if len(line) > 8<<10 {
			t.Errorf("an audit line of %d bytes: %.200s...", len(line), line)
		}
	}
}

// TestAuditRecordsAreBoundedEvenEscaped: argument names, and characters
// that JSON escapes as six bytes, do not make a long line either.
func TestAuditRecordsAreBoundedEvenEscaped(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	a := newAuditor("demo", func(s string) string { return s }, slog.New(slog.DiscardHandler), &buf, func(string) bool { return true })
	args := map[string]string{}
	for i := range maxRecordArgs {
		args[strings.Repeat("<", 1<<20)+strconv.Itoa(i)] = strings.Repeat("<", 1<<10)
	}
	long := strings.Repeat("<", 1<<20)
	a.write(policy.Record{Event: policy.EventCall, Tool: "get_issue", Repo: long, Reason: long, Error: long, Result: long, Args: args,
		Ask: &policy.AskNote{What: long, Reason: long}})
	line := strings.TrimSpace(buf.String())
	if len(line) > maxRecordLine {
		t.Errorf("an audit line of %d bytes: %.200s...", len(line), line)
	}
	if r, err := policy.ParseRecord([]byte(line)); err != nil || r.Args["..."] != "16 arguments, too long to record" {
		t.Errorf("the record %+v (%v); want its arguments replaced by their count", r, err)
	}
}

// TestAuditDropsFloods: past the burst, calls of one kind are counted and
// written as one record per kind; calls that did something on the forge,
// or that a person decided, are always written; the names of tools the
// gator does not have are one kind.
func TestAuditDropsFloods(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	known := map[string]bool{"push_branch": true, "get_issue": true}
	a := newAuditor("demo", func(s string) string { return s }, slog.New(slog.DiscardHandler), &buf, func(tool string) bool { return known[tool] })
	for i := range 150 {
		a.write(policy.Record{Event: policy.EventCall, Tool: "push_branch", Decision: policy.DecisionDeny, Reason: "denied"})
		a.write(policy.Record{Event: policy.EventCall, Tool: "push_branch", Decision: policy.DecisionAllow, Result: "created"})
		a.write(policy.Record{Event: policy.EventCall, Tool: "get_issue", Decision: policy.DecisionAllow})
		a.write(policy.Record{Event: policy.EventCall, Tool: "push_branch", Decision: policy.DecisionAllow,
			Ask: &policy.AskNote{Outcome: policy.AskRejected}})
		a.write(policy.Record{Event: policy.EventCall, Tool: "made_up_" + strconv.Itoa(i), Decision: policy.DecisionDeny})
		a.write(policy.Record{Event: policy.EventCall, Tool: "made_up_" + strconv.Itoa(i+1000), Decision: policy.DecisionDeny})
	}
	for range 5 {
		a.write(policy.Record{Event: policy.EventCall, Tool: "get_issue", Decision: policy.DecisionDeny, Reason: "denied"})
	}
	a.finish()
	counts := map[string]int{}
	dropped := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		r, err := policy.ParseRecord([]byte(line))
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if r.Event == policy.EventDropped {
			dropped[r.Reason+" "+r.Tool+" "+r.Decision] += r.Count
			continue
		}
		if strings.HasPrefix(r.Tool, "made_up_") {
			r.Tool = "made_up"
		}
		counts[r.Tool+" "+r.Decision]++
	}
	want := map[string]int{"push_branch deny": 100, "push_branch allow": 300, "get_issue allow": 100, "get_issue deny": 5, "made_up deny": 100}
	if !maps.Equal(counts, want) {
		t.Errorf("records %v, want %v", counts, want)
	}
	wantDropped := map[string]int64{"call push_branch deny": 50, "call get_issue allow": 50, "call unknown deny": 200}
	if !maps.Equal(dropped, wantDropped) {
		t.Errorf("dropped %v, want %v", dropped, wantDropped)
	}
}

// TestCheckToken: a token is letters, digits, '_', '-' and '.': anything
// that JSON or a URL would escape would escape the redaction too.
func TestCheckToken(t *testing.T) {
	for token, ok := range map[string]bool{
		"ghp_0123456789abcdefABCDEF": true, "github_pat_11AAA.b-c": true, "short": false,
		"ghp_0123456789<abc>": false, "ghp_0123&456789": false, "ghp_0123 456789": false, "ghp_01234567\x1b": false,
	} {
		if err := checkToken(token); (err == nil) != ok {
			t.Errorf("checkToken(%q) = %v; want ok %v", token, err, ok)
		}
	}
}

// TestAuditScrubsBeforeItCuts: a text field cut through the token keeps
// none of it.
func TestAuditScrubsBeforeItCuts(t *testing.T) {
	var b bytes.Buffer
	a := &auditor{w: &b, redact: func(s string) string { return strings.ReplaceAll(s, testToken, "[redacted]") }}
	a.write(policy.Record{Event: policy.EventCall, Error: strings.Repeat("x", maxRecordText-8) + testToken})
	if strings.Contains(b.String(), testToken[:8]) {
		t.Errorf("the audit line keeps the token's start: %s", b.String())
	}
}

// TestPushFromTheAgentsGitDir: the gator pushes from the agent's own git
// directory as up makes it (a partial clone without the blobs of masked
// files), after the agent committed there.
func TestPushFromTheAgentsGitDir(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newTestRig(t, "github:octo/app:push-branch")
	commit(t, r.workspace, ".env", "TOKEN=hush\n")
	gitRun(t, r.workspace, "push", "-q", r.bare, "main")
	src, err := source.Resolve(ctx, r.workspace, source.Options{})
	if err != nil {
		t.Fatal(err)
	}
	co := filepath.Join(t.TempDir(), "co")
	if err := src.Checkout(ctx, co); err != nil {
		t.Fatal(err)
	}
	agentGit := filepath.Join(t.TempDir(), "agent.git")
	if err := source.AgentGitDir(ctx, co, agentGit, []string{".env"}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(r.workspace, ".git")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(agentGit, filepath.Join(r.workspace, ".git")); err != nil {
		t.Fatal(err)
	}
	head := commit(t, r.workspace, "b.txt", "the agent's work\n")
	r.mustPushNew(t, "agent/work", head)
}

// mustPushNew pushes the workspace's HEAD, head, to branch, which must be
// new, and checks that the remote has it whole.
func (r *testRig) mustPushNew(t *testing.T, branch, head string) {
	t.Helper()
	var res pushResult
	r.mustCall(t, policy.ToolPushBranch, repoArgs("branch", branch), &res)
	if res.Action != "created" || res.Commit != head {
		t.Errorf("push_branch %s: %+v; want %s created", branch, res, head)
	}
	if got := gitRun(t, r.bare, "rev-parse", "refs/heads/"+branch); got != head {
		t.Errorf("%s is %s; want %s", branch, got, head)
	}
	gitRun(t, r.bare, "fsck", "--no-progress")
}

// TestPushFromAnOlderBase: while the agent works, someone pushes to main,
// so the commit the agent started from is no longer a branch's tip. Its
// history (a workflow a person committed, long ago) is the remote's all
// the same: the commit devaipod recorded at up as the repository's
// (KnownCommits), once GitHub confirms it is in the default branch's
// history, stops the walk there, and the push sends only the agent's
// commit. Without that record, with one of another repository, or with a
// pull request's head (on the forge, but in no branch: a host that
// fetches refs/pull/* into its remote-tracking refs names one), the push
// is checked back to the branches' tips, as before. Nothing the agent
// writes makes a commit known.
func TestPushFromAnOlderBase(t *testing.T) {
	t.Parallel()
	// setUp makes the history, has the gator know known(base), and
	// returns the agent's commit.
	setUp := func(t *testing.T, known func(base string) []string) (r *testRig, head string) {
		r = newTestRig(t, "github:octo/app:push-branch")
		os.MkdirAll(filepath.Join(r.workspace, ".github", "workflows"), 0o755)
		commit(t, r.workspace, ".github/workflows/ci.yml", "on: push\n")
		base := commit(t, r.workspace, "a.txt", "a person's work\n")
		gitRun(t, r.workspace, "push", "-q", r.bare, "main")
		gitRun(t, r.other, "pull", "-q", "origin", "main")
		commit(t, r.other, "b.txt", "someone else's work, after up\n")
		gitRun(t, r.other, "push", "-q", "origin", "main")
		// As New does with Options.KnownCommits, which it needs before
		// this history exists.
		for _, k := range known(base) {
			repo, h, err := ParseKnownCommit(k)
			if err != nil {
				t.Fatal(err)
			}
			r.server.pusher.known[repo] = append(r.server.pusher.known[repo], h)
		}
		return r, commit(t, r.workspace, "c.txt", "the agent's work\n")
	}
	refused := func(t *testing.T, r *testRig, what string) {
		t.Helper()
		if text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/old")); !isErr || !strings.Contains(text, "workflows/ci.yml") {
			t.Errorf("push from an older base, %s: %q; want it refused for the workflow", what, text)
		}
		if out := gitRun(t, r.bare, "for-each-ref", "refs/heads/agent"); out != "" {
			t.Errorf("the push went through: %s", out)
		}
	}

	r, _ := setUp(t, func(string) []string { return nil })
	refused(t, r, "nothing known")

	r, _ = setUp(t, func(base string) []string {
		return []string{"octo/app@" + strings.Repeat("0", 40), "other/app@" + base}
	})
	refused(t, r, "known for another repository only, or unknown to GitHub")

	// A fork's pull request puts a workflow in; the host named its head.
	r, _ = setUp(t, func(string) []string { return nil })
	gitRun(t, r.other, "checkout", "-q", "-b", "fork")
	evil := commit(t, r.other, ".github/workflows/ci.yml", "on: push\njobs: {steal: {}}\n")
	gitRun(t, r.other, "push", "-q", "origin", "fork:refs/pull/1/head")
	gitRun(t, r.workspace, "fetch", "-q", r.bare, "refs/pull/1/head")
	gitRun(t, r.workspace, "checkout", "-q", evil)
	commit(t, r.workspace, "d.txt", "the agent's work on the pull request\n")
	r.server.pusher.known["octo/app"] = []plumbing.Hash{plumbing.NewHash(evil)}
	refused(t, r, "known but a pull request's head")
	compared := false
	for _, req := range r.api.requested() {
		compared = compared || strings.HasPrefix(req, "GET /api/v3/repos/octo/app/compare/"+evil+"...main")
	}
	if !compared {
		t.Errorf("the gator did not ask GitHub about the known commit: %q", r.api.requested())
	}

	r, head := setUp(t, func(base string) []string { return []string{"Octo/App@" + base} })
	// Keep what the push sends as a pack, to count its objects.
	gitRun(t, r.bare, "config", "receive.unpackLimit", "1")
	packsBefore, _ := filepath.Glob(filepath.Join(r.bare, "objects", "pack", "*.idx"))
	r.mustPushNew(t, "agent/old", head)
	// The agent's commit, its tree and c.txt: not the history before base.
	packs, _ := filepath.Glob(filepath.Join(r.bare, "objects", "pack", "*.idx"))
	sent := 0
	for _, p := range packs {
		if slices.Contains(packsBefore, p) {
			continue
		}
		idx, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("git", "show-index")
		cmd.Stdin = idx
		out, err := cmd.Output()
		idx.Close()
		if err != nil {
			t.Fatalf("git show-index %s: %v", p, err)
		}
		sent += strings.Count(string(out), "\n")
	}
	if sent != 3 {
		t.Errorf("the push sent %d objects; want 3 (the known commit's history is the remote's)", sent)
	}
	// GitHub is asked once about a commit it confirmed, and not at all
	// for a push with nothing to send.
	compares := func() int {
		n := 0
		for _, req := range r.api.requested() {
			if strings.Contains(req, "/compare/") {
				n++
			}
		}
		return n
	}
	asked := compares()
	r.mustCall(t, policy.ToolPushBranch, repoArgs("branch", "agent/old"), nil) // up to date
	commit(t, r.workspace, "e.txt", "more of the agent's work\n")
	r.mustCall(t, policy.ToolPushBranch, repoArgs("branch", "agent/old"), nil) // a fast-forward
	if asked != 1 || compares() != asked {
		t.Errorf("GitHub was asked %d times about the known commit, then %d more for two pushes; want once", asked, compares()-asked)
	}
}

func TestParseKnownCommit(t *testing.T) {
	t.Parallel()
	sha := strings.Repeat("a1", 20)
	repo, h, err := ParseKnownCommit("Octo/App@" + sha)
	if err != nil || repo != "octo/app" || h.String() != sha {
		t.Errorf("ParseKnownCommit: %q %s %v", repo, h, err)
	}
	for _, bad := range []string{"", "octo/app", "octo/app@", "octo/app@HEAD", "octo/app@" + sha[:39],
		"octo/app@" + strings.ToUpper(sha), "octo@" + sha, "octo/../x@" + sha, "@" + sha} {
		if _, _, err := ParseKnownCommit(bad); err == nil {
			t.Errorf("ParseKnownCommit(%q) took it", bad)
		}
	}
}

// TestKeepRecord: past the log's bound, the gator keeps every record but
// an allowed call that failed in nothing, that no person decided and that
// changed nothing on the forge; whatever the agent names its arguments.
func TestKeepRecord(t *testing.T) {
	t.Parallel()
	call := func(decision, result, errText string, args map[string]string) policy.Record {
		return policy.Record{Kind: "gator", Event: policy.EventCall, Tool: policy.ToolPushBranch, Decision: decision,
			Result: result, Error: errText, Args: args}
	}
	for _, c := range []struct {
		name string
		r    policy.Record
		kept bool
	}{
		{"a read", policy.Record{Kind: "gator", Event: policy.EventCall, Tool: "get_issue", Decision: policy.DecisionAllow}, false},
		{"a push of an up-to-date branch", call(policy.DecisionAllow, "up-to-date agent/x at 0123", "", nil), false},
		{"a push that created a branch", call(policy.DecisionAllow, "created agent/x at 0123", "", nil), true},
		{"a failed call", call(policy.DecisionAllow, "", "refused: the commits to push change ci.yml", nil), true},
		{"a denied call", call(policy.DecisionDeny, "", "", nil), true},
		{"an approved call", policy.Record{Kind: "gator", Event: policy.EventCall, Tool: policy.ToolPushBranch, Decision: policy.DecisionAllow,
			Result: "up-to-date agent/x at 0123", Ask: &policy.AskNote{ID: "gator-1", Outcome: policy.AskApproved, By: "u@h"}}, true},
		{"the start", policy.Record{Kind: "gator", Event: policy.EventStart, Scopes: []string{"github:octo/app"}}, true},
		{"a dropped count", policy.Record{Kind: "gator", Event: policy.EventDropped, Tool: "get_issue", Decision: policy.DecisionDeny, Count: 3}, true},
		// The agent names the arguments: the keys of args.
		{"a denied call with an argument named decision", call(policy.DecisionDeny, "", "", map[string]string{"decision": "allow", "event": "call"}), true},
		{"an up-to-date push with arguments named error and ask", call(policy.DecisionAllow, "up-to-date agent/x at 0123", "",
			map[string]string{"error": "x", "ask": "{}", "result": "created", `"error":"x`: `"ask":{}`}), false},
	} {
		b, err := json.Marshal(c.r)
		if err != nil {
			t.Fatal(err)
		}
		if got := KeepRecord(append(b, '\n')); got != c.kept {
			t.Errorf("%s: KeepRecord(%s) = %v, want %v", c.name, b, got, c.kept)
		}
	}
}
