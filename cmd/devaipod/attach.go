package main

import (
	"errors"

	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/spf13/cobra"
)

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
		Args:              positional("NAME"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !noUI && !isTerminal(cmd.InOrStdin()) {
				return &hintError{err: errors.New("attach opens a terminal UI, and its input is not a terminal"),
					hint: "run it in a terminal; from a script, use `devaipod attach NAME --no-ui` (postAttachCommand only) or `devaipod exec NAME -- CMD`"}
			}
			return withPod(cmd, g, args, func(p pod.Engine, short string) error {
				// Also checks that the workspace runs.
				as, err := pod.WorkspaceExecAs(cmd.Context(), p, short)
				if err != nil {
					return err
				}
				// The devcontainer's postAttachCommand runs on every attach.
				// It runs what the agent may have edited: its output is
				// shown printable.
				out := &safetext.Writer{W: cmd.ErrOrStderr()}
				if err := errors.Join(pod.RunPodLifecycle(cmd.Context(), p, short, plan.StageAttach, out), out.Flush()); err != nil {
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
