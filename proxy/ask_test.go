package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeApprover hands each request it is asked about to the test, which
// answers as the person would.
type fakeApprover struct{ calls chan askCall }

type askCall struct {
	ctx   context.Context
	req   AskRequest
	reply chan askReply
}

type askReply struct {
	d   AskDecision
	err error
}

func newFakeApprover() *fakeApprover { return &fakeApprover{calls: make(chan askCall, 64)} }

func (f *fakeApprover) Approve(ctx context.Context, r AskRequest) (AskDecision, error) {
	c := askCall{ctx: ctx, req: r, reply: make(chan askReply, 1)}
	f.calls <- c
	select {
	case rep := <-c.reply:
		return rep.d, rep.err
	case <-ctx.Done():
		return AskDecision{}, ctx.Err()
	}
}

// next waits for the next request the proxy asks about.
func (f *fakeApprover) next(t *testing.T) askCall {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy asked nothing")
		return askCall{}
	}
}

// none checks that the proxy asks nothing for a while.
func (f *fakeApprover) none(t *testing.T) {
	t.Helper()
	select {
	case c := <-f.calls:
		t.Errorf("the proxy asked about %+v", c.req)
		c.reply <- askReply{d: AskDecision{}}
	case <-time.After(50 * time.Millisecond):
	}
}

func (c askCall) answer(d AskDecision) { c.reply <- askReply{d: d} }

// countingEcho is a TCP echo server that counts the connections it
// accepted, so a test sees that nothing went out.
func countingEcho(t *testing.T) (int, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				io.Copy(c, c)
				c.Close()
			})
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return portOf(t, ln.Addr().String()), &n
}

// heldConnect is a CONNECT whose answer is read in the background.
type heldConnect struct {
	conn net.Conn
	done chan struct{}
	resp *http.Response
	body string
	br   *bufio.Reader
	err  error
}

// startConnect sends a CONNECT for target, and early after it without
// waiting, and reads the answer in the background.
func startConnect(t *testing.T, p *testProxy, target, early string) *heldConnect {
	t.Helper()
	conn, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n%s", target, target, early); err != nil {
		t.Fatal(err)
	}
	h := &heldConnect{conn: conn, done: make(chan struct{}), br: bufio.NewReader(conn)}
	go func() {
		defer close(h.done)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		h.resp, h.err = http.ReadResponse(h.br, &http.Request{Method: http.MethodConnect})
		if h.err == nil && h.resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(h.resp.Body)
			h.body = string(b)
		}
		conn.SetReadDeadline(time.Time{})
	}()
	return h
}

// wait waits for the answer.
func (h *heldConnect) wait(t *testing.T) *heldConnect {
	t.Helper()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to the CONNECT")
	}
	if h.err != nil {
		t.Fatalf("reading the answer to the CONNECT: %v", h.err)
	}
	return h
}

// answered reports whether the answer has come.
func (h *heldConnect) answered() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// echo sends s through an open tunnel and checks that it comes back.
func (h *heldConnect) echo(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(h.conn, s); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(s))
	h.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(h.br, buf); err != nil || string(buf) != s {
		t.Fatalf("through the tunnel: %q, %v; want %q", buf, err, s)
	}
}

// askSetup is a proxy with ask rules for *.pkg.test on an echo server's
// port, and the address rule that lets names resolved to loopback
// through the guard.
type askSetup struct {
	p        *testProxy
	ap       *fakeApprover
	port     int
	ps       string
	accepted *atomic.Int64
	policy   string
}

func startAsking(t *testing.T, opts Options) *askSetup {
	t.Helper()
	port, accepted := countingEcho(t)
	st := &askSetup{ap: newFakeApprover(), port: port, ps: strconv.Itoa(port), accepted: accepted,
		policy: filepath.Join(t.TempDir(), "policy.json")}
	if opts.Ask == nil {
		opts.Ask = []string{"*.pkg.test:" + st.ps}
	}
	if opts.Allow == nil {
		opts.Allow = []string{"127.0.0.1:" + st.ps, "allowed.test:" + st.ps}
	}
	opts.Approver = st.ap
	opts.PolicyFile = st.policy
	if opts.Resolver == nil {
		opts.Resolver = mapResolver{"a.pkg.test": {loopback}, "b.pkg.test": {loopback}, "allowed.test": {loopback}}
	}
	st.p = startProxy(t, opts)
	return st
}

