package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devaipod/devaipod/proxy/rule"

	"github.com/elazarl/goproxy"
	"golang.org/x/net/http/httpguts"
)

// An allowed CONNECT to a host and port that a credential is bound to is
// not a tunnel: allowConnect answers it with ConnectHijack to
// serveIntercept, which terminates the client's TLS with a certificate of
// the proxy's authority (see authority) and relays the HTTP/1.1 requests
// inside itself, one after the other, in the connection's own goroutine:
// it reads a request (http.ReadRequest, with the limits and checks of
// net/http's server), checks it (the Host header must name the CONNECT's
// host; no placeholder of a credential bound elsewhere), puts the values of
// its credentials in its headers, writes it (Request.Write, without the
// hop-by-hop headers, as httputil.ReverseProxy sends it) on a TLS
// connection to the CONNECT's host and port, whatever its Host header says
// (verified, dialled through the guard, kept in a pool: see upstreams),
// reads the answer (http.ReadResponse) and writes it back, keep-alive,
// chunked and 100-continue included. Bodies stream both ways: the relay
// never waits for the upstream with bytes for the client held back, so
// server-sent events reach the client as they come. An upgrade (101)
// joins the two connections.
//
// It replaced an http.Server with httputil.ReverseProxy over an
// http.Transport: the same protocol work, but with four goroutines per
// request (the server's, its background read, the Transport's reader and
// writer) handing the request and the answer to each other, which cost
// more than half of an intercepted request's time on the proxy's one P
// (docs/benchmarks-proxy.md).
//
// Every request is audited, and the CONNECT is, like a tunnel, when its
// connection ends.

// interception is one intercepted CONNECT.
type interception struct {
	s      *Server
	x      *exchange // the CONNECT's
	client net.Conn
	cfg    *tls.Config // serves the host's certificate
	target string      // host:port, where the requests go
	ctx    context.Context
	cancel context.CancelFunc // ends dialling an upstream

	cc  *clientConn
	tc  *tls.Conn
	lim limitedReader // under br: bounds a request's head, keeps a copy of it
	br  *bufio.Reader
	bw  *bufio.Writer

	up, down atomic.Int64 // bytes from and to the client, TLS included
	idle     idleWatch    // its clock moves with each byte either way

	once   sync.Once
	reason string // the audit reason of the end, set in once

	mu      sync.Mutex
	cur     *upstreamConn // the upstream connection of the request in progress
	ended   bool
	aborted bool // the client hung up while its request waited on the upstream

	// sameHostSeen is the last Host that sameHost accepted: a client
	// names the same one in every request.
	sameHostSeen string

	watch clientWatch
	cont  *continueReader // the request's, if it waits for 100 Continue

	// mask masks the bound credentials' values in the answers (nil when
	// none is long enough to look for); maskWarned: the proxy's log said
	// so once for this connection.
	mask       *answerMask
	maskWarned bool

	// plain is the request in progress when it came in the plain subset
	// (plainhead.go), carried the credentials it carries; plainReq (and
	// its fields), plainHead (a copy of its head: the reader's buffer
	// moves on before a retry writes it again), plainHTTP (what stands
	// for it in the relay), plainBody, plainAnswer (and its fields),
	// answerBody and answerChunks are reused from one request to the next.
	plain        *plainRequest
	carried      []*credential
	plainReq     plainRequest
	plainHead    []byte
	plainHTTP    http.Request
	plainBody    lengthReader
	plainAnswer  plainResponse
	answerBody   lengthReader
	answerChunks chunkedBody
}

// serveIntercept runs an allowed CONNECT to a host that credentials are
// bound to, on the client connection that goproxy hijacked for it: it
// answers 200 and serves the requests inside until the connection ends, then
// audits the CONNECT. If it cannot start (the proxy is shutting down), the
// CONNECT gets 502, audited by ServeHTTP.
func (s *Server) serveIntercept(req *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
	x := exchangeOf(req)
	if x == nil || !x.allow || !x.slot || len(x.bound) == 0 {
		// goproxy hands over only what allowConnect allowed.
		client.Close()
		return
	}
	ic, err := s.openInterception(x, client)
	if err != nil {
		s.refuseHijacked(req, client, x, err)
		return
	}
	early := x.early
	x.early = nil
	if _, err := client.Write([]byte(connectEstablished(req))); err != nil {
		ic.end("")
		ic.finish()
		return
	}
	if x.fast {
		ic.run(early)
		return
	}
	go ic.run(early)
}

