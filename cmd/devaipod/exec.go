package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// defaultShell prefers bash and falls back to sh: images differ.
var defaultShell = []string{"/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi"}

func newExecCommand(g *globalFlags) *cobra.Command {
	var container, user string
	cmd := &cobra.Command{
		Use:   "exec NAME [-- CMD...]",
		Short: "Run a command in a pod's container (default: a shell in the workspace)",
		Long: `Run a command in one of the pod's containers, in the repository's folder.
Without CMD it opens an interactive shell in the workspace, where 'oc' talks to
the agent.

In the workspace the command has the trusted variables, and runs as the
devcontainer's remote user (remoteUser, else containerUser) with its
remoteEnv, as the devcontainer spec asks; else as the image's USER. A user
other than root also gets the agent's group, so that it can change the
agent's files in the repository and the agent its files.
--user runs it as another user (NAME, UID, NAME:GROUP or UID:GID).`,
		Example: `  devaipod exec myproject
  devaipod exec myproject -- git status
  devaipod exec myproject --user root -- apt-get install -y jq
  devaipod exec myproject -c agent -- id`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if container != plan.RoleWorkspace && container != plan.RoleAgent {
				return fmt.Errorf("unknown container %q: use workspace or agent", container)
			}
			argv := args[1:]
			if len(argv) == 0 {
				argv = defaultShell
			}
			return withPod(cmd, g, args, func(p *podman.Podman, short string) error {
				if container == plan.RoleAgent {
					if _, err := pod.RunningPod(cmd.Context(), p, short, plan.RoleAgent); err != nil {
						return err
					}
					return podmanExec(cmd, p.URI, plan.ContainerName(short, container), user, argv)
				}
				as, err := pod.WorkspaceExecAs(cmd.Context(), p, short)
				if err != nil {
					return err
				}
				if user != "" {
					as.User = user
				}
				return workspaceExec(cmd, p.URI, short, as, argv)
			})
		},
	}
	cmd.Flags().StringVarP(&container, "container", "c", plan.RoleWorkspace, "container: workspace or agent")
	cmd.Flags().StringVarP(&user, "user", "u", "", "run as this `USER` (NAME, UID, NAME:GROUP, UID:GID; default: the devcontainer's remote user, else the container's)")
	cmd.RegisterFlagCompletionFunc("container", cobra.FixedCompletions([]string{plan.RoleWorkspace, plan.RoleAgent}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// workspaceExec runs argv in the pod's workspace as as says, with the
// trusted variables.
func workspaceExec(cmd *cobra.Command, uri, short string, as plan.ExecAs, argv []string) error {
	user, wrapped := as.Command(argv, true)
	return podmanExec(cmd, uri, plan.ContainerName(short, plan.RoleWorkspace), user, wrapped)
}

func newAttachCommand(g *globalFlags) *cobra.Command {
	var noUI bool
	cmd := &cobra.Command{
		Use:   "attach NAME",
		Short: "Open the agent's terminal UI (oc) in the pod's workspace",
		Long: `Open the agent's terminal UI in the workspace container, connected to the
agent's server through devaipod's bridge, with the pod's agent password.
It runs the devcontainer's postAttachCommand first. This is
'devaipod exec NAME -- oc'; it needs a terminal.`,
		Example:           "  devaipod attach myproject",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !noUI && !isTerminal(cmd.InOrStdin()) {
				return &hintError{err: errors.New("attach opens a terminal UI, and its input is not a terminal"),
					hint: "run it in a terminal; from a script, use `devaipod attach NAME --no-ui` (postAttachCommand only) or `devaipod exec NAME -- CMD`"}
			}
			return withPod(cmd, g, args, func(p *podman.Podman, short string) error {
				// Also checks that the workspace runs.
				as, err := pod.WorkspaceExecAs(cmd.Context(), p, short)
				if err != nil {
					return err
				}
				// The devcontainer's postAttachCommand runs on every attach.
				if err := pod.RunPodLifecycle(cmd.Context(), p, short, plan.StageAttach, cmd.ErrOrStderr()); err != nil {
					return err
				}
				if noUI {
					return nil
				}
				return workspaceExec(cmd, p.URI, short, as, []string{"oc"})
			})
		},
	}
	cmd.Flags().BoolVar(&noUI, "no-ui", false, "run the postAttachCommand only, without opening the UI (for scripts)")
	return cmd
}

// podmanExec runs `podman exec` against the same service, as user (empty:
// the container's): the bindings' attach code is not made for interactive
// terminals, podman's CLI is.
func podmanExec(cmd *cobra.Command, uri, container, user string, argv []string) error {
	bin, err := exec.LookPath("podman")
	if err != nil {
		return errors.New("exec needs the podman command on this host: install podman")
	}
	args := []string{"--remote", "--url", uri, "exec", "-i"}
	if isTerminal(cmd.InOrStdin()) {
		args = append(args, "-t")
	}
	if user != "" {
		args = append(args, "--user", user)
	}
	args = append(append(args, container), argv...)
	c := exec.CommandContext(cmd.Context(), bin, args...)
	// On Ctrl-C podman exec passes the interrupt on; SIGKILL would leave
	// the command running in the container.
	c.Cancel = func() error { return c.Process.Signal(os.Interrupt) }
	c.Stdin, c.Stdout, c.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	err = c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &exitError{code: ee.ExitCode()}
	}
	return err
}

// isTerminal tells whether r is a terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
