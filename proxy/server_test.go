package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devaipod/devaipod/proxy/rule"
)

// Every server in these tests listens on 127.0.0.1; names are mapped with a
// mapResolver, never looked up.

var loopback = netip.MustParseAddr("127.0.0.1")

// auditBuffer collects audit lines; each Write must be whole lines.
type auditBuffer struct {
	flush func() // the auditor's: records writes what waits first

	mu     sync.Mutex
	lines  [][]byte
	broken []string
	n      int // Writes
}

func (b *auditBuffer) writes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

func (b *auditBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
	if len(p) == 0 || p[len(p)-1] != '\n' {
		b.broken = append(b.broken, string(p))
	}
	for l := range bytes.Lines(p) {
		b.lines = append(b.lines, slices.Clone(l))
	}
	return len(p), nil
}

func (b *auditBuffer) records(t *testing.T) []Record {
	t.Helper()
	if b.flush != nil {
		b.flush()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.broken) > 0 {
		t.Fatalf("audit writes that are not one line each: %q", b.broken)
	}
	var rs []Record
	for _, l := range b.lines {
		var r Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		rs = append(rs, r)
	}
	return rs
}

// waitRecord waits for an audit record that ok accepts.
func (b *auditBuffer) waitRecord(t *testing.T, what string, ok func(Record) bool) Record {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, r := range b.records(t) {
			if ok(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit record %s; have %+v", what, b.records(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type testProxy struct {
	s      *Server
	addr   string
	url    *url.URL
	audit  *auditBuffer
	cancel context.CancelFunc
	done   chan error
}

func startProxy(t *testing.T, opts Options) *testProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &testProxy{audit: &auditBuffer{}, done: make(chan error, 1)}
	if opts.Pod == "" {
		opts.Pod = "demo"
	}
	opts.Audit = p.audit
	p.s, err = New(opts)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	p.audit.flush = p.s.audit.flush
	p.addr = ln.Addr().String()
	p.url = &url.URL{Scheme: "http", Host: p.addr}
	var ctx context.Context
	ctx, p.cancel = context.WithCancel(context.Background())
	go func() { p.done <- p.s.Serve(ctx, ln) }()
	t.Cleanup(p.stop)
	return p
}

func (p *testProxy) stop() {
	p.cancel()
	if err := <-p.done; err != nil {
		panic(err)
	}
	p.done <- nil // stop may be called again
}

// client returns an HTTP client that goes through the proxy and trusts
// srv's certificate (under its name, example.com, whatever host is dialled).
func (p *testProxy) client(srv *httptest.Server) *http.Client {
	tr := &http.Transport{Proxy: http.ProxyURL(p.url), DisableKeepAlives: true}
	if srv != nil && srv.TLS != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: serverPool(srv), ServerName: "example.com"}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func serverPool(srv *httptest.Server) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return pool
}

// connect sends a raw CONNECT for target and returns the proxy's answer and
// the connection (the tunnel if the answer is 200).
func (p *testProxy) connect(t *testing.T, target string) (*http.Response, string, net.Conn, *bufio.Reader) {
	t.Helper()
	return p.raw(t, fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target), http.MethodConnect)
}

// raw sends a raw request and reads the answer.
func (p *testProxy) raw(t *testing.T, request, method string) (*http.Response, string, net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", request, err)
	}
	var body string
	if resp.StatusCode != http.StatusOK || method != http.MethodConnect {
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
	}
	conn.SetDeadline(time.Time{})
	return resp, body, conn, br
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

func newTLSServer(t *testing.T) (*httptest.Server, int) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "hello from %s %s, %d bytes in", r.Host, r.URL.Path, len(body))
	}))
	// Handshakes that the proxy refuses on purpose are not worth a line.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, portOf(t, srv.Listener.Addr().String())
}

func newHTTPServer(t *testing.T) (*httptest.Server, int) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen-Host", r.Host)
		fmt.Fprintf(w, "plain %s %s, %d bytes in", r.Method, r.URL.Path, len(body))
	}))
	t.Cleanup(srv.Close)
	return srv, portOf(t, srv.Listener.Addr().String())
}

