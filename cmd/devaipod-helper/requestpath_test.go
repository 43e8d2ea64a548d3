package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devaipod/devaipod/internal/approval"
	"github.com/devaipod/devaipod/proxy"
)

func requestPath(ctx context.Context, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(ctx, append([]string{"request-path"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// fakePathProxy answers path requests as answer says, and keeps what it
// was sent.
type fakePathProxy struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []proxy.PathRequest
}

func newFakePathProxy(t *testing.T, answer func(w http.ResponseWriter, req proxy.PathRequest)) *fakePathProxy {
	t.Helper()
	f := &fakePathProxy{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != proxy.RequestPathPath || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %s %s %q", r.Method, r.URL, r.Header.Get("Content-Type"))
		}
		var req proxy.PathRequest
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			t.Errorf("body: %v", err)
		}
		f.mu.Lock()
		f.got = append(f.got, req)
		f.mu.Unlock()
		answer(w, req)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakePathProxy) sent() []proxy.PathRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]proxy.PathRequest(nil), f.got...)
}

func answerJSON(w http.ResponseWriter, status int, a proxy.PathAnswer) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(a)
}

func TestRequestPathGranted(t *testing.T) {
	t.Parallel()
	f := newFakePathProxy(t, func(w http.ResponseWriter, req proxy.PathRequest) {
		answerJSON(w, 200, proxy.PathAnswer{Granted: true, At: proxy.HostPathIn(req.Path), RW: req.RW, Message: "approved by me", ID: "path-00000001"})
	})
	code, out, errOut := requestPath(context.Background(), "--proxy", f.srv.URL, "--reason", "the tests need its fixtures", "/home/me/src/lib")
	if code != 0 || out != "granted: visible at /host/home/me/src/lib (read-only)\n" ||
		!strings.Contains(errOut, "asking for /home/me/src/lib (read-only); a person on the host decides") {
		t.Errorf("= %d %q %q", code, out, errOut)
	}
	// Flags after PATH too; a trailing slash is dropped.
	code, out, errOut = requestPath(context.Background(), "/data/set/", "--rw", "--proxy", f.srv.URL+"/")
	if code != 0 || out != "granted: visible at /host/data/set (read-write)\n" {
		t.Errorf("rw = %d %q %q", code, out, errOut)
	}
	code, out, errOut = requestPath(context.Background(), "--json", "--proxy", f.srv.URL, "/srv")
	var a proxy.PathAnswer
	if code != 0 || json.Unmarshal([]byte(out), &a) != nil || a != (proxy.PathAnswer{Granted: true, At: "/host/srv", Message: "approved by me", ID: "path-00000001"}) ||
		errOut != "" || strings.Count(out, "\n") != 1 {
		t.Errorf("--json = %d %q %q", code, out, errOut)
	}
	want := []proxy.PathRequest{{Path: "/home/me/src/lib", Reason: "the tests need its fixtures"}, {Path: "/data/set", RW: true}, {Path: "/srv"}}
	if got := f.sent(); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("sent %+v; want %+v", got, want)
	}
}

func TestRequestPathRefused(t *testing.T) {
	t.Parallel()
	f := newFakePathProxy(t, func(w http.ResponseWriter, req proxy.PathRequest) {
		switch req.Path {
		case "/timeout":
			answerJSON(w, 403, proxy.PathAnswer{Reason: proxy.ReasonAskTimeout, Message: "no decision within 1m0s"})
		case "/old":
			// A proxy that knows no path requests.
			http.Error(w, "devaipod proxy: bad request: not a proxy request.", 400)
		case "/lie":
			answerJSON(w, 403, proxy.PathAnswer{Granted: true})
		default:
			answerJSON(w, 403, proxy.PathAnswer{Reason: proxy.ReasonRejected, Message: "rejected by me@host: use the fixture (path-00000002)"})
		}
	})
	code, out, errOut := requestPath(context.Background(), "--proxy", f.srv.URL, "/home/me/.aws")
	if code != 1 || out != "" || !strings.Contains(errOut, "request-path: refused (rejected): rejected by me@host: use the fixture (path-00000002)\n") {
		t.Errorf("rejected = %d %q %q", code, out, errOut)
	}
	code, out, errOut = requestPath(context.Background(), "--json", "--proxy", f.srv.URL, "/home/me/.aws")
	if code != 1 || out != `{"granted":false,"rw":false,"reason":"rejected","message":"rejected by me@host: use the fixture (path-00000002)"}`+"\n" || errOut != "" {
		t.Errorf("rejected --json = %d %q %q", code, out, errOut)
	}
	code, _, errOut = requestPath(context.Background(), "--proxy", f.srv.URL, "/timeout")
	if code != 1 || !strings.Contains(errOut, "refused (ask-timeout): no decision within 1m0s") || !strings.Contains(errOut, "nobody decided in time") {
		t.Errorf("timeout = %d %q", code, errOut)
	}
	code, _, errOut = requestPath(context.Background(), "--proxy", f.srv.URL, "/old")
	if code != 1 || !strings.Contains(errOut, `cannot ask: the proxy answered 400 Bad Request: "devaipod proxy: bad request: not a proxy request."`) {
		t.Errorf("old proxy = %d %q", code, errOut)
	}
	code, out, _ = requestPath(context.Background(), "--json", "--proxy", f.srv.URL, "/lie")
	if code != 1 || !strings.Contains(out, `"reason":"proxy-error"`) {
		t.Errorf("a grant with 403 = %d %q", code, out)
	}
}