func TestAskApprovedOnce(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	target := "A.pkg.test.:" + st.ps
	h := startConnect(t, st.p, target, "")
	call := st.ap.next(t)
	want := AskRequest{Kind: AskNetwork, Host: "a.pkg.test", Port: st.port, Method: "CONNECT", Rule: "a.pkg.test:" + st.ps,
		Ask: "*.pkg.test:" + st.ps, What: "CONNECT a.pkg.test:" + st.ps}
	if call.req != want {
		t.Errorf("asked %+v; want %+v", call.req, want)
	}
	// Held: no answer, nothing dialled.
	time.Sleep(50 * time.Millisecond)
	if h.answered() || st.accepted.Load() != 0 {
		t.Fatalf("while held: answered %v, %d connections to the server", h.answered(), st.accepted.Load())
	}
	r := st.p.audit.waitRecord(t, "for the ask", func(r Record) bool { return r.Decision == DecisionAsk })
	if r.Host != "a.pkg.test" || r.Port != st.port || r.Rule != "ask:*.pkg.test:"+st.ps || r.Status != 0 ||
		r.Method != "CONNECT" || !strings.Contains(r.Detail, "waits up to 1m0s") {
		t.Errorf("ask record %+v", r)
	}
	call.answer(AskDecision{Approve: true, By: "me@host", ID: "net-00000001"})
	h.wait(t)
	if h.resp.StatusCode != 200 {
		t.Fatalf("approved CONNECT = %d %q", h.resp.StatusCode, h.body)
	}
	h.echo(t, "hello")
	h.conn.Close()
	r = st.p.audit.waitRecord(t, "for the approved tunnel", func(r Record) bool {
		return r.Decision == DecisionAllow && r.Host == "a.pkg.test"
	})
	if r.Rule != "ask:*.pkg.test:"+st.ps || r.DecidedBy != "me@host" || r.Status != 200 || r.BytesUp != 5 ||
		r.Detail != "approved once by me@host (net-00000001)" || r.Reason != "" {
		t.Errorf("final record %+v", r)
	}

	// Once is once: the same request asks again.
	h = startConnect(t, st.p, target, "")
	call = st.ap.next(t)
	if call.req != want {
		t.Errorf("asked again %+v; want %+v", call.req, want)
	}
	call.answer(AskDecision{Approve: true, By: "me@host"})
	if h.wait(t).resp.StatusCode != 200 {
		t.Errorf("approved again = %d", h.resp.StatusCode)
	}
	if p, err := ReadPolicyFile(st.policy); err != nil || len(p.Allow) != 0 {
		t.Errorf("policy file after approvals once: %+v %v; want it untouched", p, err)
	}
}

func TestAskApprovedForPod(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	target := "a.pkg.test:" + st.ps
	h := startConnect(t, st.p, target, "")
	st.ap.next(t).answer(AskDecision{Approve: true, ForPod: true, By: "me@host", Reason: "the mirror"})
	if h.wait(t).resp.StatusCode != 200 {
		t.Fatalf("approved CONNECT = %d %q", h.resp.StatusCode, h.body)
	}
	h.echo(t, "x")
	p, err := ReadPolicyFile(st.policy)
	if err != nil || !slices.Equal(p.Allow, []string{"a.pkg.test:" + st.ps}) {
		t.Fatalf("policy file %+v %v; want the approved rule", p, err)
	}
	// At once, whatever the check interval: no one is asked again.
	h2 := startConnect(t, st.p, target, "")
	st.ap.none(t)
	if h2.wait(t).resp.StatusCode != 200 {
		t.Errorf("CONNECT after the approval for the pod = %d %q", h2.resp.StatusCode, h2.body)
	}
	h2.conn.Close()
	r := st.p.audit.waitRecord(t, "for the second tunnel", func(r Record) bool {
		return r.Host == "a.pkg.test" && r.Rule == "a.pkg.test:"+st.ps
	})
	if r.Decision != DecisionAllow || r.DecidedBy != "" {
		t.Errorf("record of a request the new rule allowed: %+v", r)
	}
	h.conn.Close()
	r = st.p.audit.waitRecord(t, "for the approved tunnel", func(r Record) bool {
		return r.Host == "a.pkg.test" && r.Rule == "ask:*.pkg.test:"+st.ps && r.Decision == DecisionAllow
	})
	if r.DecidedBy != "me@host" || r.Detail != "approved for the pod by me@host: allow a.pkg.test:"+st.ps+" added to the policy: the mirror" {
		t.Errorf("final record %+v", r)
	}
	st.p.audit.waitRecord(t, "for the new policy", func(r Record) bool {
		return r.Event == EventPolicy && slices.Contains(r.Allow, "a.pkg.test:"+st.ps)
	})
	// Another host of the ask rule still asks.
	h3 := startConnect(t, st.p, "b.pkg.test:"+st.ps, "")
	st.ap.next(t).answer(AskDecision{Approve: false})
	if h3.wait(t).resp.StatusCode != 403 {
		t.Errorf("b.pkg.test rejected = %d", h3.resp.StatusCode)
	}
}

