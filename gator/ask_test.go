package gator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devaipod/devaipod/gator/policy"
	"github.com/devaipod/devaipod/internal/approval"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// newAskRig is a test rig whose gator files the calls that need a
// person's approval in a temporary approvals folder, and the store a test
// decides them through (as devaipod-helper approvals does on the host).
func newAskRig(t *testing.T, timeout time.Duration, scopes ...string) (*testRig, *approval.Store) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "approvals")
	r := newRig(t, func(o *Options) { o.ApprovalDir, o.AskTimeout = dir, timeout }, scopes...)
	r.server.approvals.Poll = 5 * time.Millisecond
	return r, &approval.Store{Dir: dir}
}

// nextPending waits for a pending request and returns the oldest.
func nextPending(t *testing.T, store *approval.Store) approval.Request {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		reqs, err := store.Pending()
		if err != nil {
			t.Fatal(err)
		}
		if len(reqs) > 0 {
			return reqs[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("no pending request after 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func noPending(t *testing.T, store *approval.Store) {
	t.Helper()
	if reqs, err := store.Pending(); err != nil || len(reqs) != 0 {
		t.Errorf("pending requests %+v, %v; want none", reqs, err)
	}
}

type callResult struct {
	text    string
	isError bool
	err     error
}

// callAsync calls a tool without waiting for its answer, which comes on
// the channel.
func (r *testRig) callAsync(tool string, args map[string]any) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		res, err := r.session.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			ch <- callResult{err: err}
			return
		}
		var text strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text.WriteString(tc.Text)
			}
		}
		ch <- callResult{text: text.String(), isError: res.IsError}
	}()
	return ch
}

func await(t *testing.T, ch <-chan callResult) callResult {
	t.Helper()
	select {
	case res := <-ch:
		if res.err != nil {
			t.Fatal(res.err)
		}
		return res
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not end in 20s")
		return callResult{}
	}
}

// recordsOf returns the audit records of event for tool.
func recordsOf(recs []policy.Record, event, tool string) []policy.Record {
	var out []policy.Record
	for _, r := range recs {
		if r.Event == event && r.Tool == tool {
			out = append(out, r)
		}
	}
	return out
}

