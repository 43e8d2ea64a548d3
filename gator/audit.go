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
	"sync"
	"time"
	"unicode/utf8"

	"github.com/devaipod/devaipod/gator/policy"
	"github.com/devaipod/devaipod/internal/auditlog"
)

// auditor writes the audit log's records ([policy.Record]), one whole line
// per Write, never two at once. Denied calls of one tool past
// auditlog.Limiter's bounds are counted instead, and written as one
// "dropped" record within a minute (and when the gator stops).
type auditor struct {
	pod    string
	redact func(string) string
	log    *slog.Logger

	limit auditlog.Limiter

	mu     sync.Mutex
	w      io.Writer
	failed bool
	timer  *time.Timer // writes the dropped records; armed at a drop
	armed  bool
}

// droppedDelay is how long after a dropped record its count is written.
const droppedDelay = time.Minute

// Bounds of a record: its text fields carry what the agent sent (a
// repository name, an error quoting it), and one call must not write a
// megabyte line.
const (
	maxRecordText = 512
	maxRecordArgs = 16
)

func (a *auditor) write(r policy.Record) {
	if r.Event == policy.EventCall && r.Decision == policy.DecisionDeny && r.Ask == nil &&
		!a.limit.Allow(r.Tool, time.Now()) {
		a.mu.Lock()
		if !a.armed {
			a.armed = true
			if a.timer == nil {
				a.timer = time.AfterFunc(droppedDelay, a.writeDropped)
			} else {
				a.timer.Reset(droppedDelay)
			}
		}
		a.mu.Unlock()
		return
	}
	// Scrubbed before they are cut: a cut through the token would leave
	// its start, which the scrub of the whole line no longer finds.
	cut := func(s string, n int) string { return clip(a.redact(s), n) }
	r.Repo, r.Reason, r.Error, r.Result, r.Tool = cut(r.Repo, maxRecordText), cut(r.Reason, maxRecordText),
		cut(r.Error, maxRecordText), cut(r.Result, maxRecordText), cut(r.Tool, maxArgSummary)
	if len(r.Args) > maxRecordArgs {
		keys := slices.Sorted(maps.Keys(r.Args))
		kept := map[string]string{"...": strconv.Itoa(len(keys)-maxRecordArgs) + " more arguments"}
		for _, k := range keys[:maxRecordArgs] {
			kept[clip(k, maxArgSummary)] = r.Args[k]
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
	if r.Time == "" {
		r.Time = time.Now().UTC().Format(time.RFC3339Nano)
	}
	r.Kind = policy.KindGator
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

// writeDropped writes a record of the denied calls not written one by one
// since the last, per tool.
func (a *auditor) writeDropped() {
	a.mu.Lock()
	a.armed = false
	a.mu.Unlock()
	for _, d := range a.limit.Dropped() {
		a.write(policy.Record{Event: policy.EventDropped, Tool: d.Kind, Decision: policy.DecisionDeny, Count: d.Count,
			Since: d.Since.UTC().Format(time.RFC3339Nano)})
	}
}

// finish writes what was dropped and not yet written: the gator stops.
func (a *auditor) finish() {
	a.mu.Lock()
	if a.timer != nil {
		a.timer.Stop()
	}
	a.mu.Unlock()
	a.writeDropped()
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
