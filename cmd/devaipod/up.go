package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/spf13/cobra"
)

type upFlags struct {
	timings           bool
	name              string
	image             string
	ref               string
	dryRun            bool
	keepOnFailure     bool
	timeout           time.Duration
	allow             []string
	force             bool
	workspaceAccess   string
	devcontainer      string
	allowHostCommands bool
	noVerify          bool
	forgeURL          string
	gator             []string
	pull              string
	kube              kubeUpFlags // --engine kube's (up_kube.go)
	noPool            bool
	trust             bool
}

func newUpCommand(g *globalFlags) *cobra.Command {
	f := &upFlags{}
	cmd := &cobra.Command{
		Use:   "up PATH|GIT-URL|PR-URL [TASK]",
		Short: "Create a pod for a repository and start its agent",
		Long: `Create a pod for a repository and wait until its agent's server answers.
With a TASK, the agent starts working on it at once (opencode: the first
message of a new session; a custom agent: $DEVAIPOD_TASK); status shows it.

The source is a local git checkout (its committed HEAD, with history; origin
points at the checkout's real remote; uncommitted changes are left out and
listed), a git URL (https, ssh, git, file, or user@host:path), cloned on
this host with your own git credentials, or a pull request URL
(https://github.com/OWNER/REPO/pull/N, or on --forge-url): its head is
checked out on branch pr-N, with the base repository as upstream.

up is all or nothing: if a step fails, or you press Ctrl-C, everything it
created is removed again (unless --keep-on-failure).

up is idempotent: when a pod of that name exists (--name) and was made from
the same source, up uses it: it says so and how to get in, starting it first
if it is stopped, and creates nothing. The same source is the same
repository (a pull request's base repository, a URL, a checkout's origin
remote, else its directory; compared without scheme, user, port, trailing
slash or .git) and the same pull request (or none); the branch, --ref and the
commit are not compared: the pod keeps the commit it was made from. A pod of
that name from another source is refused, and left as it is.`,
		Example: `  devaipod up .
  devaipod up ./myproject --name myproject
  devaipod up https://git.example.test/org/repo.git --ref main
  devaipod up . --dry-run --output json
  devaipod up . "fix the flaky test in pkg/cache"
  devaipod up https://github.com/org/repo/pull/42 "review this change"`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return errors.New("up takes a local git checkout, a git URL or a pull request URL, and optionally a task in quotes")
			}
			if len(args) == 2 && strings.TrimSpace(args[1]) == "" {
				return errors.New("the task is empty")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			task := ""
			if len(args) == 2 {
				task = args[1]
			}
			return runUp(cmd, g, f, args[0], task)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "", "pod name (default: the repository's name plus a random suffix)")
	addKubeUpFlags(cmd, &f.kube)
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan (every object, with its security settings) and create nothing; with --name of an existing pod, say what up would do with it")
	fl.BoolVar(&f.keepOnFailure, "keep-on-failure", false, "leave what was created when up fails, for inspection (devaipod delete removes it; so does gc, since the pod is unfinished)")
	fl.BoolVar(&f.timings, "timings", false, "print how long each step took (with --output json: a \"timings\" list)")
	fl.BoolVar(&f.noPool, "no-pool", false, "make a pod even when the warm pool (devaipod pool) has one for this request")
	addPodFlags(cmd, f)
	return cmd
}

// addPodFlags adds the flags that shape the pod and how up makes it: up and
// pool take the same ones, so that a pool's pods are what an up would make.
func addPodFlags(cmd *cobra.Command, f *upFlags) {
	fl := cmd.Flags()
	fl.StringVar(&f.pull, "pull", pod.PullMissing, "pull the pod's images from their registries: missing, always or never (images under localhost/ are never pulled)")
	fl.DurationVar(&f.timeout, "timeout", 60*time.Second, "how long to wait for the agent's server")
	cmd.RegisterFlagCompletionFunc("pull", cobra.FixedCompletions(pod.PullPolicies, cobra.ShellCompDirectiveNoFileComp))
	addPlanFlags(cmd, f)
}

