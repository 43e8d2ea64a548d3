package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// pathResult is the proxy's answer to a path request.
type pathResult struct {
	code   int
	header http.Header
	answer PathAnswer
	raw    string
	err    error
}

// postPath sends body to the proxy's RequestPathPath, as the agent does
// (origin form, no proxy), and reads the answer in the background.
func postPath(ctx context.Context, p *testProxy, method, body string) chan pathResult {
	ch := make(chan pathResult, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+p.addr+RequestPathPath, strings.NewReader(body))
		if err != nil {
			ch <- pathResult{err: err}
			return
		}
		client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 10 * time.Second}
		resp, err := client.Do(req)
		if err != nil {
			ch <- pathResult{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		r := pathResult{code: resp.StatusCode, header: resp.Header, raw: string(b)}
		r.err = json.Unmarshal(b, &r.answer)
		ch <- r
	}()
	return ch
}

func (p *testProxy) requestPath(t *testing.T, body string) pathResult {
	t.Helper()
	return waitPath(t, postPath(context.Background(), p, http.MethodPost, body))
}

func waitPath(t *testing.T, ch chan pathResult) pathResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("path request: %v (%d %q)", r.err, r.code, r.raw)
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to the path request")
		return pathResult{}
	}
}

func pathBody(t *testing.T, req PathRequest) string {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPathRequestApproved(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	ch := postPath(context.Background(), st.p, http.MethodPost,
		`{"path": "/home/me/src/lib", "reason": "the task\u202e builds\nagainst it"}`)
	call := st.ap.next(t)
	want := AskRequest{Kind: AskPath, Method: "POST", Rule: "/home/me/src/lib", What: "read /home/me/src/lib",
		Path: "/home/me/src/lib", Reason: "the task builds against it"}
	if call.req != want {
		t.Errorf("asked %+v; want %+v", call.req, want)
	}
	// Held until the decision.
	select {
	case r := <-ch:
		t.Fatalf("answered before the decision: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	r := st.p.audit.waitRecord(t, "for the ask", func(r Record) bool { return r.Decision == DecisionAsk })
	if r.Host != PathRequestHost || r.Method != "POST" || r.Port != 0 || r.Status != 0 || r.Rule != "" ||
		r.Detail != "read /home/me/src/lib: waits up to 1m0s for a person's decision; reason: the task builds against it" {
		t.Errorf("ask record %+v", r)
	}
	// For the pod means nothing for a path: it is granted as asked, and
	// the policy is untouched.
	call.answer(AskDecision{Approve: true, ForPod: true, By: "me@host", Reason: "fine", ID: "path-00000001"})
	res := waitPath(t, ch)
	wantAnswer := PathAnswer{Granted: true, At: "/host/home/me/src/lib", ID: "path-00000001",
		Message: "approved by me@host: fine (path-00000001); visible at /host/home/me/src/lib (read-only)"}
	if res.code != 200 || res.answer != wantAnswer || res.header.Get("Content-Type") != "application/json" {
		t.Errorf("approved = %d %+v; want %+v", res.code, res.answer, wantAnswer)
	}
	r = st.p.audit.waitRecord(t, "for the grant", func(r Record) bool { return r.Decision == DecisionAllow })
	if r.Host != PathRequestHost || r.Method != "POST" || r.Status != 200 || r.DecidedBy != "me@host" || r.Reason != "" ||
		r.Detail != "read /home/me/src/lib: "+wantAnswer.Message || r.BytesUp == 0 {
		t.Errorf("final record %+v", r)
	}
	if p, err := ReadPolicyFile(st.policy); err != nil || len(p.Allow) != 0 {
		t.Errorf("policy %+v %v; want it untouched", p, err)
	}

	// Read-write asked, and granted so: the person's decision says.
	ch = postPath(context.Background(), st.p, http.MethodPost, pathBody(t, PathRequest{Path: "/data/set", RW: true}))
	call = st.ap.next(t)
	if call.req.What != "read-write /data/set" || !call.req.RW || call.req.Reason != "" {
		t.Errorf("asked %+v", call.req)
	}
	call.answer(AskDecision{Approve: true, RW: true})
	res = waitPath(t, ch)
	if res.code != 200 || !res.answer.Granted || !res.answer.RW || res.answer.At != "/host/data/set" ||
		res.answer.Message != "approved by unknown; visible at /host/data/set (read-write)" {
		t.Errorf("approved rw = %d %+v", res.code, res.answer)
	}
	// Read-write asked, read-only granted.
	ch = postPath(context.Background(), st.p, http.MethodPost, pathBody(t, PathRequest{Path: "/data/set", RW: true}))
	st.ap.next(t).answer(AskDecision{Approve: true})
	if res = waitPath(t, ch); res.code != 200 || res.answer.RW || !strings.HasSuffix(res.answer.Message, "(read-only)") {
		t.Errorf("rw asked, ro granted = %d %+v", res.code, res.answer)
	}
	if st.accepted.Load() != 0 {
		t.Errorf("%d connections to the echo server", st.accepted.Load())
	}
}

func TestPathRequestRejected(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	ch := postPath(context.Background(), st.p, http.MethodPost, pathBody(t, PathRequest{Path: "/home/me/.aws", Reason: "deploy"}))
	st.ap.next(t).answer(AskDecision{By: "me@\x1bhost", Reason: "no\x1b[2J, use\r\nthe fixture", ID: "path-00000002"})
	res := waitPath(t, ch)
	want := PathAnswer{Reason: ReasonRejected, Message: "rejected by me@host: no[2J, use  the fixture (path-00000002)"}
	if res.code != 403 || res.answer != want || res.header.Get("X-Devaipod-Proxy") != ReasonRejected {
		t.Errorf("rejected = %d %+v; want %+v", res.code, res.answer, want)
	}
	r := st.p.audit.waitRecord(t, "for the rejection", func(r Record) bool { return r.Decision == DecisionDeny })
	if r.Reason != ReasonRejected || r.DecidedBy != "me@host" || r.Status != 403 || r.Host != PathRequestHost ||
		r.Detail != "read /home/me/.aws: "+want.Message || r.BytesDown != 0 {
		t.Errorf("record %+v", r)
	}
}

func TestPathRequestTimeout(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{AskTimeout: 100 * time.Millisecond})
	ch := postPath(context.Background(), st.p, http.MethodPost, pathBody(t, PathRequest{Path: "/srv/x"}))
	call := st.ap.next(t) // never answered
	res := waitPath(t, ch)
	if call.ctx.Err() == nil {
		t.Error("the approver's context is not done after the timeout")
	}
	if res.code != 403 || res.answer.Granted || res.answer.Reason != ReasonAskTimeout || res.answer.Message != "no decision within 100ms" {
		t.Errorf("timed out = %d %+v", res.code, res.answer)
	}
	r := st.p.audit.waitRecord(t, "for the timeout", func(r Record) bool { return r.Decision == DecisionDeny })
	if r.Reason != ReasonAskTimeout || r.DurationMS < 100 || r.Detail != "read /srv/x: no decision within 100ms" {
		t.Errorf("record %+v", r)
	}
	// The approver's own timeout, and its failure.
	ch = postPath(context.Background(), st.p, http.MethodPost, pathBody(t, PathRequest{Path: "/srv/x"}))
	st.ap.next(t).reply <- askReply{err: fmt.Errorf("path-00000003: %w", ErrAskTimeout)}
	if res := waitPath(t, ch); res.code != 403 || res.answer.Reason != ReasonAskTimeout {
		t.Errorf("approver's timeout = %d %+v", res.code, res.answer)
	}
	ch = postPath(context.Background(), st.p, http.MethodPost, pathBody(t, PathRequest{Path: "/srv/x"}))
	st.ap.next(t).reply <- askReply{err: errors.New("disk full")}
	if res := waitPath(t, ch); res.code != 503 || res.answer.Reason != ReasonAskFailed || !strings.Contains(res.answer.Message, "disk full") {
		t.Errorf("approver's failure = %d %+v", res.code, res.answer)
	}
}

// TestPathRequestForbidden: a forbidden path, or one under it, is refused
// at once, unasked; its parents and siblings are asked about.
func TestPathRequestForbidden(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{ForbiddenPaths: []string{"/home/me/.ssh", "/etc/", "/home/me/.config/devaipod"}})
	for _, tt := range []struct{ path, under string }{
		{"/home/me/.ssh", ""},
		{"/home/me/.ssh/id_ed25519", "/home/me/.ssh"},
		{"/etc", ""},
		{"/etc/passwd", "/etc"},
		{"/home/me/.config/devaipod/devaipod.toml", "/home/me/.config/devaipod"},
	} {
		res := st.p.requestPath(t, pathBody(t, PathRequest{Path: tt.path, RW: true}))
		msg := tt.path + " is never shared with this pod"
		if tt.under != "" {
			msg += " (it is under " + tt.under + ")"
		}
		if res.code != 403 || res.answer != (PathAnswer{Reason: ReasonPathForbidden, Message: msg}) ||
			res.header.Get("X-Devaipod-Proxy") != ReasonPathForbidden {
			t.Errorf("%s = %d %+v", tt.path, res.code, res.answer)
		}
	}
	st.ap.none(t)
	for _, r := range st.p.audit.records(t) {
		if r.Event == EventRequest && (r.Decision != DecisionDeny || r.Reason != ReasonPathForbidden ||
			!strings.HasPrefix(r.Detail, "read-write /") || r.Host != PathRequestHost || r.Method != "POST") {
			t.Errorf("record %+v", r)
		}
	}
	for _, p := range []string{"/home/me", "/home/me/.sshx", "/etcetera", "/home/me/.config"} {
		ch := postPath(context.Background(), st.p, http.MethodPost, pathBody(t, PathRequest{Path: p}))
		if call := st.ap.next(t); call.req.Path != p {
			t.Errorf("asked %+v; want %s", call.req, p)
		} else {
			call.answer(AskDecision{})
		}
		if res := waitPath(t, ch); res.code != 403 || res.answer.Reason != ReasonRejected {
			t.Errorf("%s = %d %+v", p, res.code, res.answer)
		}
	}

	// "/" forbids every path.
	p := startProxy(t, Options{Approver: newFakeApprover(), ForbiddenPaths: []string{"/"}})
	if res := p.requestPath(t, `{"path":"/tmp"}`); res.code != 403 || res.answer.Reason != ReasonPathForbidden {
		t.Errorf("with / forbidden: %d %+v", res.code, res.answer)
	}
	if _, err := New(Options{ForbiddenPaths: []string{"home/.ssh"}}); err == nil || !strings.Contains(err.Error(), "not absolute") {
		t.Errorf("relative forbidden path: %v", err)
	}
}

func TestPathRequestMalformed(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	long := "/" + strings.Repeat("a", MaxRequestedPath)
	for _, tt := range []struct{ name, body, want string }{
		{"empty", ``, "want a JSON object"},
		{"not JSON", `path=/x`, "want a JSON object"},
		{"an array", `["/x"]`, "want a JSON object"},
		{"unknown field", `{"path":"/x","mode":"rw"}`, "unknown field"},
		{"two values", `{"path":"/x"}{"path":"/y"}`, "more than one JSON value"},
		{"no path", `{"reason":"x"}`, "missing path"},
		{"relative", `{"path":"home/me"}`, "not absolute"},
		{"tilde", `{"path":"~/src"}`, "not absolute"},
		{"dot dot", `{"path":"/home/me/../root"}`, `ask for "/home/root"`},
		{"trailing slash", `{"path":"/home/me/"}`, "not clean"},
		{"double slash", `{"path":"//home"}`, "not clean"},
		{"root", `{"path":"/"}`, "whole file system"},
		{"NUL", `{"path":"/home\u0000/x"}`, "NUL"},
		{"escape", `{"path":"/home/\u001b[2J"}`, "control"},
		{"newline", `{"path":"/home/a\nb"}`, "control"},
		{"bidi", `{"path":"/home/\u202eexe.txt"}`, "invisible"},
		{"zero width", `{"path":"/home/a\u200bb"}`, "invisible"},
		{"invalid UTF-8", "{\"path\":\"/home/\xff\"}", "UTF-8"},
		{"long path", pathBody(t, PathRequest{Path: long}), "at most 4096"},
		{"long reason", pathBody(t, PathRequest{Path: "/x", Reason: strings.Repeat("r", MaxPathReason+1)}), "reason of 501 bytes"},
		{"big body", `{"path":"/x","reason":"` + strings.Repeat(" ", MaxPathRequestBody) + `"}`, "at most 8192"},
		{"rw not a bool", `{"path":"/x","rw":"yes"}`, "want a JSON object"},
	} {
		res := st.p.requestPath(t, tt.body)
		if res.code != 400 || res.answer.Granted || res.answer.Reason != ReasonBadRequest || !strings.Contains(res.answer.Message, tt.want) {
			t.Errorf("%s: %d %+v; want 400 with %q", tt.name, res.code, res.answer, tt.want)
		}
		if len(res.raw) > 1024 {
			t.Errorf("%s: an answer of %d bytes", tt.name, len(res.raw))
		}
	}
	// A chunked body, of no length said in advance, is cut at the bound.
	chunk := strings.Repeat("x", MaxPathRequestBody+10)
	resp, body, _, _ := st.p.raw(t, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
		RequestPathPath, len(chunk), chunk), http.MethodPost)
	if resp.StatusCode != 400 || !strings.Contains(body, "more than 8192 bytes") {
		t.Errorf("chunked big body = %d %q", resp.StatusCode, body)
	}
	res := waitPath(t, postPath(context.Background(), st.p, http.MethodGet, ""))
	if res.code != 405 || res.header.Get("Allow") != "POST" || res.answer.Reason != ReasonBadRequest {
		t.Errorf("GET = %d %+v", res.code, res.answer)
	}
	st.ap.none(t)
	for _, r := range st.p.audit.records(t) {
		if r.Event == EventRequest && (r.Decision != DecisionDeny || r.Reason != ReasonBadRequest || r.Host != PathRequestHost) {
			t.Errorf("record %+v", r)
		}
	}
	// A long path that passes is clipped in the audit, not in the ask.
	longOK := "/" + strings.Repeat("b", MaxRequestedPath-1)
	ch := postPath(context.Background(), st.p, http.MethodPost, pathBody(t, PathRequest{Path: longOK}))
	if call := st.ap.next(t); call.req.Path != longOK {
		t.Errorf("asked for a path of %d bytes", len(call.req.Path))
	} else {
		call.answer(AskDecision{})
	}
	waitPath(t, ch)
	r := st.p.audit.waitRecord(t, "for the long path", func(r Record) bool { return r.Reason == ReasonRejected })
	if !strings.HasPrefix(r.Detail, "read /bbb") || !strings.Contains(r.Detail, "...: rejected by unknown") || len(r.Detail) > 1100 {
		t.Errorf("record of a long path: %d bytes %q", len(r.Detail), r.Detail)
	}
}