// newEchoServer is a TCP server that echoes, for tunnel tests.
func newEchoServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
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
	return portOf(t, ln.Addr().String())
}

func TestConnectAllowed(t *testing.T) {
	t.Parallel()
	srv, port := newTLSServer(t)
	p := startProxy(t, Options{
		Allow:    []string{"api.allowed.test:" + strconv.Itoa(port), "127.0.0.1:" + strconv.Itoa(port)},
		Resolver: mapResolver{"api.allowed.test": {loopback}},
	})
	for _, host := range []string{"api.allowed.test", "API.Allowed.Test.", "127.0.0.1"} {
		u := fmt.Sprintf("https://%s/hello", net.JoinHostPort(host, strconv.Itoa(port)))
		resp, err := p.client(srv).Post(u, "text/plain", strings.NewReader("ping"))
		if err != nil {
			t.Fatalf("POST %s: %v", u, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "hello from") || !strings.Contains(string(body), "4 bytes in") {
			t.Errorf("POST %s = %d %q", u, resp.StatusCode, body)
		}
	}
	r := p.audit.waitRecord(t, "for the closed tunnel", func(r Record) bool {
		return r.Method == http.MethodConnect && r.Host == "api.allowed.test"
	})
	if r.Decision != DecisionAllow || r.Rule != "api.allowed.test:"+strconv.Itoa(port) || r.Status != 200 ||
		r.Port != port || r.BytesUp == 0 || r.BytesDown == 0 || r.Reason != "" || r.Pod != "demo" || r.Event != EventRequest {
		t.Errorf("audit record %+v", r)
	}
	if _, err := time.Parse(time.RFC3339Nano, r.Time); err != nil {
		t.Errorf("audit time %q: %v", r.Time, err)
	}
	r = p.audit.waitRecord(t, "for the IP literal", func(r Record) bool { return r.Host == "127.0.0.1" })
	if r.Decision != DecisionAllow || r.Rule != "127.0.0.1:"+strconv.Itoa(port) {
		t.Errorf("audit record %+v", r)
	}
}

func TestConnectRefused(t *testing.T) {
	t.Parallel()
	_, port := newTLSServer(t)
	ps := strconv.Itoa(port)
	p := startProxy(t, Options{
		Pod:   "demo",
		Allow: []string{"api.allowed.test", "rebind.test:" + ps, "gone.test:" + ps, "[::1]:1"},
		Resolver: mapResolver{
			"api.allowed.test": {loopback},
			"rebind.test":      {loopback},
			"metadata.test":    {netip.MustParseAddr("169.254.169.254")},
		},
	})
	tests := []struct {
		target     string
		wantStatus int
		wantReason string
		wantBody   []string
	}{
		{"other.test:443", 403, ReasonNotAllowed, []string{
			"devaipod proxy: other.test:443 is not on the allowlist of pod demo.\n",
			"Allow it with: devaipod allow demo other.test\n",
			"(or add it to [network] allow in your devaipod.toml)\n"}},
		{"other.test:8080", 403, ReasonNotAllowed, []string{"devaipod allow demo other.test:8080\n"}},
		{"api.allowed.test:8443", 403, ReasonNotAllowed, []string{"api.allowed.test:8443 is not on the allowlist"}},
		{"api.allowed.test:80", 403, ReasonNotAllowed, nil},
		{"api.allowed.test.evil.test:443", 403, ReasonNotAllowed, nil},
		{"api.allowed.test", 400, ReasonBadRequest, []string{"CONNECT wants host:port"}},
		{"api.allowed.test:", 400, ReasonBadRequest, []string{"bad port"}},
		{"api.allowed.test:0", 400, ReasonBadRequest, []string{"bad port"}},
		{"api.allowed.test:99999", 400, ReasonBadRequest, []string{"bad port"}},
		// net/http refuses this one itself.
		{"api.allowed.test:+443", 400, "", nil},
		{"api..allowed.test:443", 400, ReasonBadRequest, []string{"empty label"}},
		{":443", 400, ReasonBadRequest, nil},
		{"127.0.0.1:" + ps, 403, ReasonIPLiteral, []string{
			"127.0.0.1:" + ps + " is an IP address", "devaipod allow demo 127.0.0.1:" + ps + "\n"}},
		{"[::1]:443", 403, ReasonIPLiteral, []string{"devaipod allow demo [::1]\n"}},
		{"[::ffff:127.0.0.1]:443", 403, ReasonIPLiteral, nil},
		{"2130706433:443", 403, ReasonIPLiteral, nil},
		{"0x7f.1:443", 403, ReasonIPLiteral, nil},
		{"rebind.test:" + ps, 403, ReasonPrivateAddress, []string{
			"rebind.test resolves to 127.0.0.1, which is not a public address (loopback)",
			"devaipod allow demo 127.0.0.1:" + ps + "\n"}},
		{"gone.test:" + ps, 502, ReasonUpstreamError, []string{"cannot reach gone.test:" + ps + ": no such host.\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			t.Parallel()
			resp, body, _, _ := p.connect(t, tt.target)
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("CONNECT %s = %d %q; want %d", tt.target, resp.StatusCode, body, tt.wantStatus)
			}
			if got := resp.Header.Get("X-Devaipod-Proxy"); got != tt.wantReason {
				t.Errorf("CONNECT %s reason header %q; want %q", tt.target, got, tt.wantReason)
			}
			for _, w := range tt.wantBody {
				if !strings.Contains(body, w) {
					t.Errorf("CONNECT %s body %q; want it to contain %q", tt.target, body, w)
				}
			}
		})
	}
}

