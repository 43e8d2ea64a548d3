package main

import (
	"errors"

	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/spf13/cobra"
)

func newLogsCommand(g *globalFlags) *cobra.Command {
	var container string
	var follow bool
	var tail int
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Show a container's logs (the agent's by default)",
		Long: `Show a container's logs (the agent's by default). With --engine kube,
the log the cluster keeps of the container (as kubectl logs).`,
		Example: `  devaipod logs myproject
  devaipod logs myproject -c workspace --tail 50
  devaipod logs myproject -f`,
		Args:              positional("NAME"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPodEngine(cmd, g, args, func(eng pod.Engine, short string) error {
				// The agent's lines may carry escape sequences: on a
				// terminal they are shown, not obeyed.
				if !isTerminal(cmd.OutOrStdout()) {
					return pod.Logs(cmd.Context(), eng, short, container, tail, follow, cmd.OutOrStdout())
				}
				w := &safetext.Writer{W: cmd.OutOrStdout()}
				err := pod.Logs(cmd.Context(), eng, short, container, tail, follow, w)
				return errors.Join(err, w.Flush())
			})
		},
	}
	cmd.Flags().StringVarP(&container, "container", "c", plan.RoleAgent, "container: workspace, agent, proxy or gator")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines")
	cmd.Flags().IntVar(&tail, "tail", -1, "print only the last N lines")
	cmd.RegisterFlagCompletionFunc("container", cobra.FixedCompletions(plan.Roles, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