func TestCheckRequestedPath(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"/home/me/src", "/a", "/srv/data set/ü", "/" + strings.Repeat("x", MaxRequestedPath-1)} {
		if err := CheckRequestedPath(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	for _, p := range []string{"", "/", ".", "a", "/a/", "/a/.", "/a/./b", "/a//b", "/\x00", "/a\tb", "/a\u2066b", "/a\xffb",
		"/" + strings.Repeat("x", MaxRequestedPath)} {
		if err := CheckRequestedPath(p); err == nil {
			t.Errorf("%q: accepted", p)
		}
	}
	if got := clip("abcdef", 5); got != "ab..." {
		t.Errorf("clip = %q", got)
	}
	if got := clip("a\x1bb", 5); got != "ab" {
		t.Errorf("clip = %q", got)
	}
}

func TestPathRequestNoApprover(t *testing.T) {
	t.Parallel()
	p := startProxy(t, Options{})
	res := p.requestPath(t, `{"path":"/home/me/src"}`)
	if res.code != 404 || res.answer.Granted || res.answer.Reason != ReasonNoApprovals || !strings.Contains(res.answer.Message, "no approvals in this pod") {
		t.Errorf("without an approver = %d %+v", res.code, res.answer)
	}
	r := p.audit.waitRecord(t, "for the refusal", func(r Record) bool { return r.Event == EventRequest })
	if r.Decision != DecisionDeny || r.Reason != ReasonNoApprovals || r.Status != 404 || r.Host != PathRequestHost || r.Method != "POST" {
		t.Errorf("record %+v", r)
	}
}

// TestPathRequestLimit: path requests and held network requests share
// MaxAsks.
func TestPathRequestLimit(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{MaxAsks: 2})
	held := startConnect(t, st.p, "a.pkg.test:"+st.ps, "")
	c1 := st.ap.next(t)
	ch := postPath(context.Background(), st.p, http.MethodPost, `{"path":"/a"}`)
	c2 := st.ap.next(t)
	res := st.p.requestPath(t, `{"path":"/b"}`)
	if res.code != 503 || res.answer.Reason != ReasonAskLimit || !strings.Contains(res.answer.Message, "2 requests wait for a decision") {
		t.Errorf("third = %d %+v", res.code, res.answer)
	}
	st.ap.none(t)
	c1.answer(AskDecision{})
	c2.answer(AskDecision{Approve: true})
	if res := waitPath(t, ch); res.code != 200 {
		t.Errorf("held path request = %d %+v", res.code, res.answer)
	}
	held.wait(t)
	if n := st.p.s.asking.Load(); n != 0 {
		t.Errorf("%d asks still counted", n)
	}
}

