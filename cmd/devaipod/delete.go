package main

import (
	"fmt"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/spf13/cobra"
)

func newDeleteCommand(g *globalFlags) *cobra.Command {
	var keepVolumes bool
	cmd := &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Remove a pod and everything labelled for it",
		Long: `Remove a pod: its containers, volumes and secrets, found by the
io.devaipod.pod label, and nothing else. With --keep-volumes the workspace
copy and the agent's HOME stay (and are removed by a later delete or gc).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPod(cmd, g, args, func(p *podman.Podman, short string) error {
				removed, err := pod.Delete(cmd.Context(), p, short, keepVolumes)
				if err != nil {
					return err
				}
				return reportObjects(cmd, g, "removed", removed, fmt.Sprintf("Pod %s deleted", short))
			})
		},
	}
	cmd.Flags().BoolVar(&keepVolumes, "keep-volumes", false, "keep the pod's volumes (the repository's copy, the agent's HOME and git directory, the sidecars' state)")
	return cmd
}