// TestConnectRefusedAudit checks the audit of refusals (in their own proxy,
// so the records are easy to find).
func TestConnectRefusedAudit(t *testing.T) {
	t.Parallel()
	_, port := newTLSServer(t)
	ps := strconv.Itoa(port)
	p := startProxy(t, Options{
		Allow:    []string{"rebind.test:" + ps},
		Resolver: mapResolver{"rebind.test": {loopback}},
	})
	p.connect(t, "Other.Test.:443")
	p.connect(t, "rebind.test:"+ps)
	r := p.audit.waitRecord(t, "for other.test", func(r Record) bool { return r.Host == "other.test" })
	want := Record{Time: r.Time, Pod: "demo", Event: EventRequest, Method: "CONNECT", Host: "other.test", Port: 443,
		Decision: DecisionDeny, Reason: ReasonNotAllowed, Detail: "no rule allows it", Status: 403, DurationMS: r.DurationMS}
	if !equalRecords(r, want) {
		t.Errorf("audit record\n%+v; want\n%+v", r, want)
	}
	r = p.audit.waitRecord(t, "for rebind.test", func(r Record) bool { return r.Host == "rebind.test" })
	if r.Decision != DecisionDeny || r.Reason != ReasonPrivateAddress || r.Status != 403 || r.Rule != "" ||
		!strings.Contains(r.Detail, "loopback") {
		t.Errorf("audit record %+v", r)
	}
}

