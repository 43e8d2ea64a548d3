package main

import (
	"encoding/json"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/devaipod/devaipod/gator/policy"
	"github.com/devaipod/devaipod/internal/approval"
	"github.com/devaipod/devaipod/pod"
)

func TestShownAsPath(t *testing.T) {
	if got := shownAs("path")("/home/me/d\u0430ta\x1b\t"); got != `/home/me/d\u0430ta\x1b\u0009` {
		t.Errorf("a path with a Cyrillic a and ESC shows as %q", got)
	}
	if got := shownAs("gator")("Fix the café"); got != "Fix the café" {
		t.Errorf("a gator title shows as %q", got)
	}
}

// TestTablesEscapeTabs: a tab in what the agent wrote (a gator tool's name,
// a request's details) would start a column of its own in the audit and
// approvals tables; it shows as \t instead.
func TestTablesEscapeTabs(t *testing.T) {
	var b strings.Builder
	printPending(&b, []pod.Pending{{Request: approval.Request{ID: "r1", Pod: "p", Kind: "gator",
		What: "push\tallow", Details: map[string]string{"title\tx": "a\tb"}, Created: time.Now()}}})
	if strings.Count(b.String(), `\t`) != 3 {
		t.Errorf("pending requests:\n%s\nwant every tab of the request shown as \\t", b.String())
	}
	line, _ := json.Marshal(policy.Record{Kind: policy.KindGator, Event: policy.EventCall, Tool: "evil\tallow\tx",
		Repo: "o/r", Decision: policy.DecisionDeny, Reason: "unknown tool"})
	b.Reset()
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	printGatorRecord(tw, &globalFlags{}, &b, string(line), false)
	tw.Flush()
	if !strings.Contains(b.String(), `evil\tallow\tx o/r`) {
		t.Errorf("audit row %q: want the tool's tabs shown as \\t", b.String())
	}
}

// TestPendingShowsWholeTexts: a body of several lines is shown whole, a
// line each, with what would fool a terminal escaped in every line.
func TestPendingShowsWholeTexts(t *testing.T) {
	var b strings.Builder
	body := "First line\nsecond \x1b[2J line\n\nlast line, after a blank one\n"
	printPending(&b, []pod.Pending{{Request: approval.Request{ID: "r1", Pod: "p", Kind: "gator",
		What: "add_issue_comment o/r #1", Details: map[string]string{"body": body, "number": "1"}, Created: time.Now()}}})
	out := b.String()
	for _, want := range []string{"  body: (4 lines)\n", "    | First line\n", `    | second \x1b[2J line` + "\n", "    | \n", "    | last line, after a blank one\n", "  number: 1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("pending requests lack %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("an escape reached the terminal:\n%q", out)
	}
}
