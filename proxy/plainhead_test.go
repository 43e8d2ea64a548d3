package proxy

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// The plain subset (plainhead.go) against net/http: whatever the subset
// takes, net/http reads alike, and what the relay writes of it reads as
// what it writes of net/http's reading.

const plainHost = "api.example.com"

// plainCredentials are two credentials of the test, one of them bound to
// plainHost.
func plainCredentials(t testing.TB) *credentials {
	cs, err := compileCredentials([]Credential{
		{Name: apiKeyName, Placeholder: apiKeyPlaceholder, Value: apiKeyValue, Hosts: []string{plainHost}},
		{Name: otherName, Placeholder: otherPlaceholder, Value: otherValue, Hosts: []string{"other.example.com"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

var plainRequestSeeds = []string{
	"GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
	"POST /v1/messages?beta=true HTTP/1.1\r\nHost: api.example.com\r\nContent-Type: application/json\r\nX-Api-Key: " + apiKeyPlaceholder + "\r\nContent-Length: 5\r\n\r\nhello",
	"GET /a%20b;c HTTP/1.1\r\nhost: api.example.com:443\r\nConnection: keep-alive, close\r\nKeep-Alive: 5\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n",
	"PUT /x HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+apiKeyPlaceholder)) + "\r\nContent-Length: 0\r\n\r\n",
	"DELETE /x HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer " + apiKeyPlaceholder + "\t \r\nIdempotency-Key: 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Other: " + otherPlaceholder + "\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET //x/../y?a=b?c HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 007\r\n\r\n",
	"OPTIONS /%7e HTTP/1.1\r\nHost: api.example.com\r\nConnection: upgrade\r\n\r\n",
}

func FuzzPlainRequest(f *testing.F) {
	for _, s := range plainRequestSeeds {
		f.Add([]byte(s))
	}
	cs := plainCredentials(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		end := bytes.Index(data, headEnd)
		if end < 0 {
			return
		}
		head := data[:end+len(headEnd)]
		pr, ok := parsePlainRequest(head, nil)
		if !ok {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			t.Fatalf("the plain subset takes a request that net/http refuses (%v):\n%q", err, head)
		}
		if err := checkHead(req, head); err != nil {
			t.Fatalf("the plain subset takes a request that checkHead refuses (%v):\n%q", err, head)
		}
		if req.Method != pr.method || req.Host != string(pr.host) || req.ContentLength != pr.length || req.Close != pr.close {
			t.Fatalf("read as %s host %q length %d close %v; net/http: %s %q %d %v\n%q",
				pr.method, pr.host, pr.length, pr.close, req.Method, req.Host, req.ContentLength, req.Close, head)
		}
		if _, idem := req.Header["Idempotency-Key"]; idem != pr.idempotent && !pr.idempotent {
			t.Fatalf("idempotency key missed:\n%q", head)
		}
		carried, ok := cs.carriedIn(pr.fields)
		if !ok {
			t.Fatal("carriedIn gave up with two credentials")
		}
		if got, want := names(carried), names(cs.carried(req.Header)); !slices.Equal(got, want) {
			t.Fatalf("carries %v; net/http's headers carry %v\n%q", got, want, head)
		}
		if int64(len(data)-len(head)) < pr.length {
			return // the body is cut short: no request to compare
		}
		body := data[len(head) : int64(len(head))+pr.length]

		// What the relay writes of each, read again as the upstream reads it.
		ic := &interception{s: &Server{creds: cs}, target: plainHost + ":443", plain: &pr, carried: carried}
		var plain bytes.Buffer
		w := bufio.NewWriter(&plain)
		if err := ic.writePlain(w, bytes.NewReader(body)); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		substitute(req.Header, carried)
		if err := ic.prepare(req); err != nil {
			t.Fatal(err)
		}
		var parsed bytes.Buffer
		if err := req.Write(&parsed); err != nil {
			t.Fatalf("Request.Write: %v", err)
		}
		a, b := readBack(t, plain.Bytes()), readBack(t, parsed.Bytes())
		if a.method != b.method || a.uri != b.uri || a.host != b.host || a.length != b.length ||
			!maps.EqualFunc(a.header, b.header, slices.Equal) || !bytes.Equal(a.body, b.body) {
			t.Fatalf("the relay writes\n%q\nwhere the parsed path writes\n%q\nfor\n%q", plain.Bytes(), parsed.Bytes(), head)
		}
	})
}

// sentRequest is a request as the upstream reads it.
type sentRequest struct {
	method, uri, host string
	length            int64
	header            http.Header
	body              []byte
}

func readBack(t *testing.T, b []byte) sentRequest {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatalf("the upstream cannot read %q: %v", b, err)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatalf("the upstream cannot read the body of %q: %v", b, err)
	}
	// Request.Write sends no Content-Length for a GET without a body,
	// the relay the one the client sent: ContentLength says the same.
	delete(r.Header, "Content-Length")
	return sentRequest{r.Method, r.RequestURI, r.Host, r.ContentLength, r.Header, body}
}

var plainResponseSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nDate: Mon, 30 Nov 2026 10:00:00 GMT\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 42\r\n\r\n",
	"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n",
	"HTTP/1.1 304\r\nConnection: close\r\n\r\n",
	"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	"HTTP/1.1 200 OK\r\n\r\nuntil the close",
	"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n",
	"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nno",
}

func FuzzPlainResponse(f *testing.F) {
	for _, s := range plainResponseSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		end := bytes.Index(data, headEnd)
		if end < 0 {
			return
		}
		pr, ok := parsePlainResponse(data[:end+len(headEnd)], method, nil)
		if !ok {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), &http.Request{Method: method})
		if err != nil {
			t.Fatalf("the plain subset takes an answer that net/http refuses (%v):\n%q", err, data)
		}
		chunked := slices.Equal(resp.TransferEncoding, []string{"chunked"})
		if resp.StatusCode != pr.status || resp.Close != pr.close || chunked != (pr.length < 0) ||
			pr.length >= 0 && resp.Body != http.NoBody && resp.ContentLength != pr.length {
			t.Fatalf("read as %d length %d close %v; net/http: %d length %d chunked %v close %v\n%q",
				pr.status, pr.length, pr.close, resp.StatusCode, resp.ContentLength, chunked, resp.Close, data)
		}
		want, wantErr := io.ReadAll(resp.Body)

		uc := &upstreamConn{}
		uc.lim = limitedReader{r: bytes.NewReader(data[len(pr.head):]), n: -1}
		uc.br = bufio.NewReader(&uc.lim)
		var body io.Reader = &lengthReader{r: uc.br, n: pr.length}
		var cb chunkedBody
		if pr.length < 0 {
			cb.reset(uc)
			body = &cb
		}
		got, gotErr := io.ReadAll(body)
		if !bytes.Equal(got, want) || (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("body %q (%v); net/http's %q (%v)\n%q", got, gotErr, want, wantErr, data)
		}
		if wantErr == nil && !maps.EqualFunc(cb.trailer, resp.Trailer, slices.Equal) {
			t.Fatalf("trailer %v; net/http's %v\n%q", cb.trailer, resp.Trailer, data)
		}
	})
}