func equalRecords(a, b Record) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func TestPlainHTTP(t *testing.T) {
	t.Parallel()
	srv, port := newHTTPServer(t)
	ps := strconv.Itoa(port)
	p := startProxy(t, Options{
		Allow:    []string{"web.test:" + ps, "127.0.0.1:" + ps, "web443.test", "web80.test:80"},
		Resolver: mapResolver{"web.test": {loopback}, "web443.test": {loopback}},
	})
	c := p.client(srv)

	resp, err := c.Post("http://WEB.test.:"+ps+"/x", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "plain POST /x, 5 bytes in" {
		t.Errorf("allowed POST = %d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Seen-Host"); got != "WEB.test.:"+ps {
		t.Errorf("server saw Host %q; want the client's", got)
	}
	r := p.audit.waitRecord(t, "for web.test", func(r Record) bool { return r.Host == "web.test" })
	if r.Method != "POST" || r.Decision != DecisionAllow || r.Rule != "web.test:"+ps || r.Status != 200 ||
		r.BytesUp != 5 || r.BytesDown != int64(len(body)) {
		t.Errorf("audit record %+v", r)
	}

	tests := []struct {
		url        string
		wantStatus int
		wantReason string
		wantBody   string
	}{
		{"http://other.test:" + ps + "/", 403, ReasonNotAllowed, "devaipod proxy: other.test:" + ps + " is not on the allowlist of pod demo.\nAllow it with: devaipod allow demo other.test:" + ps + "\n"},
		// A rule without a port means 443: it does not allow plain HTTP on 80.
		{"http://web443.test/", 403, ReasonNotAllowed, "devaipod allow demo web443.test:80\n"},
		{"http://web.test:1/", 403, ReasonNotAllowed, ""},
		{"http://127.0.0.2:" + ps + "/", 403, ReasonIPLiteral, ""},
		{"http://[::1]:" + ps + "/", 403, ReasonIPLiteral, ""},
	}
	for _, tt := range tests {
		resp, err := c.Get(tt.url)
		if err != nil {
			t.Fatalf("GET %s: %v", tt.url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.wantStatus || resp.Header.Get("X-Devaipod-Proxy") != tt.wantReason ||
			!strings.Contains(string(body), tt.wantBody) {
			t.Errorf("GET %s = %d %s %q; want %d %s %q", tt.url, resp.StatusCode,
				resp.Header.Get("X-Devaipod-Proxy"), body, tt.wantStatus, tt.wantReason, tt.wantBody)
		}
	}

	r = p.audit.waitRecord(t, "for other.test", func(r Record) bool { return r.Host == "other.test" })
	if r.Decision != DecisionDeny || r.Status != 403 || r.BytesDown != 0 || r.BytesUp != 0 {
		t.Errorf("audit record of a denial %+v; want no bytes counted", r)
	}

	// "host:80" does allow port 80. Nothing may listen on port 80 here, so
	// check the decision rather than a request.
	hk, _ := rule.ParseHost("web80.test")
	if ruleText, allow, _ := p.s.policy.current().decide(hk, 80); !allow || ruleText != "web80.test:80" {
		t.Errorf("web80.test:80 decided %q, %v; want allowed by web80.test:80", ruleText, allow)
	}
}

func TestOddRequests(t *testing.T) {
	t.Parallel()
	_, port := newHTTPServer(t)
	ps := strconv.Itoa(port)
	p := startProxy(t, Options{
		Allow:    []string{"web.test:" + ps},
		Resolver: mapResolver{"web.test": {loopback}},
	})
	tests := []struct {
		name       string
		request    string
		method     string
		wantStatus int
	}{
		{"not a proxy request", "GET /path HTTP/1.1\r\nHost: web.test\r\n\r\n", "GET", 400},
		{"unknown method", "FROB http://web.test:" + ps + "/ HTTP/1.1\r\nHost: web.test\r\n\r\n", "FROB", 405},
		{"TRACE", "TRACE http://web.test:" + ps + "/ HTTP/1.1\r\nHost: web.test\r\n\r\n", "TRACE", 405},
		{"lower-case connect", "connect web.test:" + ps + " HTTP/1.1\r\nHost: web.test\r\n\r\n", "connect", 405},
		{"ftp scheme", "GET ftp://web.test:" + ps + "/ HTTP/1.1\r\nHost: web.test\r\n\r\n", "GET", 400},
		{"userinfo", "GET http://u:p@web.test:" + ps + "/ HTTP/1.1\r\nHost: web.test\r\n\r\n", "GET", 400},
		{"bad port", "GET http://web.test:x/ HTTP/1.1\r\nHost: web.test\r\n\r\n", "GET", 400},
		{"zone", "GET http://[fe80::1%25eth0]:" + ps + "/ HTTP/1.1\r\nHost: x\r\n\r\n", "GET", 400},
		{"CONNECT with a URL", "CONNECT http://web.test:" + ps + "/ HTTP/1.1\r\nHost: web.test\r\n\r\n", "CONNECT", 400},
		{"non-ASCII host", "CONNECT b\xc3\xbccher.test:443 HTTP/1.1\r\nHost: x\r\n\r\n", "CONNECT", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body, _, _ := p.raw(t, tt.request, tt.method)
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("%q = %d %q; want %d", tt.request, resp.StatusCode, body, tt.wantStatus)
			}
			if resp.StatusCode == 400 && resp.Header.Get("X-Devaipod-Proxy") == ReasonBadRequest &&
				!strings.HasPrefix(body, "devaipod proxy: bad request: ") {
				t.Errorf("body %q", body)
			}
		})
	}
}

func TestReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	p := startProxy(t, Options{ReadHeaderTimeout: 100 * time.Millisecond})
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "CONNECT x.test:443 HTTP/1.1\r\n") // and never the end of the headers
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	io.ReadAll(conn)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the proxy kept a connection without headers for %v", d)
	}
}