func TestAskRejected(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	h := startConnect(t, st.p, "a.pkg.test:"+st.ps, "")
	st.ap.next(t).answer(AskDecision{By: "me@\x1bhost", Reason: "not\x1b[2J now\u202e,\r\nuse the mirror.", ID: "net-00000002"})
	h.wait(t)
	if h.resp.StatusCode != 403 || h.resp.Header.Get("X-Devaipod-Proxy") != ReasonRejected {
		t.Fatalf("rejected CONNECT = %d %s %q", h.resp.StatusCode, h.resp.Header.Get("X-Devaipod-Proxy"), h.body)
	}
	want := "devaipod proxy: a.pkg.test:" + st.ps + " was rejected by me@host: not[2J now,  use the mirror. (net-00000002).\n"
	if h.body != want {
		t.Errorf("body %q; want %q", h.body, want)
	}
	if st.accepted.Load() != 0 {
		t.Errorf("%d connections to the server", st.accepted.Load())
	}
	r := st.p.audit.waitRecord(t, "for the rejection", func(r Record) bool { return r.Decision == DecisionDeny })
	if r.Reason != ReasonRejected || r.DecidedBy != "me@host" || r.Rule != "ask:*.pkg.test:"+st.ps || r.Status != 403 ||
		!strings.Contains(r.Detail, "use the mirror") {
		t.Errorf("record %+v", r)
	}
	// The printable text is cut to its bound, on a character boundary.
	if got := printable(strings.Repeat("é", 400), 11); got != "ééééé" {
		t.Errorf("printable cut = %q", got)
	}
}

func TestAskTimeout(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{AskTimeout: 100 * time.Millisecond})
	h := startConnect(t, st.p, "a.pkg.test:"+st.ps, "")
	call := st.ap.next(t) // never answered: the context's deadline ends it
	h.wait(t)
	if call.ctx.Err() == nil {
		t.Error("the approver's context is not done after the timeout")
	}
	if h.resp.StatusCode != 403 || h.resp.Header.Get("X-Devaipod-Proxy") != ReasonAskTimeout ||
		!strings.Contains(h.body, "waited 100ms for a person's decision") ||
		!strings.Contains(h.body, "devaipod allow demo a.pkg.test:"+st.ps+"\n") {
		t.Errorf("timed out CONNECT = %d %s %q", h.resp.StatusCode, h.resp.Header.Get("X-Devaipod-Proxy"), h.body)
	}
	r := st.p.audit.waitRecord(t, "for the timeout", func(r Record) bool { return r.Decision == DecisionDeny })
	if r.Reason != ReasonAskTimeout || r.Rule != "ask:*.pkg.test:"+st.ps || r.DurationMS < 100 {
		t.Errorf("record %+v", r)
	}

	// An approver's own timeout (ErrAskTimeout) is a timeout too.
	h = startConnect(t, st.p, "b.pkg.test:"+st.ps, "")
	st.ap.next(t).reply <- askReply{err: fmt.Errorf("net-00000003: %w", ErrAskTimeout)}
	if h.wait(t).resp.Header.Get("X-Devaipod-Proxy") != ReasonAskTimeout {
		t.Errorf("approver's timeout = %d %q", h.resp.StatusCode, h.body)
	}
	// Any other error of the approver: 503, nothing asked.
	h = startConnect(t, st.p, "b.pkg.test:"+st.ps, "")
	st.ap.next(t).reply <- askReply{err: errors.New("disk full")}
	if h.wait(t).resp.StatusCode != 503 || h.resp.Header.Get("X-Devaipod-Proxy") != ReasonAskFailed || !strings.Contains(h.body, "disk full") {
		t.Errorf("approver's failure = %d %q", h.resp.StatusCode, h.body)
	}
}

