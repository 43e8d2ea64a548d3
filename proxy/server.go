// Package proxy is devaipod's egress proxy: an HTTP forward proxy, built on
// github.com/elazarl/goproxy, that is the agent container's only way out.
//
// It denies by default. A CONNECT tunnel or a plain-HTTP request goes
// through only if an allow rule covers its host and port and no deny rule
// does (see Rule for the forms; the port is 443 unless a rule names
// another, so plain HTTP needs a "host:80" rule). IP literals need a rule
// that names the address. At dial time, after DNS, a connection to a
// loopback, private, link-local, carrier-grade NAT, multicast, cloud
// metadata or otherwise non-public address is refused unless a rule names
// that address (see AddrClass), so a name that resolves, or rebinds, to an
// internal address gets nowhere.
//
// Every decision is written as one JSON line (see Record) to the audit
// writer. A refusal answers 403 with a short text that names the host and
// says how to allow it. The rules are the base rules given to New plus a
// policy file (see Policy) that EditPolicyFile changes while the proxy
// runs.
//
// Ask rules (Options.Ask, the same forms) name what a person may let
// through while the proxy runs: a request that no allow or deny rule
// covers but an ask rule does waits, with nothing sent, until a person
// decides through Options.Approver (see Approver): approved once, it goes
// on as an allowed request; approved for the pod, the rule that allows
// its host and port is added to the policy file first; rejected or not
// decided within Options.AskTimeout, it is refused.
//
// The agent may also ask for a host path it was not given (see
// RequestPathPath): the proxy asks the same Approver, a person decides,
// and devaipod on the host copies the path into the pod.
//
// The proxy does not look inside a CONNECT tunnel, with one exception:
// credentials (see Credential). The agent holds a placeholder for each; a
// CONNECT to a host that a credential is bound to is intercepted: the
// proxy terminates its TLS with a certificate of an authority of its own,
// made fresh in memory at start, constrained to the bound hosts, and served
// to the agent at CAPath (see Server.CACertPEM). It puts the real values in
// place of the placeholders in the headers of the HTTP/1.1 requests inside,
// and forwards them over TLS that it verifies to the CONNECT's host. A
// request that carries a placeholder to any other host, or in plain HTTP,
// is refused. Every other host stays an opaque tunnel.
//
// The package has no dependency on podman: it runs in the helper binary.
package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devaipod/devaipod/proxy/rule"

	"github.com/elazarl/goproxy"
)

// Defaults for Options.
const (
	DefaultMaxTunnels          = 256
	DefaultIdleTimeout         = 10 * time.Minute
	DefaultDialTimeout         = 10 * time.Second
	DefaultReadHeaderTimeout   = 10 * time.Second
	DefaultPolicyCheckInterval = 200 * time.Millisecond
)

// shutdownWait bounds how long Serve waits, after closing everything, for
// requests still in their handlers.
const shutdownWait = 5 * time.Second

// keepAliveTimeout closes a client connection that waits for its next
// request this long.
const keepAliveTimeout = 2 * time.Minute