// TestProxyEnvIgnored: the proxy's own environment must not chain it
// through another proxy, for tunnels or plain requests.
func TestProxyEnvIgnored(t *testing.T) {
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"} {
		t.Setenv(k, "http://127.0.0.1:1")
	}
	t.Setenv("NO_PROXY", "")
	tlsSrv, tlsPort := newTLSServer(t)
	_, httpPort := newHTTPServer(t)
	p := startProxy(t, Options{
		Allow: []string{"127.0.0.1:" + strconv.Itoa(tlsPort), "127.0.0.1:" + strconv.Itoa(httpPort)},
	})
	for _, u := range []string{
		"https://127.0.0.1:" + strconv.Itoa(tlsPort) + "/",
		"http://127.0.0.1:" + strconv.Itoa(httpPort) + "/",
	} {
		resp, err := p.client(tlsSrv).Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s with proxy variables in the proxy's environment = %d", u, resp.StatusCode)
		}
	}
}

// TestPlainHTTPSVerified: an https:// URL sent to the proxy as a plain
// request makes the proxy speak TLS, and it verifies the server.
func TestPlainHTTPSVerified(t *testing.T) {
	t.Parallel()
	srv, port := newTLSServer(t)
	target := "https://127.0.0.1:" + strconv.Itoa(port) + "/"
	request := "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
	allow := []string{"127.0.0.1:" + strconv.Itoa(port)}

	p := startProxy(t, Options{Allow: allow, RootCAs: x509.NewCertPool()})
	resp, body, _, _ := p.raw(t, request, "GET")
	if resp.StatusCode != 502 || !strings.Contains(body, "TLS certificate is not trusted") {
		t.Errorf("untrusted server: %d %q; want 502", resp.StatusCode, body)
	}

	p = startProxy(t, Options{Allow: allow, RootCAs: serverPool(srv)})
	resp, body, _, _ = p.raw(t, request, "GET")
	if resp.StatusCode != 200 {
		t.Errorf("trusted server: %d %q; want 200", resp.StatusCode, body)
	}
}

