package policy

import (
	"encoding/json"
	"fmt"
)

// KindGator is the "kind" of every gator audit record. The proxy's records
// have no kind, so a reader merging both logs (devaipod audit) tells them
// apart by it.
const KindGator = "gator"

// The events of audit records.
const (
	EventStart = "start" // the gator started; Scopes lists what it grants
	EventCall  = "call"  // one tool call, allowed or denied
	// EventAsk is a call held for a person's decision (an ask: permission),
	// written when the request is filed; the call's own record follows,
	// with the outcome in Ask.
	EventAsk = "ask"
	// EventDropped counts the records of one tool and decision that were
	// not written one by one (a flood of them would push the earlier
	// records out of the bounded log): Tool, Decision, Reason (the event
	// of the records counted: call or ask), Count, and Since, the time of
	// the first of them.
	EventDropped = "dropped"
)

// The decisions of call records.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
	// DecisionAsk is an ask record's, or the call record's of a call that
	// needed a person's approval and ended before it was asked (its
	// arguments were refused, say).
	DecisionAsk = "ask"
)

// The outcomes of an ask (AskNote.Outcome).
const (
	AskApproved  = "approved"
	AskRejected  = "rejected"
	AskTimeout   = "timeout"   // no decision came in time
	AskWithdrawn = "withdrawn" // the call ended first (the agent gave up)
	AskRefused   = "refused"   // never filed: too many calls wait already
)

// Record is one line of the gator's audit log: one JSON object per line.
// Call records carry tool, decision and duration_ms always; repo, args,
// permission, reason, result, error and ask when set. A call that needed a
// person's approval has an ask record (EventAsk) when it is filed, then
// its call record with the outcome. A call that was allowed but
// failed (GitHub said no, the push was not a fast-forward...) has decision
// "allow" and an error. Start records carry scopes instead, dropped
// records a count. No record ever
// holds the token, and args hold summaries ("body": "312 bytes"), not
// bodies.
type Record struct {
	Time  string `json:"time"` // RFC 3339 with nanoseconds, UTC
	Kind  string `json:"kind"` // always "gator"
	Pod   string `json:"pod,omitempty"`
	Event string `json:"event"`

	Tool       string            `json:"tool,omitempty"`
	Repo       string            `json:"repo,omitempty"` // OWNER/REPO as the agent wrote it
	Args       map[string]string `json:"args,omitempty"` // argument summary, without owner and repo
	Decision   string            `json:"decision,omitempty"`
	Permission string            `json:"permission,omitempty"` // the permission the tool needs
	Reason     string            `json:"reason,omitempty"`
	// Result is a short note of what an allowed call did: a pull request's
	// URL, a pushed ref and commit.
	Result     string `json:"result,omitempty"`
	Error      string `json:"error,omitempty"`
	DurationMS int64  `json:"duration_ms"`

	Scopes []string `json:"scopes,omitempty"` // start records: the scopes granted

	Count int64  `json:"count,omitempty"` // dropped records: how many
	Since string `json:"since,omitempty"` // dropped records: the first one's time

	// Ask is set on calls that needed a person's approval: on the ask
	// record, the request; on the call record, also its outcome.
	Ask *AskNote `json:"ask,omitempty"`
}

// AskNote is what an audit record tells of a request for a person's
// approval (internal/approval): which one, what it asked, how it ended.
type AskNote struct {
	ID   string `json:"id,omitempty"` // the request's id, such as gator-0a1b2c3d
	What string `json:"what,omitempty"`
	// Commit is the commit a push_branch request asked to push.
	Commit  string `json:"commit,omitempty"`
	Outcome string `json:"outcome,omitempty"` // AskApproved, AskRejected...; empty on the ask record
	For     string `json:"for,omitempty"`     // an approval's scope: once or pod
	By      string `json:"by,omitempty"`      // who decided
	Reason  string `json:"reason,omitempty"`  // the person's reason
}

// ParseRecord reads one audit line and checks that it is a gator record.
func ParseRecord(line []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		return Record{}, fmt.Errorf("parse gator audit record: %w", err)
	}
	if r.Kind != KindGator {
		return Record{}, fmt.Errorf("parse gator audit record: kind %q, want %q", r.Kind, KindGator)
	}
	return r, nil
}
