package main

import (
	"fmt"

	"github.com/devaipod/devaipod/pod"
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
copy and the agent's HOME stay (and are removed by a later delete or gc).

With --engine kube: the pod's Pods, then (once they are gone, so that the
agent never runs without its deny-all NetworkPolicy) its NetworkPolicies
and ConfigMaps, its PersistentVolumeClaims (the volumes) and Secrets, all
found by the io.devaipod.pod label in the namespace.`,
		Args:              positional("NAME"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPodEngine(cmd, g, args, func(eng pod.Engine, short string) error {
				removed, err := pod.Delete(cmd.Context(), eng, short, keepVolumes)
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