// openInterception registers an interception of client, unless the proxy
// is shutting down, and starts its idle timer.
func (s *Server) openInterception(x *exchange, client net.Conn) (*interception, error) {
	cfg, err := s.ca.serverConfig(x.hk)
	if err != nil {
		s.log.Error("make a certificate", "host", x.host, "err", err)
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ic := &interception{s: s, x: x, client: client, cfg: cfg, ctx: ctx, cancel: cancel,
		target: net.JoinHostPort(x.host, strconv.Itoa(x.port)), mask: newAnswerMask(x.bound)}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		cancel()
		return nil, errShuttingDown
	}
	s.tunnels[ic] = struct{}{}
	s.tunnelWG.Add(1)
	s.mu.Unlock()
	ic.idle.start(s.opts.IdleTimeout, func() { ic.end(ReasonIdleTimeout) })
	x.served, x.status = ic, http.StatusOK
	x.detail = "intercepted to put credentials in"
	return ic, nil
}

// Buffers of the client connections, kept for reuse.
var (
	clientReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	clientWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
)

// run does the TLS handshake with the client, the client's early bytes
// first, relays its requests until the connection ends, and audits the
// CONNECT.
func (ic *interception) run(early []byte) {
	s := ic.s
	defer func() {
		// As the http.Server did: a panic costs the connection, not the
		// proxy.
		if v := recover(); v != nil {
			s.log.Error("panic in an interception", "host", ic.x.host, "panic", s.creds.scrub(fmt.Sprint(v)))
		}
		ic.end("")
		if ic.cc != nil && ic.cc.cork != nil {
			putBuffer(ic.cc.cork)
			ic.cc.cork = nil
		}
		if ic.br != nil {
			ic.br.Reset(nil)
			clientReaders.Put(ic.br)
			ic.bw.Reset(nil)
			clientWriters.Put(ic.bw)
		}
		ic.finish()
	}()
	ic.cc = &clientConn{Conn: ic.client, ic: ic, early: early}
	ic.tc = tls.Server(ic.cc, ic.cfg)
	// The http.Server's bound on the handshake.
	ic.client.SetDeadline(time.Now().Add(s.opts.ReadHeaderTimeout))
	if err := ic.tc.HandshakeContext(ic.ctx); err != nil {
		s.log.Debug("intercepted TLS handshake", "host", ic.x.host, "err", err)
		return
	}
	ic.client.SetDeadline(time.Time{})
	ic.lim = limitedReader{r: ic.tc, n: -1}
	ic.br = clientReaders.Get().(*bufio.Reader)
	ic.br.Reset(&ic.lim)
	ic.bw = clientWriters.Get().(*bufio.Writer)
	ic.bw.Reset(ic.tc)
	for ic.serveOne() {
	}
}

// serveOne relays one request and its answer, and reports whether the
// connection stays open for another.
func (ic *interception) serveOne() bool {
	s, cx := ic.s, ic.x
	// Wait for the request, as the http.Server does: keepAliveTimeout for
	// its first byte, ReadHeaderTimeout for its head.
	deadline := false
	if ic.br.Buffered() == 0 {
		ic.client.SetReadDeadline(time.Now().Add(keepAliveTimeout))
		deadline = true
		if _, err := ic.br.Peek(1); err != nil {
			return false
		}
	}
	buffered, _ := ic.br.Peek(ic.br.Buffered())
	// A head that has arrived whole is read without waiting: no deadline
	// for it (a deadline costs a timer's update, twice).
	end := bytes.Index(buffered, headEnd)
	if end < 0 {
		ic.client.SetReadDeadline(time.Now().Add(s.opts.ReadHeaderTimeout))
		deadline = true
	}
	ic.plain, ic.carried = nil, nil
	if end >= 0 && !s.opts.parsedHeadsOnly {
		ic.plain, ic.carried = ic.readPlain(buffered[:end+len(headEnd)])
	}
	var req *http.Request
	if ic.plain != nil {
		req = ic.plain.request(&ic.plainHTTP, &ic.plainBody)
	} else if req = ic.readParsed(buffered); req == nil {
		return false
	}
	if deadline {
		ic.client.SetReadDeadline(time.Time{})
	}
	s.startBusy()
	defer s.busy.Add(-1)

	x := &exchange{start: time.Now(), method: shorten(req.Method, 32), host: cx.host, hk: cx.hk, port: cx.port,
		allow: true, rule: cx.rule}
	// HTTP/1.0 and Connection: close end the connection after the answer.
	keep := !req.Close && req.ProtoAtLeast(1, 1)
	ic.cont = nil
	if expect := req.Header.Get("Expect"); ic.plain == nil && expect != "" {
		if !httpguts.HeaderValuesContainsToken(req.Header["Expect"], "100-continue") {
			ic.writeRaw(errorAnswer(http.StatusExpectationFailed, ""))
			return false
		}
		// The client waits for 100 Continue before it sends the body:
		// it gets it once the body is read, when the request goes
		// upstream (as from the http.Server), and the upstream gets the
		// body without waiting.
		req.Header.Del("Expect")
		if req.ProtoAtLeast(1, 1) && req.ContentLength != 0 && req.Body != http.NoBody {
			ic.cont = &continueReader{ReadCloser: req.Body, ic: ic}
			req.Body = ic.cont
		}
	}
	var body *countingReader
	if req.Body != nil && req.Body != http.NoBody {
		body = &countingReader{ReadCloser: req.Body}
		req.Body = body
	}
	var down int64
	if ic.plain != nil {
		// readPlain made admit's checks.
		x.credentials = names(ic.carried)
		down, keep = ic.forward(x, req, body, keep)
	} else if ic.admit(x, req) {
		down, keep = ic.forward(x, req, body, keep)
	} else {
		// As the http.Server does with a body the handler left: read up
		// to 256 KiB of it, before the answer, to keep the connection;
		// past that, or if it cannot be read, the answer says that the
		// connection closes.
		keep = ic.mayKeep(keep)
		if keep && body != nil {
			if n, _ := io.CopyN(io.Discard, body, 256<<10+1); n > 256<<10 || body.failed() {
				keep = false
			}
		}
		keep = ic.writeRefusal(req, x, keep)
	}
	if x.status == 0 {
		x.status = http.StatusOK
	}
	if x.reason != "" {
		down = 0 // the proxy's own answer
	}
	if x.masked = ic.mask.take(); len(x.masked) > 0 && !ic.maskWarned {
		ic.maskWarned = true
		s.log.Warn("an answer held a credential's value, masked before the client got it",
			"host", cx.host, "credentials", x.masked)
	}
	s.record(x, body.count(), down, "")
	// Never read another request after a body that failed: the rest of
	// the body would be read as one (forward already says so).
	if body.failed() {
		keep = false
	}
	if !keep {
		ic.closeClient()
	}
	return keep
}

