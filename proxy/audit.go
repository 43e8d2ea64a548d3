package proxy

import (
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"time"
)

// The events of audit records.
const (
	EventRequest = "request" // one decision on a CONNECT or plain HTTP request
	EventPolicy  = "policy"  // the policy in force, at start and after each change of the policy file
)

// The decisions of request records.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
)

// The reasons of request records. A deny always has one; an allowed request
// has one only when it did not end normally.
const (
	ReasonNotAllowed     = "not-allowed"     // no rule covers host and port
	ReasonDenied         = "denied"          // a deny rule (devaipod deny) covers it; Rule names it
	ReasonIPLiteral      = "ip-literal"      // an IP address that no address rule names
	ReasonPrivateAddress = "private-address" // the name resolved to a non-public address (at dial time)
	ReasonTunnelLimit    = "tunnel-limit"    // too many open tunnels
	ReasonBadRequest     = "bad-request"     // malformed, not a proxy request, unsupported method or scheme
	ReasonUpstreamError  = "upstream-error"  // allowed, but connecting or talking to the server failed
	ReasonIdleTimeout    = "idle-timeout"    // allowed tunnel closed after no traffic for the idle timeout
	ReasonShutdown       = "shutdown"        // allowed tunnel closed because the proxy stopped
)

// Record is one line of the audit log: JSON, one object per line, written
// to the proxy container's stdout. Request records (Event "request") are
// written once per decision: for an allowed CONNECT when its tunnel closes,
// otherwise when the answer has been sent. They always carry method, host,
// port, decision, status, bytes_up, bytes_down and duration_ms; rule, reason
// and detail only when set. Policy records (Event "policy") carry file,
// allow, deny and error instead.
type Record struct {
	Time  string `json:"time"` // RFC 3339 with nanoseconds, UTC
	Pod   string `json:"pod"`
	Event string `json:"event"`

	Method   string `json:"method,omitempty"` // CONNECT, GET...
	Host     string `json:"host,omitempty"`   // normalised: lower case, no trailing dot, IPv6 without brackets
	Port     int    `json:"port,omitempty"`
	Decision string `json:"decision,omitempty"` // allow or deny
	// Rule is the rule that decided: the allow rule of an allowed request,
	// the deny rule of a request denied by one.
	Rule       string `json:"rule,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Detail     string `json:"detail,omitempty"` // a short human-readable explanation
	Status     int    `json:"status,omitempty"` // the HTTP status the client got
	BytesUp    int64  `json:"bytes_up"`         // client to server: request body, or tunnel bytes
	BytesDown  int64  `json:"bytes_down"`       // server to client: response body, or tunnel bytes (0 when the proxy answered itself)
	DurationMS int64  `json:"duration_ms"`

	File  string   `json:"file,omitempty"`  // the policy file
	Allow []string `json:"allow,omitempty"` // every allow rule in force (base and file)
	Deny  []string `json:"deny,omitempty"`  // every deny rule in force
	// Error says why the policy file was not applied; Allow and Deny are
	// then the rules still in force.
	Error string `json:"error,omitempty"`
}

// requestLine and policyLine are what Record marshals to: each event with
// its own fields and nothing else.
type requestLine struct {
	Time       string `json:"time"`
	Pod        string `json:"pod"`
	Event      string `json:"event"`
	Method     string `json:"method"`
	Host       string `json:"host"`
	Port       int    `json:"port"`
	Decision   string `json:"decision"`
	Rule       string `json:"rule,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Detail     string `json:"detail,omitempty"`
	Status     int    `json:"status"`
	BytesUp    int64  `json:"bytes_up"`
	BytesDown  int64  `json:"bytes_down"`
	DurationMS int64  `json:"duration_ms"`
}

type policyLine struct {
	Time  string   `json:"time"`
	Pod   string   `json:"pod"`
	Event string   `json:"event"`
	File  string   `json:"file,omitempty"`
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
	Error string   `json:"error,omitempty"`
}

// MarshalJSON writes the fields of r's event only.
func (r Record) MarshalJSON() ([]byte, error) {
	if r.Event == EventPolicy {
		l := policyLine{Time: r.Time, Pod: r.Pod, Event: r.Event, File: r.File, Allow: r.Allow, Deny: r.Deny, Error: r.Error}
		if l.Allow == nil {
			l.Allow = []string{}
		}
		if l.Deny == nil {
			l.Deny = []string{}
		}
		return json.Marshal(l)
	}
	return json.Marshal(requestLine{
		Time: r.Time, Pod: r.Pod, Event: r.Event, Method: r.Method, Host: r.Host, Port: r.Port,
		Decision: r.Decision, Rule: r.Rule, Reason: r.Reason, Detail: r.Detail, Status: r.Status,
		BytesUp: r.BytesUp, BytesDown: r.BytesDown, DurationMS: r.DurationMS,
	})
}

// auditor writes records, one whole line per Write, never two at once.
type auditor struct {
	pod string
	log *slog.Logger

	mu     sync.Mutex
	w      io.Writer
	failed bool
}

func (a *auditor) write(r Record) {
	r.Time = time.Now().UTC().Format(time.RFC3339Nano)
	r.Pod = a.pod
	b, err := json.Marshal(r)
	if err != nil {
		a.log.Error("audit: encode record", "err", err)
		return
	}
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.w.Write(b); err != nil && !a.failed {
		a.failed = true // say it once; stdout going away is not worth a log line per request
		a.log.Error("audit: write", "err", err)
	}
}
