package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/devaipod/devaipod/internal/approval"
	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/config"
	units "github.com/docker/go-units"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func newApprovalsCommand(g *globalFlags) *cobra.Command {
	var watch, granted bool
	cmd := &cobra.Command{
		Use:   "approvals [NAME]",
		Short: "List the requests that wait for your decision (every pod's, or NAME's)",
		Long: `List the requests of agents that wait for a person: a network request that a
[network] ask rule covers, a gator call that an ask: permission covers. Each has
an id, its pod, its kind (network or gator), exactly what it asks (host:port; the
tool and its arguments: branch, commit ids and the files of a push, a pull
request's title, base and body, a comment's or a review's whole text, a line
each) and how long it has waited. The agent's connection or
call is held open meanwhile; without a decision within [network] ask_timeout
(60s by default) it is refused.

Decide with devaipod approve ID [--for once|pod|repo] or devaipod reject ID
[--reason TEXT], or run devaipod approvals --watch: it shows each request as it
comes and takes one key: a approve once, p approve for the pod's life,
r reject, s skip, q quit; it runs [approvals] notify for each new one.

Only the host decides: the requests wait in the proxy's and the gator's state
volumes, which the agent does not mount, and devaipod reaches them with podman
exec. What the agent wrote (hosts, branch names, titles) is shown with control
characters escaped.

--granted lists the approvals kept for every pod of a repository
(approve --for repo); devaipod revoke GRANT removes one.`,
		Example: `  devaipod approvals
  devaipod approvals myproject -o json
  devaipod approvals --watch
  devaipod approvals --granted`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if granted {
				return printGrants(cmd, g)
			}
			short := ""
			if len(args) == 1 {
				var err error
				if short, err = podArg(args); err != nil {
					return err
				}
			}
			return withEngine(cmd, g, func(p pod.Engine) error {
				if watch {
					return watchApprovals(cmd, g, p, short)
				}
				pending, err := pod.Approvals(cmd.Context(), p, short)
				if err != nil {
					return err
				}
				if g.json() {
					return writeJSON(cmd.OutOrStdout(), jsonList(pending))
				}
				if len(pending) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "No request waits.")
					return nil
				}
				share, err := g.shareOptions(false)
				if err != nil {
					return err
				}
				printPending(cmd.OutOrStdout(), pending, share)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&watch, "watch", false, "show requests as they come and decide each with one key")
	cmd.Flags().BoolVar(&granted, "granted", false, "list the approvals kept for every pod of a repository")
	return cmd
}

func jsonList[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// printPending shows requests for a person: the agent's text made
// printable.
func printPending(w io.Writer, pending []pod.Pending, share pod.ShareOptions) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPOD\tKIND\tWAITED\tWHAT")
	for _, p := range pending {
		show := shownAs(p.Kind)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.ID, p.Pod, p.Kind, time.Since(p.Created).Round(time.Second), show(p.What))
		for _, line := range detailLines(p.Details, show) {
			fmt.Fprintf(tw, "\t\t\t\t  %s\n", line)
		}
		if see := seePush(p); see != "" {
			fmt.Fprintf(tw, "\t\t\t\t  %s\n", see)
		}
		for _, line := range pathFacts(p, share) {
			fmt.Fprintf(tw, "\t\t\t\t  %s\n", line)
		}
	}
	tw.Flush()
}

