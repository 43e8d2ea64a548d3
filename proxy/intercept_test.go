package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/netip"
	"os"
	"os/exec"
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

// The credentials of these tests: apiKey is bound to api.example.com (a
// name the test servers' certificate covers), otherToken to
// other.example.com. Both resolve to 127.0.0.1, which address rules let
// through the guard.
const (
	apiKeyName        = "ANTHROPIC_API_KEY"
	apiKeyPlaceholder = "devaipod-placeholder-ANTHROPIC_API_KEY"
	apiKeyValue       = "sk-ant-REAL-VALUE-1f0c9a"
	otherName         = "OTHER_TOKEN"
	otherPlaceholder  = "devaipod-placeholder-OTHER_TOKEN"
	otherValue        = "ghp_REAL-OTHER-VALUE-77e2"
)

// syncBuffer is a bytes.Buffer for a logger that several goroutines use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// seen is what an upstream test server saw of the requests it got.
type seen struct {
	mu       sync.Mutex
	requests []*http.Request // with the bodies' SHA-256 and length in Trailer
}

func (s *seen) add(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
}

func (s *seen) all() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// interceptSetup is a proxy with both credentials and the upstream servers
// of the tests.
type interceptSetup struct {
	p       *testProxy
	log     *syncBuffer
	seen    *seen
	port    int // the TLS upstream's
	ps      string
	plain   int // a plain-HTTP upstream's
	caPool  *x509.CertPool
	release chan struct{} // the SSE handler waits for it between its events
	// canceled gets the path of a /wait request whose context ended.
	canceled chan string
	srv      *httptest.Server // the TLS upstream
}

func startIntercepting(t *testing.T, opts Options) *interceptSetup {
	t.Helper()
	return startInterceptingOn(t, nil, opts)
}