func TestLengthReader(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int64
		want string
		err  error
	}{
		{"hello, world", 5, "hello", nil},
		{"hel", 5, "hel", io.ErrUnexpectedEOF},
		{"", 0, "", nil},
	} {
		got, err := io.ReadAll(&lengthReader{r: bytes.NewReader([]byte(tc.in)), n: tc.n})
		if string(got) != tc.want || !errors.Is(err, tc.err) && err != tc.err {
			t.Errorf("%q, %d: %q, %v; want %q, %v", tc.in, tc.n, got, err, tc.want, tc.err)
		}
	}
}

func TestParsePlain(t *testing.T) {
	// What stays out of the plain subset, for net/http: each of these
	// would otherwise be read, and must not be.
	for _, head := range []string{
		"GET / HTTP/1.0\r\nHost: api.example.com\r\n\r\n",
		"GET http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: api.example.com\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.example.com\r\nConnection: X-Secret\r\nX-Secret: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: +1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.example.com\r\nX: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.example.com\nX: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost : api.example.com\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.example.com\r\nX: caf\xc3\xa9\r\n\r\n",
		"GET /a#b HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
		"GET /%zz HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
		"TRACE / HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.example.com\r\nPragma: no-cache\r\n\r\n",
	} {
		if _, ok := parsePlainRequest([]byte(head), nil); ok {
			t.Errorf("plain: %q", head)
		}
	}
	for _, head := range []string{
		"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: X-Hop\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
	} {
		if _, ok := parsePlainResponse([]byte(head), http.MethodGet, nil); ok {
			t.Errorf("plain: %q", head)
		}
	}
}