// Options configure a Server. Zero values mean the defaults.
type Options struct {
	// Pod is the pod's name, used in the audit and in the 403 text
	// ("devaipod allow POD HOST").
	Pod string
	// Allow are the base rules (see Rule).
	Allow []string
	// PolicyFile is the policy file (see Policy), reloaded when it changes;
	// it need not exist. Empty means none.
	PolicyFile string
	// Audit receives one JSON line per decision (see Record); nil discards.
	Audit io.Writer
	// Logger receives operational messages; nil discards.
	Logger *slog.Logger
	// Resolver resolves host names; nil means net.DefaultResolver. Tests use
	// it to map names without /etc/hosts.
	Resolver Resolver
	// RootCAs verify the servers of https:// requests sent to the proxy as
	// plain HTTP and of intercepted hosts (see Credentials); nil means the
	// system roots.
	RootCAs *x509.CertPool
	// Credentials are put into the requests to their hosts (see
	// Credential).
	Credentials []Credential
	// MaxTunnels caps the CONNECT tunnels open at once; beyond it a CONNECT
	// gets 503.
	MaxTunnels int
	// IdleTimeout closes a tunnel that carried no byte in either direction
	// for this long.
	IdleTimeout time.Duration
	// DialTimeout bounds name resolution and connecting, per request.
	DialTimeout time.Duration
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration
	// PolicyCheckInterval is how often, at most, the policy file is checked
	// for changes (on the request path).
	PolicyCheckInterval time.Duration
	// Ask are rules (see Rule) whose requests, when no allow rule covers
	// them, wait for a person's decision through Approver instead of
	// being refused; a deny rule still refuses them unasked. They need
	// Approver and PolicyFile (approvals for the pod are written to it).
	Ask []string
	// AskTimeout is how long a held request waits for a decision
	// (DefaultAskTimeout); then it is refused.
	AskTimeout time.Duration
	// Approver asks a person about the requests Ask rules hold.
	Approver Approver
	// MaxAsks caps the requests that wait for a decision at once
	// (DefaultMaxAsks); beyond it a request an ask rule covers gets 503.
	// Path requests count too.
	MaxAsks int
	// ForbiddenPaths are absolute host paths never shared with the pod:
	// a request for a host path (see RequestPathPath) that is one of them
	// or under one is refused unasked. Lexical: the host, which copies a
	// granted path, checks again after resolving symbolic links. "/"
	// refuses every path request.
	ForbiddenPaths []string

	// parsedHeadsOnly sends every intercepted request and answer through
	// net/http's parser, none through the plain subset (plainhead.go): for
	// the tests that compare the two.
	parsedHeadsOnly bool
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.MaxTunnels == 0 {
		o.MaxTunnels = DefaultMaxTunnels
	}
	def(&o.IdleTimeout, DefaultIdleTimeout)
	def(&o.DialTimeout, DefaultDialTimeout)
	def(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&o.PolicyCheckInterval, DefaultPolicyCheckInterval)
	def(&o.AskTimeout, DefaultAskTimeout)
	if o.MaxAsks == 0 {
		o.MaxAsks = DefaultMaxAsks
	}
	if o.Audit == nil {
		o.Audit = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	return o
}

// Server is the proxy. It implements http.Handler; Serve runs it on a
// listener and cleans up after it.
type Server struct {
	opts   Options
	log    *slog.Logger
	audit  *auditor
	policy *policySource
	guard  *guard
	gp     *goproxy.ProxyHttpServer
	// acceptTunnel is allowConnect's answer to an allowed CONNECT: goproxy
	// hijacks the connection and hands it to serveTunnel; acceptIntercept
	// the answer to one that credentials are bound to (serveIntercept).
	acceptTunnel, acceptIntercept *goproxy.ConnectAction
	creds                         *credentials  // nil when none
	forbidden                     []string      // Options.ForbiddenPaths, clean
	askRules                      *rule.Matcher // nil without ask rules
	ca                            *authority    // nil without credentials
	// upstreams are the interceptions' connections to their hosts.
	upstreams *upstreams

	openTunnels atomic.Int64 // reserved tunnel slots
	// busy counts the intercepted requests in progress, busyPeak the most
	// at once since AdaptMaxProcs last looked.
	busy, busyPeak atomic.Int64
	asking         atomic.Int64 // requests waiting for a decision
	// serveCtx is Serve's context: done when the proxy stops, which
	// ends held requests with 503.
	serveCtx atomic.Pointer[context.Context]

	mu       sync.Mutex
	serving  bool
	closing  bool
	tunnels  map[hijacked]struct{}
	conns    map[net.Conn]struct{} // connections whose CONNECT request serveConn reads
	handlers sync.WaitGroup        // ServeHTTP calls in progress
	tunnelWG sync.WaitGroup        // tunnels and interceptions not yet ended
}

// hijacked serves an allowed CONNECT after its 200: a tunnel or an
// interception. It audits the CONNECT when it ends; Serve ends those still
// open when it stops.
type hijacked interface {
	// end closes the connections, once; reason is the audit reason
	// (empty for a normal end).
	end(reason string)
}

// New checks opts, reads the policy file and returns a server. A bad rule, a
// bad credential or a malformed policy file is an error. With credentials,
// it makes the certificate authority of intercepted hosts.
func New(opts Options) (*Server, error) {
	opts = opts.withDefaults()
	switch {
	case opts.MaxTunnels < 0:
		return nil, fmt.Errorf("max tunnels %d is negative", opts.MaxTunnels)
	case opts.MaxAsks < 0:
		return nil, fmt.Errorf("max asks %d is negative", opts.MaxAsks)
	case opts.IdleTimeout < 0, opts.DialTimeout < 0, opts.ReadHeaderTimeout < 0, opts.PolicyCheckInterval < 0, opts.AskTimeout < 0:
		return nil, errors.New("timeouts must not be negative")
	case len(opts.Ask) > 0 && opts.Approver == nil:
		return nil, errors.New("ask rules need an approver")
	case len(opts.Ask) > 0 && opts.PolicyFile == "":
		return nil, errors.New("ask rules need a policy file (approvals for the pod are written to it)")
	}
	base, err := rule.ParseAll(opts.Allow)
	if err != nil {
		return nil, err
	}
	ask, err := rule.ParseAll(opts.Ask)
	if err != nil {
		return nil, fmt.Errorf("ask: %w", err)
	}
	creds, err := compileCredentials(opts.Credentials)
	if err != nil {
		return nil, err
	}
	forbidden, err := checkForbiddenPaths(opts.ForbiddenPaths)
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts:      opts,
		forbidden: forbidden,
		log:       opts.Logger,
		audit:     newAuditor(opts.Pod, opts.Logger, opts.Audit),
		creds:     creds,
		tunnels:   make(map[hijacked]struct{}),
		conns:     make(map[net.Conn]struct{}),
	}
	if len(ask) > 0 {
		s.askRules = rule.NewMatcher(ask...)
	}
	if creds != nil {
		if s.ca, err = newAuthority(opts.Pod, creds.rules()); err != nil {
			return nil, fmt.Errorf("make the certificate authority: %w", err)
		}
		s.upstreams = newUpstreams()
	}
	s.policy, err = newPolicySource(base, opts.PolicyFile, opts.PolicyCheckInterval, s.policyChanged)
	if err != nil {
		return nil, err
	}
	s.guard = &guard{
		resolver: opts.Resolver,
		timeout:  opts.DialTimeout,
		exempt:   func(a netip.Addr, port int) bool { return s.policy.current().allowsAddr(a, port) },
		approved: approvedAddr,
	}
	s.acceptTunnel = &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: s.serveTunnel}
	s.acceptIntercept = &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: s.serveIntercept}
	s.gp = s.newGoproxy()
	return s, nil
}

