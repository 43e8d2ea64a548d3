package main

import (
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/spf13/cobra"
)

func newStartCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:               "start NAME",
		Short:             "Start a stopped pod",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onPod(cmd, g, args, "started", func(p *podman.Podman, short string) error {
				return pod.Start(cmd.Context(), p, short, cmd.ErrOrStderr())
			})
		},
	}
}