// headEnd ends a request's head, as clients send it.
var headEnd = []byte("\r\n\r\n")

// readParsed reads a request with net/http, from buffered (what the
// reader holds) on, and checks it as the http.Server would; nil if it
// could not be read, after the answer that says why.
func (ic *interception) readParsed(buffered []byte) *http.Request {
	ic.lim.head = append(ic.lim.head[:0], buffered...)
	ic.lim.n, ic.lim.tee, ic.lim.hit = maxHeaderBytes+4096, true, false
	req, err := http.ReadRequest(ic.br)
	ic.lim.n, ic.lim.tee = -1, false
	if err == nil {
		err = checkHead(req, ic.lim.head)
	}
	if cap(ic.lim.head) > 16<<10 {
		ic.lim.head = nil
	} else {
		clear(ic.lim.head)
	}
	if err != nil {
		ic.badRequest(err)
		return nil
	}
	return req
}

// readPlain takes the request whose head is the reader's head (whole,
// not read yet) if it is in the plain subset and admit would let it
// through, and returns it with the credentials it carries; nil leaves the
// request to readParsed and admit, which also make the refusals.
func (ic *interception) readPlain(head []byte) (*plainRequest, []*credential) {
	// Read from a copy: the reader's buffer moves on before a retry
	// writes the request again.
	ic.plainHead = append(ic.plainHead[:0], head...)
	pr, ok := parsePlainRequest(ic.plainHead, ic.plainReq.fields)
	ic.plainReq.fields = pr.fields // kept for the next request
	if !ok || string(pr.host) != ic.sameHostSeen && !ic.sameHost(string(pr.host)) {
		return nil, nil
	}
	carried, ok := ic.s.creds.carriedIn(pr.fields)
	if !ok {
		return nil, nil
	}
	for _, c := range carried {
		if !slices.Contains(ic.x.bound, c) {
			return nil, nil
		}
	}
	pr.host = nil
	ic.plainReq = pr
	ic.plainBody = lengthReader{r: ic.br, n: pr.length}
	ic.br.Discard(len(head))
	return &ic.plainReq, carried
}

// mayKeep is keep, unless the client still waits for 100 Continue to send
// a body: then the connection cannot carry another request.
func (ic *interception) mayKeep(keep bool) bool {
	return keep && (ic.cont == nil || ic.cont.sent)
}

// badRequest answers a request that could not be read as the http.Server
// does: 431 for a head too large, 400 (or what checkHead says) for a
// malformed one, nothing when the client went away or was too slow.
func (ic *interception) badRequest(err error) {
	var re *requestError
	switch {
	case ic.lim.hit:
		ic.writeRaw(errorAnswer(http.StatusRequestHeaderFieldsTooLarge, ""))
	case errors.As(err, &re):
		ic.writeRaw(re.answer)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, net.ErrClosed):
	default:
		var ne net.Error
		if errors.As(err, &ne) {
			return
		}
		if strings.Contains(err.Error(), "unsupported transfer encoding") {
			ic.writeRaw(errorAnswer(http.StatusNotImplemented, "unsupported transfer encoding"))
			return
		}
		ic.writeRaw(errorAnswer(http.StatusBadRequest, ""))
	}
}