// TestAskPushApprovedOnce: a push that needs approval is held; the request
// names the commit HEAD was at when it was asked, with the commits and
// files; approved once, that commit is pushed even though HEAD moved
// meanwhile; the next push asks again, and a rejection's reason reaches
// the agent without control characters. Held calls block nothing else.
func TestAskPushApprovedOnce(t *testing.T) {
	t.Parallel()
	r, store := newAskRig(t, 20*time.Second, "github:octo/app:read,ask:push-branch")
	a := commit(t, r.workspace, "fix.txt", "fixed\n")

	held := r.callAsync(policy.ToolPushBranch, repoArgs("branch", "agent/fix"))
	req := nextPending(t, store)
	if req.Kind != approval.KindGator || req.Pod != "test" || req.What != "push_branch octo/app agent/fix" || req.Rule != "push_branch octo/app" ||
		!strings.HasPrefix(req.ID, "gator-") {
		t.Errorf("request %+v", req)
	}
	d := req.Details
	if d["commit"] != a || d["branch"] != "agent/fix" || d["action"] != "create agent/fix" ||
		d["commits"] != "1 new commit, from the pushed one back:\n"+a[:12]+" change fix.txt" ||
		d["files"] != "1 file changed by these commits:\nfix.txt" {
		t.Errorf("details %q", d)
	}

	// While the push waits, the same session and another one are served.
	var status statusResult
	r.mustCall(t, policy.ToolStatus, nil, &status)
	if !slices.Equal(status.Ask["octo/app"], []string{"push-branch"}) || !strings.Contains(status.Approvals, "wait up to 20s") || status.ApprovedForPod != nil {
		t.Errorf("status %+v", status)
	}
	other := connect(t, r.server)
	if res, err := other.CallTool(context.Background(), &mcp.CallToolParams{Name: policy.ToolListIssues, Arguments: repoArgs()}); err != nil || res.IsError {
		t.Errorf("another session while a push is held: %+v, %v", res, err)
	}

	// HEAD moves on before the person decides: B must not be pushed.
	b := commit(t, r.workspace, "more.txt", "more\n")
	if err := store.Decide(approval.Decision{ID: req.ID, Approve: true, By: "alice@host"}); err != nil {
		t.Fatal(err)
	}
	res := await(t, held)
	var pushed pushResult
	if res.isError || json.Unmarshal([]byte(res.text), &pushed) != nil || pushed.Commit != a || pushed.Action != "created" {
		t.Fatalf("approved push: %+v", res)
	}
	if got := gitRun(t, r.bare, "rev-parse", "refs/heads/agent/fix"); got != a {
		t.Fatalf("agent/fix is %s; want the approved commit %s (HEAD is %s)", got, a, b)
	}
	noPending(t, store)

	// The next push asks again, about B; rejected, nothing moves.
	held = r.callAsync(policy.ToolPushBranch, repoArgs("branch", "agent/fix"))
	req2 := nextPending(t, store)
	if req2.ID == req.ID || req2.Details["commit"] != b || req2.Details["action"] != "fast-forward agent/fix from "+a ||
		!strings.Contains(req2.Details["files"], "more.txt") || strings.Contains(req2.Details["files"], "fix.txt") {
		t.Errorf("second request %+v", req2)
	}
	reason := "not yet\x1b]0;pwned\x07\nrun the tests \u202eplease"
	if err := store.Decide(approval.Decision{ID: req2.ID, Reason: reason, By: "bob@host"}); err != nil {
		t.Fatal(err)
	}
	res = await(t, held)
	want := "rejected: a person rejected push_branch octo/app agent/fix (request " + req2.ID + "): not yet ]0;pwned run the tests please"
	if !res.isError || res.text != want {
		t.Errorf("rejected push: %q\nwant %q", res.text, want)
	}
	if got := gitRun(t, r.bare, "rev-parse", "refs/heads/agent/fix"); got != a {
		t.Errorf("agent/fix moved to %s after a rejection", got)
	}
	noPending(t, store)

	// The audit: an ask record for each request, then the call's record
	// with the outcome.
	recs := r.records(t)
	asks := recordsOf(recs, policy.EventAsk, policy.ToolPushBranch)
	calls := recordsOf(recs, policy.EventCall, policy.ToolPushBranch)
	if len(asks) != 2 || len(calls) != 2 {
		t.Fatalf("%d ask and %d call records of push_branch:\n%s", len(asks), len(calls), r.audit.String())
	}
	for i, id := range []string{req.ID, req2.ID} {
		if ask := asks[i]; ask.Decision != policy.DecisionAsk || ask.Ask == nil || ask.Ask.ID != id || ask.Ask.Outcome != "" ||
			ask.Ask.What != "push_branch octo/app agent/fix" || ask.Repo != "octo/app" || ask.Permission != "push-branch" {
			t.Errorf("ask record %d: %+v %+v", i, ask, ask.Ask)
		}
	}
	if asks[0].Ask.Commit != a || asks[1].Ask.Commit != b {
		t.Errorf("ask records' commits %s, %s; want %s, %s", asks[0].Ask.Commit, asks[1].Ask.Commit, a, b)
	}
	if c := calls[0]; c.Decision != policy.DecisionAllow || c.Ask == nil || c.Ask.Outcome != policy.AskApproved || c.Ask.By != "alice@host" ||
		c.Ask.For != approval.ForOnce || c.Ask.ID != req.ID || !strings.Contains(c.Result, a) {
		t.Errorf("approved call record %+v %+v", c, c.Ask)
	}
	if c := calls[1]; c.Decision != policy.DecisionDeny || c.Ask == nil || c.Ask.Outcome != policy.AskRejected || c.Ask.By != "bob@host" ||
		c.Ask.Reason != "not yet ]0;pwned run the tests please" || !strings.HasPrefix(c.Reason, "rejected: ") {
		t.Errorf("rejected call record %+v %+v", c, c.Ask)
	}
	if strings.ContainsAny(r.audit.String(), "\x1b\x07") {
		t.Error("the audit log holds the reason's control characters")
	}
}