// startInterceptingOn is startIntercepting on a listener of the test's
// choice (nil for a TCP one).
func startInterceptingOn(t *testing.T, ln net.Listener, opts Options) *interceptSetup {
	t.Helper()
	st := &interceptSetup{log: &syncBuffer{}, seen: &seen{}, release: make(chan struct{}), canceled: make(chan string, 4)}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		rc := r.Clone(r.Context())
		rc.Trailer = http.Header{"Sha256": {hex.EncodeToString(h.Sum(nil))}, "Length": {strconv.FormatInt(n, 10)}}
		st.seen.add(rc)
		fmt.Fprintf(w, "ok %s %s", r.Method, r.URL.Path)
	})
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		st.seen.add(r.Clone(r.Context()))
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		// The second event comes only once the client has read the
		// first (or after a while, for the test to fail rather than hang).
		select {
		case <-st.release:
		case <-time.After(3 * time.Second):
		}
		time.Sleep(300 * time.Millisecond)
		io.WriteString(w, "data: two\n\n")
	})
	mux.HandleFunc("/wait", func(w http.ResponseWriter, r *http.Request) {
		// Answers after 5 s, or says that its request was canceled.
		select {
		case <-r.Context().Done():
			st.canceled <- r.URL.Path
		case <-time.After(5 * time.Second):
			io.WriteString(w, "waited")
		}
	})
	mux.HandleFunc("/upgrade", func(w http.ResponseWriter, r *http.Request) {
		// Switches to a protocol that echoes lines.
		st.seen.add(r.Clone(r.Context()))
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString("echo " + line)
			brw.Flush()
		}
	})
	mux.HandleFunc("/switch-unasked", func(w http.ResponseWriter, r *http.Request) {
		// Switches protocols, to none named, whatever the request asked
		// for.
		st.seen.add(r.Clone(r.Context()))
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n\r\n")
		brw.Flush()
		io.Copy(io.Discard, brw)
	})
	mux.HandleFunc("/trailer", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "part one, ")
		w.(http.Flusher).Flush()
		io.WriteString(w, "part two")
		w.Header().Set("X-Sum", "42")
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		// 8 MiB, of a known length or (?chunked) not.
		b := pattern(8 << 20)
		if r.URL.RawQuery != "chunked" {
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		}
		for len(b) > 0 {
			n := min(len(b), 100_000)
			w.Write(b[:n])
			b = b[n:]
		}
	})
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/hints", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, "after the hints")
	})
	mux.HandleFunc("/raw", func(w http.ResponseWriter, r *http.Request) {
		// Answers with the bytes of its X-Answer header (base64) as they
		// are, then closes the connection.
		answer, _ := base64.StdEncoding.DecodeString(r.Header.Get("X-Answer"))
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		rc := r.Clone(r.Context())
		rc.Trailer = http.Header{"Sha256": {hex.EncodeToString(h.Sum(nil))}, "Length": {strconv.FormatInt(n, 10)}}
		st.seen.add(rc)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.Write(answer)
		brw.Flush()
	})
	mux.HandleFunc("/last", func(w http.ResponseWriter, r *http.Request) {
		// The server closes the connection after this answer.
		w.Header().Set("Connection", "close")
		io.WriteString(w, "last")
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	st.srv = srv
	t.Cleanup(srv.Close)
	st.port = portOf(t, srv.Listener.Addr().String())
	st.ps = strconv.Itoa(st.port)
	plain := httptest.NewServer(mux)
	t.Cleanup(plain.Close)
	st.plain = portOf(t, plain.Listener.Addr().String())
	pps := strconv.Itoa(st.plain)

	opts.Allow = append(opts.Allow, "api.example.com:"+st.ps, "other.example.com:"+st.ps, "127.0.0.1:"+st.ps,
		"gone.example.com:"+st.ps, "plain.example.com:"+pps, "127.0.0.1:"+pps)
	opts.Resolver = mapResolver{"api.example.com": {loopback}, "other.example.com": {loopback}, "plain.example.com": {loopback}}
	opts.RootCAs = serverPool(srv)
	opts.Credentials = append(opts.Credentials,
		Credential{Name: apiKeyName, Placeholder: apiKeyPlaceholder, Value: apiKeyValue,
			Hosts: []string{"api.example.com:" + st.ps, "gone.example.com:" + st.ps}},
		Credential{Name: otherName, Placeholder: otherPlaceholder, Value: otherValue, Hosts: []string{"other.example.com:" + st.ps}})
	opts.Logger = slog.New(slog.NewTextHandler(st.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if ln == nil {
		st.p = startProxy(t, opts)
	} else {
		st.p = startProxyOn(t, ln, opts)
	}
	st.caPool = x509.NewCertPool()
	if !st.caPool.AppendCertsFromPEM(st.p.s.CACertPEM()) {
		t.Fatal("CACertPEM is not a PEM certificate")
	}
	t.Cleanup(func() { st.checkNoValue(t) })
	return st
}

// checkNoValue fails if a credential's value is in the audit or the log.
func (st *interceptSetup) checkNoValue(t *testing.T) {
	t.Helper()
	st.p.audit.mu.Lock()
	audit := string(bytes.Join(st.p.audit.lines, nil))
	st.p.audit.mu.Unlock()
	logText := st.log.String()
	for _, v := range []string{apiKeyValue, otherValue} {
		if strings.Contains(audit, v) {
			t.Errorf("a credential's value is in the audit:\n%s", audit)
		}
		if strings.Contains(logText, v) {
			t.Errorf("a credential's value is in the log:\n%s", logText)
		}
	}
}

// client goes through the proxy and trusts only the proxy's CA.
func (st *interceptSetup) client(keepAlive bool) *http.Client {
	tr := &http.Transport{
		Proxy:                 http.ProxyURL(st.p.url),
		TLSClientConfig:       &tls.Config{RootCAs: st.caPool},
		DisableKeepAlives:     !keepAlive,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (st *interceptSetup) url(host, path string) string {
	return "https://" + net.JoinHostPort(host, st.ps) + path
}

// do sends req and returns the answer with its body.
func do(t *testing.T, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return resp, string(body)
}

func newRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// answerHas fails unless nothing of resp shows a value.
func answerHasNoValue(t *testing.T, resp *http.Response, body string) {
	t.Helper()
	var b strings.Builder
	resp.Header.Write(&b)
	b.WriteString(body)
	for _, v := range []string{apiKeyValue, otherValue} {
		if strings.Contains(b.String(), v) {
			t.Errorf("the client saw a credential's value: %q", b.String())
		}
	}
}

func TestInterceptPutsCredentialsIn(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	c := st.client(false)

	req := newRequest(t, http.MethodPost, st.url("api.example.com", "/v1/messages"), strings.NewReader(`{"q":1}`))
	req.Header.Set("Authorization", "Bearer "+apiKeyPlaceholder)
	req.Header.Set("X-Api-Key", apiKeyPlaceholder)
	req.Header.Set("X-Body-Like", "not "+apiKeyPlaceholder+" twice "+apiKeyPlaceholder)
	resp, body := do(t, c, req)
	if resp.StatusCode != 200 || body != "ok POST /v1/messages" {
		t.Fatalf("POST = %d %q", resp.StatusCode, body)
	}
	answerHasNoValue(t, resp, body)

	// The certificate the client got is the proxy's, for the name, and
	// verifies against the CA alone (name constraints included).
	leaf := resp.TLS.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: st.caPool}); err != nil {
		t.Errorf("the leaf does not verify against the proxy's CA: %v", err)
	}
	if !slices.Equal(leaf.DNSNames, []string{"api.example.com"}) || len(leaf.IPAddresses) != 0 {
		t.Errorf("leaf names %q %v", leaf.DNSNames, leaf.IPAddresses)
	}

	got := st.seen.all()
	if len(got) != 1 {
		t.Fatalf("upstream got %d requests; want 1", len(got))
	}
	r := got[0]
	if r.Header.Get("Authorization") != "Bearer "+apiKeyValue || r.Header.Get("X-Api-Key") != apiKeyValue ||
		r.Header.Get("X-Body-Like") != "not "+apiKeyValue+" twice "+apiKeyValue {
		t.Errorf("upstream saw headers %v", r.Header)
	}
	if r.Host != "api.example.com:"+st.ps || r.Trailer.Get("Length") != "7" {
		t.Errorf("upstream saw Host %q and %s body bytes", r.Host, r.Trailer.Get("Length"))
	}
	for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "Forwarded"} {
		if v := r.Header.Get(k); v != "" {
			t.Errorf("upstream saw %s: %q", k, v)
		}
	}

	// Basic authentication, as git sends it: the value goes into the
	// password.
	req = newRequest(t, http.MethodGet, st.url("api.example.com", "/repo.git/info/refs"), nil)
	req.SetBasicAuth("x-access-token", apiKeyPlaceholder)
	resp, body = do(t, c, req)
	if resp.StatusCode != 200 {
		t.Fatalf("GET with Basic = %d %q", resp.StatusCode, body)
	}
	got = st.seen.all()
	if user, pass, ok := got[len(got)-1].BasicAuth(); !ok || user != "x-access-token" || pass != apiKeyValue {
		t.Errorf("upstream saw Basic %q %q %v", user, pass, ok)
	}

	// A request without placeholder goes through with its headers as they
	// are, but Accept-Encoding: an answer of the bound host comes
	// uncompressed, for the values to be looked for in it (answerMask).
	// Its audit names no credentials.
	req = newRequest(t, http.MethodGet, st.url("api.example.com", "/none"), nil)
	req.Header.Set("Accept-Encoding", "gzip")
	req.Header.Set("X-Custom", "kept as it is")
	if resp, body := do(t, c, req); resp.StatusCode != 200 {
		t.Fatalf("GET = %d %q", resp.StatusCode, body)
	}
	got = st.seen.all()
	if h := got[len(got)-1].Header; h.Get("Accept-Encoding") != "identity" || h.Get("X-Custom") != "kept as it is" {
		t.Errorf("upstream saw Accept-Encoding %q, X-Custom %q; want identity and the client's", h.Get("Accept-Encoding"), h.Get("X-Custom"))
	}

	rec := st.p.audit.waitRecord(t, "for the POST", func(r Record) bool { return r.Method == http.MethodPost })
	want := Record{Time: rec.Time, Pod: "demo", Event: EventRequest, Method: "POST", Host: "api.example.com", Port: st.port,
		Decision: DecisionAllow, Rule: "api.example.com:" + st.ps, Status: 200, BytesUp: 7, BytesDown: int64(len("ok POST /v1/messages")),
		DurationMS: rec.DurationMS, Credentials: []string{apiKeyName}}
	if !equalRecords(rec, want) {
		t.Errorf("audit record\n%+v; want\n%+v", rec, want)
	}
	rec = st.p.audit.waitRecord(t, "for the GET without placeholder", func(r Record) bool { return r.Method == http.MethodGet && r.BytesDown == int64(len("ok GET /none")) })
	if rec.Credentials != nil || rec.Decision != DecisionAllow {
		t.Errorf("audit record %+v; want no credentials", rec)
	}
	// Each CONNECT (no keep-alive here) is audited when its connection
	// ends, with the bytes through it.
	rec = st.p.audit.waitRecord(t, "for a CONNECT", func(r Record) bool { return r.Method == http.MethodConnect })
	if rec.Decision != DecisionAllow || rec.Status != 200 || rec.Reason != "" || rec.Host != "api.example.com" ||
		rec.BytesUp == 0 || rec.BytesDown == 0 || rec.Credentials != nil {
		t.Errorf("CONNECT audit record %+v", rec)
	}
}

func TestInterceptRefusesMisplacedPlaceholders(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	c := st.client(true)

	check := func(name string, req *http.Request, wantStatus int, wantReason string, wantBody ...string) {
		t.Helper()
		before := len(st.seen.all())
		resp, body := do(t, c, req)
		if resp.StatusCode != wantStatus || resp.Header.Get("X-Devaipod-Proxy") != wantReason {
			t.Errorf("%s: %d %s %q; want %d %s", name, resp.StatusCode, resp.Header.Get("X-Devaipod-Proxy"), body, wantStatus, wantReason)
		}
		for _, w := range wantBody {
			if !strings.Contains(body, w) {
				t.Errorf("%s: body %q; want it to contain %q", name, body, w)
			}
		}
		answerHasNoValue(t, resp, body)
		if n := len(st.seen.all()); n != before {
			t.Errorf("%s: upstream got the request", name)
		}
	}

	// The placeholder of a credential bound to other.example.com, on its
	// way to api.example.com (where another credential is bound).
	req := newRequest(t, http.MethodGet, st.url("api.example.com", "/"), nil)
	req.Header.Set("Authorization", "Bearer "+otherPlaceholder)
	check("other's placeholder", req, 403, ReasonCredentialHost,
		"devaipod proxy: request to api.example.com:"+st.ps+" refused, nothing was sent: ",
		"placeholder of "+otherName+", which the proxy fills in only on HTTPS to other.example.com:"+st.ps)

	// Together with a right one, in Basic.
	req = newRequest(t, http.MethodGet, st.url("api.example.com", "/"), nil)
	req.Header.Set("X-Api-Key", apiKeyPlaceholder)
	req.SetBasicAuth("u", otherPlaceholder)
	check("other's placeholder in Basic", req, 403, ReasonCredentialHost, otherName)

	// The other way round, and to a tunnelled host nothing is looked at
	// (only a placeholder leaves): see TestInterceptOnlyBoundHosts.
	req = newRequest(t, http.MethodGet, st.url("other.example.com", "/"), nil)
	req.Header.Set("X-Api-Key", apiKeyPlaceholder)
	check("api key to other", req, 403, ReasonCredentialHost, apiKeyName, "api.example.com:"+st.ps+", gone.example.com:"+st.ps)

	// Plain HTTP carries no credential, not even to a bound host, and the
	// refusal says so whatever the host (allowed or not: verify relies on it).
	for _, host := range []string{"plain.example.com", "127.0.0.1", "nowhere.example.net"} {
		req = newRequest(t, http.MethodPost, "http://"+net.JoinHostPort(host, strconv.Itoa(st.plain))+"/", strings.NewReader("x"))
		req.Header.Set("Authorization", "Bearer "+apiKeyPlaceholder)
		check("plain HTTP to "+host, req, 403, ReasonCredentialHost, apiKeyName)
	}
	req = newRequest(t, http.MethodGet, "http://plain.example.com:"+strconv.Itoa(st.plain)+"/", nil)
	req.SetBasicAuth("u", otherPlaceholder)
	check("plain HTTP, Basic", req, 403, ReasonCredentialHost, otherName)
	// Without a placeholder it goes through.
	req = newRequest(t, http.MethodGet, "http://plain.example.com:"+strconv.Itoa(st.plain)+"/", nil)
	if resp, body := do(t, c, req); resp.StatusCode != 200 {
		t.Errorf("plain GET = %d %q", resp.StatusCode, body)
	}

	rec := st.p.audit.waitRecord(t, "for a refusal", func(r Record) bool { return r.Reason == ReasonCredentialHost })
	if rec.Decision != DecisionDeny || rec.Status != 403 || rec.Credentials != nil || !strings.Contains(rec.Detail, "placeholder of ") {
		t.Errorf("audit record %+v", rec)
	}
}

func TestInterceptHostMismatch(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	c := st.client(true)
	for _, host := range []string{"other.example.com:" + st.ps, "evil.test", "api.example.com:1", "127.0.0.1:" + st.ps} {
		req := newRequest(t, http.MethodGet, st.url("api.example.com", "/"), nil)
		req.Host = host
		req.Header.Set("X-Api-Key", apiKeyPlaceholder)
		resp, body := do(t, c, req)
		if resp.StatusCode != http.StatusMisdirectedRequest || resp.Header.Get("X-Devaipod-Proxy") != ReasonBadRequest ||
			!strings.Contains(body, "but its CONNECT was for api.example.com:"+st.ps) {
			t.Errorf("Host %s: %d %q; want 421", host, resp.StatusCode, body)
		}
	}
	if n := len(st.seen.all()); n != 0 {
		t.Errorf("upstream got %d requests", n)
	}
	rec := st.p.audit.waitRecord(t, "for the mismatch", func(r Record) bool { return r.Status == http.StatusMisdirectedRequest })
	if rec.Decision != DecisionDeny || rec.Reason != ReasonBadRequest || rec.Host != "api.example.com" || rec.Credentials != nil {
		t.Errorf("audit record %+v", rec)
	}

	// The same host in other spellings is the same host; TRACE, which
	// would echo the value back, is refused.
	for _, host := range []string{"API.Example.Com.", "api.example.com"} {
		req := newRequest(t, http.MethodGet, st.url("api.example.com", "/"), nil)
		req.Host = host
		if resp, body := do(t, c, req); resp.StatusCode != 200 {
			t.Errorf("Host %s: %d %q", host, resp.StatusCode, body)
		}
	}
	req := newRequest(t, http.MethodTrace, st.url("api.example.com", "/"), nil)
	req.Header.Set("X-Api-Key", apiKeyPlaceholder)
	if resp, body := do(t, c, req); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("TRACE: %d %q", resp.StatusCode, body)
	}
}

func TestInterceptStreaming(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	c := st.client(true)

	// Server-sent events: the first event reaches the client while the
	// server still waits to send the second.
	req := newRequest(t, http.MethodGet, st.url("api.example.com", "/sse"), nil)
	req.Header.Set("Authorization", "Bearer "+apiKeyPlaceholder)
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event %q, %v", line, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the first event took %v", d)
	}
	firstAt := time.Now()
	close(st.release)
	rest, err := io.ReadAll(br)
	resp.Body.Close()
	if err != nil || string(rest) != "\ndata: two\n\n" {
		t.Fatalf("the rest %q, %v", rest, err)
	}
	if d := time.Since(firstAt); d < 250*time.Millisecond {
		t.Errorf("the second event came %v after the first; the server waits 300 ms", d)
	}

	// A large chunked upload, and 100-continue, on the same connection.
	payload := pattern(8 << 20)
	var reused []bool
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = append(reused, info.Reused) }}
	req = newRequest(t, http.MethodPut, st.url("api.example.com", "/upload"), io.MultiReader(bytes.NewReader(payload)))
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	req.Header.Set("Expect", "100-continue")
	req.Header.Set("X-Api-Key", apiKeyPlaceholder)
	if req.ContentLength != 0 {
		t.Fatal("the upload is not chunked")
	}
	resp, body := do(t, c, req)
	if resp.StatusCode != 200 {
		t.Fatalf("upload = %d %q", resp.StatusCode, body)
	}
	got := st.seen.all()
	r := got[len(got)-1]
	sum := sha256.Sum256(payload)
	if r.Trailer.Get("Length") != strconv.Itoa(len(payload)) || r.Trailer.Get("Sha256") != hex.EncodeToString(sum[:]) {
		t.Errorf("upstream got %s bytes, sha256 %s", r.Trailer.Get("Length"), r.Trailer.Get("Sha256"))
	}
	if !slices.Contains(r.TransferEncoding, "chunked") {
		t.Errorf("upstream saw transfer encoding %q", r.TransferEncoding)
	}
	if r.Header.Get("X-Api-Key") != apiKeyValue {
		t.Errorf("upstream saw X-Api-Key %q", r.Header.Get("X-Api-Key"))
	}
	if !slices.Equal(reused, []bool{true}) {
		t.Errorf("the upload's connection reused: %v; want the SSE request's", reused)
	}
	rec := st.p.audit.waitRecord(t, "for the upload", func(r Record) bool { return r.Method == http.MethodPut })
	if rec.BytesUp != int64(len(payload)) || rec.Status != 200 || !slices.Equal(rec.Credentials, []string{apiKeyName}) {
		t.Errorf("audit record %+v", rec)
	}

	// One CONNECT for both, audited when it closes.
	c.CloseIdleConnections()
	rec = st.p.audit.waitRecord(t, "for the CONNECT", func(r Record) bool { return r.Method == http.MethodConnect })
	if rec.BytesUp < int64(len(payload)) || rec.Reason != "" {
		t.Errorf("CONNECT audit record %+v", rec)
	}
	var connects int
	for _, r := range st.p.audit.records(t) {
		if r.Method == http.MethodConnect {
			connects++
		}
	}
	if connects != 1 {
		t.Errorf("%d CONNECT records; want 1", connects)
	}
}