// writeRaw sends the client an answer the proxy made whole.
func (ic *interception) writeRaw(b []byte) {
	if b == nil {
		return
	}
	ic.client.SetWriteDeadline(time.Now().Add(5 * time.Second))
	ic.bw.Write(b)
	ic.bw.Flush()
}

// admit checks r and puts its credentials in; false means it is refused,
// with x saying why.
func (ic *interception) admit(x *exchange, r *http.Request) bool {
	if !plainMethods[r.Method] {
		// Not TRACE, above all, which would echo the values back.
		x.refuse(http.StatusMethodNotAllowed, ReasonBadRequest, fmt.Sprintf("method %q is not supported", x.method))
		return false
	}
	if !ic.sameHost(r.Host) {
		x.refuse(http.StatusMisdirectedRequest, ReasonBadRequest,
			fmt.Sprintf("the request is for %q, but its CONNECT was for %s", shorten(r.Host, 255), ic.target))
		return false
	}
	carried := ic.s.creds.carried(r.Header)
	for _, c := range carried {
		if !slices.Contains(ic.x.bound, c) {
			x.refuse(http.StatusForbidden, ReasonCredentialHost, c.misplaced())
			return false
		}
	}
	substitute(r.Header, carried)
	x.credentials = names(carried)
	return true
}

// hopHeaders are the hop-by-hop headers, which a proxy does not forward
// (RFC 9110, 7.6.1; httputil.ReverseProxy's list).
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// removeHopByHop removes the hop-by-hop headers from h, and those that its
// Connection header names.
func removeHopByHop(h http.Header) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