// TestAskTimeout: no decision in time refuses the call and withdraws the
// request.
func TestAskTimeout(t *testing.T) {
	t.Parallel()
	r, store := newAskRig(t, 300*time.Millisecond, "github:octo/app:ask:push-branch")
	commit(t, r.workspace, "fix.txt", "fixed\n")
	text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/fix"))
	if !isErr || !strings.HasPrefix(text, "no decision: push_branch octo/app agent/fix waited 300ms for a person's approval (request gator-") {
		t.Errorf("push without a decision: %q", text)
	}
	if out := gitRun(t, r.bare, "for-each-ref", "refs/heads/agent"); out != "" {
		t.Errorf("pushed without a decision: %s", out)
	}
	noPending(t, store)
	calls := recordsOf(r.records(t), policy.EventCall, policy.ToolPushBranch)
	if len(calls) != 1 || calls[0].Decision != policy.DecisionDeny || calls[0].Ask == nil || calls[0].Ask.Outcome != policy.AskTimeout {
		t.Errorf("call records %+v", calls)
	}
}

// TestAskForPod: an approval for the pod's life lets later calls of the
// same tool on the same repository through without asking; other tools
// still ask.
func TestAskForPod(t *testing.T) {
	t.Parallel()
	r, store := newAskRig(t, 20*time.Second, "github:octo/app:read,ask:push-branch,ask:create-draft")
	a := commit(t, r.workspace, "fix.txt", "fixed\n")
	held := r.callAsync(policy.ToolPushBranch, repoArgs("branch", "agent/fix"))
	req := nextPending(t, store)
	if err := store.Decide(approval.Decision{ID: req.ID, Approve: true, For: approval.ForPod, By: "carol@host"}); err != nil {
		t.Fatal(err)
	}
	if res := await(t, held); res.isError || !strings.Contains(res.text, a) {
		t.Fatalf("approved push: %+v", res)
	}

	// The next push, to another branch too, goes through without a request.
	b := commit(t, r.workspace, "more.txt", "more\n")
	var pushed pushResult
	r.mustCall(t, policy.ToolPushBranch, repoArgs("branch", "agent/fix"), &pushed)
	r.mustCall(t, policy.ToolPushBranch, repoArgs("branch", "agent/other"), nil)
	if pushed.Commit != b || gitRun(t, r.bare, "rev-parse", "refs/heads/agent/other") != b {
		t.Errorf("push after the pod's approval: %+v", pushed)
	}
	var status statusResult
	r.mustCall(t, policy.ToolStatus, nil, &status)
	if !slices.Equal(status.ApprovedForPod, []string{"push_branch octo/app"}) || !slices.Equal(status.Ask["octo/app"], []string{"create-draft", "push-branch"}) {
		t.Errorf("status %+v", status)
	}
	recs := r.records(t)
	if asks := recordsOf(recs, policy.EventAsk, policy.ToolPushBranch); len(asks) != 1 {
		t.Errorf("%d ask records, want 1", len(asks))
	}
	calls := recordsOf(recs, policy.EventCall, policy.ToolPushBranch)
	if len(calls) != 3 || calls[0].Ask.For != approval.ForPod {
		t.Fatalf("call records %+v", calls)
	}
	for _, c := range calls[1:] {
		if c.Decision != policy.DecisionAllow || c.Ask != nil ||
			c.Reason != "allowed by ask:push-branch, approved for the pod's life by carol@host (request "+req.ID+")" {
			t.Errorf("call record %+v", c)
		}
	}

	// create_draft_pull_request still asks, showing what it would open.
	held = r.callAsync(policy.ToolCreateDraftPullRequest, repoArgs("title", "Fix the crash\u202e\n(really)", "head", "agent/fix", "body", "Fixes #1"))
	req = nextPending(t, store)
	if req.What != "create_draft_pull_request octo/app agent/fix" || req.Rule != "create_draft_pull_request octo/app" ||
		req.Details["title"] != "Fix the crash\u202e\n(really)" || req.Details["head"] != "agent/fix" || req.Details["base"] != "main" || req.Details["body"] != "Fixes #1" {
		t.Errorf("draft request %+v", req)
	}
	if err := store.Decide(approval.Decision{ID: req.ID}); err != nil {
		t.Fatal(err)
	}
	if res := await(t, held); !res.isError || !strings.HasSuffix(res.text, "(request "+req.ID+"): no reason given") {
		t.Errorf("rejected draft: %+v", res)
	}
	if got := r.api.posted("/api/v3/repos/octo/app/pulls"); got != nil {
		t.Errorf("a rejected pull request reached the API: %v", got)
	}
	held = r.callAsync(policy.ToolCreateDraftPullRequest, repoArgs("title", "Fix", "head", "agent/fix"))
	req = nextPending(t, store)
	store.Decide(approval.Decision{ID: req.ID, Approve: true})
	if res := await(t, held); res.isError || r.api.posted("/api/v3/repos/octo/app/pulls")["draft"] != true {
		t.Errorf("approved draft: %+v", res)
	}
}

