package gator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/devaipod/devaipod/gator/policy"
	"github.com/devaipod/devaipod/internal/auditlog"
)

// auditor writes the audit log's records ([policy.Record]), one whole line
// per Write, never two at once.
type auditor struct {
	pod    string
	redact func(string) string
	log    *slog.Logger
	// flood counts the records of one kind past its bounds instead of
	// writing them (see floodKind); nil is no limit.
	flood *auditlog.Flood[floodKey]
	// known reports whether the gator has a tool of that name.
	known func(tool string) bool

	mu     sync.Mutex
	w      io.Writer
	failed bool
}

func newAuditor(pod string, redact func(string) string, log *slog.Logger, w io.Writer, known func(string) bool) *auditor {
	a := &auditor{pod: pod, redact: redact, log: log, w: w, known: known}
	a.flood = auditlog.NewFlood(a.writeDropped)
	return a
}

// floodKey is a kind of records for the flood limit.
type floodKey struct{ event, tool, decision string }

// floodKind is the kind of r that auditlog.Flood counts by, and false when
// r is always written: the start; a call that did something on the forge
// (GitHub's rate limit bounds those); a call a person decided, or let time
// out (a handful can wait at once). Every other call, allowed or not, the
// agent can make as fast as it asks. The kinds are the event, the tool
// (any tool the gator does not have counts as "unknown": its name is the
// agent's) and the decision, a fixed set.
func floodKind(r policy.Record, known func(string) bool) (floodKey, bool) {
	switch {
	case r.Event != policy.EventCall && r.Event != policy.EventAsk,
		r.Result != "",
		r.Ask != nil && (r.Ask.Outcome == policy.AskApproved || r.Ask.Outcome == policy.AskRejected || r.Ask.Outcome == policy.AskTimeout):
		return floodKey{}, false
	}
	tool := r.Tool
	if !known(tool) {
		tool = "unknown"
	}
	return floodKey{r.Event, tool, r.Decision}, true
}

// KeepRecord tells whether an audit line is kept when the bounded log
// file it is in is dropped (auditlog.Keep): every record but an allowed
// call that failed in nothing, that no person decided, and that changed
// nothing on the forge (a read, or a push_branch of a branch already up to
// date). Those the agent can repeat at the forge's pace; a stream of them
// must not push out the record of what it was refused (which floodKind
// slows down) or of what it did. The line is decoded, not looked at as
// bytes: a record carries the names of the agent's arguments as keys.
func KeepRecord(line []byte) bool {
	var r struct {
		Event, Decision, Error, Result string
		Ask                            json.RawMessage
	}
	if json.Unmarshal(line, &r) != nil {
		return true
	}
	routine := r.Event == policy.EventCall && r.Decision == policy.DecisionAllow && r.Error == "" && r.Ask == nil &&
		(r.Result == "" || strings.HasPrefix(r.Result, "up-to-date "))
	return !routine
}

// Bounds of a record: its text fields carry what the agent sent (a
// repository name, an error quoting it), and one call must not write a
// megabyte line.
const (
	maxRecordText = 512
	maxRecordArgs = 16
	maxRecordLine = 8 << 10
)

func (a *auditor) write(r policy.Record) {
	if a.flood != nil {
		if kind, limited := floodKind(r, a.known); limited && !a.flood.Allow(kind) {
			return
		}
	}
	// Scrubbed before they are cut: a cut through the token would leave
	// its start, which the scrub of the whole line no longer finds.
	cut := func(s string, n int) string { return clip(a.redact(s), n) }
	r.Repo, r.Reason, r.Error, r.Result, r.Tool = cut(r.Repo, maxRecordText), cut(r.Reason, maxRecordText),
		cut(r.Error, maxRecordText), cut(r.Result, maxRecordText), cut(r.Tool, maxArgSummary)
	nargs := len(r.Args)
	if nargs > 0 {
		keys := slices.Sorted(maps.Keys(r.Args))
		kept := map[string]string{}
		if len(keys) > maxRecordArgs {
			kept["..."] = strconv.Itoa(len(keys)-maxRecordArgs) + " more arguments"
			keys = keys[:maxRecordArgs]
		}
		for _, k := range keys {
			kept[cut(k, maxArgSummary)] = cut(r.Args[k], maxArgSummary)
		}
		r.Args = kept
	}
	if r.Ask != nil {
		n := *r.Ask
		n.ID, n.What, n.Commit, n.Outcome, n.For = clip(n.ID, maxArgSummary), clip(n.What, maxRecordText), clip(n.Commit, maxArgSummary),
			clip(n.Outcome, maxArgSummary), clip(n.For, maxArgSummary)
		n.By, n.Reason = clip(n.By, maxArgSummary), clip(n.Reason, maxRecordText)
		r.Ask = &n
	}
	r.Time = time.Now().UTC().Format(time.RFC3339Nano)
	r.Kind = policy.KindGator
	r.Pod = a.pod
	b, err := json.Marshal(r)
	if err == nil && len(b) > maxRecordLine {
		// JSON escapes some characters as six bytes (<, controls), so
		// the bounds above make a line of up to some 30 KiB: past
		// maxRecordLine, the arguments go, then the texts are cut short.
		r.Args = map[string]string{"...": strconv.Itoa(nargs) + " arguments, too long to record"}
		if b, err = json.Marshal(r); err == nil && len(b) > maxRecordLine {
			r.Repo, r.Reason, r.Error, r.Result = clip(r.Repo, 64), clip(r.Reason, 64), clip(r.Error, 64), clip(r.Result, 64)
			if r.Ask != nil {
				r.Ask.What, r.Ask.Reason = clip(r.Ask.What, 64), clip(r.Ask.Reason, 64)
			}
			b, err = json.Marshal(r)
		}
	}
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

// writeDropped writes a record of the calls of each kind that were counted
// rather than written one by one.
func (a *auditor) writeDropped(dropped []auditlog.Dropped[floodKey]) {
	for _, d := range dropped {
		a.write(policy.Record{Event: policy.EventDropped, Tool: d.Kind.tool, Decision: d.Kind.decision, Reason: d.Kind.event,
			Count: d.Count, Since: d.Since.UTC().Format(time.RFC3339Nano)})
	}
}

// finish writes what was counted and not yet written: the gator stops.
func (a *auditor) finish() {
	if a.flood != nil {
		a.flood.Close()
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
			continue // in policy.Record.Repo
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

// argsMap turns a tool's raw JSON arguments into a map for policy.Decide
// and the audit. Arguments that are not a JSON object give an error (and an
// empty map, so that the denial can still be audited).
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
func scopeStrings(scopes []policy.Scope) []string {
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