func TestRequestPathNoAnswer(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	f := newFakePathProxy(t, func(w http.ResponseWriter, req proxy.PathRequest) { <-release })
	defer close(release)
	start := time.Now()
	code, out, _ := requestPath(context.Background(), "--json", "--timeout", "100ms", "--proxy", f.srv.URL, "/x")
	if code != 1 || out != `{"granted":false,"rw":false,"reason":"helper-timeout","message":"no answer within 100ms (--timeout)"}`+"\n" {
		t.Errorf("= %d %q", code, out)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	// Nobody listening.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	code, _, errOut := requestPath(context.Background(), "--proxy", "http://"+addr, "/x")
	if code != 1 || !strings.Contains(errOut, "cannot ask: cannot reach the proxy") {
		t.Errorf("no proxy = %d %q", code, errOut)
	}
}

func TestRequestPathUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "want exactly one PATH, got 0"},
		{[]string{"/a", "/b"}, "want exactly one PATH, got 2"},
		{[]string{"src/lib"}, "is not absolute"},
		{[]string{"~/src"}, "is not absolute"},
		{[]string{"/a/../b"}, `ask for "/b"`},
		{[]string{"/"}, "whole file system"},
		{[]string{"///"}, "whole file system"},
		{[]string{"/a\x1bb"}, "control"},
		{[]string{"--reason", strings.Repeat("x", 501), "/a"}, "--reason of 501 bytes"},
		{[]string{"--timeout", "0s", "/a"}, "--timeout 0s"},
		{[]string{"--proxy", "https://127.0.0.1:3128", "/a"}, "want http://HOST:PORT"},
		{[]string{"--proxy", "127.0.0.1:3128", "/a"}, "want http://HOST:PORT"},
		{[]string{"--nope", "/a"}, "flag provided but not defined"},
	} {
		code, out, errOut := requestPath(context.Background(), tt.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, tt.want) {
			t.Errorf("%q = %d %q %q; want 2 and %q", tt.args, code, out, errOut, tt.want)
		}
	}
	code, out, errOut := requestPath(context.Background(), "-h")
	if code != 0 || !strings.Contains(errOut, "A person decides") || !strings.Contains(errOut, "/host/PATH") || out != "" {
		t.Errorf("-h = %d %q %q", code, out, errOut)
	}
	var help bytes.Buffer
	if code := run(context.Background(), []string{"help", "request-path"}, &help, io.Discard); code != 0 || !strings.Contains(help.String(), "--rw") {
		t.Errorf("help request-path = %d %q", code, help.String())
	}
}

// TestRequestPathIgnoresProxyEnv: the request goes to --proxy itself,
// never through HTTP_PROXY (which, in the agent, is that same proxy).
func TestRequestPathIgnoresProxyEnv(t *testing.T) {
	f := newFakePathProxy(t, func(w http.ResponseWriter, req proxy.PathRequest) {
		answerJSON(w, 200, proxy.PathAnswer{Granted: true, At: proxy.HostPathIn(req.Path)})
	})
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	if code, out, errOut := requestPath(context.Background(), "--proxy", f.srv.URL, "/x"); code != 0 || out != "granted: visible at /host/x (read-only)\n" {
		t.Errorf("= %d %q %q", code, out, errOut)
	}
}

