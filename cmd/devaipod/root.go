package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/spf13/cobra"
)

// streams are the command's standard streams, injected for tests.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

// globalFlags are flags every command has.
type globalFlags struct {
	config     string
	connection string
	output     string
	quiet      bool
	// engine is podman or kube (--engine, $DEVAIPOD_ENGINE); kubeContext
	// and namespace choose the cluster's (engine.go).
	engine, kubeContext, namespace string
}

// exitError carries an exit code chosen by a command (e.g. exec passes on
// the command's own status).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func run(ctx context.Context, args []string, s streams) int {
	root := newRootCommand(s)
	root.SetArgs(args)
	if completing(args) {
		// Completing, exec's flags after NAME are flags, whose names and
		// values cobra then completes; run, they stop at the command
		// (newExecCommand), which cobra's completion does not follow.
		if exec, _, err := root.Find([]string{"exec"}); err == nil {
			exec.Flags().SetInterspersed(true)
		}
	}
	err := spellFlags(root.ExecuteContext(ctx))
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	w := s.err
	var text bytes.Buffer
	asJSON := false
	if f := root.PersistentFlags().Lookup("output"); f != nil && f.Value.String() == "json" {
		w, asJSON = &text, true
	}
	if f := root.PersistentFlags().Lookup("engine"); f != nil && f.Value.String() == engineKube {
		printKubeError(w, err)
	} else {
		printError(w, err)
	}
	if asJSON {
		writeJSONError(s.err, err, text.String())
	}
	return 1
}

// jsonError is an error as --output json prints it, on standard error:
// what printError would print, the error, the hint and the lines between
// them apart.
type jsonError struct {
	Error  string   `json:"error"`
	Hint   string   `json:"hint,omitempty"`
	Detail []string `json:"detail,omitempty"` // other lines: the agent's log...
}

// writeJSONError writes err, and what printError wrote after it (text), as
// one JSON object. The error is taken whole, never parsed from the text: it
// may carry lines of the agent's (a failed command's output), which must
// not pass for a hint. After it, printError writes only its own lines and
// the agent's log indented, so a line there that starts with "Hint: " is
// printError's.
func writeJSONError(w io.Writer, err error, text string) {
	e := jsonError{Error: safetext.Lines(err.Error())}
	rest, ok := strings.CutPrefix(text, "Error: "+e.Error+"\n")
	if !ok {
		rest = "" // not printError's shape: the error alone
	}
	for _, line := range strings.Split(strings.TrimRight(rest, "\n"), "\n") {
		switch {
		case line == "":
		case strings.HasPrefix(line, "Hint: "):
			e.Hint = strings.TrimPrefix(line, "Hint: ")
		default:
			e.Detail = append(e.Detail, line)
		}
	}
	b, _ := json.Marshal(e)
	fmt.Fprintf(w, "%s\n", b)
}

// printError is the one place that turns errors into advice. An error
// may carry what the agent or the repository wrote (a failed command's
// output, git's complaint about a file name, the agent's log): every line
// is shown printable.
// spellFlags says the request field an error of the library names
// (pod.InputError) as the flag that set it: "pull: ..." is "--pull: ...".
func spellFlags(err error) error {
	var ie *pod.InputError
	if !errors.As(err, &ie) {
		return err
	}
	return &flagError{err: err, text: strings.Replace(err.Error(), ie.Error(), "--"+ie.Error(), 1)}
}

// flagError is an error whose text spellFlags rewrote.
type flagError struct {
	err  error
	text string
}

func (e *flagError) Error() string { return e.text }
func (e *flagError) Unwrap() error { return e.err }