// newGoproxy sets up goproxy so that nothing gets through that no rule
// allows: goproxy accepts every CONNECT that no handler answers, and
// forwards every plain request that no handler answers, so each chain ends
// with a handler that refuses whatever was not allowed.
func (s *Server) newGoproxy() *goproxy.ProxyHttpServer {
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = goproxyLogger{s.log}
	gp.Verbose = false
	gp.AllowHTTP2 = false
	// Pass the client's Accept-Encoding and the server's encoding through
	// untouched, as a proxy should.
	gp.KeepAcceptEncoding = true
	gp.NonproxyHandler = http.HandlerFunc(s.serveNonProxy)
	// Not goproxy's default, which skips nothing in v1.9.2 but follows
	// HTTP(S)_PROXY from the environment: the proxy dials directly, through
	// the guard, and verifies TLS. Interceptions use it too; it speaks
	// HTTP/1.1 only (a TLS config of its own and no ForceAttemptHTTP2).
	gp.Tr = &http.Transport{
		Proxy:                 nil,
		DialContext:           s.guard.dialContext,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: s.opts.RootCAs},
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		// Enough idle connections per host for a busy intercepted host
		// (an LLM API): past them, each request to it paid a new TLS
		// handshake upstream (docs/benchmarks-proxy.md).
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		DisableCompression:  true,
	}
	// goproxy dials no CONNECT itself: an allowed one is hijacked to
	// serveTunnel, which dials through the guard. Both of goproxy's CONNECT
	// dialers (ConnectDialWithReq takes precedence; ConnectDial is by
	// default chained through $HTTPS_PROXY) refuse, so that no path dials
	// without a decision.
	gp.ConnectDialWithReq = func(*http.Request, string, string) (net.Conn, error) {
		return nil, errors.New("CONNECT dial outside serveTunnel")
	}
	gp.ConnectDial = func(string, string) (net.Conn, error) {
		return nil, errors.New("CONNECT dial without a request")
	}
	gp.ConnectionErrHandler = s.connectError

	gp.OnRequest().HandleConnectFunc(s.allowConnect)
	gp.OnRequest().HandleConnectFunc(s.rejectConnect) // the final reject
	gp.OnRequest().DoFunc(s.allowHTTP)
	gp.OnRequest(goproxy.ReqConditionFunc(notAllowed)).DoFunc(s.rejectHTTP) // the final reject
	gp.OnResponse().DoFunc(s.upstreamError)
	return gp
}