// TestInterceptOnlyBoundHosts: a host no credential is bound to stays an
// opaque tunnel, where the client talks TLS with the server itself.
func TestInterceptOnlyBoundHosts(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	u := st.url("127.0.0.1", "/")
	for _, tt := range []struct {
		name  string
		roots *x509.CertPool
		ok    bool
	}{
		{"the server's roots", st.p.s.opts.RootCAs, true},
		{"the proxy's CA", st.caPool, false},
	} {
		tr := &http.Transport{Proxy: http.ProxyURL(st.p.url), DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: tt.roots}}
		req := newRequest(t, http.MethodGet, u, nil)
		req.Header.Set("X-Api-Key", apiKeyPlaceholder)
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if tt.ok {
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("%s: %d", tt.name, resp.StatusCode)
			}
			continue
		}
		var uerr x509.UnknownAuthorityError
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: the tunnelled server's certificate verified against the proxy's CA", tt.name)
		} else if !errors.As(err, &uerr) {
			t.Errorf("%s: %v; want an unknown authority", tt.name, err)
		}
	}
	// The placeholder went through the tunnel as it was: the proxy did not
	// see it.
	got := st.seen.all()
	if len(got) != 1 || got[0].Header.Get("X-Api-Key") != apiKeyPlaceholder {
		t.Errorf("upstream got %d requests", len(got))
	}
}

