package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/devaipod/devaipod/proxy/rule"

	"github.com/elazarl/goproxy"
)

// rejectConnect is the last CONNECT handler: it refuses whatever reaches it.
func (s *Server) rejectConnect(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	x := exchangeOf(ctx.Req)
	if x == nil {
		x = &exchange{method: http.MethodConnect, host: shorten(host, 255)}
	}
	if x.allow || x.status == 0 {
		x.refuse(http.StatusForbidden, ReasonNotAllowed, "no rule allows it")
	}
	ctx.Resp = s.refusal(ctx.Req, x)
	return &goproxy.ConnectAction{Action: goproxy.ConnectReject}, host
}

var errShuttingDown = errors.New("the proxy is shutting down")

// connectError answers a CONNECT that goproxy failed to dial: 403 if the
// guard refused the address, 502 otherwise. goproxy's dialers refuse
// everything (serveTunnel dials), so only a CONNECT that reached goproxy's
// own tunnel path gets here.
func (s *Server) connectError(w io.Writer, ctx *goproxy.ProxyCtx, err error) {
	x := exchangeOf(ctx.Req)
	if x == nil || x.served != nil {
		// goproxy also calls this for copy errors inside its tunnels;
		// never write into a tunnel.
		return
	}
	s.upstreamFailed(x, err)
	if err := s.refusal(ctx.Req, x).Write(w); err != nil {
		s.log.Debug("write CONNECT refusal", "host", x.host, "err", err)
	}
}

func notAllowed(r *http.Request, _ *goproxy.ProxyCtx) bool {
	x := exchangeOf(r)
	return x == nil || !x.allow
}

// rejectHTTP is the last request handler: it refuses whatever reaches it.
func (s *Server) rejectHTTP(r *http.Request, _ *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	x := exchangeOf(r)
	if x == nil {
		x = &exchange{method: shorten(r.Method, 32), host: shorten(r.URL.Hostname(), 255)}
	}
	if x.allow || x.status == 0 {
		x.refuse(http.StatusForbidden, ReasonNotAllowed, "no rule allows it")
	}
	return r, s.refusal(r, x)
}

// upstreamError turns a failed round trip into a short 403 or 502 instead of
// goproxy's 500 with the whole error.
func (s *Server) upstreamError(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
	if resp != nil {
		return resp
	}
	x := exchangeOf(ctx.Req)
	if x == nil {
		x = &exchange{}
	}
	err := ctx.Error
	if err == nil {
		err = errors.New("no response")
	}
	s.upstreamFailed(x, err)
	return s.refusal(ctx.Req, x)
}

// upstreamFailed records a failed dial or round trip in x.
func (s *Server) upstreamFailed(x *exchange, err error) {
	var be *BlockedError
	if errors.As(err, &be) {
		x.refuse(http.StatusForbidden, ReasonPrivateAddress, be.Error())
		x.suggest = rule.Rule{Addr: be.Addr, Port: x.port}.String()
		return
	}
	s.log.Debug("upstream failed", "host", x.host, "port", x.port, "err", s.creds.scrub(err.Error()))
	x.status, x.reason, x.detail = http.StatusBadGateway, ReasonUpstreamError, describeError(err)
}

// describeError says in a few words why connecting or talking to a server
// failed, without the internals.
func describeError(err error) string {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var netErr net.Error
	switch {
	case errors.Is(err, errShuttingDown):
		return errShuttingDown.Error()
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return "no such host"
		}
		return "name resolution failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case errors.As(err, &certErr):
		return "the server's TLS certificate is not trusted"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timed out"
	}
	return "connection failed"
}

// serveNonProxy answers requests that are not proxy requests (a path
// instead of an absolute URL): the certificate authority at CAPath, a
// request for a host path at RequestPathPath, a refusal otherwise.
func (s *Server) serveNonProxy(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	if x == nil {
		x = &exchange{}
	}
	x.host = shorten(r.Host, 255)
	if r.URL.Path == CAPath && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		s.serveCA(w, r, x)
		return
	}
	if r.URL.Path == RequestPathPath {
		s.servePathRequest(w, r, x)
		return
	}
	x.refuse(http.StatusBadRequest, ReasonBadRequest, "not a proxy request: the request target must be an absolute URL")
	s.writeRefusal(w, r, x)
}