func TestAskNotAsked(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	if _, err := EditPolicyFile(st.policy, OpDeny, "a.pkg.test:"+st.ps); err != nil {
		t.Fatal(err)
	}
	time.Sleep(DefaultPolicyCheckInterval + 50*time.Millisecond)
	tests := []struct {
		target, reason string
	}{
		{"a.pkg.test:" + st.ps, ReasonDenied},     // a deny rule wins, unasked
		{"other.test:" + st.ps, ReasonNotAllowed}, // no ask rule
		{"b.pkg.test:443", ReasonNotAllowed},      // the ask rule's port only
		{"pkg.test:" + st.ps, ReasonNotAllowed},   // *. is below, not the name itself
		{"127.0.0.2:" + st.ps, ReasonIPLiteral},   // names do not cover addresses
		{"allowed.test:" + st.ps, ""},             // allowed, unasked
		{"b.pkg.test:0", ReasonBadRequest},
	}
	for _, tt := range tests {
		h := startConnect(t, st.p, tt.target, "").wait(t)
		if got := h.resp.Header.Get("X-Devaipod-Proxy"); got != tt.reason {
			t.Errorf("CONNECT %s: %d %s %q; want %q", tt.target, h.resp.StatusCode, got, h.body, tt.reason)
		}
	}
	st.ap.none(t)
	for _, r := range st.p.audit.records(t) {
		if r.Decision == DecisionAsk || strings.HasPrefix(r.Rule, AskRulePrefix) {
			t.Errorf("record of an ask: %+v", r)
		}
	}
}

func TestAskPlainHTTP(t *testing.T) {
	t.Parallel()
	_, port := newHTTPServer(t)
	ps := strconv.Itoa(port)
	st := startAsking(t, Options{Ask: []string{"web.pkg.test:" + ps}, Allow: []string{"127.0.0.1:" + ps},
		Resolver: mapResolver{"web.pkg.test": {loopback}}})
	type result struct {
		code   int
		body   string
		reason string
		err    error
	}
	get := func() chan result {
		ch := make(chan result, 1)
		go func() {
			resp, err := st.p.client(nil).Get("http://web.pkg.test:" + ps + "/x?y=1")
			if err != nil {
				ch <- result{err: err}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ch <- result{code: resp.StatusCode, body: string(b), reason: resp.Header.Get("X-Devaipod-Proxy")}
		}()
		return ch
	}
	ch := get()
	call := st.ap.next(t)
	if call.req.What != "GET http://web.pkg.test:"+ps+"/x?y=1" || call.req.Method != "GET" || call.req.Rule != "web.pkg.test:"+ps {
		t.Errorf("asked %+v", call.req)
	}
	call.answer(AskDecision{Approve: true, By: "me"})
	if r := <-ch; r.err != nil || r.code != 200 || r.body != "plain GET /x, 0 bytes in" {
		t.Errorf("approved GET = %+v", r)
	}
	rec := st.p.audit.waitRecord(t, "for the GET", func(r Record) bool { return r.Decision == DecisionAllow })
	if rec.Method != "GET" || rec.Rule != "ask:web.pkg.test:"+ps || rec.DecidedBy != "me" || rec.Status != 200 {
		t.Errorf("record %+v", rec)
	}
	ch = get()
	st.ap.next(t).answer(AskDecision{By: "me", Reason: "no"})
	if r := <-ch; r.err != nil || r.code != 403 || r.reason != ReasonRejected || !strings.Contains(r.body, "rejected by me: no") {
		t.Errorf("rejected GET = %+v", r)
	}
}

// TestAskIPLiteral: an ask rule that names an address, approved once,
// lets exactly that request through the guard, as an address rule would;
// a name approved once does not get past the guard.
func TestAskIPLiteral(t *testing.T) {
	t.Parallel()
	port, _ := countingEcho(t)
	ps := strconv.Itoa(port)
	st := startAsking(t, Options{Ask: []string{"127.0.0.1:" + ps, "*.pkg.test:" + ps}, Allow: []string{},
		Resolver: mapResolver{"a.pkg.test": {loopback}}})
	h := startConnect(t, st.p, "127.0.0.1:"+ps, "")
	call := st.ap.next(t)
	if call.req.Rule != "127.0.0.1:"+ps {
		t.Errorf("asked %+v", call.req)
	}
	call.answer(AskDecision{Approve: true})
	if h.wait(t).resp.StatusCode != 200 {
		t.Fatalf("approved CONNECT to the address = %d %q", h.resp.StatusCode, h.body)
	}
	h.echo(t, "ip")
	h.conn.Close()
	r := st.p.audit.waitRecord(t, "for the tunnel", func(r Record) bool { return r.Decision == DecisionAllow })
	if r.DecidedBy != "unknown" || r.Detail != "approved once by unknown" {
		t.Errorf("record %+v", r)
	}

	h = startConnect(t, st.p, "a.pkg.test:"+ps, "")
	st.ap.next(t).answer(AskDecision{Approve: true, By: "me"})
	if h.wait(t).resp.StatusCode != 403 || h.resp.Header.Get("X-Devaipod-Proxy") != ReasonPrivateAddress {
		t.Errorf("approved name that resolves to loopback = %d %q; want the guard's refusal", h.resp.StatusCode, h.body)
	}
}

// TestAskEarlyData: bytes the client sends right after its CONNECT, while
// it waits for the decision, reach the server after the approval.
func TestAskEarlyData(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	h := startConnect(t, st.p, "a.pkg.test:"+st.ps, "early bytes ")
	call := st.ap.next(t)
	time.Sleep(20 * time.Millisecond)
	call.answer(AskDecision{Approve: true})
	if h.wait(t).resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %d", h.resp.StatusCode)
	}
	if _, err := io.WriteString(h.conn, "and more"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("early bytes and more"))
	h.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(h.br, buf); err != nil || string(buf) != "early bytes and more" {
		t.Errorf("through the tunnel: %q, %v", buf, err)
	}
}