// upgradeType is the protocol that h asks to switch to, if any.
func upgradeType(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// printableASCII reports whether s is printable ASCII.
func printableASCII(s string) bool {
	for i := range len(s) {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// errUpstreamProtocol is an answer the relay cannot pass on.
var errUpstreamProtocol = errors.New("bad answer from the server")

// forward sends req upstream as httputil.ReverseProxy would and relays the
// answer; it returns the bytes of the answer's body sent to the client and
// whether the client connection stays open (keep: whether it may).
func (ic *interception) forward(x *exchange, req *http.Request, body *countingReader, keep bool) (int64, bool) {
	if ic.plain == nil {
		if err := ic.prepare(req); err != nil {
			return 0, ic.failed(x, req, err, keep)
		}
	}
	var (
		uc    *upstreamConn
		resp  *http.Response
		plain *plainResponse
		err   error
	)
	for attempt := 0; ; attempt++ {
		if uc = ic.s.upstreams.get(ic.target); uc == nil {
			if uc, err = ic.s.dialUpstream(ic.ctx, ic.target, ic.x.host); err != nil {
				return 0, ic.failed(x, req, err, keep)
			}
		}
		if !ic.setUpstream(uc) {
			uc.discard()
			return 0, ic.failed(x, req, errShuttingDown, false)
		}
		resp, plain, err = ic.roundTrip(uc, req)
		if err == nil {
			break
		}
		ic.setUpstream(nil)
		uc.discard()
		if body.failed() {
			// The client's body, not the upstream, failed: nothing to
			// try again, and the connection cannot go on.
			ic.s.log.Debug("intercepted request's body unreadable", "host", ic.x.host, "err", ic.s.creds.scrub(err.Error()))
			x.refuse(http.StatusBadRequest, ReasonBadRequest, "the request's body could not be read")
			return 0, ic.writeRefusal(req, x, false)
		}
		// A connection from the pool that the server closed meanwhile:
		// again on a new one, as the Transport does, if the server got
		// nothing of it and no byte of the body was taken.
		if attempt == 0 && uc.used && uc.lim.got == 0 && body.count() == 0 && replayable(req) && !ic.isAborted() {
			continue
		}
		return 0, ic.failed(x, req, err, keep)
	}
	var (
		down                 int64
		clientOK, upstreamOK bool
		closing              bool
	)
	switch {
	case plain != nil:
		down, clientOK, upstreamOK = ic.relayPlainResponse(x, plain, uc, keep)
		closing = plain.close
	case resp.StatusCode == http.StatusSwitchingProtocols:
		ic.upgrade(x, req, resp, uc)
		return 0, false
	default:
		down, clientOK, upstreamOK = ic.relayResponse(x, req, resp, uc, keep)
		closing = resp.Close
	}
	ic.setUpstream(nil)
	// Not back to the pool if abort may have closed it (the client hung
	// up just as the answer ended).
	if upstreamOK && !closing && !ic.isAborted() {
		ic.s.upstreams.put(uc)
	} else {
		uc.discard()
	}
	return down, keep && clientOK
}

// prepare makes req, as net/http read it, the request that goes upstream,
// as httputil.ReverseProxy would send it.
func (ic *interception) prepare(req *http.Request) error {
	upType := upgradeType(req.Header)
	if !printableASCII(upType) {
		return fmt.Errorf("%w: an upgrade to an invalid protocol", errUpstreamProtocol)
	}
	te := httpguts.HeaderValuesContainsToken(req.Header["Te"], "trailers")
	removeHopByHop(req.Header)
	if te {
		req.Header.Set("Te", "trailers")
	}
	if upType != "" {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", upType)
	}
	// No forwarding headers: the server gets the request as the agent sent
	// it, but for the credentials (what ReverseProxy's Rewrite sends).
	for _, k := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		delete(req.Header, k)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = noUserAgent // not Go's own
	}
	// An answer the relay can search for the values (see answerMask).
	req.Header["Accept-Encoding"] = identityOnly
	// The CONNECT's host and port, whatever the request names (admit
	// checked its Host header, which is kept).
	req.URL.Scheme, req.URL.Host, req.URL.User = "https", ic.target, nil
	if req.Host == "" { // HTTP/1.0
		req.Host = strings.TrimSuffix(ic.target, ":443")
	}
	req.Close = false
	if req.ContentLength == 0 {
		req.Body = nil
	} else if req.Body != nil {
		// Request.Write closes the body it is given when it fails; the
		// relay closes it itself, and may retry with it unread.
		req.Body = keepOpen{req.Body}
	}
	return nil
}

// replayable reports whether req may be sent again after its connection
// failed before any answer, as the Transport decides.
func replayable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	_, a := req.Header["Idempotency-Key"]
	_, b := req.Header["X-Idempotency-Key"]
	return a || b
}

// noUserAgent is the User-Agent of a request without one: Request.Write
// then writes none (rather than Go's). Shared: nothing changes it.
var noUserAgent = []string{""}

// identityOnly is the Accept-Encoding of every intercepted request, so
// that the answer's body is not compressed where the values are looked for
// (answerMask). Shared: nothing changes it.
var identityOnly = []string{"identity"}

// keepOpen is a request body that Request.Write cannot close.
type keepOpen struct{ io.ReadCloser }

func (keepOpen) Close() error { return nil }

// roundTrip writes req (or the plain request in progress) on uc and reads
// the answer's head, relaying 1xx answers but 100 (the relay does not ask
// for it) to the client. An answer in the plain subset comes back as
// plain, its head still in uc's reader.
func (ic *interception) roundTrip(uc *upstreamConn, req *http.Request) (resp *http.Response, plain *plainResponse, err error) {
	uc.lim.got = 0
	if ic.plain != nil {
		err = ic.writePlain(uc.bw, req.Body)
	} else {
		err = req.Write(uc.bw)
	}
	if err == nil {
		err = uc.bw.Flush()
	}
	if err != nil {
		return nil, nil, err
	}
	for range 6 {
		uc.lim.n = maxResponseHeaderBytes
		watched := ic.watchIfWaiting(uc)
		// Its first bytes; an error is left for ReadResponse to report.
		if _, perr := uc.br.Peek(1); perr == nil && req.ProtoAtLeast(1, 1) && !ic.s.opts.parsedHeadsOnly {
			plain = ic.readPlainAnswer(uc, req.Method)
		}
		if plain == nil {
			resp, err = http.ReadResponse(uc.br, req)
		}
		if watched {
			ic.unwatch()
		}
		uc.lim.n = -1
		if plain != nil {
			return nil, plain, nil
		}
		if err != nil {
			if uc.lim.hit {
				err = fmt.Errorf("%w: headers too large", errUpstreamProtocol)
			}
			return nil, nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil, nil
		}
		if resp.StatusCode != http.StatusContinue && req.ProtoAtLeast(1, 1) {
			// 103 Early Hints and the like, as ReverseProxy passes them on.
			removeHopByHop(resp.Header)
			ic.mask.maskHeader(resp.Header)
			ic.writeHead(resp.StatusCode, resp.Header, "", false)
			if err := ic.bw.Flush(); err != nil {
				ic.abort()
				return nil, nil, err
			}
		}
	}
	return nil, nil, fmt.Errorf("%w: too many 1xx answers", errUpstreamProtocol)
}

// failed answers a request that could not be forwarded (the upstream
// could not be reached, or failed before its answer) with the proxy's own
// answer, and says whether the client connection stays open.
func (ic *interception) failed(x *exchange, req *http.Request, err error, keep bool) bool {
	if ic.isAborted() {
		err = context.Canceled
		keep = false
	}
	ic.s.upstreamFailed(x, err)
	keep = ic.mayKeep(keep)
	return ic.writeRefusal(req, x, keep) && keep
}

// writeRefusal writes the proxy's own answer for x; keep false adds
// Connection: close. It returns keep, or false if the answer did not go
// out.
func (ic *interception) writeRefusal(req *http.Request, x *exchange, keep bool) bool {
	resp := ic.s.refusal(req, x)
	ic.writeHead(resp.StatusCode, resp.Header, strconv.FormatInt(resp.ContentLength, 10), !keep)
	if req.Method != http.MethodHead {
		io.Copy(ic.bw, resp.Body)
	}
	return ic.bw.Flush() == nil && keep
}

// writeHead writes the status line and headers of an answer to the client,
// as the http.Server did: h, then Content-Length (unless length is empty),
// Date if h has none, Connection: close when closing.
func (ic *interception) writeHead(code int, h http.Header, length string, closing bool) {
	bw := ic.bw
	bw.WriteString("HTTP/1.1 ")
	var scratch [32]byte
	bw.Write(strconv.AppendInt(scratch[:0], int64(code), 10))
	bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code ")
		bw.Write(strconv.AppendInt(scratch[:0], int64(code), 10))
	}
	bw.WriteString("\r\n")
	h.WriteSubset(bw, nil)
	if length != "" {
		bw.WriteString("Content-Length: ")
		bw.WriteString(length)
		bw.WriteString("\r\n")
	}
	if _, ok := h["Date"]; !ok && code >= 200 {
		bw.WriteString("Date: ")
		bw.Write(time.Now().UTC().AppendFormat(scratch[:0], http.TimeFormat))
		bw.WriteString("\r\n")
	}
	if closing {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
}

// relayResponse writes resp, the answer to req read from uc, to the
// client, its body as it comes. It returns the body bytes sent, whether
// the client connection is still good, and whether uc is (its answer read
// to the end).
func (ic *interception) relayResponse(x *exchange, req *http.Request, resp *http.Response, uc *upstreamConn, keep bool) (down int64, clientOK, upstreamOK bool) {
	x.status = resp.StatusCode
	removeHopByHop(resp.Header)
	ic.mask.maskHeader(resp.Header)
	hasBody := req.Method != http.MethodHead && resp.StatusCode != http.StatusNoContent &&
		resp.StatusCode != http.StatusNotModified && resp.ContentLength != 0
	if ic.mask != nil && hasBody {
		if enc, ok := compressed(resp.Header[hdrContentEncoding]); ok {
			resp.Body.Close()
			down, clientOK = ic.refuseEncoded(x, enc, keep)
			return down, clientOK, false
		}
	}
	// A body of unknown length goes chunked to an HTTP/1.1 client, up to
	// the close to an HTTP/1.0 one.
	chunked := hasBody && resp.ContentLength < 0 && req.ProtoAtLeast(1, 1)
	if hasBody && resp.ContentLength < 0 && !chunked {
		keep = false
	}
	h := resp.Header
	if chunked {
		h["Transfer-Encoding"] = []string{"chunked"}
		if len(resp.Trailer) > 0 {
			keys := make([]string, 0, len(resp.Trailer))
			for k := range resp.Trailer {
				keys = append(keys, k)
			}
			h["Trailer"] = []string{strings.Join(keys, ", ")}
		}
	}
	ic.writeHead(resp.StatusCode, h, "", !keep)
	if !hasBody {
		resp.Body.Close()
		return 0, ic.bw.Flush() == nil && keep, true
	}
	body := io.Reader(resp.Body)
	if ic.mask != nil && maskedHeaderBody(resp.Header) {
		body = ic.mask.body(body)
	}
	down, clientOK, upstreamOK = ic.relayBody(uc, body, chunked, func() http.Header { return resp.Trailer })
	return down, clientOK && keep, upstreamOK
}

// relayBody relays an answer's body from uc to the client, as it comes,
// chunked (with the trailer that trailer returns at its end) or not. It
// returns the body bytes sent, whether the client connection is still
// good, and whether uc is (the body read to its end).
func (ic *interception) relayBody(uc *upstreamConn, body io.Reader, chunked bool, trailer func() http.Header) (down int64, clientOK, upstreamOK bool) {
	bp := getBuffer(false)
	defer putBuffer(bp)
	buf := *bp
	var werr error
	for {
		// Never wait for the upstream with bytes for the client held
		// back: that is what streams server-sent events. While more
		// is already waiting in the upstream's socket, the TLS records
		// for the client pile up under the TLS (corked) and go in one
		// write: a 16 KiB record per write(2) cost about a fifth of
		// the proxy's time on large answers.
		watched := false
		if uc.br.Buffered() == 0 {
			if uc.pending() {
				ic.cork()
			} else {
				if werr = ic.flush(); werr != nil {
					break
				}
				watched = ic.watchIfWaiting(uc)
			}
		}
		n, err := body.Read(buf)
		if watched {
			ic.unwatch()
		}
		if n > 0 {
			if chunked {
				var size [16]byte
				ic.bw.Write(strconv.AppendInt(size[:0], int64(n), 16))
				ic.bw.WriteString("\r\n")
			}
			_, werr = ic.bw.Write(buf[:n])
			if chunked {
				ic.bw.WriteString("\r\n")
			}
			if werr != nil {
				break
			}
			down += int64(n)
		}
		if errors.Is(err, io.EOF) {
			upstreamOK = true
			break
		}
		if err != nil {
			// The upstream failed in the middle: the client sees the
			// answer cut off, with the connection.
			ic.s.log.Debug("intercepted answer cut off", "host", ic.x.host, "err", ic.s.creds.scrub(err.Error()))
			ic.flush()
			return down, false, false
		}
	}
	if werr != nil {
		// The client went away. (Not resp.Body.Close, which would read
		// the rest of the body first.)
		ic.uncork()
		return down, false, false
	}
	if chunked {
		ic.bw.WriteString("0\r\n")
		if t := trailer(); len(t) > 0 {
			ic.mask.maskHeader(t)
			t.Write(ic.bw)
		}
		ic.bw.WriteString("\r\n")
	}
	return down, ic.flush() == nil, upstreamOK
}

// cork makes the client connection keep what TLS writes to it, up to a
// bulk buffer's worth, until flush.
func (ic *interception) cork() {
	if ic.cc.cork == nil {
		ic.cc.cork = getBuffer(true)
		ic.cc.corked = (*ic.cc.cork)[:0]
	}
}

// flush sends what the client's buffered writer holds, and what the
// corked connection kept.
func (ic *interception) flush() error {
	err := ic.bw.Flush()
	if uerr := ic.uncork(); err == nil {
		err = uerr
	}
	return err
}

// uncork sends what the corked client connection kept and stops keeping.
func (ic *interception) uncork() error {
	cc := ic.cc
	if cc.cork == nil {
		return nil
	}
	err := cc.writeOut()
	putBuffer(cc.cork)
	cc.cork, cc.corked = nil, nil
	return err
}

// upgrade relays a 101 answer, then joins the client and uc both ways
// until either ends: the connection is the upgraded protocol's, and the
// interception ends with it.
func (ic *interception) upgrade(x *exchange, req *http.Request, resp *http.Response, uc *upstreamConn) {
	reqType, respType := upgradeType(req.Header), upgradeType(resp.Header)
	if reqType == "" || !printableASCII(respType) || !strings.EqualFold(reqType, respType) {
		ic.setUpstream(nil)
		uc.discard()
		// Scrubbed before quoting: the asked-for protocol is the
		// client's header, which may have had a credential put in, and
		// the scrubber would miss a value quoting escaped.
		creds := ic.s.creds
		ic.failed(x, req, fmt.Errorf("%w: switched to protocol %q when %q was asked for", errUpstreamProtocol,
			creds.scrub(respType), creds.scrub(reqType)), false)
		return
	}
	x.status = resp.StatusCode
	ic.writeHead(resp.StatusCode, resp.Header, "", false)
	if ic.bw.Flush() != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(uc.tls, ic.br) // what the client had sent after the request first
		uc.close()
		ic.end("")
	}()
	io.Copy(ic.tc, uc.br)
	ic.end("")
	<-done
	uc.sr.release()
}