func TestLivePolicy(t *testing.T) {
	t.Parallel()
	_, port := newHTTPServer(t)
	ps := strconv.Itoa(port)
	file := filepath.Join(t.TempDir(), "policy.json")
	p := startProxy(t, Options{
		Allow:               []string{"base.test:" + ps, "127.0.0.1:" + ps},
		PolicyFile:          file,
		PolicyCheckInterval: time.Nanosecond,
		Resolver:            mapResolver{"base.test": {loopback}, "late.test": {loopback}},
	})
	get := func(host string) (int, string) {
		t.Helper()
		resp, err := p.client(nil).Get("http://" + host + ":" + ps + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	edit := func(op, ruleText string) {
		t.Helper()
		if _, err := EditPolicyFile(file, op, ruleText); err != nil {
			t.Fatal(err)
		}
	}
	if code, _ := get("base.test"); code != 200 {
		t.Fatalf("base rule: %d", code)
	}
	if code, _ := get("late.test"); code != 403 {
		t.Fatalf("late.test before allow: %d", code)
	}
	edit(OpAllow, "late.test:"+ps)
	if code, _ := get("late.test"); code != 200 {
		t.Errorf("late.test after allow: %d", code)
	}
	edit(OpDeny, "base.test:*")
	code, body := get("base.test")
	if code != 403 || !strings.Contains(body, "denied by the rule base.test:* of pod demo") ||
		!strings.Contains(body, "devaipod allow demo base.test:*") {
		t.Errorf("base.test after deny: %d %q", code, body)
	}
	r := p.audit.waitRecord(t, "for the deny", func(r Record) bool { return r.Reason == ReasonDenied })
	if r.Rule != "base.test:*" || r.Decision != DecisionDeny {
		t.Errorf("audit record %+v", r)
	}
	edit(OpRemove, "base.test:*")
	if code, _ := get("base.test"); code != 200 {
		t.Errorf("base.test after remove: %d", code)
	}

	// A connection that was allowed is not re-checked, but new ones are:
	// CONNECT after a deny is refused too.
	edit(OpDeny, "late.test:"+ps)
	if resp, _, _, _ := p.connect(t, "late.test:"+ps); resp.StatusCode != 403 {
		t.Errorf("CONNECT late.test after deny: %d", resp.StatusCode)
	}

	var policies []Record
	for _, r := range p.audit.records(t) {
		if r.Event == EventPolicy {
			policies = append(policies, r)
		}
	}
	if len(policies) < 5 {
		t.Fatalf("%d policy records; want one at start and one per edit", len(policies))
	}
	last := policies[len(policies)-1]
	if last.File != file || !slices.Contains(last.Allow, "base.test:"+ps) || !slices.Equal(last.Deny, []string{"late.test:" + ps}) {
		t.Errorf("last policy record %+v", last)
	}
}

func TestTunnelLimit(t *testing.T) {
	t.Parallel()
	echo := newEchoServer(t)
	target := "127.0.0.1:" + strconv.Itoa(echo)
	p := startProxy(t, Options{Allow: []string{target}, MaxTunnels: 2})
	var tunnels []net.Conn
	for range 2 {
		resp, _, conn, _ := p.connect(t, target)
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d", resp.StatusCode)
		}
		tunnels = append(tunnels, conn)
	}
	resp, body, _, _ := p.connect(t, target)
	if resp.StatusCode != 503 || !strings.Contains(body, "has 2 tunnels open, the limit") {
		t.Errorf("third CONNECT = %d %q; want 503", resp.StatusCode, body)
	}
	r := p.audit.waitRecord(t, "for the limit", func(r Record) bool { return r.Reason == ReasonTunnelLimit })
	if r.Status != 503 || r.Decision != DecisionDeny {
		t.Errorf("audit record %+v", r)
	}
	tunnels[0].Close()
	p.audit.waitRecord(t, "for the closed tunnel", func(r Record) bool { return r.Status == 200 })
	if resp, _, _, _ := p.connect(t, target); resp.StatusCode != 200 {
		t.Errorf("CONNECT after one closed = %d; want 200", resp.StatusCode)
	}
}

func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	echo := newEchoServer(t)
	target := "127.0.0.1:" + strconv.Itoa(echo)
	p := startProxy(t, Options{Allow: []string{target}, IdleTimeout: 300 * time.Millisecond})

	// A busy tunnel stays open past the timeout.
	resp, _, busy, busyR := p.connect(t, target)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %d", resp.StatusCode)
	}
	buf := make([]byte, 4)
	for range 8 {
		time.Sleep(100 * time.Millisecond)
		io.WriteString(busy, "ping")
		busy.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.ReadFull(busyR, buf); err != nil {
			t.Fatalf("busy tunnel closed: %v", err)
		}
	}

	// A quiet one is closed.
	resp, _, quiet, quietR := p.connect(t, target)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %d", resp.StatusCode)
	}
	io.WriteString(quiet, "ping")
	io.ReadFull(quietR, buf)
	start := time.Now()
	quiet.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := quietR.ReadByte(); err != io.EOF {
		t.Errorf("read from an idle tunnel: %v; want EOF", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("idle tunnel closed after %v", d)
	}
	r := p.audit.waitRecord(t, "for the idle tunnel", func(r Record) bool {
		return r.Reason == ReasonIdleTimeout && r.BytesUp == 4
	})
	if r.Decision != DecisionAllow || r.BytesUp != 4 || r.BytesDown != 4 || r.DurationMS < 300 {
		t.Errorf("audit record %+v", r)
	}
}

func TestAuditConcurrent(t *testing.T) {
	t.Parallel()
	_, port := newHTTPServer(t)
	ps := strconv.Itoa(port)
	p := startProxy(t, Options{Allow: []string{"127.0.0.1:" + ps}})
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			host := "127.0.0.1"
			if i%2 == 1 {
				host = "denied.test"
			}
			resp, err := p.client(nil).Get("http://" + host + ":" + ps + "/")
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	var n int
	for _, r := range p.audit.records(t) {
		if r.Event == EventRequest {
			n++
		}
	}
	if n != 40 {
		t.Errorf("%d request records for 40 requests", n)
	}
}