// addPlanFlags adds the flags that shape the plan: up's, pool's and kube
// render's.
func addPlanFlags(cmd *cobra.Command, f *upFlags) {
	fl := cmd.Flags()
	fl.StringVar(&f.image, "image", "", "image for the workspace and the agent (default: [workspace] image, else "+config.DefaultImage+")")
	fl.StringVar(&f.ref, "ref", "", "branch or tag to clone (git URLs only)")
	fl.StringVar(&f.devcontainer, "devcontainer", "", "the devcontainer.json to use, as a path in the repository (default: .devcontainer/devcontainer.json, .devcontainer.json, or the only .devcontainer/*/devcontainer.json)")
	fl.StringVar(&f.forgeURL, "forge-url", "", "web address of the GitHub Enterprise (or other) server whose pull request URLs up accepts (default: [forge] url, else https://github.com)")
	fl.StringArrayVar(&f.gator, "gator", nil, "grant the agent scoped GitHub access through the gator: github:OWNER/REPO[:PERMS], github:OWNER/*, github:readonly-all (repeatable; PERMS: read, comment, create-draft, push-branch, pending-review; see docs/gator.md)")
	fl.BoolVar(&f.noVerify, "no-verify", false, "skip the fast containment battery (devaipod verify --fast) that up runs in the agent before it reports ready")
	fl.BoolVar(&f.allowHostCommands, "allow-host-commands", false, "run the devcontainer's initializeCommand on this host (it is the repository's code; a trusted repository's only)")
	fl.BoolVar(&f.trust, "trust", false, "trust the repository for this up: its devcontainer's commands, image and features run with your [trusted.env] values, [[mounts]] and the host variables it names (devaipod trust remembers a local checkout)")
	fl.StringVar(&f.workspaceAccess, "workspace-access", "", "the agent's access to the workspace: rw or ro (default: [agent] workspace_access, else rw)")
	cmd.RegisterFlagCompletionFunc("workspace-access", cobra.FixedCompletions([]string{config.AccessRW, config.AccessRO}, cobra.ShellCompDirectiveNoFileComp))
	fl.StringArrayVar(&f.allow, "allow", nil, "also allow this host for this pod (repeatable; rule syntax: devaipod allow --help)")
	fl.BoolVar(&f.force, "force", false, "accept an --allow rule that opens a whole public suffix, such as '*.com' (refused without it)")
}

func runUp(cmd *cobra.Command, g *globalFlags, f *upFlags, input, task string) error {
	if err := f.check(); err != nil {
		return err
	}
	if g.engine == engineKube {
		return runUpKube(cmd, g, f, input, task)
	}
	start := time.Now()
	ctx := cmd.Context()
	cfg, err := g.loadConfig()
	if err != nil {
		return err
	}
	req, output := f.request(cmd, g, cfg, input)
	defer output.Flush()
	req.Task, req.Name, req.KeepOnFailure, req.DryRun, req.NoPool = task, f.name, f.keepOnFailure, f.dryRun, f.noPool
	if !g.json() && isTerminal(cmd.InOrStdin()) && isTerminal(cmd.ErrOrStderr()) {
		req.AskTrust = askTrust(cmd)
	}
	steps := &stepClock{start: start}
	req.Progress = func(s string) {
		steps.mark(s)
		g.infof(cmd, "%s", s)
	}
	if g.quiet {
		req.Output = io.Discard
	}
	var p *podman.Podman
	switch {
	case !f.dryRun:
		if p, err = g.connect(cmd); err != nil {
			return err
		}
		defer p.Close()
	case f.name != "":
		// A dry run needs no podman, but with --name it says what up would
		// do with a pod of that name, when podman answers. (A derived
		// name is new: it ends in random digits.)
		if p, err = g.connect(cmd); err != nil {
			g.warnf(cmd, "cannot ask podman whether pod %s exists (%v): the plan assumes it does not", f.name, err)
			p = nil
		} else {
			defer p.Close()
		}
	}
	var eng pod.Engine
	if p != nil {
		eng = p
	}
	res, err := pod.Create(ctx, eng, req)
	if err != nil {
		return err
	}
	if res.Existing != nil {
		return reportExisting(cmd, g, f.dryRun, res.Existing, start)
	}
	pl := res.Plan
	if f.dryRun {
		if g.json() {
			// The plan's keys, and the steps up would take.
			return writeJSON(cmd.OutOrStdout(), struct {
				*plan.Plan
				Steps []pod.Step `json:"steps"`
			}{pl.Redacted(), res.Steps})
		}
		printPlan(cmd.OutOrStdout(), pl.Redacted(), res.Steps)
		return nil
	}
	steps.mark("")
	if g.json() {
		out := map[string]any{
			"name": pl.Name, "pod": pl.Pod.Name, "workdir": pl.Workdir,
			"agent_url": pl.AgentURL, "commit": res.Source.Commit, "seconds": time.Since(start).Seconds(),
			"credentials": pl.Credentials, "existing": false, "claimed": res.Claimed,
			"trust": res.Trust, "withheld": pl.Withheld}
		if f.timings {
			out["timings"] = steps.list
		}
		return writeJSON(cmd.OutOrStdout(), out)
	}
	// The mode from the socket's owner when it tells: /info was the
	// longest step of up.
	rootless, known := p.Rootless()
	if !known {
		host, err := p.Info(ctx)
		if err != nil {
			return err
		}
		rootless = host.Rootless
	}
	out := cmd.OutOrStdout()
	from := ""
	if res.Claimed {
		from = ", taken from the pool"
	}
	fmt.Fprintf(out, "Pod %s is ready (%.1fs, %s podman%s).\n", pl.Name, time.Since(start).Seconds(), podmanMode(rootless), from)
	if f.timings {
		steps.print(out)
	}
	if !g.quiet {
		for _, c := range pl.Credentials {
			fmt.Fprintf(out, "  credential %s: the agent holds a placeholder; the proxy puts in %s on %s\n", c.Name, c.From, strings.Join(c.Hosts, ", "))
		}
		printGetIn(out, pl.Name)
	}
	return nil
}