// TestAskNeverForRefusedCalls: the gator's own checks come before any
// ask, so nobody is asked about a call that would be refused anyway; and
// a push with nothing to push asks nothing.
func TestAskNeverForRefusedCalls(t *testing.T) {
	t.Parallel()
	r, store := newAskRig(t, 20*time.Second, "github:octo/*:ask:push-branch,ask:create-draft,ask:comment")

	// Someone else's history on an agent/ branch.
	commit(t, r.other, "theirs.txt", "theirs\n")
	gitRun(t, r.other, "push", "-q", r.bare, "HEAD:refs/heads/agent/shared")
	commit(t, r.workspace, "mine.txt", "mine\n")
	cases := []struct {
		tool string
		args map[string]any
		want string
	}{
		{policy.ToolPushBranch, repoArgs("branch", "main"), "denied: push_branch on octo/app: branch \"main\""},
		{policy.ToolPushBranch, repoArgs("branch", "agent/\u202efix"), "denied: "},
		{policy.ToolPushBranch, map[string]any{"owner": "octo", "repo": "agentdefault", "branch": "agent/main"}, "is the default branch"},
		{policy.ToolPushBranch, repoArgs("branch", "agent/shared"), "never force-pushes"},
		{policy.ToolCreateDraftPullRequest, repoArgs("title", "T", "head", "feature/x"), "refused: the head must be an agent/ branch"},
		{policy.ToolCreateDraftPullRequest, repoArgs("title", "T", "head", "agent/fix", "base", "dev"), "refused: draft pull requests go to the default branch"},
		{policy.ToolCreateDraftPullRequest, repoArgs("head", "agent/fix"), "missing title"},
		{policy.ToolAddIssueComment, repoArgs("number", 1, "body", "  "), "missing body"},
		{policy.ToolAddIssueComment, repoArgs("number", 0, "body", "hi"), "want the (positive) issue"},
		{policy.ToolGetIssue, repoArgs("number", 1), "needs scope read"},
	}
	for _, c := range cases {
		text, isErr := r.call(t, c.tool, c.args)
		if !isErr || !strings.Contains(text, c.want) {
			t.Errorf("%s %v: %q; want an error with %q", c.tool, c.args, text, c.want)
		}
	}
	os.MkdirAll(filepath.Join(r.workspace, ".github", "workflows"), 0o755)
	commit(t, r.workspace, ".github/workflows/ci.yml", "on: push\n")
	if text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/ci")); !isErr || !strings.Contains(text, "refused: the commits to push change .github/workflows/ci.yml") {
		t.Errorf("push of a workflow: %q", text)
	}
	noPending(t, store)
	for _, rec := range r.records(t) {
		if rec.Event == policy.EventAsk || rec.Ask != nil {
			t.Errorf("a refused call was asked about: %+v", rec)
		}
	}

	// Nothing to push: no request either.
	gitRun(t, r.workspace, "reset", "-q", "--hard", "HEAD~1")
	head := gitRun(t, r.workspace, "rev-parse", "HEAD")
	gitRun(t, r.workspace, "push", "-q", r.bare, "HEAD:refs/heads/agent/same")
	var res pushResult
	r.mustCall(t, policy.ToolPushBranch, repoArgs("branch", "agent/same"), &res)
	if res.Action != "up-to-date" || res.Commit != head {
		t.Errorf("push of a branch already there: %+v", res)
	}
	noPending(t, store)
}