// TestInterceptEarlyData: a client that sends its TLS hello with the
// CONNECT, before the answer, is served all the same (here with an
// HTTP/1.0 request without Host, which gets the CONNECT's).
func TestInterceptEarlyData(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{})
	target := "api.example.com:" + st.ps
	raw, err := net.Dial("tcp", st.p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	ec := &earlyConn{Conn: raw, br: bufio.NewReader(raw),
		prefix: []byte("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n")}
	tc := tls.Client(ec, &tls.Config{RootCAs: st.caPool, ServerName: "api.example.com"})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	fmt.Fprintf(tc, "GET /early HTTP/1.0\r\nX-Api-Key: %s\r\n\r\n", apiKeyPlaceholder)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "ok GET /early" {
		t.Errorf("GET = %d %q", resp.StatusCode, body)
	}
	if got := st.seen.all(); len(got) != 1 || got[0].Header.Get("X-Api-Key") != apiKeyValue || got[0].Host != target {
		t.Errorf("upstream got %d requests", len(got))
	}
}

// TestInterceptSlowPath: a CONNECT that reaches goproxy through the
// http.Server (where serveConn cannot see the socket, and outside Linux) is
// intercepted the same.
func TestInterceptSlowPath(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := startInterceptingOn(t, hiddenListener{ln}, Options{})
	c := st.client(true)
	for range 2 {
		req := newRequest(t, http.MethodGet, st.url("api.example.com", "/slow-path"), nil)
		req.Header.Set("Authorization", "Bearer "+apiKeyPlaceholder)
		if resp, body := do(t, c, req); resp.StatusCode != 200 {
			t.Fatalf("GET = %d %q", resp.StatusCode, body)
		}
	}
	got := st.seen.all()
	if len(got) != 2 || got[1].Header.Get("Authorization") != "Bearer "+apiKeyValue {
		t.Errorf("upstream got %d requests", len(got))
	}
	c.CloseIdleConnections()
	rec := st.p.audit.waitRecord(t, "for the CONNECT", func(r Record) bool { return r.Method == http.MethodConnect })
	if rec.Decision != DecisionAllow || rec.Reason != "" || rec.BytesUp == 0 {
		t.Errorf("CONNECT audit record %+v", rec)
	}
}