// check refuses, before anything else happens, flag values that can
// only fail later: a name podman would refuse, a wait that cannot end.
func (f *upFlags) check() error {
	if f.timeout < time.Second {
		return fmt.Errorf("--timeout %v: give at least 1s (such as 90s or 5m)", f.timeout)
	}
	if f.name != "" {
		if _, err := plan.NormalizeName(f.name); err != nil {
			return fmt.Errorf("--name: %w", err)
		}
	}
	return nil
}

// request is what up and pool ask pod for: the pod's flags and the host.
// The output of the commands it runs (the repository's lifecycle commands,
// an image build) goes to stderr made printable: the repository is not
// the user's to trust; the caller flushes it at the end.
func (f *upFlags) request(cmd *cobra.Command, g *globalFlags, cfg *config.Config, input string) (pod.Request, *safetext.Writer) {
	output := &safetext.Writer{W: cmd.ErrOrStderr()}
	return pod.Request{Source: input, Image: f.image, Ref: f.ref, ForgeURL: f.forgeURL,
		Allow: f.allow, Force: f.force, WorkspaceAccess: f.workspaceAccess, Devcontainer: f.devcontainer,
		AllowHostCommands: f.allowHostCommands, NoVerify: f.noVerify, Gator: f.gator, Pull: f.pull,
		ReadyTimeout: f.timeout,
		Config:       cfg, ConfigFile: cmp.Or(g.config, config.DefaultConfigPath()), HostEnv: hostEnv(), Grants: pod.DefaultGrants(),
		Trusted: pod.DefaultTrustStore(), Trust: f.trust,
		Trusting: func(t pod.Trust) { sayTrust(cmd, g, t, input) },
		Warn:     func(s string) { g.warnf(cmd, "%s", s) },
		Output:   output}, output
}

// sayTrust says in one line whether the repository is trusted: since when,
// or how to trust it (the plan's warnings say what was withheld).
func sayTrust(cmd *cobra.Command, g *globalFlags, t pod.Trust, input string) {
	if t.Trusted {
		how := "for this up (--trust)"
		switch t.How {
		case pod.TrustRemembered:
			how = "since " + t.Since.Local().Format("2006-01-02 15:04") + " (devaipod trust; devaipod trust --revoke to undo)"
		case pod.TrustAnsweredYes:
			how = "for this up (you said so)"
		}
		g.infof(cmd, "the repository is trusted %s: its workspace gets your trusted values", how)
		return
	}
	fix := "trust it with `devaipod trust " + shellQuote(input) + "` (or up --trust)"
	if !t.Rememberable {
		fix = "trust it for one up with up --trust (the code of a URL or a pull request is never remembered as trusted)"
	}
	g.warnf(cmd, "the repository is not trusted: its devcontainer's commands, image and features run without your trusted values, host paths, host variables and registry logins; %s", fix)
}