// exchange is what the proxy knows about one request, from decision to
// audit record. It travels in the request's context. Only the request's
// handler goroutine writes it; a tunnel reads it when it ends.
type exchange struct {
	start   time.Time
	method  string
	host    string // normalised, or the raw host shortened if it did not parse
	hk      rule.Host
	port    int
	allow   bool
	rule    string
	reason  string
	detail  string
	status  int
	suggest string   // the rule that would allow the address, for private-address
	slot    bool     // holds a tunnel slot
	served  hijacked // serves an allowed CONNECT after its 200, and audits it
	// bound are the credentials bound to a CONNECT's host and port (it is
	// intercepted); credentials the names of those put into a request,
	// masked of those whose value its answer held (answerMask).
	bound       []*credential
	credentials []string
	masked      []string
	// fast: serveConn read the request (a CONNECT); early are the bytes
	// the client sent after it without waiting for the answer, which the
	// tunnel sends first (an interception reads them first).
	fast  bool
	early []byte
	// unaudited: the proxy's own answer that is not a decision on egress
	// (its CA for the agent).
	unaudited bool
	// askRule is the ask rule that covers a request no allow or deny rule
	// does, askFor the rule that would allow exactly its host and port;
	// decidedBy who approved or rejected it; exemptAddr the address of
	// an approved IP literal, which the guard lets through (written
	// before the dial, only read after).
	askRule, askFor string
	decidedBy       string
	exemptAddr      netip.AddrPort
	// conn is the client's connection of a CONNECT that serveConn read
	// (fast), watched for a hang-up while the request waits for a
	// decision.
	conn net.Conn
}

type exchangeKey struct{}

func exchangeOf(r *http.Request) *exchange {
	if r == nil {
		return nil
	}
	x, _ := r.Context().Value(exchangeKey{}).(*exchange)
	return x
}

func (x *exchange) refuse(status int, reason, detail string) {
	x.allow = false
	x.status, x.reason, x.detail = status, reason, detail
	if reason != ReasonDenied {
		x.rule = ""
	}
}