func printError(w io.Writer, err error) {
	fmt.Fprintf(w, "Error: %s\n", safetext.Lines(err.Error()))
	if hint := kubeHint(err); hint != "" {
		fmt.Fprintf(w, "Hint: %s\n", hint)
		return
	}
	var ce *podman.ConnectError
	var re *pod.ReadyError
	var he *hintError
	var xe *pod.ExistingPodError
	var se *pod.StaleImageError
	var ie *pod.InputError
	var hce *pod.HostCommandError
	switch {
	case errors.As(err, &he):
		fmt.Fprintf(w, "Hint: %s\n", he.hint)
	case errors.As(err, new(*pod.PullError)):
		fmt.Fprintln(w, "Hint: check the image's name and that this host reaches its registry (a private one needs `podman login REGISTRY`); an image built here is named localhost/NAME")
	case errors.As(err, &se):
		fmt.Fprintf(w, "Hint: %s; `devaipod doctor` checks the images\n", se.Fix())
	case errors.As(err, &hce) && hce.Untrusted:
		fmt.Fprintln(w, "Hint: only a repository you trust runs code on your host: read it, trust it (devaipod trust PATH, or up --trust), then pass --allow-host-commands")
	case errors.As(err, &hce):
		fmt.Fprintln(w, "Hint: read it, then pass --allow-host-commands to run it (a repository must not run code on your host by default)")
	case errors.As(err, new(*pod.NotRememberableError)):
		fmt.Fprintln(w, "Hint: pass --trust to up to trust it for that up; clone it yourself and trust the checkout to remember it")
	case errors.As(err, new(*pod.ToolMissingError)):
		fmt.Fprintln(w, "Hint: install it (npm install -g @devcontainers/cli), or build the image yourself and pass --image NAME")
	case errors.As(err, &ce) && ce.Hint != "":
		fmt.Fprintf(w, "Hint: %s\n", ce.Hint)
	case errors.As(err, &re):
		if re.Logs != "" {
			fmt.Fprintf(w, "Last lines of the agent's log:\n%s", indent(safetext.Lines(re.Logs)))
		}
		fmt.Fprintln(w, "Hint: check [agent] command in your config, or rerun with --keep-on-failure and inspect with `devaipod logs NAME -c agent`")
	case errors.Is(err, pod.ErrNotFound) && strings.HasPrefix(err.Error(), "pod "):
		fmt.Fprintln(w, "Hint: `devaipod list` shows the pods that exist")
	case errors.As(err, new(*pod.CheckError)):
		fmt.Fprintln(w, "Hint: up refuses to report a pod ready whose agent can get out; everything it created was removed. `devaipod doctor` checks the host")
	case errors.As(err, new(*pod.WorkTooLargeError)):
		fmt.Fprintln(w, "Hint: if the agent's work is meant to be that large, pass a larger --max-size; `devaipod diff NAME --stat` (with --max-size too) shows what it holds")
	case errors.As(err, new(*plan.GuardedValueError)):
		fmt.Fprintln(w, "Hint: nothing was created. The agent never holds a trusted or credential value, under any name: give that variable a value of its own, or stop passing it to the agent (the repository's devcontainer.json envAllowlist, [env] in your config, DEVAIPOD_AGENT_* variables)")
	case errors.As(err, &ie) && ie.Forcible:
		fmt.Fprintf(w, "Hint: pass --force to allow it all the same\n")
	case errors.As(err, new(*pod.AccessError)):
		fmt.Fprintln(w, "Hint: devaipod reads the checkout as the user it runs as: give that user access (chmod o+x on the folder named, o+rX on the checkout), or clone the repository where it can read it; a root's checkout under /root is out of other users' reach")
	case errors.As(err, new(*plan.NoModelError)):
		fmt.Fprintln(w, "Hint: nothing was created. Give the agent a model: export an LLM key where devaipod runs (ANTHROPIC_API_KEY, OPENAI_API_KEY...; the proxy puts it in, the agent holds a placeholder), "+
			"or an opencode config (DEVAIPOD_AGENT_OPENCODE_CONFIG_CONTENT, [credentials] for its provider's key), or allow opencode's hosted models (--allow opencode.ai, or [network] allow = [\"opencode.ai\"]); then up again")
	case errors.As(err, new(*pod.NotRunningError)):
		fmt.Fprintln(w, "Hint: `devaipod start NAME` starts it")
	case errors.As(err, &xe):
		switch xe.Reason {
		case pod.ReasonSource:
			fmt.Fprintf(w, "Hint: pick another name with --name NAME (or leave --name out: up derives a new one), or `devaipod delete %s` first; `devaipod status %s` shows the pod\n", xe.Name, xe.Name)
		case pod.ReasonTask:
			fmt.Fprintf(w, "Hint: `devaipod attach %s` gives its agent the task; for a new pod with it, pick another --name (or leave --name out: up derives a new one)\n", xe.Name)
		case pod.ReasonIncomplete:
			fmt.Fprintf(w, "Hint: `devaipod gc` removes what a failed up left; `devaipod delete %s` removes everything of that name\n", xe.Name)
		case pod.ReasonState:
			if xe.State == "paused" {
				fmt.Fprintf(w, "Hint: `podman pod unpause devaipod-%s`, then up again; or pick another --name\n", xe.Name)
			} else {
				fmt.Fprintf(w, "Hint: `devaipod status %s` shows it; `devaipod delete %s` removes it, or pick another --name\n", xe.Name, xe.Name)
			}
		}
	case errors.Is(err, pod.ErrExists):
		fmt.Fprintln(w, "Hint: pick another --name, or `devaipod delete NAME` first")
	case strings.Contains(err.Error(), "create session key: disk quota exceeded"):
		// runc's session keyring: one key per running container, from the
		// user's kernel key quota (docs/commands.md, doctor).
		fmt.Fprintln(w, "Hint: this user's kernel key quota is spent (one key per running container): `devaipod doctor --pods N` shows the room left and the sysctl that raises it")
	}
}