// setUpstream sets the upstream connection of the request in progress,
// which end closes; false if the interception has ended.
func (ic *interception) setUpstream(uc *upstreamConn) bool {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if ic.ended && uc != nil {
		return false
	}
	ic.cur = uc
	return true
}

// abort closes the upstream connection of the request in progress: its
// client went away.
func (ic *interception) abort() {
	ic.mu.Lock()
	ic.aborted = true
	uc := ic.cur
	ic.mu.Unlock()
	if uc != nil {
		uc.close()
	}
}

func (ic *interception) isAborted() bool {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return ic.aborted
}

// closeClient ends the client connection after its last answer: a
// close_notify, then the close, once the client has closed its side or
// after half a second (as the http.Server waits before it closes, so that
// the client reads the answer before any reset).
func (ic *interception) closeClient() {
	ic.tc.CloseWrite()
	if canCloseWrite(ic.client) {
		closeWrite(ic.client)
	}
	ic.client.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.Copy(io.Discard, ic.client)
}

// clientWatch watches the client connection while a request waits for
// its upstream: an http.Server reads in the background for that, so that
// a client that hangs up cancels its request (and the upstream stops
// generating an answer nobody reads). The relay watches only once the
// wait has lasted watchDelay, in a goroutine of the timer's, so that a
// quick answer costs no goroutine.
type clientWatch struct {
	mu    sync.Mutex
	timer *time.Timer
	armed bool
	done  chan struct{} // while a watch runs
}