// ServeHTTP handles one proxy request and audits it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		http.Error(w, "devaipod proxy: shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.handlers.Done()

	x := exchangeOf(r) // serveConn's
	if x == nil {
		x = &exchange{start: time.Now(), method: shorten(r.Method, 32)}
		r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, x))
	}

	if r.Method == http.MethodConnect {
		s.gp.ServeHTTP(w, r)
		if x.served != nil {
			return // audited by the tunnel or interception when it ends
		}
		if x.slot {
			s.openTunnels.Add(-1)
		}
		if x.status == 0 {
			// goproxy gave up before deciding or dialling (a failed hijack).
			x.refuse(http.StatusInternalServerError, ReasonBadRequest, "connection lost")
		}
		s.record(x, 0, 0, "")
		return
	}

	sw := &statusWriter{ResponseWriter: w}
	var body *countingReader
	if r.Body != nil && r.Body != http.NoBody {
		body = &countingReader{ReadCloser: r.Body}
		r.Body = body
	}
	s.gp.ServeHTTP(sw, r)
	x.status = sw.status
	if x.status == 0 {
		x.status = http.StatusOK
	}
	down := sw.n
	if x.reason != "" {
		down = 0 // the proxy's own answer, not a transfer
	}
	s.record(x, body.count(), down, "")
}

func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.handlers.Add(1)
	return true
}

// decide applies the policy to host (as the client wrote it) and port, and
// fills in x.
func (s *Server) decide(x *exchange, host string, port int) bool {
	x.port = port
	x.host = shorten(host, 255)
	hk, err := rule.ParseHost(host)
	switch {
	case errors.Is(err, rule.ErrNumericName):
		x.refuse(http.StatusForbidden, ReasonIPLiteral, "host reads as an IP address but is not a valid one")
		return false
	case err != nil:
		x.refuse(http.StatusBadRequest, ReasonBadRequest, "bad host: "+err.Error())
		return false
	}
	x.hk, x.host = hk, hk.String()
	ruleText, allow, ok := s.policy.current().decide(hk, port)
	x.rule = ruleText
	if !ok && s.askRules != nil {
		// No allow and no deny rule: the caller asks if an ask rule
		// covers it.
		if askRule, asked := s.askRules.MatchHost(hk, port); asked {
			x.askRule, x.askFor = askRule, ruleFor(hk, port)
		}
	}
	switch {
	case ok && allow:
		x.allow = true
		return true
	case ok:
		x.refuse(http.StatusForbidden, ReasonDenied, "denied by rule "+ruleText)
	case hk.Addr.IsValid():
		x.refuse(http.StatusForbidden, ReasonIPLiteral, "no rule names this address")
	default:
		x.refuse(http.StatusForbidden, ReasonNotAllowed, "no rule allows it")
	}
	return false
}

// allowConnect is the CONNECT decision. It answers only for allowed
// requests; everything else falls through to rejectConnect.
func (s *Server) allowConnect(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	x := exchangeOf(ctx.Req)
	if x == nil {
		return nil, ""
	}
	h, portText, err := net.SplitHostPort(host)
	if err != nil || h == "" {
		x.host = shorten(host, 255)
		x.refuse(http.StatusBadRequest, ReasonBadRequest, "CONNECT wants host:port")
		return nil, ""
	}
	port, ok := rule.ParsePort(portText)
	if !ok {
		x.host = shorten(h, 255)
		x.refuse(http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf("bad port %q", shorten(portText, 16)))
		return nil, ""
	}
	if !s.decide(x, h, port) && (x.askRule == "" || !s.ask(ctx.Req.Context(), x, connectWhat(x))) {
		return nil, ""
	}
	if !s.reserveTunnel() {
		x.refuse(http.StatusServiceUnavailable, ReasonTunnelLimit,
			fmt.Sprintf("%d tunnels open, the limit", s.opts.MaxTunnels))
		return nil, ""
	}
	x.slot = true
	if x.bound = s.creds.boundTo(x.hk, port); len(x.bound) > 0 {
		return s.acceptIntercept, net.JoinHostPort(x.host, strconv.Itoa(port))
	}
	return s.acceptTunnel, net.JoinHostPort(x.host, strconv.Itoa(port))
}