// TestAskWithoutApprovalDir: a gator with no approvals folder refuses the
// calls that would need a person, saying why.
func TestAskWithoutApprovalDir(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/app:read,ask:push-branch")
	commit(t, r.workspace, "fix.txt", "fixed\n")
	text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/fix"))
	if !isErr || !strings.HasPrefix(text, "denied: push_branch on octo/app needs a person's approval (ask:push-branch), but this pod's gator has no approvals folder") {
		t.Errorf("push: %q", text)
	}
	if out := gitRun(t, r.bare, "for-each-ref", "refs/heads/agent"); out != "" {
		t.Errorf("pushed: %s", out)
	}
	var status statusResult
	r.mustCall(t, policy.ToolStatus, nil, &status)
	if !strings.HasPrefix(status.Approvals, "off: ") || !slices.Equal(status.Ask["octo/app"], []string{"push-branch"}) {
		t.Errorf("status %+v", status)
	}
	// Reads, granted outright, are not affected.
	r.mustCall(t, policy.ToolListIssues, repoArgs(), nil)
}

// TestAskBound: past maxPendingAsks held calls, the next is refused at
// once instead of queued.
func TestAskBound(t *testing.T) {
	t.Parallel()
	r, store := newAskRig(t, 20*time.Second, "github:octo/app:ask:comment")
	for range maxPendingAsks {
		r.server.asking <- struct{}{}
	}
	text, isErr := r.call(t, policy.ToolAddIssueComment, repoArgs("number", 1, "body", "hi"))
	if !isErr || !strings.Contains(text, "16 calls wait for one already") {
		t.Errorf("comment past the bound: %q", text)
	}
	noPending(t, store)
	for range maxPendingAsks {
		<-r.server.asking
	}
	calls := recordsOf(r.records(t), policy.EventCall, policy.ToolAddIssueComment)
	if len(calls) != 1 || calls[0].Ask == nil || calls[0].Ask.Outcome != policy.AskRefused {
		t.Errorf("call records %+v", calls)
	}

	// With room again, it is asked about, with the comment whole (the
	// CLI escapes what it shows).
	held := r.callAsync(policy.ToolAddIssueComment, repoArgs("number", 1, "body", "Working on it\x1b[2J"))
	req := nextPending(t, store)
	if req.What != "add_issue_comment octo/app #1" || req.Details["body"] != "Working on it\x1b[2J" {
		t.Errorf("comment request %+v", req)
	}
	store.Decide(approval.Decision{ID: req.ID, Approve: true})
	if res := await(t, held); res.isError {
		t.Errorf("approved comment: %+v", res)
	}
}