// pathFacts say what a path request would share, as approving it shares
// it: what the path resolves to and holds, what is left out, and whether
// it is, holds or lies in the pod's own source checkout.
func pathFacts(p pod.Pending, share pod.ShareOptions) []string {
	if p.Kind != approval.KindPath {
		return nil
	}
	show := shownAs(p.Kind)
	sh, err := pod.DescribeShare(p.Rule, share)
	if err != nil {
		return []string{"cannot be shared: " + show(err.Error())}
	}
	facts := []string{fmt.Sprintf("resolves to %s: %s, %s; left out when shared: %s, %s (approve --with-git shares those)",
		show(sh.Resolved), count(sh.Files, "file"), units.BytesSize(float64(sh.Bytes)), count(sh.Masked, "masked file"), count(sh.GitDirs, "git directory"))}
	if p.SourceDir != "" {
		source := p.SourceDir
		if real, err := filepath.EvalSymlinks(source); err == nil {
			source = real
		}
		within := func(dir, p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
		switch {
		case sh.Resolved == source:
			facts = append(facts, "it is this pod's own source checkout")
		case within(sh.Resolved, source):
			facts = append(facts, "it holds this pod's own source checkout, "+show(source))
		case within(source, sh.Resolved):
			facts = append(facts, "it lies in this pod's own source checkout, "+show(source))
		}
	}
	return facts
}

// seePush is how to see what a push_branch request would push, or "".
func seePush(p pod.Pending) string {
	commit := p.Details["commit"]
	if p.Kind != approval.KindGator || !strings.HasPrefix(p.What, "push_branch ") || !pod.IsCommitID(commit) {
		return ""
	}
	return "see it: devaipod diff " + safetext.Cell(p.Pod) + " --commit " + commit
}

// detailLines is a request's details as a person reads them, a line each
// ("key: value"), and a value of several lines (a body, a list of files)
// whole under its key, each line shown with show and after a gutter, so
// that what the agent wrote cannot pass for a field or a request of its
// own. A person approves what they read, so nothing of it is left out.
func detailLines(details map[string]string, show func(string) string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(details)) {
		key := safetext.Cell(k)
		lines := strings.Split(strings.TrimSuffix(details[k], "\n"), "\n")
		if len(lines) == 1 {
			out = append(out, key+": "+show(lines[0]))
			continue
		}
		out = append(out, fmt.Sprintf("%s: (%d lines)", key, len(lines)))
		for _, l := range lines {
			out = append(out, "  | "+show(l))
		}
	}
	return out
}

// shownAs is how a request of kind is shown: a path with every non-ASCII
// rune escaped, so that a look-alike letter (a Cyrillic а in /home/me/dаta)
// cannot pass for another path; the rest printable.
func shownAs(kind string) func(string) string {
	if kind != approval.KindPath {
		return safetext.Cell
	}
	return func(s string) string {
		var b strings.Builder
		for _, r := range safetext.Printable(s) {
			if r > 0x7e || r == '\t' {
				fmt.Fprintf(&b, `\u%04x`, r)
				continue
			}
			b.WriteRune(r)
		}
		return b.String()
	}
}

// decider is who decides: user@host, for the audit.
func decider() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

func newApproveCommand(g *globalFlags) *cobra.Command {
	var scope string
	var rw, withGit bool
	cmd := &cobra.Command{
		Use:   "approve ID [--for once|pod|repo]",
		Short: "Let a waiting request through",
		Long: `Let the waiting request ID (devaipod approvals lists them) through, unchanged.
--for once (the default) approves this request only: the next one like it asks
again. --for pod allows what it asks for the rest of the pod's life (a network
request's host and port, as devaipod allow does; a gator tool on that
repository). --for repo does the same and keeps the approval for every pod up
makes of the same repository (devaipod approvals --granted, devaipod revoke).
A path request is shared (as devaipod share) read-only, or as a copy the agent
may change with --rw, whatever the agent asked for; without the files your
[agent] mask names and without the git directories it holds, unless
--with-git.`,
		Example: `  devaipod approve net-0a1b2c3d
  devaipod approve gator-4e5f6a7b --for pod`,
		Args: positional("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch scope {
			case approval.ForOnce, approval.ForPod, pod.ForRepo:
			default:
				return fmt.Errorf("--for %q: use once, pod or repo", scope)
			}
			if (rw || withGit) && !strings.HasPrefix(args[0], approval.KindPath+"-") {
				return fmt.Errorf("--rw and --with-git are for path requests (path-...), not %s", args[0])
			}
			return decide(cmd, g, approval.Decision{ID: args[0], Approve: true, For: scope, RW: rw, By: decider()}, withGit)
		},
	}
	cmd.Flags().StringVar(&scope, "for", approval.ForOnce, "once, pod or repo")
	cmd.Flags().BoolVar(&rw, "rw", false, "a path request: share a copy the agent may change (read-only otherwise)")
	cmd.Flags().BoolVar(&withGit, "with-git", false, "a path request: share the git directories (.git) it holds too (left out otherwise)")
	cmd.RegisterFlagCompletionFunc("for", cobra.FixedCompletions([]string{approval.ForOnce, approval.ForPod, pod.ForRepo}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func newRejectCommand(g *globalFlags) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "reject ID [--reason TEXT]",
		Short: "Refuse a waiting request",
		Long: `Refuse the waiting request ID: a network request gets 403 with your reason,
a gator call an error with it. The next request like it asks again.`,
		Example: `  devaipod reject net-0a1b2c3d --reason "use the internal mirror"`,
		Args:    positional("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return decide(cmd, g, approval.Decision{ID: args[0], Reason: reason, By: decider()}, false)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the agent")
	return cmd
}

func decide(cmd *cobra.Command, g *globalFlags, d approval.Decision, withGit bool) error {
	share, err := g.shareOptions(withGit)
	if err != nil {
		return err
	}
	return withEngine(cmd, g, func(p pod.Engine) error {
		req, err := pod.Decide(cmd.Context(), p, pod.DefaultGrants(), d, share)
		if err != nil {
			return err
		}
		verb := "Rejected"
		if d.Approve {
			verb = "Approved (for " + d.For + ")"
		}
		if g.json() {
			return writeJSON(cmd.OutOrStdout(), map[string]any{"id": d.ID, "pod": req.Pod, "approve": d.Approve, "for": d.For, "what": req.What})
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s %s of pod %s: %s\n", verb, d.ID, req.Pod, safetext.Printable(req.What))
		return nil
	})
}

func newRevokeCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "revoke GRANT",
		Short:   "Remove an approval kept for a repository",
		Long:    `Remove an approval that approve --for repo kept (devaipod approvals --granted lists them). Pods already made keep what they were given.`,
		Example: `  devaipod revoke grant-2`,
		Args:    positional("GRANT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			gone, err := pod.DefaultGrants().Revoke(args[0])
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), gone)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Revoked %s: %s %s for %s\n", gone.ID, gone.Kind, safetext.Printable(gone.Rule), safetext.Printable(gone.Repo))
			return nil
		},
	}
}