// earlyConn writes prefix in front of the first write (so that the two go
// together) and reads the proxy's answer to it before the first read.
type earlyConn struct {
	net.Conn
	br     *bufio.Reader
	prefix []byte
	read   bool
}

func (c *earlyConn) Write(p []byte) (int, error) {
	if c.prefix != nil {
		b := append(c.prefix, p...)
		c.prefix = nil
		if _, err := c.Conn.Write(b); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *earlyConn) Read(p []byte) (int, error) {
	if !c.read {
		c.read = true
		resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("CONNECT: %s", resp.Status)
		}
	}
	return c.br.Read(p)
}

// TestInterceptEnds: an intercepted connection counts against the tunnel
// limit, is closed after the idle timeout and at shutdown, and is
// audited with the reason; an upstream that cannot be reached is a 502
// answer inside, with nothing of the value in the log.
func TestInterceptEnds(t *testing.T) {
	t.Parallel()
	st := startIntercepting(t, Options{MaxTunnels: 1, IdleTimeout: time.Second})
	c := st.client(true)
	req := newRequest(t, http.MethodGet, st.url("api.example.com", "/"), nil)
	if resp, body := do(t, c, req); resp.StatusCode != 200 {
		t.Fatalf("GET = %d %q", resp.StatusCode, body)
	}
	// The connection is idle in the client's pool: the limit is reached.
	resp, body, _, _ := st.p.connect(t, "127.0.0.1:"+st.ps)
	if resp.StatusCode != 503 {
		t.Errorf("CONNECT beyond the limit = %d %q", resp.StatusCode, body)
	}
	rec := st.p.audit.waitRecord(t, "for the idle interception", func(r Record) bool {
		return r.Method == http.MethodConnect && r.Reason == ReasonIdleTimeout
	})
	if rec.Decision != DecisionAllow || rec.Host != "api.example.com" || rec.DurationMS < 1000 {
		t.Errorf("audit record %+v", rec)
	}

	// gone.example.com has a credential but no address.
	req = newRequest(t, http.MethodGet, "https://gone.example.com:"+st.ps+"/", nil)
	req.Header.Set("Authorization", "Bearer "+apiKeyPlaceholder)
	resp, body = do(t, c, req)
	if resp.StatusCode != 502 || !strings.Contains(body, "cannot reach gone.example.com:"+st.ps+": no such host") {
		t.Errorf("GET gone = %d %q", resp.StatusCode, body)
	}
	rec = st.p.audit.waitRecord(t, "for the failed request", func(r Record) bool { return r.Host == "gone.example.com" && r.Method == http.MethodGet })
	if rec.Reason != ReasonUpstreamError || rec.Status != 502 || !slices.Equal(rec.Credentials, []string{apiKeyName}) {
		t.Errorf("audit record %+v", rec)
	}
	// Its slot is free once its CONNECT is audited.
	c.CloseIdleConnections()
	st.p.audit.waitRecord(t, "for the CONNECT to gone", func(r Record) bool { return r.Host == "gone.example.com" && r.Method == http.MethodConnect })

	// Shutdown ends an open interception.
	req = newRequest(t, http.MethodGet, st.url("api.example.com", "/"), nil)
	if resp, body := do(t, c, req); resp.StatusCode != 200 {
		t.Fatalf("GET = %d %q", resp.StatusCode, body)
	}
	st.p.stop()
	st.p.audit.waitRecord(t, "for the interception ended by shutdown", func(r Record) bool {
		return r.Method == http.MethodConnect && r.Reason == ReasonShutdown
	})
	if n := st.p.s.openTunnels.Load(); n != 0 {
		t.Errorf("%d tunnel slots still taken", n)
	}
}

