package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devaipod/devaipod/proxy/rule"

	"github.com/elazarl/goproxy"
)

// An allowed CONNECT to a host and port that a credential is bound to is
// not a tunnel: allowConnect answers it with ConnectHijack to
// serveIntercept, which terminates the client's TLS with a certificate of
// the proxy's authority (see authority) and serves the HTTP/1.1 requests
// inside with an http.Server of its own (keep-alive, 100-continue, chunked
// bodies, the main server's limits). Each request is checked (the Host
// header must name the CONNECT's host; no placeholder of a credential
// bound elsewhere), gets the values of its credentials in its headers and
// goes, with httputil.ReverseProxy and the proxy's transport (the guard's
// dialer, verified TLS), to the CONNECT's host and port, whatever its Host
// header says. Bodies stream both ways, unbuffered. Every request is
// audited, and the CONNECT is, like a tunnel, when its connection ends.

// interception is one intercepted CONNECT.
type interception struct {
	s      *Server
	x      *exchange // the CONNECT's
	client net.Conn
	cert   *tls.Certificate
	srv    *http.Server
	rp     *httputil.ReverseProxy
	cancel context.CancelFunc // cancels the requests' context

	up, down atomic.Int64 // bytes from and to the client, TLS included
	idle     idleWatch    // its clock moves with each byte either way

	once   sync.Once
	reason string // the audit reason of the end, set in once

	// released is closed once the http.Server is done with the
	// connection; handlers counts the requests being served (an upgraded
	// one outlives the server's hold on the connection).
	released    chan struct{}
	releaseOnce sync.Once
	handlers    sync.WaitGroup
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
	cert, err := s.ca.leaf(x.hk)
	if err != nil {
		s.log.Error("make a certificate", "host", x.host, "err", err)
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ic := &interception{s: s, x: x, client: client, cert: cert, cancel: cancel, released: make(chan struct{})}
	ic.srv = &http.Server{
		Handler:           http.HandlerFunc(ic.serveRequest),
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		IdleTimeout:       keepAliveTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          s.errorLog,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnState:         ic.connState,
		// Not nil: no HTTP/2 (the TLS offers http/1.1 only anyway).
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	target := net.JoinHostPort(x.host, strconv.Itoa(x.port))
	ic.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The CONNECT's host and port, whatever the request names
			// (admit checked its Host header, which is kept). No
			// X-Forwarded headers (Rewrite adds none unless asked): the
			// server gets the request as the agent sent it, but for the
			// credentials.
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = target
			pr.Out.URL.User = nil
			if pr.Out.Host == "" { // HTTP/1.0
				pr.Out.Host = strings.TrimSuffix(target, ":443")
			}
		},
		Transport: s.gp.Tr,
		// No FlushInterval: ReverseProxy already sends each piece as it
		// arrives for server-sent events and for bodies of unknown length
		// (streamed completions); -1 would cost every response a timer
		// and a write of its own for the headers.
		BufferPool: responseBuffers{},
		ErrorLog:   s.errorLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			rx := exchangeOf(r)
			s.upstreamFailed(rx, err)
			s.writeRefusal(w, r, rx)
		},
	}
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

// run serves the requests on the connection, the client's early bytes
// first, until it ends, and audits the CONNECT.
func (ic *interception) run(early []byte) {
	tc := tls.Server(&clientConn{Conn: ic.client, ic: ic, early: early}, &tls.Config{
		Certificates: []tls.Certificate{*ic.cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	// Serve returns once the connection is released (see oneConnListener).
	ic.srv.Serve(&oneConnListener{conn: tc, released: ic.released})
	ic.handlers.Wait()
	ic.end("")
	ic.finish()
}

// connState releases the connection when the http.Server is done with it.
func (ic *interception) connState(_ net.Conn, state http.ConnState) {
	if state == http.StateClosed || state == http.StateHijacked {
		ic.releaseOnce.Do(func() { close(ic.released) })
	}
}

// serveRequest serves one request of the intercepted connection and
// audits it.
func (ic *interception) serveRequest(w http.ResponseWriter, r *http.Request) {
	ic.handlers.Add(1)
	defer ic.handlers.Done()
	s, cx := ic.s, ic.x
	x := &exchange{start: time.Now(), method: shorten(r.Method, 32), host: cx.host, hk: cx.hk, port: cx.port,
		allow: true, rule: cx.rule}
	sw := &statusWriter{ResponseWriter: w}
	var body *countingReader
	if r.Body != nil && r.Body != http.NoBody {
		body = &countingReader{ReadCloser: r.Body}
		r.Body = body
	}
	// Deferred: ReverseProxy panics with http.ErrAbortHandler when copying
	// the response fails (the client went away), and the request is
	// audited all the same.
	defer func() {
		x.status = sw.status
		if x.status == 0 {
			x.status = http.StatusOK
		}
		down := sw.n
		if x.reason != "" {
			down = 0 // the proxy's own answer
		}
		s.record(x, body.count(), down, "")
	}()
	if !ic.admit(x, r) {
		s.writeRefusal(sw, r, x)
		return
	}
	ic.rp.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, x)))
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
		target := net.JoinHostPort(ic.x.host, strconv.Itoa(ic.x.port))
		x.refuse(http.StatusMisdirectedRequest, ReasonBadRequest,
			fmt.Sprintf("the request is for %q, but its CONNECT was for %s", shorten(r.Host, 255), target))
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

// sameHost reports whether a request's Host (or absolute URL's host) names
// the CONNECT's host, and its port if it names one. An empty Host (HTTP/1.0)
// is the CONNECT's.
func (ic *interception) sameHost(hostport string) bool {
	if hostport == "" {
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
	if portText == "" {
		return true
	}
	port, ok := rule.ParsePort(portText)
	return ok && port == ic.x.port
}

// end closes the connection, which ends the requests in progress, once;
// reason is the audit reason (empty for a normal end).
func (ic *interception) end(reason string) {
	ic.once.Do(func() {
		ic.reason = reason
		ic.idle.stop()
		ic.cancel()
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
// counts the bytes each way.
type clientConn struct {
	net.Conn
	ic    *interception
	early []byte
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
	n, err := c.Conn.Write(p)
	c.ic.moved(&c.ic.down, n)
	return n, err
}

// oneConnListener hands an http.Server one connection, then blocks until
// the connection is released and fails, which ends the server's Serve.
type oneConnListener struct {
	conn     net.Conn
	released <-chan struct{}
	given    bool
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if !l.given {
		l.given = true
		return l.conn, nil
	}
	<-l.released
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error { return nil }

func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

// responseBuffers lends ReverseProxy the tunnels' copy buffers: a fresh
// 32 KiB buffer per response was most of what an intercepted request
// allocated.
type responseBuffers struct{}

func (responseBuffers) Get() []byte { return *getBuffer(false) }

func (responseBuffers) Put(b []byte) {
	if cap(b) == copyBufferSize {
		b = b[:copyBufferSize]
		putBuffer(&b)
	}
}