func printGrants(cmd *cobra.Command, g *globalFlags) error {
	list, err := pod.DefaultGrants().List()
	if err != nil {
		return err
	}
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), jsonList(list))
	}
	if len(list) == 0 {
		fmt.Fprintln(cmd.OutOrStdout(), "No approval is kept for a repository.")
		return nil
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GRANT\tREPOSITORY\tKIND\tRULE\tBY\tAT")
	for _, o := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", o.ID, safetext.Cell(o.Repo), o.Kind, safetext.Cell(o.Rule), safetext.Cell(o.By), o.At.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

// watchApprovals shows the oldest waiting request and decides it with one
// key, until q or Ctrl-C; new requests run [approvals] notify.
func watchApprovals(cmd *cobra.Command, g *globalFlags, p pod.Engine, short string) error {
	in, ok := cmd.InOrStdin().(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		return errors.New("--watch needs a terminal: list with devaipod approvals, decide with approve and reject")
	}
	cfg, err := g.loadConfig()
	if err != nil {
		return err
	}
	notify := cfg.Approvals.Notify
	share := pod.ShareOptions{Forbidden: g.forbiddenMounts(), Mask: config.MaskPatterns(cfg)}
	state, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return err
	}
	defer term.Restore(int(in.Fd()), state)
	// Each key with when it was read: a key typed before the request on
	// the screen was shown (a double tap; the one shown before was
	// withdrawn meanwhile) is not a decision about it.
	type keypress struct {
		b  byte
		at time.Time
	}
	keys := make(chan keypress)
	go func() {
		b := make([]byte, 1)
		for {
			if n, err := in.Read(b); err != nil || n == 0 {
				close(keys)
				return
			}
			keys <- keypress{b[0], time.Now()}
		}
	}()
	out := cmd.OutOrStdout()
	say := func(format string, a ...any) { fmt.Fprintf(out, strings.ReplaceAll(format, "\n", "\r\n"), a...) }
	seen, skipped := map[string]bool{}, map[string]bool{}
	shown, shownAt := "", time.Time{}
	say("Watching for requests (a approve once, p approve for the pod, r reject, s skip, q quit)...\n")
	for {
		pending, err := pod.Approvals(cmd.Context(), p, short)
		if err != nil {
			say("error: %s\n", safetext.Printable(err.Error()))
		}
		var next *pod.Pending
		for i := range pending {
			r := &pending[i]
			if !seen[r.ID] {
				seen[r.ID] = true
				runNotify(cmd.Context(), notify, r)
			}
			if next == nil && !skipped[r.ID] {
				next = r
			}
		}
		if next != nil && next.ID != shown {
			shown = next.ID
			show := shownAs(next.Kind)
			say("\n%s  pod %s  %s  waiting %s\n  %s\n", next.ID, next.Pod, next.Kind, time.Since(next.Created).Round(time.Second), show(next.What))
			for _, line := range detailLines(next.Details, show) {
				say("  %s\n", line)
			}
			if see := seePush(*next); see != "" {
				say("  %s\n", see)
			}
			for _, line := range pathFacts(*next, share) {
				say("  %s\n", line)
			}
			// Again under a long text, which scrolls the head away.
			say("%s  %s\n[a]pprove once, approve for the [p]od, [r]eject, [s]kip, [q]uit? ", next.ID, show(next.What))
			shownAt = time.Now()
		}
		select {
		case <-cmd.Context().Done():
			return nil
		case kp, ok := <-keys:
			k := kp.b
			if !ok || k == 'q' || k == 3 { // 3: Ctrl-C in raw mode
				say("\n")
				return nil
			}
			if next == nil || next.ID != shown || kp.at.Before(shownAt) {
				continue
			}
			d := approval.Decision{ID: next.ID, By: decider()}
			switch k {
			case 'a':
				d.Approve, d.For = true, approval.ForOnce
			case 'p':
				d.Approve, d.For = true, approval.ForPod
			case 'r':
			case 's':
				skipped[next.ID] = true
				shown = ""
				say("skipped\n")
				continue
			default:
				continue
			}
			if _, err := pod.Decide(cmd.Context(), p, pod.DefaultGrants(), d, share); err != nil {
				say("%s\n", safetext.Printable(err.Error()))
			} else if d.Approve {
				say("approved (for %s)\n", d.For)
			} else {
				say("rejected\n")
			}
			shown = ""
		case <-time.After(time.Second):
		}
	}
}