// hintError is an error of cmd's own with advice for the user.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// completing tells whether args ask cobra for completions: its hidden
// command comes before any exec (global flags may precede it).
func completing(args []string) bool {
	for _, a := range args {
		switch a {
		case cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
			return true
		case "exec":
			return false
		}
	}
	return false
}

func newRootCommand(s streams) *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "devaipod",
		Short: "Run AI coding agents in sandboxed rootless podman pods",
		Long: `devaipod runs an AI coding agent on a repository inside a rootless podman pod.

Each pod has a trusted workspace container (your image, your credentials, the
'oc' shim to talk to the agent) and an agent container with no capabilities,
no network interface but loopback, a read-only root filesystem and its own
HOME. Both share one cloned copy of the repository.

Start with 'devaipod up PATH-OR-URL', then 'devaipod exec NAME' to get a shell
in the workspace. 'devaipod doctor' says what this host can enforce.

With --engine kube (or DEVAIPOD_ENGINE=kube), up, list, status, logs, exec,
delete and verify work on the cluster of your kubeconfig instead
(--context, --namespace): the agent in a Pod of its own behind a deny-all
NetworkPolicy, the workspace, proxy and gator in another (docs/kubernetes.md).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version prints what `devaipod version` prints.
		Version: plan.Version,
	}
	root.SetVersionTemplate(strings.ReplaceAll(versionLine(), "{{", "{{`{{`}}"))
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	pf := root.PersistentFlags()
	pf.StringVar(&g.config, "config", "", "config file (default $XDG_CONFIG_HOME/devaipod.toml or ~/.config/devaipod.toml)")
	pf.StringVar(&g.connection, "connection", "", "podman service: a URI (unix:///run/user/1000/podman/podman.sock, tcp://, ssh://) or the name of a podman connection (default $CONTAINER_CONNECTION, then $CONTAINER_HOST, then the user's socket)")
	pf.StringVarP(&g.output, "output", "o", "text", "output format: text or json")
	pf.BoolVarP(&g.quiet, "quiet", "q", false, "print only results and errors")
	pf.StringVar(&g.engine, "engine", defaultEngine(), "where pods run: podman (this host) or kube (the cluster of your kubeconfig; up, list, status, logs, exec, delete and verify); default $DEVAIPOD_ENGINE, else podman")
	pf.StringVar(&g.kubeContext, "context", "", "with --engine kube: the kubeconfig context (default: its current context; the kubeconfig is $KUBECONFIG, else ~/.kube/config)")
	pf.StringVar(&g.namespace, "namespace", "", "with --engine kube: the namespace (default: the context's, else default)")
	root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	root.RegisterFlagCompletionFunc("engine", cobra.FixedCompletions(engines, cobra.ShellCompDirectiveNoFileComp))
	root.RegisterFlagCompletionFunc("context", completeKubeContexts)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if g.output != "text" && g.output != "json" {
			return fmt.Errorf("--output must be text or json, not %q", g.output)
		}
		return g.checkEngine(cmd)
	}
	root.AddCommand(
		newUpCommand(g),
		newPoolCommand(g),
		newListCommand(g),
		newStatusCommand(g),
		newExecCommand(g),
		newCodeCommand(g),
		newLogsCommand(g),
		newStopCommand(g),
		newStartCommand(g),
		newDeleteCommand(g),
		newGCCommand(g),
		newPolicyCommand(g, pod.PolicyAllow),
		newPolicyCommand(g, pod.PolicyDeny),
		newAuditCommand(g),
		newAttachCommand(g),
		newDiffCommand(g),
		newFetchCommand(g),
		newApprovalsCommand(g),
		newApproveCommand(g),
		newRejectCommand(g),
		newRevokeCommand(g),
		newTrustCommand(g),
		newShareCommand(g),
		newVerifyCommand(g),
		newDoctorCommand(g),
		newVersionCommand(g),
		newKubeCommand(g),
	)
	for _, c := range extraCommands {
		root.AddCommand(c())
	}
	// cobra's completion command, not runnable, shows its help and exits 0
	// for a shell it does not know; runnable, it refuses it ("unknown
	// command").
	root.InitDefaultCompletionCmd() // after the verbs: it makes nothing for a root without them
	if c, _, err := root.Find([]string{"completion"}); err == nil && c.Name() == "completion" {
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	return root
}

// extraCommands are added by files built only with a build tag (genman.go).
var extraCommands []func() *cobra.Command

// connect reaches podman and says so when it had to start a service.
func (g *globalFlags) connect(cmd *cobra.Command) (*podman.Podman, error) {
	p, err := podman.Connect(cmd.Context(), g.connection)
	if err != nil {
		return nil, err
	}
	if p.Started {
		g.infof(cmd, "no podman service was running: started one for this command (%s)", p.URI)
	}
	return p, nil
}

// loadConfig reads --config, or the default file if it exists.
func (g *globalFlags) loadConfig() (*config.Config, error) {
	if g.config != "" {
		return config.LoadConfig(g.config, true)
	}
	return config.LoadConfig(config.DefaultConfigPath(), false)
}

// infof and warnf print progress and warnings, which may name what the
// repository or the agent wrote (a path, a devaipod key, a command):
// every line is shown printable.
func (g *globalFlags) infof(cmd *cobra.Command, format string, args ...any) {
	if !g.quiet {
		fmt.Fprintln(cmd.ErrOrStderr(), safetext.Lines(fmt.Sprintf(format, args...)))
	}
}

func (g *globalFlags) warnf(cmd *cobra.Command, format string, args ...any) {
	fmt.Fprintln(cmd.ErrOrStderr(), "Warning: "+safetext.Lines(fmt.Sprintf(format, args...)))
}

func (g *globalFlags) json() bool { return g.output == "json" }

// writeJSON writes v indented, with what JSON allows raw in strings but a
// terminal obeys (C1 controls, bidirectional and invisible characters)
// escaped: values may be the agent's.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, safetext.JSONSafe(string(b))+"\n")
	return err
}

// positional checks a command's arguments against their names in its
// usage ("NAME", "HOST"), and says which is missing or what is too many:
// "missing pod NAME (see `devaipod list`)" rather than cobra's count.
func positional(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < len(names) {
			missing := names[len(args)]
			switch missing {
			case "NAME":
				return errors.New("missing pod NAME (see `devaipod list`)")
			case "ID":
				return errors.New("missing request ID (see `devaipod approvals`)")
			case "GRANT":
				return errors.New("missing GRANT (see `devaipod approvals --granted`)")
			}
			return fmt.Errorf("missing %s (usage: devaipod %s)", missing, cmd.Use)
		}
		if len(args) > len(names) {
			return fmt.Errorf("too many arguments: %s takes %s, and %q is one more (usage: devaipod %s)",
				cmd.Name(), strings.Join(names, " "), args[len(names)], cmd.Use)
		}
		return nil
	}
}

// podArg validates a NAME argument (with or without the devaipod- prefix).
func podArg(args []string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("missing pod NAME (see `devaipod list`)")
	}
	return plan.NormalizeName(args[0])
}

// completePods offers existing pod names for shell completion.
func completePods(g *globalFlags) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var sums []pod.Summary
		err := withAnyEngine(cmd, &globalFlags{connection: g.connection, engine: g.engine, kubeContext: g.kubeContext,
			namespace: g.namespace, quiet: true}, func(eng pod.Engine) (err error) {
			sums, err = pod.List(cmd.Context(), eng)
			return err
		})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names := make([]string, 0, len(sums))
		for _, s := range sums {
			names = append(names, s.Name)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

func hostEnv() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}
