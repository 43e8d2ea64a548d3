package gator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// KindGator is the "kind" of every gator audit record. The proxy's records
// have no kind, so a reader merging both logs (devaipod audit) tells them
// apart by it.
const KindGator = "gator"

// The events of audit records.
const (
	EventStart = "start" // the gator started; Scopes lists what it grants
	EventCall  = "call"  // one tool call, allowed or denied
)

// The decisions of call records.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
)

// Record is one line of the gator's audit log: one JSON object per line.
// Call records carry tool, decision and duration_ms always; repo, args,
// permission, reason, result and error when set. A call that was allowed but
// failed (GitHub said no, the push was not a fast-forward...) has decision
// "allow" and an error. Start records carry scopes instead. No record ever
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

// auditor writes records, one whole line per Write, never two at once.
type auditor struct {
	pod    string
	redact func(string) string
	log    *slog.Logger

	mu     sync.Mutex
	w      io.Writer
	failed bool
}

func (a *auditor) write(r Record) {
	r.Time = time.Now().UTC().Format(time.RFC3339Nano)
	r.Kind = KindGator
	r.Pod = a.pod
	b, err := json.Marshal(r)
	if err != nil {
		a.log.Error("audit: encode record", "err", err)
		return
	}
	// The token can only get here through text the gator did not write
	// (an error from GitHub quoting a header, say); scrub the whole line.
	b = []byte(a.redact(string(b)))
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.w.Write(b); err != nil && !a.failed {
		a.failed = true // say it once, not once per call
		a.log.Error("audit: write", "err", err)
	}
}

// bodyArgs are summarised by size only: they are long, and they are the
// agent's prose, not what an auditor looks for.
var bodyArgs = map[string]bool{"body": true, "comments": true}

const maxArgSummary = 120

// summarizeArgs turns a tool's JSON arguments into short strings: bodies
// become their size, lists their length, long strings are cut.
func summarizeArgs(args map[string]any) map[string]string {
	out := make(map[string]string)
	for k, v := range args {
		if k == "owner" || k == "repo" {
			continue // in Record.Repo
		}
		if v == nil {
			continue
		}
		switch v := v.(type) {
		case string:
			if v == "" {
				continue
			}
			if bodyArgs[k] {
				out[k] = strconv.Itoa(len(v)) + " bytes"
			} else {
				out[k] = clip(v, maxArgSummary)
			}
		case []any:
			if len(v) > 0 {
				out[k] = strconv.Itoa(len(v)) + " items"
			}
		case map[string]any:
			out[k] = strconv.Itoa(len(v)) + " fields"
		case float64:
			if v != 0 {
				out[k] = strconv.FormatFloat(v, 'f', -1, 64)
			}
		case bool:
			out[k] = strconv.FormatBool(v)
		default:
			out[k] = clip(fmt.Sprint(v), maxArgSummary)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// argsMap turns a tool's raw JSON arguments into a map for Decide and the
// audit. Arguments that are not a JSON object give an error (and an empty
// map, so that the denial can still be audited).
func argsMap(raw json.RawMessage) (map[string]any, error) {
	m := map[string]any{}
	if len(raw) == 0 || string(raw) == "null" {
		return m, nil
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return map[string]any{}, errors.New("arguments are not a JSON object")
	}
	return m, nil
}

// scopeStrings renders scopes for the start record and the status tool.
func scopeStrings(scopes []Scope) []string {
	out := make([]string, len(scopes))
	for i, s := range scopes {
		out[i] = s.String()
	}
	sort.Strings(out)
	return out
}

// repoOf renders the target of a call for the audit: OWNER/REPO as given,
// or "" when the call named none.
func repoOf(owner, repo string) string {
	if owner == "" && repo == "" {
		return ""
	}
	return owner + "/" + repo
}