// TestPathRequestClientGone: a client that goes away ends the wait.
func TestPathRequestClientGone(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ch := postPath(ctx, st.p, http.MethodPost, `{"path":"/a"}`)
	call := st.ap.next(t)
	cancel()
	select {
	case <-call.ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the wait goes on after the client went away")
	}
	<-ch
	r := st.p.audit.waitRecord(t, "for the end", func(r Record) bool { return r.Decision == DecisionDeny })
	if r.Reason != ReasonAskCanceled || r.Host != PathRequestHost {
		t.Errorf("record %+v", r)
	}
}

// TestPathRequestShutdown: a held path request does not hold up Serve.
func TestPathRequestShutdown(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	ch := postPath(context.Background(), st.p, http.MethodPost, `{"path":"/a"}`)
	call := st.ap.next(t)
	start := time.Now()
	st.p.stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Serve took %v to return", d)
	}
	if call.ctx.Err() == nil {
		t.Error("the approver's context is not done")
	}
	if res := <-ch; res.err == nil && (res.code != 503 || res.answer.Granted) {
		t.Errorf("held path request at shutdown = %d %+v", res.code, res.answer)
	}
	r := st.p.audit.waitRecord(t, "for the end", func(r Record) bool { return r.Decision == DecisionDeny })
	if r.Reason != ReasonShutdown || r.Host != PathRequestHost {
		t.Errorf("record %+v", r)
	}
}