// shellQuote quotes s for a shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// askTrust asks on the terminal whether to trust a repository up does not
// trust yet.
func askTrust(cmd *cobra.Command) func(pod.TrustQuestion) (pod.TrustAnswer, error) {
	return func(q pod.TrustQuestion) (pod.TrustAnswer, error) {
		w := cmd.ErrOrStderr()
		what := "The repository " + safetext.Printable(q.Repo)
		if q.PR > 0 {
			what = fmt.Sprintf("Pull request #%d (%s)", q.PR, safetext.Printable(q.Repo))
		}
		fmt.Fprintf(w, "%s is not trusted. Its devcontainer's lifecycle commands, image and features run in the workspace;\n"+
			"trusted, they get your [trusted.env] values, [[mounts]] and the host variables it names.\n", what)
		choices := "[y]es for this up, [N]o"
		if q.Rememberable {
			choices = "[y]es for this up, [a]lways (devaipod trust), [N]o"
		}
		fmt.Fprintf(w, "Trust it? %s: ", choices)
		line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
		if err != nil && line == "" {
			fmt.Fprintln(w)
			return pod.TrustNo, nil
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return pod.TrustOnce, nil
		case "a", "always":
			if q.Rememberable {
				return pod.TrustAlways, nil
			}
		}
		return pod.TrustNo, nil
	}
}

// printGetIn says how to use a pod that is up.
func printGetIn(out io.Writer, name string) {
	fmt.Fprintf(out, "  shell in the workspace:  devaipod exec %s\n", name)
	fmt.Fprintf(out, "  talk to the agent:       devaipod attach %s\n", name)
	fmt.Fprintf(out, "  open it in VS Code:      devaipod code %s\n", name)
	fmt.Fprintf(out, "  remove it:               devaipod delete %s\n", name)
}

// reportExisting reports a pod of the requested name that up found made
// from the same source: as it was, started, or (dry run) what up would do.
// The JSON has the keys of a new pod's, with "existing": true.
func reportExisting(cmd *cobra.Command, g *globalFlags, dryRun bool, ex *pod.Existing, start time.Time) error {
	out := cmd.OutOrStdout()
	if dryRun {
		if g.json() {
			return writeJSON(out, struct {
				*pod.Existing
				Exists bool `json:"existing"`
				DryRun bool `json:"dry_run"`
			}{ex, true, true})
		}
		would := "up would change nothing and say how to get in"
		if ex.Action == pod.ActionStart {
			would = "up would start it"
		}
		fmt.Fprintf(out, "Pod %s exists already (%s, from %s): %s. Nothing done.\n", ex.Name, ex.State, ex.Source(), would)
		return nil
	}
	if g.json() {
		creds := make([]plan.Credential, 0, len(ex.Credentials))
		for _, n := range ex.Credentials {
			creds = append(creds, plan.Credential{Name: n, Hosts: []string{}})
		}
		return writeJSON(out, map[string]any{
			"name": ex.Name, "pod": ex.Pod, "workdir": ex.Workdir,
			"agent_url": ex.AgentURL, "commit": ex.Commit, "seconds": time.Since(start).Seconds(),
			"credentials": creds, "existing": true, "claimed": false, "state": ex.State, "action": ex.Action, "repo": ex.Repo,
			// As the pod was made: what it withheld is not kept.
			"trust": pod.Trust{Trusted: !ex.Untrusted}, "withheld": []string{}})
	}
	if ex.Action == pod.ActionStart {
		fmt.Fprintf(out, "Pod %s was not running (%s): started it (from %s, %.1fs).\n", ex.Name, ex.State, ex.Source(), time.Since(start).Seconds())
	} else {
		fmt.Fprintf(out, "Pod %s is already running (from %s).\n", ex.Name, ex.Source())
	}
	if !g.quiet {
		for _, c := range ex.Credentials {
			fmt.Fprintf(out, "  credential %s: the agent holds a placeholder; the proxy puts in the value\n", c)
		}
		printGetIn(out, ex.Name)
	}
	return nil
}

func podmanMode(rootless bool) string {
	if rootless {
		return "rootless"
	}
	return "rootful"
}

