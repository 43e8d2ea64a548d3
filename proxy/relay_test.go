package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The relay of intercepted requests (intercept.go) where it does what the
// http.Server, httputil.ReverseProxy and http.Transport did before it.

// rawIntercepted opens an intercepted connection to host (at the TLS
// upstream's port): CONNECT, then TLS with the proxy's CA.
func (st *interceptSetup) rawIntercepted(t *testing.T, host string) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	resp, body, conn, br := st.p.connect(t, net.JoinHostPort(host, st.ps))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %d %q", resp.StatusCode, body)
	}
	if br.Buffered() > 0 {
		t.Fatal("bytes after the CONNECT's answer")
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(conn, &tls.Config{RootCAs: st.caPool, ServerName: host})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc, bufio.NewReader(tc)
}

// readAnswer reads an answer to method, and its body.
func readAnswer(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp, string(b)
}

func TestInterceptAnswers(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	tc, br := st.rawIntercepted(t, "api.example.com")
	host := "api.example.com:" + st.ps

	// Two requests at once (pipelined), the first one HEAD.
	io.WriteString(tc, "HEAD /x HTTP/1.1\r\nHost: "+host+"\r\n\r\nGET /y HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	resp, body := readAnswer(t, br, http.MethodHead)
	if resp.StatusCode != 200 || body != "" || resp.ContentLength != int64(len("ok HEAD /x")) {
		t.Errorf("HEAD = %d %q, length %d", resp.StatusCode, body, resp.ContentLength)
	}
	if resp, body = readAnswer(t, br, http.MethodGet); resp.StatusCode != 200 || body != "ok GET /y" {
		t.Errorf("pipelined GET = %d %q", resp.StatusCode, body)
	}

	// No content; a chunked body with a trailer; 103 before the answer.
	io.WriteString(tc, "GET /empty HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	if resp, body = readAnswer(t, br, http.MethodGet); resp.StatusCode != 204 || body != "" {
		t.Errorf("GET /empty = %d %q", resp.StatusCode, body)
	}
	io.WriteString(tc, "GET /trailer HTTP/1.1\r\nHost: "+host+"\r\nTe: trailers\r\n\r\n")
	resp, body = readAnswer(t, br, http.MethodGet)
	if resp.StatusCode != 200 || body != "part one, part two" || resp.Trailer.Get("X-Sum") != "42" ||
		len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("GET /trailer = %d %q, trailer %v, transfer encoding %v", resp.StatusCode, body, resp.Trailer, resp.TransferEncoding)
	}
	io.WriteString(tc, "GET /hints HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusEarlyHints || resp.Header.Get("Link") == "" {
		t.Fatalf("GET /hints: first answer %v, %v", resp, err)
	}
	if resp, body = readAnswer(t, br, http.MethodGet); resp.StatusCode != 200 || body != "after the hints" {
		t.Errorf("GET /hints = %d %q", resp.StatusCode, body)
	}

	// The server closes its connection after an answer, and all of its
	// connections in the pool: the next requests go on new ones, and the
	// client's connection stays open.
	for _, path := range []string{"/last", "/after-last"} {
		io.WriteString(tc, "GET "+path+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		if resp, body = readAnswer(t, br, http.MethodGet); resp.StatusCode != 200 || resp.Close {
			t.Errorf("GET %s = %d %q, close %v", path, resp.StatusCode, body, resp.Close)
		}
	}
	// Just after an answer the pool does not look (a GET without a body
	// is sent again on a new connection); later it does, and a POST goes
	// on a new connection at once.
	for _, method := range []string{"GET", "POST"} {
		if method == "POST" {
			time.Sleep(upstreamFresh + 50*time.Millisecond)
		}
		st.srv.CloseClientConnections()
		time.Sleep(20 * time.Millisecond)
		request := method + " /again HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
		if method == "POST" {
			request = method + " /again HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 2\r\n\r\nhi"
		}
		io.WriteString(tc, request)
		if resp, body = readAnswer(t, br, method); resp.StatusCode != 200 || body != "ok "+method+" /again" {
			t.Errorf("%s after the server closed its connections = %d %q", method, resp.StatusCode, body)
		}
	}

	// Connection: close is answered and the connection closed.
	io.WriteString(tc, "GET /bye HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
	if resp, body = readAnswer(t, br, http.MethodGet); resp.StatusCode != 200 || !resp.Close {
		t.Errorf("GET with Connection: close = %d %q, close %v", resp.StatusCode, body, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close: %v; want EOF", err)
	}
}

// TestInterceptBadRequests: what the http.Server refused is refused, with
// its answers, and nothing reaches the upstream.
func TestInterceptBadRequests(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	host := "api.example.com:" + st.ps
	for _, tt := range []struct {
		name, request string
		status        int
	}{
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"malformed Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: " + host + "\r\nHost: " + host + "\r\n\r\n", 400},
		{"bad header value", "GET / HTTP/1.1\r\nHost: " + host + "\r\nX: a\x00b\r\n\r\n", 400},
		{"HTTP/2", "GET / HTTP/2.0\r\nHost: " + host + "\r\n\r\n", 505},
		{"unknown expectation", "POST / HTTP/1.1\r\nHost: " + host + "\r\nExpect: magic\r\nContent-Length: 1\r\n\r\nx", 417},
		{"head too large", "GET / HTTP/1.1\r\nHost: " + host + "\r\nX: " + strings.Repeat("a", maxHeaderBytes+8192) + "\r\n\r\n", 431},
		{"garbage", "this is not HTTP\r\n\r\n", 400},
	} {
		tc, br := st.rawIntercepted(t, "api.example.com")
		go io.WriteString(tc, tt.request)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if resp.StatusCode != tt.status {
			t.Errorf("%s: %d; want %d", tt.name, resp.StatusCode, tt.status)
		}
		tc.Close()
	}
	if n := len(st.seen.all()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
}

// TestInterceptRefusedUpload: a refused request whose client waits for
// 100 Continue gets its refusal without sending the body, and the
// connection closes.
func TestInterceptRefusedUpload(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	tc, br := st.rawIntercepted(t, "api.example.com")
	io.WriteString(tc, "PUT / HTTP/1.1\r\nHost: api.example.com:"+st.ps+"\r\nExpect: 100-continue\r\nContent-Length: 100000\r\n"+
		"Authorization: Bearer "+otherPlaceholder+"\r\n\r\n")
	resp, body := readAnswer(t, br, http.MethodPut)
	if resp.StatusCode != 403 || !resp.Close || !strings.Contains(body, otherName) {
		t.Errorf("PUT = %d %q, close %v", resp.StatusCode, body, resp.Close)
	}
	if n := len(st.seen.all()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
}

// TestInterceptClientHangsUp: a client that goes away while its request
// waits for the upstream's answer cancels it upstream, as the http.Server
// and the Transport did.
func TestInterceptClientHangsUp(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	c := st.client(true)
	ctx, cancel := context.WithCancel(context.Background())
	req := newRequest(t, http.MethodGet, st.url("api.example.com", "/wait"), nil).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer "+apiKeyPlaceholder)
	go func() {
		time.Sleep(300 * time.Millisecond)
		cancel()
	}()
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("the request was answered")
	}
	select {
	case <-st.canceled:
	case <-time.After(3 * time.Second):
		t.Fatal("the upstream's request was not canceled")
	}
	rec := st.p.audit.waitRecord(t, "for the canceled request", func(r Record) bool { return r.Method == http.MethodGet })
	if rec.Status != 502 || rec.Reason != ReasonUpstreamError || rec.Detail != "canceled" {
		t.Errorf("audit record %+v", rec)
	}
}

// TestInterceptUpgrade: an upgrade (WebSocket's way) joins the client and
// the upstream, after the credentials went in.
func TestInterceptUpgrade(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	tc, br := st.rawIntercepted(t, "api.example.com")
	io.WriteString(tc, "GET /upgrade HTTP/1.1\r\nHost: api.example.com:"+st.ps+"\r\nConnection: Upgrade\r\nUpgrade: echo\r\n"+
		"X-Api-Key: "+apiKeyPlaceholder+"\r\n\r\nfirst\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "echo" {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	for _, line := range []string{"first\n", "second\n"} {
		if line != "first\n" {
			io.WriteString(tc, line)
		}
		got, err := br.ReadString('\n')
		if err != nil || got != "echo "+line {
			t.Errorf("got %q, %v; want the echo of %q", got, err, line)
		}
	}
	tc.Close()
	got := st.seen.all()
	if len(got) != 1 || got[0].Header.Get("X-Api-Key") != apiKeyValue {
		t.Errorf("upstream got %d requests", len(got))
	}
	rec := st.p.audit.waitRecord(t, "for the upgrade", func(r Record) bool { return r.Method == http.MethodGet })
	if rec.Status != http.StatusSwitchingProtocols || rec.Decision != DecisionAllow {
		t.Errorf("audit record %+v", rec)
	}
}

// TestInterceptLargeAnswers: large bodies arrive whole, of known length or
// chunked, on one connection.
func TestInterceptLargeAnswers(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	c := st.client(true)
	want := pattern(8 << 20)
	for _, path := range []string{"/big", "/big?chunked", "/big"} {
		resp, body := do(t, c, newRequest(t, http.MethodGet, st.url("api.example.com", path), nil))
		if resp.StatusCode != 200 || !bytes.Equal([]byte(body), want) {
			t.Errorf("GET %s = %d, %d bytes, equal %v", path, resp.StatusCode, len(body), bytes.Equal([]byte(body), want))
		}
	}
	c.CloseIdleConnections()
	rec := st.p.audit.waitRecord(t, "for the CONNECT", func(r Record) bool { return r.Method == http.MethodConnect })
	if rec.BytesDown < 3*int64(len(want)) {
		t.Errorf("CONNECT audit record %+v", rec)
	}
}

// TestInterceptReadHeaderTimeout: inside an intercepted connection, a
// request's head that does not arrive whole within ReadHeaderTimeout ends
// the connection, as a CONNECT's does; one that arrives whole, in one
// piece or after a pause shorter than that, is answered.
func TestInterceptReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{ReadHeaderTimeout: 300 * time.Millisecond})
	host := "api.example.com:" + st.ps
	tc, br := st.rawIntercepted(t, "api.example.com")
	io.WriteString(tc, "GET /whole HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	if resp, body := readAnswer(t, br, http.MethodGet); resp.StatusCode != 200 || body != "ok GET /whole" {
		t.Fatalf("GET /whole = %d %q", resp.StatusCode, body)
	}
	io.WriteString(tc, "GET /in-two HTTP/1.1\r\n")
	time.Sleep(100 * time.Millisecond)
	io.WriteString(tc, "Host: "+host+"\r\n\r\n")
	if resp, body := readAnswer(t, br, http.MethodGet); resp.StatusCode != 200 || body != "ok GET /in-two" {
		t.Fatalf("GET /in-two = %d %q", resp.StatusCode, body)
	}
	io.WriteString(tc, "GET /never HTTP/1.1\r\nHost: "+host+"\r\n") // and never the end of the head
	start := time.Now()
	if b, err := io.ReadAll(br); len(b) > 0 {
		t.Errorf("after a head that never ended: %q, %v", b, err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Errorf("the connection ended after %v; want about 300ms", d)
	}
}

// TestInterceptBrokenBody: a request whose body cannot be read (a
// malformed chunk) gets an answer and ends its connection, as from the
// http.Server: what follows in the stream is the body's, never a request
// of its own.
func TestInterceptBrokenBody(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	host := "api.example.com:" + st.ps
	for _, tt := range []struct {
		name, head string
		status     int
		reason     string
	}{
		{"forwarded", "POST /broken HTTP/1.1\r\nHost: " + host + "\r\n", http.StatusBadRequest, ReasonBadRequest},
		// Refused, so its body is read only to keep the connection.
		{"refused", "POST /broken HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + otherPlaceholder + "\r\n",
			http.StatusForbidden, ReasonCredentialHost},
	} {
		tc, br := st.rawIntercepted(t, "api.example.com")
		io.WriteString(tc, tt.head+"Transfer-Encoding: chunked\r\n\r\nzz\r\n"+"GET /after HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		resp, _ := readAnswer(t, br, http.MethodPost)
		if resp.StatusCode != tt.status || !resp.Close {
			t.Errorf("%s: POST with a broken body = %d, close %v; want %d and the connection closed", tt.name, resp.StatusCode, resp.Close, tt.status)
		}
		if b, err := io.ReadAll(br); len(b) > 0 {
			t.Errorf("%s: after the broken body: %q, %v; want the end", tt.name, b, err)
		}
		rec := st.p.audit.waitRecord(t, "for the broken body's request", func(r Record) bool { return r.Method == http.MethodPost && r.Reason == tt.reason })
		if rec.Status != tt.status {
			t.Errorf("%s: audit record %+v", tt.name, rec)
		}
	}
	for _, r := range st.seen.all() {
		if r.URL.Path == "/after" {
			t.Error("the bytes after a broken body reached the upstream as a request")
		}
	}
}

// TestInterceptUnaskedUpgrade: a 101 to a request that asked for no
// upgrade is the upstream's error, not a joined connection.
func TestInterceptUnaskedUpgrade(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	tc, br := st.rawIntercepted(t, "api.example.com")
	io.WriteString(tc, "GET /switch-unasked HTTP/1.1\r\nHost: api.example.com:"+st.ps+"\r\n\r\n")
	if resp, body := readAnswer(t, br, http.MethodGet); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("GET /switch-unasked = %d %q; want 502", resp.StatusCode, body)
	}
}
