// Package record is the proxy's audit record, standard library only, so
// that devaipod's CLI reads them without linking the proxy (goproxy), as
// gator/policy is for the gator's.
package record

import "encoding/json"

// The events of audit records.
const (
	EventRequest = "request" // one decision on a CONNECT or plain HTTP request
	EventPolicy  = "policy"  // the policy in force, at start and after each change of the policy file
	// EventDropped counts the requests of one decision and reason that
	// were not written one by one (a flood of them would push the earlier
	// records out of the bounded log; see the proxy's floodKind): decision, reason,
	// count, and since, the time of the first of them.
	EventDropped = "dropped"
)

// The decisions of request records.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
	// DecisionAsk: an ask rule holds the request, which waits for a
	// person's decision; its own record, with the final decision, follows.
	DecisionAsk = "ask"
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
	ReasonShutdown       = "shutdown"        // allowed tunnel closed, or a held request refused (503), because the proxy stopped
	ReasonCredentialHost = "credential-host" // a credential's placeholder on its way to a host it is not bound to, or in plain HTTP
	ReasonRejected       = "rejected"        // a held request a person rejected; Detail has who and why
	ReasonAskTimeout     = "ask-timeout"     // a held request nobody decided within the ask timeout
	ReasonAskLimit       = "ask-limit"       // too many requests wait for a decision (503)
	ReasonAskCanceled    = "ask-canceled"    // the client went away while its request waited
	ReasonAskFailed      = "ask-failed"      // the approver failed: the request could not be asked about (503)
	ReasonPathForbidden  = "path-forbidden"  // a host path that is or is under one of the proxy's Options.ForbiddenPaths: never asked about
	ReasonNoApprovals    = "no-approvals"    // a host path asked of a proxy without an Approver: nobody to ask (404)
	ReasonEncodedAnswer  = "encoded-answer"  // a bound host's answer compressed although identity was asked for: refused (502), its values could not be masked
)

// Record is one line of the audit log: JSON, one object per line, written
// to the proxy container's stdout. Request records (Event "request") are
// written once per decision: for an allowed CONNECT when its tunnel (or
// interception) closes, otherwise when the answer has been sent; each
// request inside an intercepted CONNECT has its own. They always carry
// method, host, port, decision, status, bytes_up, bytes_down and
// duration_ms; rule, reason, detail, credentials and decided_by only when
// set. Policy records (Event "policy") carry file, allow, deny and error
// instead.
//
// A request that an ask rule holds (see the proxy's Options.Ask) has two request
// records: one with decision "ask" when it starts to wait (status 0, no
// bytes; rule "ask:" and the ask rule, detail how long it may wait), and
// its final one, rule "ask:RULE" too: decision allow when a person
// approved it (decided_by who, detail "approved once by..." or
// "approved for the pod by..." and the request's id), or deny with
// reason rejected (decided_by, the person's reason in detail),
// ask-timeout, ask-canceled, ask-failed or shutdown (or denied, with the
// deny rule, when one came while it waited). A request that finds
// the proxy's Options.MaxAsks requests waiting is refused unasked: one record, deny
// with reason ask-limit.
//
// A request for a host path (see the proxy's RequestPathPath) has records of the same
// kind, with method POST, host "devaipod" (PathRequestHost), port 0 and no
// rule; once its body is read and checked, the detail starts with what
// was asked, "read /PATH" or "read-write /PATH" (cut to 1 KiB, ending in
// "..." when cut). Asked
// about, it has the two records of a held request (approved: decision
// allow, decided_by, and where the agent sees it in the detail);
// refused unasked, one: deny with reason bad-request, path-forbidden,
// no-approvals or ask-limit.
type Record struct {
	Time  string `json:"time"` // RFC 3339 with nanoseconds, UTC
	Pod   string `json:"pod"`
	Event string `json:"event"`

	Method   string `json:"method,omitempty"` // CONNECT, GET...
	Host     string `json:"host,omitempty"`   // normalised: lower case, no trailing dot, IPv6 without brackets
	Port     int    `json:"port,omitempty"`
	Decision string `json:"decision,omitempty"` // allow, deny or ask
	// Rule is the rule that decided: the allow rule of an allowed request,
	// the deny rule of a request denied by one, "ask:" and the ask rule of
	// a request that waited for a person.
	Rule       string `json:"rule,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Detail     string `json:"detail,omitempty"` // a short human-readable explanation
	Status     int    `json:"status,omitempty"` // the HTTP status the client got
	BytesUp    int64  `json:"bytes_up"`         // client to server: request body, or tunnel bytes
	BytesDown  int64  `json:"bytes_down"`       // server to client: response body, or tunnel bytes (0 when the proxy answered itself)
	DurationMS int64  `json:"duration_ms"`
	// Credentials are the names of the credentials put into an intercepted
	// request (see the proxy's Credential); never their values.
	Credentials []string `json:"credentials,omitempty"`
	// Masked are the names of the credentials whose value the answer to
	// an intercepted request held, masked before the client got it.
	Masked []string `json:"masked,omitempty"`
	// DecidedBy is who approved or rejected a held request (user@host).
	DecidedBy string `json:"decided_by,omitempty"`

	File  string   `json:"file,omitempty"`  // the policy file
	Allow []string `json:"allow,omitempty"` // every allow rule in force (base and file)
	Deny  []string `json:"deny,omitempty"`  // every deny rule in force
	// Error says why the policy file was not applied; Allow and Deny are
	// then the rules still in force.
	Error string `json:"error,omitempty"`

	Count int64  `json:"count,omitempty"` // dropped records: how many
	Since string `json:"since,omitempty"` // dropped records: the first one's time
}

// requestLine and policyLine are what Record marshals to: each event with
// its own fields and nothing else.
type requestLine struct {
	Time        string   `json:"time"`
	Pod         string   `json:"pod"`
	Event       string   `json:"event"`
	Method      string   `json:"method"`
	Host        string   `json:"host"`
	Port        int      `json:"port"`
	Decision    string   `json:"decision"`
	Rule        string   `json:"rule,omitempty"`
	Reason      string   `json:"reason,omitempty"`
	Detail      string   `json:"detail,omitempty"`
	Status      int      `json:"status"`
	BytesUp     int64    `json:"bytes_up"`
	BytesDown   int64    `json:"bytes_down"`
	DurationMS  int64    `json:"duration_ms"`
	Credentials []string `json:"credentials,omitempty"`
	Masked      []string `json:"masked,omitempty"`
	DecidedBy   string   `json:"decided_by,omitempty"`
}

type droppedLine struct {
	Time     string `json:"time"`
	Pod      string `json:"pod"`
	Event    string `json:"event"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Count    int64  `json:"count"`
	Since    string `json:"since"`
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
	if r.Event == EventDropped {
		return json.Marshal(droppedLine{Time: r.Time, Pod: r.Pod, Event: r.Event, Decision: r.Decision, Reason: r.Reason, Count: r.Count, Since: r.Since})
	}
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
		BytesUp: r.BytesUp, BytesDown: r.BytesDown, DurationMS: r.DurationMS, Credentials: r.Credentials,
		Masked: r.Masked, DecidedBy: r.DecidedBy,
	})
}