// writeRefusal writes the refusal of req (see refusal) to w.
func (s *Server) writeRefusal(w http.ResponseWriter, req *http.Request, x *exchange) {
	resp := s.refusal(req, x)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// refusal builds the plain-text answer to a refused or failed request.
func (s *Server) refusal(req *http.Request, x *exchange) *http.Response {
	body := s.message(x)
	h := make(http.Header)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Devaipod-Proxy", x.reason)
	resp := &http.Response{
		StatusCode:    x.status,
		Status:        fmt.Sprintf("%d %s", x.status, http.StatusText(x.status)),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		ContentLength: int64(len(body)),
		Body:          io.NopCloser(strings.NewReader(body)),
	}
	if req != nil && req.Method == http.MethodConnect {
		resp.Close = true // goproxy closes the connection after it
	} else {
		resp.Request = req
	}
	return resp
}

// message is the body of a refusal: what happened, and how to allow it.
func (s *Server) message(x *exchange) string {
	pod := s.opts.Pod
	if pod == "" {
		pod = "NAME"
	}
	target := net.JoinHostPort(x.host, strconv.Itoa(x.port))
	const configHint = "(or add it to [network] allow in your devaipod.toml)\n"
	switch x.reason {
	case ReasonNotAllowed:
		return fmt.Sprintf("devaipod proxy: %s is not on the allowlist of pod %s.\nAllow it with: devaipod allow %s %s\n%s",
			target, pod, pod, ruleFor(x.hk, x.port), configHint)
	case ReasonIPLiteral:
		if !x.hk.Addr.IsValid() {
			return fmt.Sprintf("devaipod proxy: %q reads as an IP address but is not a valid one; use a host name.\n", x.host)
		}
		return fmt.Sprintf("devaipod proxy: %s is an IP address, and pod %s reaches addresses only when a rule names them.\nAllow it with: devaipod allow %s %s\n%s",
			target, pod, pod, ruleFor(x.hk, x.port), configHint)
	case ReasonDenied:
		return fmt.Sprintf("devaipod proxy: %s is denied by the rule %s of pod %s (devaipod deny).\nLift it with: devaipod allow %s %s\n",
			target, x.rule, pod, pod, x.rule)
	case ReasonPrivateAddress:
		return fmt.Sprintf("devaipod proxy: %s refused: %s.\nIf pod %s should reach that address, allow the address too: devaipod allow %s %s\n%s",
			target, x.detail, pod, pod, x.suggest, configHint)
	case ReasonTunnelLimit:
		return fmt.Sprintf("devaipod proxy: pod %s has %d tunnels open, the limit; try again later.\n", pod, s.opts.MaxTunnels)
	case ReasonUpstreamError:
		return fmt.Sprintf("devaipod proxy: cannot reach %s: %s.\n", target, x.detail)
	case ReasonCredentialHost:
		return fmt.Sprintf("devaipod proxy: request to %s refused, nothing was sent: %s.\n", target, x.detail)
	case ReasonRejected:
		// The detail is the person's word, made printable (see ask).
		return fmt.Sprintf("devaipod proxy: %s was %s.\n", target, strings.TrimRight(x.detail, "."))
	case ReasonAskTimeout:
		return fmt.Sprintf("devaipod proxy: %s waited %v for a person's decision (ask rule %s of pod %s) and got none; nothing was sent.\nAllow it with: devaipod allow %s %s\n%s",
			target, s.opts.AskTimeout, x.askRule, pod, pod, x.askFor, configHint)
	case ReasonAskLimit:
		return fmt.Sprintf("devaipod proxy: pod %s has %d requests waiting for a decision, the limit; %s was not asked about. Try again later.\n",
			pod, s.opts.MaxAsks, target)
	case ReasonAskFailed, ReasonAskCanceled:
		return fmt.Sprintf("devaipod proxy: %s refused, nothing was sent: %s.\n", target, x.detail)
	case ReasonEncodedAnswer:
		return fmt.Sprintf("devaipod proxy: the answer of %s was refused: %s.\n", target, x.detail)
	case ReasonShutdown:
		return fmt.Sprintf("devaipod proxy: the proxy of pod %s is stopping; %s refused, nothing was sent.\n", pod, target)
	default:
		return fmt.Sprintf("devaipod proxy: bad request: %s.\n", x.detail)
	}
}

// ruleFor is the rule that allows exactly host and port.
func ruleFor(h rule.Host, port int) string {
	if h.Addr.IsValid() {
		return rule.Rule{Addr: h.Addr, Port: port}.String()
	}
	return rule.Rule{Name: h.Name, Port: port}.String()
}