// TestAskClientGone: a client that goes away while its CONNECT waits ends
// the wait (and its pending request).
func TestAskClientGone(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	h := startConnect(t, st.p, "a.pkg.test:"+st.ps, "")
	call := st.ap.next(t)
	h.conn.Close()
	select {
	case <-call.ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the wait goes on after the client went away")
	}
	r := st.p.audit.waitRecord(t, "for the end", func(r Record) bool { return r.Decision == DecisionDeny })
	if r.Reason != ReasonAskCanceled || r.Status != 503 {
		t.Errorf("record %+v", r)
	}
}

// TestAskLimit: at most MaxAsks requests wait at once; more are refused
// at once, and held requests hold up nothing else.
func TestAskLimit(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{MaxAsks: 2, MaxTunnels: 1})
	var held []*heldConnect
	var calls []askCall
	for _, host := range []string{"a.pkg.test", "b.pkg.test"} {
		held = append(held, startConnect(t, st.p, host+":"+st.ps, ""))
		calls = append(calls, st.ap.next(t))
	}
	h := startConnect(t, st.p, "a.pkg.test:"+st.ps, "").wait(t)
	if h.resp.StatusCode != 503 || h.resp.Header.Get("X-Devaipod-Proxy") != ReasonAskLimit ||
		!strings.Contains(h.body, "has 2 requests waiting for a decision, the limit") {
		t.Errorf("third held CONNECT = %d %q; want 503 ask-limit", h.resp.StatusCode, h.body)
	}
	st.ap.none(t)
	r := st.p.audit.waitRecord(t, "for the limit", func(r Record) bool { return r.Reason == ReasonAskLimit })
	if r.Decision != DecisionDeny || r.Status != 503 || r.Rule != "ask:*.pkg.test:"+st.ps {
		t.Errorf("record %+v", r)
	}
	// Held requests take no tunnel slot (MaxTunnels is 1) and block no
	// other request.
	h = startConnect(t, st.p, "allowed.test:"+st.ps, "").wait(t)
	if h.resp.StatusCode != 200 {
		t.Fatalf("allowed CONNECT while two wait = %d %q", h.resp.StatusCode, h.body)
	}
	h.echo(t, "free")
	h.conn.Close()
	st.p.audit.waitRecord(t, "for the allowed tunnel", func(r Record) bool { return r.Host == "allowed.test" })
	for i, c := range calls {
		c.answer(AskDecision{Approve: i == 0})
	}
	if held[0].wait(t).resp.StatusCode != 200 || held[1].wait(t).resp.StatusCode != 403 {
		t.Errorf("held answers %d, %d; want 200, 403", held[0].resp.StatusCode, held[1].resp.StatusCode)
	}
	// A place is free again.
	h = startConnect(t, st.p, "b.pkg.test:"+st.ps, "")
	st.ap.next(t).answer(AskDecision{})
	h.wait(t)
}

