package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"

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
				var as plan.ExecAs
				if container == plan.RoleWorkspace {
					var err error
					if as, err = pod.WorkspaceExecAs(cmd.Context(), p, short); err != nil {
						return err
					}
				}
				as.User = cmp.Or(user, as.User)
				return attach(cmd, p, short, container, as, argv)
			})
		},
	}
	cmd.Flags().StringVarP(&container, "container", "c", plan.RoleWorkspace, "container: workspace or agent")
	cmd.Flags().StringVarP(&user, "user", "u", "", "run as this `USER` (NAME, UID, NAME:GROUP, UID:GID; default: the devcontainer's remote user, else the container's)")
	cmd.RegisterFlagCompletionFunc("container", cobra.FixedCompletions([]string{plan.RoleWorkspace, plan.RoleAgent}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// attach runs argv in the pod's container of role with the command's
// streams and passes on its exit status.
func attach(cmd *cobra.Command, p *podman.Podman, short, role string, as plan.ExecAs, argv []string) error {
	code, err := pod.Attach(cmd.Context(), p, short, role, as, argv,
		cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), isTerminal(cmd.InOrStdin()))
	if err == nil && code != 0 {
		return &exitError{code: code}
	}
	return err
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
				return attach(cmd, p, short, plan.RoleWorkspace, as, []string{"oc"})
			})
		},
	}
	cmd.Flags().BoolVar(&noUI, "no-ui", false, "run the postAttachCommand only, without opening the UI (for scripts)")
	return cmd
}

// isTerminal tells whether r is a terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