func TestCredentialsChecked(t *testing.T) {
	t.Parallel()
	good := Credential{Name: "K", Placeholder: "placeholder-0123456789", Value: "v", Hosts: []string{"api.example.test"}}
	tests := []struct {
		name string
		edit func(c *Credential) []Credential
		want string
	}{
		{"empty name", func(c *Credential) []Credential { c.Name = ""; return []Credential{*c} }, "credential 1: empty name"},
		{"short placeholder", func(c *Credential) []Credential { c.Placeholder = "short-0123"; return []Credential{*c} },
			`credential "K": the placeholder is 10 characters long, the minimum is 16`},
		{"placeholder characters", func(c *Credential) []Credential { c.Placeholder = "placeholder 0123456789"; return []Credential{*c} },
			`credential "K": the placeholder may have only`},
		{"empty value", func(c *Credential) []Credential { c.Value = ""; return []Credential{*c} }, `credential "K": empty value`},
		{"value with a newline", func(c *Credential) []Credential { c.Value = "a\r\nX-Evil: 1"; return []Credential{*c} },
			`credential "K": the value has characters`},
		{"no hosts", func(c *Credential) []Credential { c.Hosts = nil; return []Credential{*c} }, `credential "K": no hosts`},
		{"bad host", func(c *Credential) []Credential {
			c.Hosts = []string{"https://api.example.test/"}
			return []Credential{*c}
		},
			`credential "K": rule "https://api.example.test/": looks like a URL`},
		{"same placeholder", func(c *Credential) []Credential {
			d := *c
			d.Name = "L"
			return []Credential{*c, d}
		}, `credentials "K" and "L": one placeholder contains the other`},
		{"placeholder in another", func(c *Credential) []Credential {
			d := *c
			d.Name, d.Placeholder = "L", "x"+c.Placeholder
			return []Credential{*c, d}
		}, `credentials "K" and "L": one placeholder contains the other`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			_, err := New(Options{Credentials: tt.edit(&c)})
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("New: %v; want %q", err, tt.want)
			}
			if err != nil && (strings.Contains(err.Error(), c.Placeholder) || strings.Contains(err.Error(), "\r\nX-Evil")) {
				t.Errorf("the error shows the placeholder or value: %v", err)
			}
		})
	}
	s, err := New(Options{Credentials: []Credential{good}})
	if err != nil || s.CACertPEM() == nil {
		t.Errorf("New with a good credential: %v", err)
	}
	if s, err := New(Options{}); err != nil || s.CACertPEM() != nil || s.ca != nil {
		t.Errorf("New without credentials: a CA (%v)", err)
	}
}

