package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// defaultShell prefers bash and falls back to sh: images differ.
var defaultShell = []string{"/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi"}

func newExecCommand(g *globalFlags) *cobra.Command {
	var container, user string
	var argv []string
	cmd := &cobra.Command{
		Use:   "exec NAME [CMD...]",
		Short: "Run a command in a pod's container (default: a shell in the workspace)",
		Long: `Run a command in one of the pod's containers, in the repository's folder.
Without CMD it opens an interactive shell in the workspace, where 'oc' talks to
the agent.

In the workspace the command has the trusted variables, and runs as the
devcontainer's remote user (remoteUser, else containerUser) with its
remoteEnv, as the devcontainer spec asks; else as the image's USER. A user
other than root also gets the agent's group, so that it can change the
agent's files in the repository and the agent its files.
--user runs it as another user (NAME, UID, NAME:GROUP or UID:GID).

The command starts at the first argument after NAME that is not one of
exec's flags, and its own flags are its own: "devaipod exec NAME ls -la"
runs ls -la. exec's flags go before NAME or right after it; "--" ends
them, for a command that starts with "-".

With --engine kube the command runs through the cluster's exec, as the
container's user: --user can only name that user.`,
		Example: `  devaipod exec myproject
  devaipod exec myproject git status
  devaipod exec myproject ls -la
  devaipod exec myproject --user root -- apt-get install -y jq
  devaipod exec myproject -c agent -- id`,
		// Flags stop at NAME (as podman exec's do), so that the command's
		// own flags are not taken for exec's; Args reads exec's flags that
		// follow NAME, up to the command or "--".
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("missing pod NAME (see `devaipod list`)")
			}
			argv = nil
			if len(args) == 1 {
				return nil
			}
			fs := cmd.Flags()
			if err := fs.Parse(args[1:]); err != nil {
				return err
			}
			argv = fs.Args()
			return nil
		},
		ValidArgsFunction: completeExec(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if help, _ := cmd.Flags().GetBool("help"); help {
				return cmd.Help() // -h after NAME
			}
			if container != plan.RoleWorkspace && container != plan.RoleAgent {
				return fmt.Errorf("unknown container %q: use workspace or agent", container)
			}
			if len(argv) == 0 {
				argv = defaultShell
			}
			return withPodEngine(cmd, g, args, func(eng pod.Engine, short string) error {
				var as plan.ExecAs
				if container == plan.RoleWorkspace {
					var err error
					if as, err = pod.WorkspaceExecAs(cmd.Context(), eng, short); err != nil {
						return err
					}
				}
				as.User = cmp.Or(user, as.User)
				return attach(cmd, eng, short, container, as, argv)
			})
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringVarP(&container, "container", "c", plan.RoleWorkspace, "container: workspace or agent")
	cmd.Flags().StringVarP(&user, "user", "u", "", "run as this `USER` (NAME, UID, NAME:GROUP, UID:GID; default: the devcontainer's remote user, else the container's)")
	cmd.RegisterFlagCompletionFunc("container", cobra.FixedCompletions([]string{plan.RoleWorkspace, plan.RoleAgent}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// completeExec completes NAME, then the command's arguments as files.
// exec's flags after NAME are flags while completing (see run).
func completeExec(g *globalFlags) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	pods := completePods(g)
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return pods(cmd, args, toComplete)
		}
		return nil, cobra.ShellCompDirectiveDefault
	}
}

// attach runs argv in the pod's container of role with the command's
// streams and passes on its exit status.
func attach(cmd *cobra.Command, eng pod.Engine, short, role string, as plan.ExecAs, argv []string) error {
	code, err := pod.Attach(cmd.Context(), eng, short, role, as, argv,
		cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), isTerminal(cmd.InOrStdin()))
	if (err == nil || errors.Is(err, pod.ErrAttachKilled)) && code != 0 {
		return &exitError{code: code} // as the shell would say it
	}
	return err
}

// isTerminal tells whether a command's input or output is a terminal.
func isTerminal(stream any) bool {
	f, ok := stream.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