const watchDelay = 50 * time.Millisecond

// watchIfWaiting starts watching the client unless uc has an answer's
// bytes buffered already; true means the caller calls unwatch.
func (ic *interception) watchIfWaiting(uc *upstreamConn) bool {
	if uc.br.Buffered() > 0 {
		return false
	}
	w := &ic.watch
	w.mu.Lock()
	w.armed = true
	w.mu.Unlock()
	if w.timer == nil {
		w.timer = time.AfterFunc(watchDelay, ic.watchClient)
	} else {
		w.timer.Reset(watchDelay)
	}
	return true
}

// watchClient waits for the client's next bytes or its end (the latter
// aborts the request), until unwatch.
func (ic *interception) watchClient() {
	w := &ic.watch
	w.mu.Lock()
	if !w.armed || w.done != nil {
		w.mu.Unlock()
		return
	}
	done := make(chan struct{})
	w.done = done
	w.mu.Unlock()
	defer close(done)
	if _, err := ic.br.Peek(1); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		ic.abort()
	}
}

// unwatch stops watching the client, and waits for a watch in progress.
func (ic *interception) unwatch() {
	w := &ic.watch
	w.mu.Lock()
	w.armed = false
	done := w.done
	w.done = nil
	w.mu.Unlock()
	w.timer.Stop()
	if done != nil {
		ic.client.SetReadDeadline(time.Unix(1, 0))
		<-done
		ic.client.SetReadDeadline(time.Time{})
	}
}