// TestProxyPathRequests runs the proxy subcommand with an approval folder
// and a forbidden path, and request-path against it through a TCP bridge
// to its socket (as the agent's init bridges 127.0.0.1:3128): a request is
// filed as kind path, approved with the approvals subcommand; a forbidden
// one is refused unasked.
func TestProxyPathRequests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "proxy.sock")
	approvalDir := filepath.Join(dir, "approvals")
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"proxy", "--listen", "unix:" + sock, "--pod", "demo", "--policy-file", filepath.Join(dir, "policy.json"),
			"--approval-dir", approvalDir, "--ask-timeout", "30s", "--forbidden-path", "/home/me/.ssh", "--forbidden-path", "/home/me/.config/devaipod/"}, &stdout, &stderr)
	}()
	waitForSocket(t, sock, exited, &stderr)
	proxyURL := "http://" + tcpToUnix(t, sock)

	type result struct {
		code     int
		out, err string
	}
	ask := func(args ...string) chan result {
		ch := make(chan result, 1)
		go func() {
			code, out, errOut := requestPath(ctx, append([]string{"--proxy", proxyURL}, args...)...)
			ch <- result{code, out, errOut}
		}()
		return ch
	}

	ch := ask("--reason", "its fixtures\x1b[2J", "/home/me/src/lib")
	r := filedRequest(t, &approval.Store{Dir: approvalDir})
	if r.Kind != approval.KindPath || r.Pod != "demo" || r.What != "read /home/me/src/lib" || r.Rule != "/home/me/src/lib" ||
		len(r.Details) != 3 || r.Details["path"] != "/home/me/src/lib" || r.Details["reason"] != "its fixtures[2J" || r.Details["rw"] != "false" ||
		!strings.HasPrefix(r.ID, "path-") {
		t.Errorf("filed %+v", r)
	}
	if code, _, errOut := approvals("--dir", approvalDir, "--by", "me@host", "approve", r.ID); code != 0 {
		t.Fatalf("approve = %d %q", code, errOut)
	}
	if got := <-ch; got.code != 0 || got.out != "granted: visible at /host/home/me/src/lib (read-only)\n" {
		t.Errorf("approved = %+v", got)
	}

	ch = ask("--rw", "/home/me/data")
	r = filedRequest(t, &approval.Store{Dir: approvalDir})
	if r.What != "read-write /home/me/data" || r.Details["rw"] != "true" || r.Details["reason"] != "" {
		t.Errorf("filed %+v", r)
	}
	if code, _, errOut := approvals("--dir", approvalDir, "--by", "me@host", "--reason", "not that one", "reject", r.ID); code != 0 {
		t.Fatalf("reject = %d %q", code, errOut)
	}
	if got := <-ch; got.code != 1 || !strings.Contains(got.err, "refused (rejected): rejected by me@host: not that one ("+r.ID+")") {
		t.Errorf("rejected = %+v", got)
	}

	for _, p := range []string{"/home/me/.ssh/id_ed25519", "/home/me/.config/devaipod"} {
		if got := <-ask(p); got.code != 1 || !strings.Contains(got.err, "refused (path-forbidden): "+p+" is never shared with this pod") {
			t.Errorf("%s = %+v", p, got)
		}
	}
	if pending, _ := (&approval.Store{Dir: approvalDir}).Pending(); len(pending) != 0 {
		t.Errorf("pending %+v", pending)
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
			if rec.Host != proxy.PathRequestHost || rec.Method != "POST" {
				t.Errorf("record %+v", rec)
			}
			decisions = append(decisions, rec.Decision+" "+rec.Reason+" "+rec.DecidedBy)
		}
	}
	want := []string{"ask  ", "allow  me@host", "ask  ", "deny rejected me@host", "deny path-forbidden ", "deny path-forbidden "}
	if strings.Join(decisions, "|") != strings.Join(want, "|") {
		t.Errorf("audit %q; want %q", decisions, want)
	}
}

// tcpToUnix forwards a TCP address on loopback to the unix socket sock,
// and returns the address.
func tcpToUnix(t *testing.T, sock string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				u, err := net.Dial("unix", sock)
				if err != nil {
					return
				}
				defer u.Close()
				go func() {
					io.Copy(u, c)
					u.(*net.UnixConn).CloseWrite()
				}()
				io.Copy(c, u)
			})
		}
	})
	return ln.Addr().String()
}
