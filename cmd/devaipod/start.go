package main

import (
	"errors"

	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/pod"
	"github.com/spf13/cobra"
)

func newStartCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:               "start NAME",
		Short:             "Start a stopped pod",
		Args:              positional("NAME"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onPod(cmd, g, args, "started", func(p pod.Engine, short string) error {
				// postStartCommand runs what the agent may have edited:
				// its output is shown printable.
				out := &safetext.Writer{W: cmd.ErrOrStderr()}
				return errors.Join(pod.Start(cmd.Context(), p, short, out), out.Flush())
			})
		},
	}
}
