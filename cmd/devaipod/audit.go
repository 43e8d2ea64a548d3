package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/devaipod/devaipod/gator/policy"
	"github.com/devaipod/devaipod/internal/helperargs"
	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/proxy/record"
	"github.com/spf13/cobra"
)

func newAuditCommand(g *globalFlags) *cobra.Command {
	var denied, follow bool
	cmd := &cobra.Command{
		Use:   "audit NAME",
		Short: "Show every egress decision and forge call of a pod",
		Long: `Show the proxy's decisions for the pod: time, method, host and port,
allow or deny, the rule that allowed or the reason that denied, bytes each way
and duration; and the gator's calls (method "mcp"): the tool and repository,
the permission it needed, or why it was denied. --output json prints the raw
JSON lines (gator records carry "kind":"gator").`,
		Args:              positional("NAME"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPod(cmd, g, args, func(p pod.Engine, short string) error {
				return printAudit(cmd, g, p, short, denied, follow)
			})
		},
	}
	cmd.Flags().BoolVar(&denied, "denied", false, "only denials")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new decisions")
	return cmd
}

func printAudit(cmd *cobra.Command, g *globalFlags, p pod.Engine, short string, denied, follow bool) error {
	out := cmd.OutOrStdout()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if !g.json() {
		fmt.Fprintln(tw, "TIME\tDECISION\tMETHOD\tHOST\tRULE/REASON\tUP\tDOWN\tMS")
	}
	lines := &lineWriter{fn: func(line string) {
		if !strings.HasPrefix(line, "{") {
			return // the proxy's or gator's own diagnostics
		}
		var kind struct{ Kind string }
		if json.Unmarshal([]byte(line), &kind) == nil && kind.Kind == policy.KindGator {
			printGatorRecord(tw, g, out, line, denied)
			if follow {
				tw.Flush()
			}
			return
		}
		var r record.Record
		if json.Unmarshal([]byte(line), &r) != nil || (r.Event != record.EventRequest && r.Event != record.EventDropped) {
			return // a policy event
		}
		if denied && r.Decision != "deny" {
			return
		}
		if g.json() {
			fmt.Fprintln(out, safetext.JSONSafe(line))
			return
		}
		why := r.Rule
		switch {
		case r.Decision == "deny":
			why = r.Reason
		case r.Reason != "":
			// Allowed, but it did not end normally: say how.
			why = strings.TrimPrefix(why+"; "+r.Reason, "; ")
		}
		if r.Decision == "deny" && helperargs.IsProbeHost(r.Host) {
			why = "devaipod's containment check (up, verify): " + why
		}
		if r.Event == record.EventDropped {
			r.Method, r.Host, why = "-", "-", droppedText(r.Reason, r.Count, r.Since)
		}
		if r.DecidedBy != "" {
			why += " by " + r.DecidedBy
		}
		if len(r.Masked) > 0 {
			// The bound host handed a credential's value back.
			why += "; answer masked: " + strings.Join(r.Masked, ",")
		}
		when := r.Time
		if t, err := time.Parse(time.RFC3339Nano, r.Time); err == nil {
			when = t.Local().Format("15:04:05")
		}
		// Host, method and reason come from the agent's requests.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s:%d\t%s\t%d\t%d\t%d\n", safetext.Cell(when),
			safetext.Cell(r.Decision), safetext.Cell(r.Method), safetext.Cell(r.Host), r.Port, safetext.Cell(why), r.BytesUp, r.BytesDown, r.DurationMS)
		if follow {
			tw.Flush()
		}
	}}
	err := pod.AuditLog(cmd.Context(), p, short, follow, lines)
	lines.flush()
	tw.Flush()
	return err
}

// printGatorRecord prints one gator call: METHOD is "mcp", HOST the tool
// and repository, RULE/REASON the permission it needed or why it was
// denied.
func printGatorRecord(tw io.Writer, g *globalFlags, out io.Writer, line string, denied bool) {
	r, err := policy.ParseRecord([]byte(line))
	if err != nil || (r.Event != policy.EventCall && r.Event != policy.EventAsk && r.Event != policy.EventDropped) ||
		(denied && r.Decision != policy.DecisionDeny) {
		return
	}
	if g.json() {
		fmt.Fprintln(out, safetext.JSONSafe(line))
		return
	}
	why := r.Permission
	if r.Decision == policy.DecisionDeny || r.Error != "" {
		why = cmp.Or(r.Reason, r.Error)
	}
	if r.Event == policy.EventDropped {
		why = droppedText(r.Reason+"s", r.Count, r.Since) // "calls", "asks"
	}
	if a := r.Ask; a != nil {
		switch {
		case r.Event == policy.EventAsk:
			r.Decision, why = policy.DecisionAsk, a.ID+" waits for a person"
		case a.Outcome != "":
			why = strings.TrimSpace(fmt.Sprintf("%s %s (%s) %s %s", why, a.Outcome, a.ID, a.By, a.Reason))
		}
	}
	when := r.Time
	if t, err := time.Parse(time.RFC3339Nano, r.Time); err == nil {
		when = t.Local().Format("15:04:05")
	}
	fmt.Fprintf(tw, "%s\t%s\tmcp\t%s %s\t%s\t-\t-\t%d\n", safetext.Cell(when), safetext.Cell(r.Decision),
		safetext.Cell(r.Tool), safetext.Cell(r.Repo), safetext.Cell(why), r.DurationMS)
}

// droppedText tells of a dropped record: the sidecar counted what a
// flood of refusals would have written, rather than write it.
func droppedText(what string, count int64, since string) string {
	if t, err := time.Parse(time.RFC3339Nano, since); err == nil {
		since = t.Local().Format("15:04:05")
	}
	return fmt.Sprintf("%d more %s since %s, counted, not written one by one", count, what, since)
}

// lineWriter calls fn for every complete line written to it.
type lineWriter struct {
	fn  func(string)
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.fn(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.fn(string(w.buf))
		w.buf = nil
	}
}