func (s *Server) reserveTunnel() bool {
	for {
		n := s.openTunnels.Load()
		if n >= int64(s.opts.MaxTunnels) {
			return false
		}
		if s.openTunnels.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// plainMethods are the methods a plain-HTTP request may use.
var plainMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// allowHTTP is the plain-HTTP decision. It lets an allowed request through
// with the host normalised; rejectHTTP refuses the rest.
func (s *Server) allowHTTP(r *http.Request, _ *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	x := exchangeOf(r)
	if x == nil {
		return r, nil
	}
	x.host = shorten(r.URL.Hostname(), 255)
	if !plainMethods[r.Method] {
		x.refuse(http.StatusMethodNotAllowed, ReasonBadRequest, fmt.Sprintf("method %q is not supported", x.method))
		return r, nil
	}
	var port int
	switch r.URL.Scheme {
	case "http":
		port = 80
	case "https":
		port = 443
	default:
		x.refuse(http.StatusBadRequest, ReasonBadRequest,
			fmt.Sprintf("scheme %q is not supported (http or https; HTTPS clients use CONNECT)", shorten(r.URL.Scheme, 16)))
		return r, nil
	}
	if r.URL.User != nil {
		x.refuse(http.StatusBadRequest, ReasonBadRequest, "user information in the URL")
		return r, nil
	}
	if p := r.URL.Port(); p != "" {
		var ok bool
		if port, ok = rule.ParsePort(p); !ok {
			x.refuse(http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf("bad port %q", shorten(p, 16)))
			return r, nil
		}
	}
	// Credentials go only into intercepted HTTPS, never into cleartext or
	// a request that the proxy does not check; so a placeholder here is
	// refused whatever the host (which lets verify attack this with a
	// host on no allowlist).
	if carried := s.creds.carried(r.Header); len(carried) > 0 {
		x.port = port
		x.refuse(http.StatusForbidden, ReasonCredentialHost, carried[0].misplaced())
		return r, nil
	}
	if !s.decide(x, r.URL.Hostname(), port) && (x.askRule == "" || !s.ask(r.Context(), x, httpWhat(r, x))) {
		return r, nil
	}
	// Dial exactly what was decided on.
	r.URL.Host = net.JoinHostPort(x.host, strconv.Itoa(port))
	return r, nil
}

// Serve accepts proxy connections on ln until ctx is done, then closes ln,
// every connection and every tunnel, waits for the requests in progress and
// returns nil. It returns early, with an error, if ln fails. Serve may be
// called once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.serving || s.closing {
		s.mu.Unlock()
		return errors.New("proxy: Serve called twice")
	}
	s.serving = true
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.serveCtx.Store(&ctx)
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		IdleTimeout:       keepAliveTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	// The http.Server gets the connections that do not start with a
	// CONNECT (see serveConn).
	plain := newHandoff(ln.Addr())
	httpDone := make(chan error, 1)
	go func() { httpDone <- hs.Serve(plain) }()
	acceptDone := make(chan error, 1)
	go func() { acceptDone <- s.accept(ctx, ln, plain) }()

	var err error
	select {
	case <-ctx.Done():
	case err = <-acceptDone:
		err = fmt.Errorf("serve: %w", err)
		acceptDone = nil
	}

	// Stop: the listener and plain connections, then the requests in
	// progress (their context; held ones get 503), then the connections
	// that serveConn reads and the tunnels and interceptions, which the
	// http.Server does not know.
	cancel()
	ln.Close()
	hs.Close()
	s.mu.Lock()
	s.closing = true
	open := make([]hijacked, 0, len(s.tunnels))
	for t := range s.tunnels {
		open = append(open, t)
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	for _, t := range open {
		t.end(ReasonShutdown)
	}
	done := make(chan struct{})
	go func() {
		s.handlers.Wait()
		s.tunnelWG.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(shutdownWait):
		s.log.Warn("requests still running after shutdown", "wait", shutdownWait)
	}
	s.gp.Tr.CloseIdleConnections()
	if s.upstreams != nil {
		s.upstreams.closeIdle()
	}
	if acceptDone != nil {
		<-acceptDone
	}
	<-httpDone // http.ErrServerClosed
	s.audit.finish()
	return err
}