// printPlan shows a plan for people: each object and its security
// settings, then the steps up would take.
func printPlan(w io.Writer, p *plan.Plan, steps []pod.Step) {
	fmt.Fprintf(w, "Plan for pod %s (nothing created):\n", p.Pod.Name)
	fmt.Fprintf(w, "  pod      %s  labels %s\n", p.Pod.Name, labelString(p.Pod.Labels))
	for _, v := range p.Volumes {
		fmt.Fprintf(w, "  volume   %s  owner %d:%d\n", v.Name, v.UID, v.GID)
	}
	for _, s := range p.Secrets {
		fmt.Fprintf(w, "  secret   %s  (value hidden)\n", s.Name)
	}
	for _, c := range p.Containers {
		fmt.Fprintf(w, "  container %s (%s)\n", c.Name, c.Role)
		fmt.Fprintf(w, "    image        %s\n", c.Image)
		fmt.Fprintf(w, "    command      %s\n", strings.Join(append(append([]string{}, c.Entrypoint...), c.Command...), " "))
		user := c.User
		if user == "" {
			user = "(image default)"
		}
		fmt.Fprintf(w, "    user         %s\n", user)
		fmt.Fprintf(w, "    network      %s\n", c.Network)
		var caps []string
		if len(c.CapDrop) > 0 {
			caps = append(caps, "drop "+strings.Join(c.CapDrop, ","))
		}
		if len(c.CapAdd) > 0 {
			caps = append(caps, "add "+strings.Join(c.CapAdd, ","))
		}
		if len(caps) == 0 {
			caps = []string{"image default"}
		}
		fmt.Fprintf(w, "    capabilities %s; no-new-privileges %v; read-only root %v\n", strings.Join(caps, ", "), c.NoNewPrivileges, c.ReadOnlyRoot)
		if c.Privileged {
			fmt.Fprintf(w, "    PRIVILEGED   every capability and device of the host's user\n")
		}
		seccomp := "podman's default"
		if c.Seccomp != "" {
			seccomp = "devaipod's " + c.Seccomp
		}
		fmt.Fprintf(w, "    seccomp      %s\n", seccomp)
		for _, o := range c.SecurityOpt {
			fmt.Fprintf(w, "    security-opt %s\n", o)
		}
		for _, d := range c.Devices {
			fmt.Fprintf(w, "    device       %s\n", d)
		}
		for _, m := range c.Mounts {
			fmt.Fprintf(w, "    mount        %s -> %s (%s)\n", m.Volume, m.Dest, rwMode(m.ReadOnly))
		}
		for _, b := range c.Binds {
			from := "host " + b.HostPath
			if b.HostPath == "" {
				from = b.Volume + ":" + b.SubPath
			}
			fmt.Fprintf(w, "    bind         %s -> %s (%s)\n", from, b.Dest, rwMode(b.ReadOnly))
		}
		for _, m := range c.ImageMounts {
			fmt.Fprintf(w, "    mount        image %s -> %s (ro)\n", m.Image, m.Dest)
		}
		for _, t := range c.Tmpfs {
			fmt.Fprintf(w, "    tmpfs        %s size %s\n", t.Dest, t.Size)
		}
		if l := c.Limits; l != nil {
			fmt.Fprintf(w, "    limits       memory %s cpus %s pids %s\n", cmp.Or(l.Memory, "none"), limitText(l.CPUs), limitText(l.Pids))
		}
		fmt.Fprintf(w, "    env          %s\n", strings.Join(slices.Sorted(maps.Keys(c.Env)), " "))
		if len(c.SecretEnv) > 0 {
			fmt.Fprintf(w, "    secret env   %s\n", strings.Join(slices.Sorted(maps.Keys(c.SecretEnv)), " "))
		}
	}
	for _, c := range p.Credentials {
		fmt.Fprintf(w, "  credential %s  placeholder in the agent; %s put in by the proxy on %s\n", c.Name, c.From, strings.Join(c.Hosts, ", "))
	}
	for _, warn := range p.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
	if len(steps) > 0 {
		fmt.Fprintf(w, "Steps up would take (a dry run takes only the first, the clone, and removes it again):\n")
		for i, s := range steps {
			fmt.Fprintf(w, "  %2d. %-10s %s\n", i+1, s.Kind, s.What)
		}
	}
}

func rwMode(readOnly bool) string {
	if readOnly {
		return "ro"
	}
	return "rw"
}

// limitText shows a limit, zero as none.
func limitText[N int64 | float64](n N) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

func labelString(l map[string]string) string {
	parts := make([]string, 0, len(l))
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

// stepClock times up's steps: each from its progress line to the next
// (the first from the command's start), for up --timings.
type stepClock struct {
	start time.Time
	last  time.Time
	step  string
	list  []stepTime
}

type stepTime struct {
	Step string `json:"step"`
	MS   int64  `json:"ms"`
}

// mark ends the step in progress and starts step ("" ends the last).
func (c *stepClock) mark(step string) {
	now := time.Now()
	if c.last.IsZero() {
		c.last, c.step = c.start, "reading the configuration and resolving the source"
	}
	c.list = append(c.list, stepTime{Step: strings.TrimSuffix(c.step, "..."), MS: now.Sub(c.last).Milliseconds()})
	c.last, c.step = now, step
}

func (c *stepClock) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ms\tstep\t")
	for _, s := range c.list {
		fmt.Fprintf(tw, "%d\t  %s\t\n", s.MS, s.Step)
	}
	tw.Flush()
}
