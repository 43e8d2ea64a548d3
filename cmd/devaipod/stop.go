package main

import (
	"github.com/devaipod/devaipod/pod"
	"github.com/spf13/cobra"
)

func newStopCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:               "stop NAME",
		Short:             "Stop a pod's containers (the workspace volume and the agent's HOME stay)",
		Args:              positional("NAME"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onPod(cmd, g, args, "stopped", func(p pod.Engine, short string) error {
				return pod.Stop(cmd.Context(), p, short)
			})
		},
	}
}