func TestCAServed(t *testing.T) {
	t.Parallel()
	p := startProxy(t, Options{Pod: "myproject", Credentials: []Credential{
		{Name: "K", Placeholder: "placeholder-0123456789", Value: "v", Hosts: []string{"api.example.test", "*.example.test:*", "10.0.2.2:8443"}}}})
	resp, err := http.Get("http://" + p.addr + CAPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-pem-file" || !bytes.Equal(body, p.s.CACertPEM()) {
		t.Fatalf("GET %s = %d %s %q", CAPath, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	block, _ := pem.Decode(body)
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if ca.Subject.CommonName != "devaipod myproject proxy CA" || !ca.IsCA || !ca.MaxPathLenZero || ca.KeyUsage != x509.KeyUsageCertSign ||
		!ca.PermittedDNSDomainsCritical || !slices.Equal(ca.PermittedDNSDomains, []string{".example.test", "api.example.test"}) ||
		len(ca.PermittedIPRanges) != 1 || ca.PermittedIPRanges[0].String() != "10.0.2.2/32" || len(ca.ExcludedIPRanges) != 0 {
		t.Errorf("CA %+v", ca)
	}
	if d := time.Until(ca.NotAfter); d < 360*24*time.Hour || d > 370*24*time.Hour {
		t.Errorf("CA valid until %v", ca.NotAfter)
	}
	// Not egress, so not audited: only the refusal below is.
	p.raw(t, "GET /devaipod/refused HTTP/1.1\r\nHost: x\r\n\r\n", "GET")
	p.audit.waitRecord(t, "for the refusal", func(r Record) bool { return r.Status == 400 })
	for _, r := range p.audit.records(t) {
		if r.Event == EventRequest && r.Status != 400 {
			t.Errorf("audit record %+v: want the refusal only (the CA is not egress)", r)
		}
	}

	// Other paths are still not proxy requests; without credentials there
	// is no CA.
	resp, body2, _, _ := p.raw(t, "GET /devaipod/other HTTP/1.1\r\nHost: x\r\n\r\n", "GET")
	if resp.StatusCode != 400 {
		t.Errorf("GET /devaipod/other = %d %q", resp.StatusCode, body2)
	}
	p = startProxy(t, Options{})
	resp, body2, _, _ = p.raw(t, "GET "+CAPath+" HTTP/1.1\r\nHost: x\r\n\r\n", "GET")
	if resp.StatusCode != 404 || !strings.Contains(body2, "no credential is bound") {
		t.Errorf("GET %s without credentials = %d %q", CAPath, resp.StatusCode, body2)
	}
}

// TestCANameConstraints: the CA's certificates verify for the bound hosts
// only, with Go's verifier and, where it is installed, OpenSSL's.
func TestCANameConstraints(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rules    []string
		ok, fail []rule.Host
	}{
		{
			rules: []string{"api.example.test", "*.example.org:8443", "10.0.2.2", "[fd00::2]:*"},
			ok: []rule.Host{{Name: "api.example.test"}, {Name: "a.example.org"}, {Name: "a.b.example.org"},
				{Addr: netip.MustParseAddr("10.0.2.2")}, {Addr: netip.MustParseAddr("fd00::2")}},
			fail: []rule.Host{{Name: "example.org"}, {Name: "evil.test"}, {Name: "example.test"}, {Addr: netip.MustParseAddr("10.0.2.3")},
				{Addr: netip.MustParseAddr("127.0.0.1")}},
		},
		{
			rules: []string{"api.example.test"},
			ok:    []rule.Host{{Name: "api.example.test"}},
			fail:  []rule.Host{{Name: "evil.test"}, {Addr: netip.MustParseAddr("127.0.0.1")}, {Addr: netip.MustParseAddr("::1")}},
		},
		{
			rules: []string{"127.0.0.1:8443"},
			ok:    []rule.Host{{Addr: netip.MustParseAddr("127.0.0.1")}},
			fail:  []rule.Host{{Name: "localhost"}, {Name: "evil.test"}, {Addr: netip.MustParseAddr("127.0.0.2")}},
		},
	} {
		rules, err := rule.ParseAll(tt.rules)
		if err != nil {
			t.Fatal(err)
		}
		a, err := newAuthority("p", rules)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(a.cert)
		openssl, _ := exec.LookPath("openssl")
		dir := t.TempDir()
		caFile := filepath.Join(dir, "ca.pem")
		if err := os.WriteFile(caFile, a.pem, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, h := range append(slices.Clone(tt.ok), tt.fail...) {
			want := slices.Contains(tt.ok, h)
			leaf, err := a.leaf(h)
			if err != nil {
				t.Fatal(err)
			}
			if again, _ := a.leaf(h); again != leaf {
				t.Errorf("%v: the leaf was made again", h)
			}
			_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: h.String(), Roots: pool})
			if (err == nil) != want {
				t.Errorf("rules %q, leaf for %v: Go verifies: %v; want ok %v", tt.rules, h, err, want)
			}
			if openssl == "" {
				continue
			}
			leafFile := filepath.Join(dir, "leaf.pem")
			os.WriteFile(leafFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]}), 0o600)
			check := "-verify_hostname"
			if h.Addr.IsValid() {
				check = "-verify_ip"
			}
			out, err := exec.Command(openssl, "verify", "-x509_strict", "-purpose", "sslserver", check, h.String(),
				"-CAfile", caFile, leafFile).CombinedOutput()
			if (err == nil) != want {
				t.Errorf("rules %q, leaf for %v: openssl verify: %v %s; want ok %v", tt.rules, h, err, out, want)
			}
		}
	}
}