// TestAuditShape pins the JSON field names that devaipod audit reads.
func TestAuditShape(t *testing.T) {
	t.Parallel()
	keys := func(r Record) []string {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	got := keys(Record{Event: EventRequest, Method: "CONNECT", Host: "h", Port: 443, Decision: DecisionDeny, Reason: ReasonNotAllowed, Status: 403})
	want := []string{"bytes_down", "bytes_up", "decision", "duration_ms", "event", "host", "method", "pod", "port", "reason", "status", "time"}
	if !slices.Equal(got, want) {
		t.Errorf("deny record keys %q; want %q", got, want)
	}
	got = keys(Record{Event: EventRequest, Rule: "h", Detail: "d", Credentials: []string{"K"}, DecidedBy: "me@host"})
	if !slices.Contains(got, "rule") || !slices.Contains(got, "detail") || !slices.Contains(got, "credentials") || !slices.Contains(got, "decided_by") {
		t.Errorf("allow record keys %q lack rule, detail, credentials or decided_by", got)
	}
	got = keys(Record{Event: EventPolicy, File: "f", Error: "e"})
	want = []string{"allow", "deny", "error", "event", "file", "pod", "time"}
	if !slices.Equal(got, want) {
		t.Errorf("policy record keys %q; want %q", got, want)
	}
}

// TestServeShutdown runs proxies with open tunnels and requests and stops
// them: Serve must return promptly, close the tunnels and leave no
// goroutines behind.
func TestServeShutdown(t *testing.T) {
	echo := newEchoServer(t)
	target := "127.0.0.1:" + strconv.Itoa(echo)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer slow.Close()
	slowTarget := strings.TrimPrefix(slow.URL, "http://")

	settle := func() int {
		n := runtime.NumGoroutine()
		for range 50 {
			time.Sleep(20 * time.Millisecond)
			m := runtime.NumGoroutine()
			if m == n {
				break
			}
			n = m
		}
		return n
	}
	base := settle()
	baseFDs := countFDs()
	for i := range 10 {
		p := startProxy(t, Options{Allow: []string{target, slowTarget}})
		resp, _, tunnel, tr := p.connect(t, target)
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d", resp.StatusCode)
		}
		io.WriteString(tunnel, "x")
		tr.ReadByte()
		reqDone := make(chan struct{})
		go func() {
			defer close(reqDone)
			resp, err := p.client(nil).Get(slow.URL)
			if err == nil {
				resp.Body.Close()
			}
		}()
		time.Sleep(50 * time.Millisecond) // let the request reach the slow server

		start := time.Now()
		p.stop()
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("round %d: Serve took %v to return", i, d)
		}
		tunnel.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := tr.ReadByte(); err != io.EOF {
			t.Errorf("round %d: tunnel after shutdown: %v; want EOF", i, err)
		}
		<-reqDone
		tunnel.Close()
		if i == 0 {
			p.audit.waitRecord(t, "for the tunnel closed by shutdown", func(r Record) bool { return r.Reason == ReasonShutdown })
		}
	}
	slow.CloseClientConnections()
	n := settle()
	if fds := countFDs(); baseFDs >= 0 && fds > baseFDs+2 {
		t.Errorf("%d open file descriptors after 10 proxies, %d before:\n%s", fds, baseFDs, listFDs())
	}
	if n > base+3 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%d goroutines after 10 proxies, %d before:\n%s", n, base, buf)
	}
}

// countFDs returns the number of open file descriptors, or -1 where
// /proc/self/fd does not exist. It collects garbage first: the runtime
// caches splice pipes in a sync.Pool and closes them in finalizers.
func countFDs() int {
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}

func listFDs() string {
	entries, _ := os.ReadDir("/proc/self/fd")
	var b strings.Builder
	for _, e := range entries {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		fmt.Fprintf(&b, "%s -> %s\n", e.Name(), target)
	}
	return b.String()
}