// TestPushVerifiesObjects: an object of the workspace whose content does
// not match its id (a tree swapped for another) stops the push before
// anything is checked against it or shown to a person.
func TestPushVerifiesObjects(t *testing.T) {
	t.Parallel()
	r := newTestRig(t, "github:octo/app:push-branch")
	commit(t, r.workspace, "fix.txt", "fixed\n")
	tree := gitRun(t, r.workspace, "rev-parse", "HEAD^{tree}")
	blob := gitRun(t, r.workspace, "rev-parse", "HEAD:fix.txt")
	cmd := exec.Command("git", "mktree")
	cmd.Dir, cmd.Env = r.workspace, gitEnv()
	cmd.Stdin = strings.NewReader("100644 blob " + blob + "\tinnocent.txt\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	other := strings.TrimSpace(string(out))
	objects := filepath.Join(r.workspace, ".git", "objects")
	swapped, err := os.ReadFile(filepath.Join(objects, other[:2], other[2:]))
	if err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(objects, tree[:2], tree[2:])
	os.Remove(victim)
	if err := os.WriteFile(victim, swapped, 0o444); err != nil {
		t.Fatal(err)
	}
	text, isErr := r.call(t, policy.ToolPushBranch, repoArgs("branch", "agent/fix"))
	if !isErr || !strings.Contains(text, "the workspace's object "+tree+" does not match its id") {
		t.Errorf("push with a swapped tree: %q", text)
	}
	if out := gitRun(t, r.bare, "for-each-ref", "refs/heads/agent"); out != "" {
		t.Errorf("pushed: %s", out)
	}
}

func TestPrintable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":                      "plain",
		" a\tb\r\nc  ":               "a b c",
		"x\x1b[31my\x07":             "x [31my",
		"bidi\u202eevil\u2066\u200b": "bidi evil",
		"line\u2028sep\u2029par":     "line sep par",
		"bad\xffutf8":                "bad utf8",
		"":                           "",
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAskToolWithoutItsOwnStep: a tool with no ask step of its own (the
// reads; ask:read does not parse, but a Scope can be built by hand) is
// asked about as a whole, before it makes any request.
func TestAskToolWithoutItsOwnStep(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "approvals")
	r := newRig(t, func(o *Options) {
		o.Scopes = []policy.Scope{{Owner: "octo", Repo: "app", Ask: []policy.Permission{policy.PermRead}}}
		o.ApprovalDir, o.AskTimeout = dir, 20*time.Second
	})
	r.server.approvals.Poll = 5 * time.Millisecond
	store := &approval.Store{Dir: dir}
	held := r.callAsync(policy.ToolGetIssue, repoArgs("number", 1, "note", "a\x1bb"))
	req := nextPending(t, store)
	if req.What != "get_issue octo/app" || req.Rule != "get_issue octo/app" || req.Details["number"] != "1" || req.Details["note"] != "a b" {
		t.Errorf("request %+v", req)
	}
	if got := r.api.requested(); len(got) != 0 {
		t.Errorf("requests before the decision: %q", got)
	}
	store.Decide(approval.Decision{ID: req.ID, Reason: "no"})
	if res := await(t, held); !res.isError || !strings.HasPrefix(res.text, "rejected: ") {
		t.Errorf("rejected read: %+v", res)
	}
	if got := r.api.requested(); len(got) != 0 {
		t.Errorf("a rejected read made requests: %q", got)
	}
}

// TestAskShowsWholeTexts: a person is shown a review's body and every
// comment whole, under the place it goes; a text too long to show whole
// is refused, not shown in part, and nothing reaches the forge.
func TestAskShowsWholeTexts(t *testing.T) {
	t.Parallel()
	r, store := newAskRig(t, 20*time.Second, "github:octo/app:ask:pending-review,ask:comment")
	held := r.callAsync(policy.ToolCreatePendingReview, repoArgs("number", 2, "body", "Looks fine\nmostly",
		"comments", []map[string]any{{"path": "main.go", "line": 3, "body": "nit"},
			{"path": "util.go", "line": 9, "start_line": 7, "side": "left", "body": "why?\nreally"}}))
	req := nextPending(t, store)
	want := "1. main.go, line 3 (RIGHT):\nnit\n2. util.go, line 7-9 (LEFT):\nwhy?\nreally\n"
	if req.Details["body"] != "Looks fine\nmostly" || req.Details["comments"] != want {
		t.Errorf("review request details %q, want the body and comments %q", req.Details, want)
	}
	store.Decide(approval.Decision{ID: req.ID, Approve: true})
	if res := await(t, held); res.isError {
		t.Errorf("approved review: %+v", res)
	}

	long := strings.Repeat("word ", maxAskText/5+1)
	text, isErr := r.call(t, policy.ToolAddIssueComment, repoArgs("number", 1, "body", long))
	if !isErr || !strings.Contains(text, "longer than the 64 KiB a person is shown whole") {
		t.Errorf("a comment too long to show: %q", text)
	}
	noPending(t, store)
	if body := r.api.posted("/api/v3/repos/octo/app/issues/1/comments"); body != nil {
		t.Errorf("the refused comment reached the forge: %v", body)
	}
}

// TestListLinesFitsWhatIsShown: a long list is cut to what a person is
// shown whole, saying how many more, rather than making the call refused.
func TestListLinesFitsWhatIsShown(t *testing.T) {
	var names []string
	for i := range 1000 {
		names = append(names, fmt.Sprintf("%03d-%s", i, strings.Repeat("n", 190)))
	}
	out := listLines(names, len(names), maxAskFiles)
	if len(out) > maxAskText || !strings.HasPrefix(out, "000-") || !strings.Contains(out, " more") {
		t.Errorf("listLines of 1000 long names: %d bytes, ends %q", len(out), out[max(0, len(out)-40):])
	}
	if got := listLines([]string{"a", "b"}, 2, maxAskFiles); got != "a\nb" {
		t.Errorf("listLines of two = %q", got)
	}
}