// TestInterceptShutdown stops proxies with intercepted connections open,
// idle and in the middle of a request: Serve must return promptly and
// leave no goroutines behind. Not parallel: it counts goroutines.
func TestInterceptShutdown(t *testing.T) {
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}
	}))
	upstream.Config.ErrorLog = log.New(io.Discard, "", 0)
	upstream.StartTLS()
	defer upstream.Close()
	ps := strconv.Itoa(portOf(t, upstream.Listener.Addr().String()))
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
	for i := range 5 {
		p := startProxy(t, Options{
			Allow:       []string{"api.example.com:" + ps, "127.0.0.1:" + ps},
			Resolver:    mapResolver{"api.example.com": {loopback}},
			RootCAs:     serverPool(upstream),
			Credentials: []Credential{{Name: "K", Placeholder: apiKeyPlaceholder, Value: apiKeyValue, Hosts: []string{"api.example.com:" + ps}}},
		})
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(p.s.CACertPEM())
		tr := &http.Transport{Proxy: http.ProxyURL(p.url), TLSClientConfig: &tls.Config{RootCAs: pool}}
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		resp, err := c.Get("https://api.example.com:" + ps + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close() // idle in the pool
		slowDone := make(chan struct{})
		go func() {
			defer close(slowDone)
			resp, err := (&http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(p.url),
				TLSClientConfig: &tls.Config{RootCAs: pool}}}).Get("https://api.example.com:" + ps + "/slow")
			if err == nil {
				resp.Body.Close()
			}
		}()
		time.Sleep(50 * time.Millisecond) // let the request reach the server
		start := time.Now()
		p.stop()
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("round %d: Serve took %v to return", i, d)
		}
		<-slowDone
		tr.CloseIdleConnections()
		var shutdowns int
		for _, r := range p.audit.records(t) {
			if r.Method == http.MethodConnect && r.Reason == ReasonShutdown {
				shutdowns++
			}
		}
		if shutdowns != 2 {
			t.Errorf("round %d: %d CONNECTs ended by the shutdown; want 2", i, shutdowns)
		}
	}
	upstream.CloseClientConnections()
	// On a loaded machine the last goroutines may take a while to end:
	// wait for them (up to 5 s), not for a quiet moment.
	n := settle()
	for deadline := time.Now().Add(5 * time.Second); n > base+3 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	if n > base+3 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%d goroutines after 5 proxies, %d before:\n%s", n, base, buf)
	}
}
