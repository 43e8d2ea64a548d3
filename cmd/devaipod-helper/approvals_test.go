package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devaipod/devaipod/internal/approval"
	"github.com/devaipod/devaipod/proxy"
)

// approvals runs the approvals command and returns its exit status and
// output.
func approvals(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"approvals"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestApprovalsCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := &approval.Store{Dir: dir, Poll: 5 * time.Millisecond}
	if code, out, errOut := approvals("--dir", dir, "list"); code != 0 || out != "" {
		t.Errorf("list of nothing = %d %q %q", code, out, errOut)
	}
	a, err := store.File(approval.Request{Pod: "demo", Kind: approval.KindNetwork, What: "CONNECT a.test:443", Rule: "a.test"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // oldest first
	b, err := store.File(approval.Request{Pod: "demo", Kind: approval.KindNetwork, What: "GET http://b.test:80/<x>", Rule: "b.test:80",
		Details: map[string]string{"host": "b.test"}})
	if err != nil {
		t.Fatal(err)
	}

	code, out, errOut := approvals("--dir", dir, "list")
	if code != 0 {
		t.Fatalf("list = %d %q", code, errOut)
	}
	var listed []approval.Request
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r approval.Request
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("list line %q: %v", sc.Text(), err)
		}
		listed = append(listed, r)
	}
	if len(listed) != 2 || listed[0].ID != a.ID || listed[1].ID != b.ID || listed[1].What != b.What ||
		listed[1].Rule != "b.test:80" || listed[1].Details["host"] != "b.test" || listed[0].Pod != "demo" {
		t.Errorf("listed %+v", listed)
	}

	if code, out, errOut := approvals("--dir", dir, "--for", "pod", "--by", "me@host", "--reason", "the mirror", "approve", a.ID); code != 0 ||
		out != "approved "+a.ID+" (for pod)\n" {
		t.Errorf("approve = %d %q %q", code, out, errOut)
	}
	d, err := store.Wait(context.Background(), a.ID, 5*time.Second)
	if err != nil || !d.Approve || d.For != approval.ForPod || d.By != "me@host" || d.Reason != "the mirror" {
		t.Errorf("decision %+v %v", d, err)
	}
	if code, out, errOut := approvals("--dir", dir, "--reason", "use the mirror", "reject", b.ID); code != 0 || out != "rejected "+b.ID+"\n" {
		t.Errorf("reject = %d %q %q", code, out, errOut)
	}
	d, err = store.Wait(context.Background(), b.ID, 5*time.Second)
	if err != nil || d.Approve || d.For != "" || d.Reason != "use the mirror" {
		t.Errorf("decision %+v %v", d, err)
	}

	// Decided (and withdrawn by Wait), or never filed: exit 3.
	for _, id := range []string{a.ID, "net-00000000"} {
		if code, _, errOut := approvals("--dir", dir, "approve", id); code != exitNotPending || !strings.Contains(errOut, "no such pending request") {
			t.Errorf("approve %s again = %d %q; want %d", id, code, errOut, exitNotPending)
		}
	}
	c, _ := store.File(approval.Request{Pod: "demo", Kind: approval.KindNetwork, What: "CONNECT c.test:443", Rule: "c.test"})
	if code, _, _ := approvals("--dir", dir, "approve", c.ID); code != 0 {
		t.Errorf("approve = %d", code)
	}
	if code, _, errOut := approvals("--dir", dir, "reject", c.ID); code != exitNotPending || !strings.Contains(errOut, "decided already") {
		t.Errorf("reject after approve = %d %q; want %d", code, errOut, exitNotPending)
	}
	if d, err := store.Wait(context.Background(), c.ID, 5*time.Second); err != nil || !d.Approve || d.For != approval.ForOnce {
		t.Errorf("default scope: %+v %v; want once", d, err)
	}
}

func TestApprovalsUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		args       []string
		wantCode   int
		wantStderr string
	}{
		{[]string{"list"}, 2, "missing --dir"},
		{[]string{"--dir", dir}, 2, "missing operation: list, approve ID or reject ID"},
		{[]string{"--dir", dir, "grant", "net-00000000"}, 2, `unknown operation "grant"`},
		{[]string{"--dir", dir, "list", "x"}, 2, "list takes no arguments"},
		{[]string{"--dir", dir, "--for", "pod", "list"}, 2, "list takes no --for"},
		{[]string{"--dir", dir, "approve"}, 2, "approve wants exactly one ID"},
		{[]string{"--dir", dir, "approve", "net-00000000", "--for", "pod"}, 2, "flags come before the operation"},
		{[]string{"--dir", dir, "--for", "pod", "reject", "net-00000000"}, 2, "--for and --rw are for approve"},
		{[]string{"--dir", dir, "--for", "ever", "approve", "net-00000000"}, 2, `--for "ever": want once or pod`},
		{[]string{"--dir", dir, "approve", "../../etc/passwd"}, 1, "is not a request id"},
		{[]string{"--nope"}, 2, "flag provided but not defined"},
		{[]string{"-h"}, 0, "Usage: devaipod-helper approvals --dir DIR list"},
	}
	for _, tt := range tests {
		if code, _, errOut := approvals(tt.args...); code != tt.wantCode || !strings.Contains(errOut, tt.wantStderr) {
			t.Errorf("approvals %q = %d %q; want %d and %q", tt.args, code, errOut, tt.wantCode, tt.wantStderr)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"help", "approvals"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "reject ID     refuse request ID") {
		t.Errorf("help approvals = %d %q", code, stdout.String())
	}
}

