package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Asking a person. A CONNECT or plain-HTTP request that no allow rule
// covers, and no deny rule, but an ask rule does (Options.Ask), is held:
// the client waits for its answer and nothing is sent on its behalf while
// the proxy asks Options.Approver and waits, at most
// Options.AskTimeout, for a person's decision. Approved, the request goes
// on exactly as an allowed one (the guard, the tunnel or interception,
// the audit); approved for the pod, the proxy first adds the rule that
// allows exactly its host and port to its policy file, as devaipod allow
// does, so later requests need no one. Rejected, timed out or cut short,
// it is refused. A deny rule wins over an ask rule and is never asked
// about. At most Options.MaxAsks requests wait at once; a held request
// holds no tunnel slot.

// Defaults of the ask options.
const (
	DefaultAskTimeout = time.Minute
	DefaultMaxAsks    = 32
)

// AskRulePrefix starts the Rule of the audit records of a request that an
// ask rule held: "ask:*.pkg.example.test".
const AskRulePrefix = "ask:"

// Approver asks a person about one request and waits for the answer.
// Approve must return when ctx is done (its deadline is the ask timeout)
// with ctx's error, or with an error that wraps ErrAskTimeout when its
// own wait ends without a decision.
type Approver interface {
	Approve(ctx context.Context, r AskRequest) (AskDecision, error)
}

// AskRequest is a held request, as the person is asked about it.
type AskRequest struct {
	// Kind is what is asked for: AskNetwork, a CONNECT or plain-HTTP
	// request an ask rule holds (Host, Port, Method, Rule, Ask, What), or
	// AskPath, a host path the agent asks for (Path, Reason, RW, What;
	// Rule is the path).
	Kind   string
	Host   string // normalised, as in the audit
	Port   int
	Method string // CONNECT, GET...
	// Rule is the allow rule that approving it for the pod adds to the
	// policy file: exactly Host and Port ("pkg.example.test",
	// "git.example.test:22").
	Rule string
	// Ask is the ask rule that holds it ("*.pkg.example.test").
	Ask string
	// What is the request in one printable line: "CONNECT
	// pkg.example.test:443", "GET http://pkg.example.test:80/index.json",
	// "read /home/me/src/lib", "read-write /home/me/data".
	What string
	// Path is the absolute, clean host path of an AskPath request, in
	// printable characters (see CheckRequestedPath); RW whether the agent
	// asks to write to its copy, Reason its word on why (made printable,
	// at most MaxPathReason bytes; may be empty). The person approves or
	// rejects the request as it is: an approval grants what was asked.
	Path, Reason string
	RW           bool
}

// Kinds of AskRequest.
const (
	AskNetwork = "network"
	AskPath    = "path"
)

// AskDecision is a person's answer.
type AskDecision struct {
	Approve bool
	// ForPod approves Rule for the proxy's life (written to the policy
	// file), not just this request. Path requests ignore it: each is
	// granted on its own.
	ForPod bool
	// RW grants a path request writable: the person's choice, whatever
	// the request asked.
	RW bool
	// Reason is the person's word, shown to the agent in a rejection;
	// By who decided (user@host). Both are made printable.
	Reason, By string
	// ID names the request where the person saw it (net-0a1b2c3d), for
	// the audit; may be empty.
	ID string
}

// ErrAskTimeout says that no decision came in time.
var ErrAskTimeout = errors.New("no decision in time")

// errClientGone cancels the wait of a CONNECT whose client went away.
var errClientGone = errors.New("the client went away")

// maxReasonLen bounds a person's reason in answers and the audit.
const maxReasonLen = 300