// runNotify runs [approvals] notify for a new request, its placeholders
// filled in (see notifyCommand).
func runNotify(ctx context.Context, argv []string, r *pod.Pending) {
	if len(argv) == 0 {
		return
	}
	args, env := notifyCommand(argv, r)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Run()
}

// notifyShells are the shells whose -c script notifyCommand never puts
// text into.
var notifyShells = []string{"sh", "bash", "dash", "zsh", "ksh", "ash", "fish"}

// notifyCommand is [approvals] notify for a request. The agent wrote
// some of the text ({what}, made printable), so it never becomes shell
// syntax: the command runs without a shell, a placeholder in a word is
// replaced inside that one argument, and in the script of a shell's -c
// (sh -c 'notify-send "{what}"') a placeholder becomes a reference to a
// variable that holds the text ("$DEVAIPOD_WHAT"), which the shell does not
// parse again. The first word cannot hold one (config refuses it).
func notifyCommand(argv []string, r *pod.Pending) (args, env []string) {
	values := [][2]string{{"pod", r.Pod}, {"kind", r.Kind}, {"what", safetext.Printable(r.What)}, {"id", r.ID}}
	var plain, shell []string
	for _, v := range values {
		plain = append(plain, "{"+v[0]+"}", v[1])
		shell = append(shell, "{"+v[0]+"}", `${DEVAIPOD_`+strings.ToUpper(v[0])+`}`)
		env = append(env, "DEVAIPOD_"+strings.ToUpper(v[0])+"="+v[1])
	}
	inPlace, byVariable := strings.NewReplacer(plain...), strings.NewReplacer(shell...)
	// The script: the word after a shell's -c (sh -c, env sh -c, busybox
	// sh -c).
	script := -1
	for i := 0; i+2 < len(argv); i++ {
		if slices.Contains(notifyShells, filepath.Base(argv[i])) && argv[i+1] == "-c" {
			script = i + 2
			break
		}
	}
	args = make([]string, len(argv))
	for i, a := range argv {
		if i == script {
			args[i] = byVariable.Replace(a)
		} else {
			args[i] = inPlace.Replace(a)
		}
	}
	return args, env
}