// TestPlainHeadsAsParsed sends the same requests, to the same answers,
// through a proxy with the plain subset and one without (every head
// through net/http, as before it): the upstream gets the same requests,
// the client the same answers. The plain subset passes the reason phrase
// as it comes where net/http's path writes its own, which tells the paths
// apart.
func TestPlainHeadsAsParsed(t *testing.T) {
	t.Parallel()
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+apiKeyPlaceholder))
	cases := []struct {
		name, request, answer string
		plainRequest          bool // in the plain subset
		plainAnswer           bool
	}{
		{"get", "GET /raw?a=b HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\nKeep-Alive: 5\r\nX-Forwarded-For: 10.1.2.3\r\n\r\n",
			"HTTP/1.1 200 Fine\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\nhello", true, true},
		{"post with credentials, chunked answer with a trailer",
			"POST /raw HTTP/1.1\r\nHost: {host}\r\nX-Api-Key: " + apiKeyPlaceholder + "\r\nAuthorization: " + basic +
				"\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"hello\": 42}",
			"HTTP/1.1 200 Fine\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 42\r\n\r\n", true, true},
		{"head", "HEAD /raw HTTP/1.1\r\nHost: {host}\r\n\r\n",
			"HTTP/1.1 200 Fine\r\nContent-Length: 100\r\nDate: Mon, 30 Nov 2026 10:00:00 GMT\r\n\r\n", true, true},
		{"no content", "DELETE /raw HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
			"HTTP/1.1 204 Fine\r\n\r\n", true, true},
		{"an answer up to the close", "GET /raw HTTP/1.1\r\nHost: {host}\r\n\r\n",
			"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close", true, false},
		{"a chunked request", "PUT /raw HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
			"HTTP/1.1 201 Fine\r\nContent-Length: 0\r\n\r\n", false, true},
		{"a header the Connection header names", "GET /raw HTTP/1.1\r\nHost: {host}\r\nConnection: X-Hop\r\nX-Hop: 1\r\n\r\n",
			"HTTP/1.1 200 Fine\r\nConnection: X-Gone\r\nX-Gone: 1\r\nContent-Length: 2\r\n\r\nok", false, false},
	}
	plain := startIntercepting(t, Options{})
	parsed := startIntercepting(t, Options{parsedHeadsOnly: true})
	for _, st := range []*interceptSetup{plain, parsed} {
		// The upstream closes each connection after its answer (a
		// hijacked one), without saying so: none is to be used again.
		st.p.s.upstreams.closeIdle()
	}
	type exchanged struct {
		sent   *http.Request
		answer *http.Response
		body   string
	}
	run := func(st *interceptSetup, request, answer string) exchanged {
		t.Helper()
		tc, br := st.rawIntercepted(t, "api.example.com")
		defer tc.Close()
		host := "api.example.com:" + st.ps
		request = strings.Replace(request, "{host}", host, 1)
		head, body, _ := strings.Cut(request, "\r\n\r\n")
		io.WriteString(tc, head+"\r\nX-Answer: "+base64.StdEncoding.EncodeToString([]byte(answer))+"\r\n\r\n"+body)
		method, _, _ := strings.Cut(request, " ")
		resp, got := readAnswer(t, br, method)
		seen := st.seen.all()
		if len(seen) == 0 {
			t.Fatal("the upstream got nothing")
		}
		sent := seen[len(seen)-1]
		sent.Host = strings.TrimSuffix(sent.Host, ":"+st.ps) // the upstreams' ports differ
		return exchanged{sent, resp, got}
	}
	for _, tc := range cases {
		head, _, _ := strings.Cut(tc.request, "\r\n\r\n")
		head = strings.Replace(head, "{host}", "api.example.com", 1) + "\r\n\r\n"
		if _, ok := parsePlainRequest([]byte(head), nil); ok != tc.plainRequest {
			t.Fatalf("%s: the request in the plain subset: %v", tc.name, ok)
		}
		a, b := run(plain, tc.request, tc.answer), run(parsed, tc.request, tc.answer)
		if want := tc.plainAnswer; (a.answer.Status != b.answer.Status) != want {
			t.Errorf("%s: answers %q through the plain subset, %q through net/http: the plain subset taken %v, want %v",
				tc.name, a.answer.Status, b.answer.Status, !want, want)
		}
		if a.sent.Method != b.sent.Method || a.sent.RequestURI != b.sent.RequestURI || a.sent.Host != b.sent.Host ||
			!maps.EqualFunc(a.sent.Header, b.sent.Header, slices.Equal) || !maps.EqualFunc(a.sent.Trailer, b.sent.Trailer, slices.Equal) {
			t.Errorf("%s: the upstream got\n%s %s %s %v %v\nthrough the plain subset, and\n%s %s %s %v %v\nthrough net/http", tc.name,
				a.sent.Method, a.sent.RequestURI, a.sent.Host, a.sent.Header, a.sent.Trailer,
				b.sent.Method, b.sent.RequestURI, b.sent.Host, b.sent.Header, b.sent.Trailer)
		}
		for _, h := range []http.Header{a.answer.Header, b.answer.Header} {
			h.Del("Date")
		}
		if a.answer.StatusCode != b.answer.StatusCode || a.answer.Close != b.answer.Close || a.body != b.body ||
			!maps.EqualFunc(a.answer.Header, b.answer.Header, slices.Equal) || !maps.EqualFunc(a.answer.Trailer, b.answer.Trailer, slices.Equal) {
			t.Errorf("%s: the client got\n%d %v %q %v close %v\nthrough the plain subset, and\n%d %v %q %v close %v\nthrough net/http", tc.name,
				a.answer.StatusCode, a.answer.Header, a.body, a.answer.Trailer, a.answer.Close,
				b.answer.StatusCode, b.answer.Header, b.body, b.answer.Trailer, b.answer.Close)
		}
		if tc.name == "post with credentials, chunked answer with a trailer" {
			if got := a.sent.Header.Get("X-Api-Key"); got != apiKeyValue {
				t.Errorf("the plain subset sent X-Api-Key %q", got)
			}
			if user, pass, _ := a.sent.BasicAuth(); user != "x-access-token" || pass != apiKeyValue {
				t.Errorf("the plain subset sent Basic %q:%q", user, pass)
			}
		}
	}
	for _, st := range []*interceptSetup{plain, parsed} {
		rec := st.p.audit.waitRecord(t, "for the post", func(r Record) bool { return r.Method == http.MethodPost })
		if rec.Status != 200 || rec.BytesUp != 13 || rec.BytesDown != 11 || !slices.Equal(rec.Credentials, []string{apiKeyName}) {
			t.Errorf("audit record %+v", rec)
		}
	}
}