// reserveAsk takes one of the MaxAsks places of held requests.
func (s *Server) reserveAsk() bool {
	for {
		n := s.asking.Load()
		if n >= int64(s.opts.MaxAsks) {
			return false
		}
		if s.asking.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// ask holds the request of x, which decide refused and an ask rule
// (x.askRule) covers, until a person decides or the wait ends (ctx is the
// request's). It returns true when the request may go on as an allowed
// one; otherwise x holds the refusal. what is the request in one line.
func (s *Server) ask(ctx context.Context, x *exchange, what string) bool {
	askRule := x.askRule
	x.rule = AskRulePrefix + askRule
	if !s.reserveAsk() {
		x.refuse(http.StatusServiceUnavailable, ReasonAskLimit,
			fmt.Sprintf("%d requests wait for a decision, the limit", s.opts.MaxAsks))
		x.rule = AskRulePrefix + askRule
		return false
	}
	defer s.asking.Add(-1)

	s.audit.writeRequest(&Record{
		Event: EventRequest, Method: x.method, Host: x.host, Port: x.port, Decision: DecisionAsk,
		Rule: x.rule, Detail: fmt.Sprintf("waits up to %v for a person's decision", s.opts.AskTimeout),
		DurationMS: time.Since(x.start).Milliseconds(),
	})

	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if x.conn != nil {
		// serveConn's connection: nobody reads it while the request
		// waits, so a client that goes away would go unnoticed.
		stop := watchHangup(x.conn, cancel)
		defer func() { x.early = append(x.early, stop()...) }()
	}
	d, no := s.waitDecision(wctx, AskRequest{
		Kind: AskNetwork, Host: x.host, Port: x.port, Method: x.method, Rule: x.askFor, Ask: askRule, What: what,
	})
	if no == nil {
		return s.approved(x, d)
	}
	if no.reason == ReasonRejected {
		x.decidedBy = d.By
	}
	x.refuse(no.status, no.reason, no.detail)
	x.rule = AskRulePrefix + askRule // refuse dropped it
	return false
}

// askRefusal is how a wait for a decision ended when it was not approved:
// the status and reason of the refusal, and its detail (who rejected it
// and why, or what else happened).
type askRefusal struct {
	status         int
	reason, detail string
}

// waitDecision asks the Approver about r and waits for the decision, at
// most AskTimeout, while ctx lasts (ctx's cause is errClientGone when the
// client went away). It returns the decision, made printable, with By
// "unknown" when the approver named no one, and nil when it is an
// approval; otherwise the refusal.
func (s *Server) waitDecision(ctx context.Context, r AskRequest) (AskDecision, *askRefusal) {
	actx, acancel := context.WithTimeout(ctx, s.opts.AskTimeout)
	defer acancel()
	d, err := s.opts.Approver.Approve(actx, r)
	d.Reason = printable(d.Reason, maxReasonLen)
	d.By = printable(d.By, 100)
	d.ID = printable(d.ID, 64)
	switch {
	case err == nil:
		d.By = cmp.Or(d.By, "unknown")
		if d.Approve {
			return d, nil
		}
		detail := "rejected by " + d.By
		if d.Reason != "" {
			detail += ": " + d.Reason
		}
		return d, &askRefusal{http.StatusForbidden, ReasonRejected, withID(detail, d.ID)}
	case errors.Is(err, ErrAskTimeout), errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return d, &askRefusal{http.StatusForbidden, ReasonAskTimeout, fmt.Sprintf("no decision within %v", s.opts.AskTimeout)}
	case s.stopped() && !errors.Is(context.Cause(ctx), errClientGone):
		return d, &askRefusal{http.StatusServiceUnavailable, ReasonShutdown, "the proxy stopped while the request waited for a decision"}
	case ctx.Err() != nil:
		return d, &askRefusal{http.StatusServiceUnavailable, ReasonAskCanceled, "the client went away while the request waited for a decision"}
	default:
		s.log.Error("cannot ask about a request", "kind", r.Kind, "what", r.What, "err", err)
		return d, &askRefusal{http.StatusServiceUnavailable, ReasonAskFailed, "cannot ask: " + printable(err.Error(), maxReasonLen)}
	}
}

// stopped reports whether Serve is stopping.
func (s *Server) stopped() bool {
	ctx := s.serveCtx.Load()
	return ctx != nil && (*ctx).Err() != nil
}

// approved lets x's request go on after a person approved it.
func (s *Server) approved(x *exchange, d AskDecision) bool {
	askRule := x.askRule
	x.decidedBy = cmp.Or(d.By, "unknown")
	// A deny rule that came while the request waited wins.
	if ruleText, allow, ok := s.policy.refresh().decide(x.hk, x.port); ok && !allow {
		x.rule = ruleText
		x.refuse(http.StatusForbidden, ReasonDenied, "denied by rule "+ruleText+" while it waited; approved by "+x.decidedBy)
		return false
	}
	detail := "approved once by " + x.decidedBy
	if d.ForPod {
		if _, err := EditPolicyFile(s.opts.PolicyFile, OpAllow, x.askFor); err != nil {
			s.log.Error("cannot add an approved rule to the policy file", "rule", x.askFor, "err", err)
			detail = "approved for the pod by " + x.decidedBy + ", but not saved (" + printable(err.Error(), maxReasonLen) + "): approved once"
		} else {
			s.policy.refresh()
			detail = "approved for the pod by " + x.decidedBy + ": allow " + x.askFor + " added to the policy"
		}
	}
	if d.Reason != "" {
		detail += ": " + d.Reason
	}
	x.allow, x.status, x.reason = true, 0, ""
	x.rule, x.detail = AskRulePrefix+askRule, withID(detail, d.ID)
	if x.hk.Addr.IsValid() {
		// What an address rule would do: the guard lets exactly this
		// address and port through for this request.
		x.exemptAddr = netip.AddrPortFrom(x.hk.Addr, uint16(x.port))
	}
	return true
}

func withID(detail, id string) string {
	if id == "" {
		return detail
	}
	return detail + " (" + id + ")"
}

// approvedAddr reports whether a person approved the request of ctx (see
// exchange) to exactly addr and port, an IP literal that an ask rule
// names: the guard exempts it as it would an address rule's.
func approvedAddr(ctx context.Context, addr netip.Addr, port int) bool {
	x, _ := ctx.Value(exchangeKey{}).(*exchange)
	return x != nil && x.exemptAddr.IsValid() && x.exemptAddr == netip.AddrPortFrom(addr, uint16(port))
}

// connectWhat is a held CONNECT in one line.
func connectWhat(x *exchange) string {
	return printable(http.MethodConnect+" "+net.JoinHostPort(x.host, strconv.Itoa(x.port)), 512)
}

// httpWhat is a held plain-HTTP request in one line: its method and URL,
// with the host as decided on.
func httpWhat(r *http.Request, x *exchange) string {
	return printable(x.method+" "+r.URL.Scheme+"://"+net.JoinHostPort(x.host, strconv.Itoa(x.port))+r.URL.RequestURI(), 512)
}

// printable returns s without control and format characters (bidi
// overrides among them) and invalid UTF-8, cut to at most n bytes on a
// character boundary: safe in a one-line message and a terminal.
func printable(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			if r == '\t' || r == '\n' || r == '\r' {
				r = ' '
			} else {
				continue
			}
		}
		if b.Len()+utf8.RuneLen(r) > n {
			break
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}

// aLongTimeAgo is a read deadline in the past, which wakes a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// watchHangup reads c in the background, so that a client that closes
// its connection while its CONNECT waits cancels the wait (cancel, with
// errClientGone). stop ends the watch and returns the bytes it read,
// which the client sent early, before the answer (then it stopped
// watching: they are for the tunnel). c has no read deadline after stop.
func watchHangup(c net.Conn, cancel context.CancelCauseFunc) (stop func() []byte) {
	done := make(chan struct{})
	var got []byte
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		got = buf[:n]
		if n == 0 && err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			cancel(errClientGone)
		}
	}()
	return func() []byte {
		c.SetReadDeadline(aLongTimeAgo)
		<-done
		c.SetReadDeadline(time.Time{})
		return got
	}
}