// filedRequest waits until store has one pending request and returns it.
func filedRequest(t *testing.T, store *approval.Store) approval.Request {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		pending, err := store.Pending()
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) == 1 {
			return pending[0]
		}
		if len(pending) > 1 || time.Now().After(deadline) {
			t.Fatalf("pending %+v; want one request", pending)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStoreApprover(t *testing.T) {
	t.Parallel()
	store := &approval.Store{Dir: t.TempDir(), Poll: 5 * time.Millisecond}
	a := &storeApprover{store: store, pod: "demo"}
	req := proxy.AskRequest{Host: "a.pkg.test", Port: 443, Method: "CONNECT", Rule: "a.pkg.test", Ask: "*.pkg.test", What: "CONNECT a.pkg.test:443"}
	type result struct {
		d   proxy.AskDecision
		err error
	}
	ask := func(ctx context.Context) chan result {
		ch := make(chan result, 1)
		go func() {
			d, err := a.Approve(ctx, req)
			ch <- result{d, err}
		}()
		return ch
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ch := ask(ctx)
	r := filedRequest(t, store)
	if r.Pod != "demo" || r.Kind != approval.KindNetwork || r.What != req.What || r.Rule != req.Rule ||
		r.Details["host"] != "a.pkg.test" || r.Details["port"] != "443" || r.Details["method"] != "CONNECT" || r.Details["ask_rule"] != "*.pkg.test" {
		t.Errorf("filed %+v", r)
	}
	if err := store.Decide(approval.Decision{ID: r.ID, Approve: true, For: approval.ForPod, By: "me@host", Reason: "ok"}); err != nil {
		t.Fatal(err)
	}
	if got := <-ch; got.err != nil || got.d != (proxy.AskDecision{Approve: true, ForPod: true, By: "me@host", Reason: "ok", ID: r.ID}) {
		t.Errorf("approved: %+v", got)
	}

	ch = ask(ctx)
	r = filedRequest(t, store)
	store.Decide(approval.Decision{ID: r.ID, Reason: "no", By: "me@host"})
	if got := <-ch; got.err != nil || got.d != (proxy.AskDecision{Reason: "no", By: "me@host", ID: r.ID}) {
		t.Errorf("rejected: %+v", got)
	}

	// No decision before the context's deadline: a timeout, and the
	// request is withdrawn.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	got := <-ask(short)
	if !errors.Is(got.err, proxy.ErrAskTimeout) && !errors.Is(got.err, context.DeadlineExceeded) {
		t.Errorf("timeout: %+v", got)
	}
	if pending, _ := store.Pending(); len(pending) != 0 {
		t.Errorf("pending after the timeout: %+v", pending)
	}

	// A folder it cannot write: an error, no decision.
	bad := &storeApprover{store: &approval.Store{Dir: "/proc/no-such-dir"}, pod: "demo"}
	if d, err := bad.Approve(ctx, req); err == nil || d.Approve {
		t.Errorf("unwritable folder: %+v %v", d, err)
	}
}

// TestProxyAsks runs the proxy subcommand with an ask rule: a held request
// is listed and approved with the approvals subcommand, as devaipod
// approve does through podman exec.
func TestProxyAsks(t *testing.T) {
	t.Parallel()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream says hi")
	}))
	defer upstream.Close()
	target := strings.TrimPrefix(upstream.URL, "http://")

	dir := t.TempDir()
	sock := filepath.Join(dir, "proxy.sock")
	approvalDir := filepath.Join(dir, "approvals")
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"proxy", "--listen", "unix:" + sock, "--pod", "demo", "--policy-file", filepath.Join(dir, "policy.json"),
			"--ask", target, "--ask-timeout", "30s", "--approval-dir", approvalDir}, &stdout, &stderr)
	}()
	waitForSocket(t, sock, exited, &stderr)
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(mustParseURL(t, "http://proxy.invalid")),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}
	type result struct {
		code int
		body string
		err  error
	}
	get := func() chan result {
		ch := make(chan result, 1)
		go func() {
			resp, err := client.Get(upstream.URL + "/")
			if err != nil {
				ch <- result{err: err}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			ch <- result{code: resp.StatusCode, body: string(b)}
		}()
		return ch
	}

	ch := get()
	r := filedRequest(t, &approval.Store{Dir: approvalDir})
	if r.What != "GET http://"+target+"/" || r.Rule != target || r.Pod != "demo" {
		t.Errorf("filed %+v", r)
	}
	code, out, errOut := approvals("--dir", approvalDir, "list")
	if code != 0 || !strings.Contains(out, `"id":"`+r.ID+`"`) {
		t.Errorf("list = %d %q %q", code, out, errOut)
	}
	if code, _, errOut := approvals("--dir", approvalDir, "--by", "me@host", "approve", r.ID); code != 0 {
		t.Fatalf("approve = %d %q", code, errOut)
	}
	if got := <-ch; got.err != nil || got.code != 200 || got.body != "upstream says hi" {
		t.Errorf("approved GET = %+v", got)
	}

	ch = get()
	r = filedRequest(t, &approval.Store{Dir: approvalDir})
	if code, _, errOut := approvals("--dir", approvalDir, "--by", "me@host", "--reason", "not today", "reject", r.ID); code != 0 {
		t.Fatalf("reject = %d %q", code, errOut)
	}
	if got := <-ch; got.err != nil || got.code != 403 || !strings.Contains(got.body, "rejected by me@host: not today") {
		t.Errorf("rejected GET = %+v", got)
	}

	cancel()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("proxy did not stop")
	}
	var decisions []string
	sc := bufio.NewScanner(strings.NewReader(stdout.String()))
	for sc.Scan() {
		var rec proxy.Record
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Event == proxy.EventRequest {
			decisions = append(decisions, rec.Decision+" "+rec.Rule+" "+rec.Reason+" "+rec.DecidedBy)
		}
	}
	want := []string{"ask ask:" + target + "  ", "allow ask:" + target + "  me@host", "ask ask:" + target + "  ", "deny ask:" + target + " rejected me@host"}
	if strings.Join(decisions, "|") != strings.Join(want, "|") {
		t.Errorf("audit %q; want %q", decisions, want)
	}
	if !strings.Contains(stderr.String(), "waiting for a decision id="+r.ID) {
		t.Errorf("stderr %q lacks the request's id", stderr.String())
	}
}

func TestProxyAskFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok := []string{"--listen", "unix:" + dir + "/p.sock", "--pod", "demo", "--policy-file", dir + "/policy.json"}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{append(ok, "--ask", "a.test"), "--ask needs --approval-dir"},
		{append(ok, "--ask", "https://a.test", "--approval-dir", dir), `invalid value "https://a.test" for flag -ask`},
		{append(ok, "--ask-timeout", "0s"), "--ask-timeout 0s: want a positive duration"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append([]string{"proxy"}, tt.args...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("proxy %q = %d %q; want 2 and %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}