// TestAskDeniedWhileWaiting: a deny rule that comes while the request
// waits wins over the approval.
func TestAskDeniedWhileWaiting(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	h := startConnect(t, st.p, "a.pkg.test:"+st.ps, "")
	call := st.ap.next(t)
	if _, err := EditPolicyFile(st.policy, OpDeny, "*.pkg.test:*"); err != nil {
		t.Fatal(err)
	}
	call.answer(AskDecision{Approve: true, ForPod: true, By: "me"})
	if h.wait(t).resp.StatusCode != 403 || h.resp.Header.Get("X-Devaipod-Proxy") != ReasonDenied {
		t.Errorf("approved after a deny = %d %q", h.resp.StatusCode, h.body)
	}
	if p, _ := ReadPolicyFile(st.policy); len(p.Allow) != 0 {
		t.Errorf("policy %+v; want no allow rule added", p)
	}
}

// TestAskShutdown: held requests end with 503 when the proxy stops, and
// Serve does not wait for their decision.
func TestAskShutdown(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	h := startConnect(t, st.p, "a.pkg.test:"+st.ps, "")
	call := st.ap.next(t)
	start := time.Now()
	st.p.stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Serve took %v to return", d)
	}
	if call.ctx.Err() == nil {
		t.Error("the approver's context is not done")
	}
	if h.wait(t).resp.StatusCode != 503 || h.resp.Header.Get("X-Devaipod-Proxy") != ReasonShutdown {
		t.Errorf("held CONNECT at shutdown = %d %q", h.resp.StatusCode, h.body)
	}
	r := st.p.audit.waitRecord(t, "for the end", func(r Record) bool { return r.Decision == DecisionDeny })
	if r.Reason != ReasonShutdown || r.Status != 503 {
		t.Errorf("record %+v", r)
	}
}

// TestAskMany: many requests wait at once, each gets its own decision.
func TestAskMany(t *testing.T) {
	t.Parallel()
	st := startAsking(t, Options{})
	const n = 20
	var held []*heldConnect
	for range n {
		held = append(held, startConnect(t, st.p, "a.pkg.test:"+st.ps, ""))
	}
	var calls []askCall
	for range n {
		calls = append(calls, st.ap.next(t))
	}
	for i, c := range calls {
		c.answer(AskDecision{Approve: i%2 == 0})
	}
	var ok, refused int
	for _, h := range held {
		switch h.wait(t).resp.StatusCode {
		case 200:
			ok++
			h.conn.Close()
		case 403:
			refused++
		}
	}
	if ok != n/2 || refused != n/2 {
		t.Errorf("%d approved, %d refused; want %d each", ok, refused, n/2)
	}
	if st.p.s.asking.Load() != 0 {
		t.Errorf("%d asks still counted", st.p.s.asking.Load())
	}
}

func TestAskOptionsChecked(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.json")
	ap := newFakeApprover()
	for _, tt := range []struct {
		opts Options
		want string
	}{
		{Options{Ask: []string{"https://x.test"}, Approver: ap, PolicyFile: policy}, "ask: "},
		{Options{Ask: []string{"x.test"}, PolicyFile: policy}, "need an approver"},
		{Options{Ask: []string{"x.test"}, Approver: ap}, "need a policy file"},
		{Options{Ask: []string{"x.test"}, Approver: ap, PolicyFile: policy, AskTimeout: -1}, "negative"},
		{Options{MaxAsks: -1}, "max asks"},
	} {
		if _, err := New(tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v; want %q", tt.opts, err, tt.want)
		}
	}
	s, err := New(Options{Ask: []string{"x.test"}, Approver: ap, PolicyFile: policy})
	if err != nil || s.opts.AskTimeout != DefaultAskTimeout || s.opts.MaxAsks != DefaultMaxAsks {
		t.Errorf("defaults: %v %+v", err, s.opts)
	}
}

func TestApprovedAddr(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr("10.0.2.2")
	x := &exchange{exemptAddr: netip.AddrPortFrom(a, 8443)}
	ctx := context.WithValue(context.Background(), exchangeKey{}, x)
	if !approvedAddr(ctx, a, 8443) || approvedAddr(ctx, a, 443) || approvedAddr(ctx, netip.MustParseAddr("10.0.2.3"), 8443) ||
		approvedAddr(context.Background(), a, 8443) || approvedAddr(context.WithValue(ctx, exchangeKey{}, &exchange{}), netip.Addr{}, 0) {
		t.Error("approvedAddr exempts more or less than the approved address and port")
	}
}