// continueReader is the body of a request that waits for 100 Continue: it
// sends it at the first read.
type continueReader struct {
	io.ReadCloser
	ic   *interception
	sent bool
}

func (r *continueReader) Read(p []byte) (int, error) {
	if !r.sent {
		r.sent = true
		r.ic.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if err := r.ic.bw.Flush(); err != nil {
			return 0, err
		}
	}
	return r.ReadCloser.Read(p)
}

// sameHost reports whether a request's Host (or absolute URL's host) names
// the CONNECT's host, and its port if it names one. An empty Host (HTTP/1.0)
// is the CONNECT's.
func (ic *interception) sameHost(hostport string) bool {
	if hostport == "" || hostport == ic.sameHostSeen {
		return true
	}
	host, portText, err := net.SplitHostPort(hostport)
	if err != nil {
		host, portText = hostport, ""
	}
	h, err := rule.ParseHost(host)
	if err != nil || h != ic.x.hk {
		return false
	}
	if portText != "" {
		if port, ok := rule.ParsePort(portText); !ok || port != ic.x.port {
			return false
		}
	}
	ic.sameHostSeen = hostport
	return true
}

// end closes the connection, and the upstream connection of a request in
// progress, once; reason is the audit reason (empty for a normal end).
func (ic *interception) end(reason string) {
	ic.once.Do(func() {
		ic.reason = reason
		ic.idle.stop()
		ic.cancel()
		ic.mu.Lock()
		ic.ended = true
		uc := ic.cur
		ic.mu.Unlock()
		if uc != nil {
			uc.close()
		}
		ic.client.Close()
	})
}

// finish forgets the ended interception and audits the CONNECT.
func (ic *interception) finish() {
	s := ic.s
	s.mu.Lock()
	delete(s.tunnels, ic)
	s.mu.Unlock()
	s.openTunnels.Add(-1)
	s.record(ic.x, ic.up.Load(), ic.down.Load(), ic.reason)
	s.tunnelWG.Done()
}

// moved counts n bytes into count and moves the idle clock.
func (ic *interception) moved(count *atomic.Int64, n int) {
	if n > 0 {
		count.Add(int64(n))
		ic.idle.touch()
	}
}

// clientConn is the client's side of an interception, under its TLS: it
// reads the bytes the client sent with the CONNECT (early) first, and
// counts the bytes each way. Corked (cork set), it keeps what is written
// in cork until it is full or uncorked; only the relay's goroutine writes.
type clientConn struct {
	net.Conn
	ic     *interception
	early  []byte
	cork   *[]byte // a buffer from getBuffer
	corked []byte  // what it keeps, in *cork
}

func (c *clientConn) Read(p []byte) (int, error) {
	if len(c.early) > 0 {
		n := copy(p, c.early)
		c.early = c.early[n:]
		c.ic.moved(&c.ic.up, n)
		return n, nil
	}
	n, err := c.Conn.Read(p)
	c.ic.moved(&c.ic.up, n)
	return n, err
}

func (c *clientConn) Write(p []byte) (int, error) {
	if c.cork != nil {
		if len(c.corked)+len(p) > cap(c.corked) {
			if err := c.writeOut(); err != nil {
				return 0, err
			}
		}
		if len(p) <= cap(c.corked) {
			c.corked = append(c.corked, p...)
			return len(p), nil
		}
	}
	n, err := c.Conn.Write(p)
	c.ic.moved(&c.ic.down, n)
	return n, err
}

// writeOut writes what the corked connection keeps.
func (c *clientConn) writeOut() error {
	if len(c.corked) == 0 {
		return nil
	}
	n, err := c.Conn.Write(c.corked)
	c.ic.moved(&c.ic.down, n)
	c.corked = c.corked[:0]
	return err
}
