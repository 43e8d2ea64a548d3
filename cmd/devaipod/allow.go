package main

import (
	"fmt"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/spf13/cobra"
)

func newPolicyCommand(g *globalFlags, op string) *cobra.Command {
	short := map[string]string{
		pod.PolicyAllow: "Let a running pod's agent reach a host (no restart)",
		pod.PolicyDeny:  "Take a host off a running pod's allowlist (no restart)",
	}[op]
	return &cobra.Command{
		Use:   op + " NAME HOST",
		Short: short,
		Long: short + `.

HOST is a proxy rule: "host" (port 443), "*.suffix" (any subdomain), "host:port",
"host:*", or an IP address, which also lets names that resolve to it through
the private-address guard. The change is persisted for that pod and appears in
its audit log. To change the default for new pods, edit [network] allow in the
configuration file.`,
		Example:           fmt.Sprintf("  devaipod %s myproject api.example.test\n  devaipod %s myproject '*.pkg.example.test'\n  devaipod %s myproject git.example.test:22", op, op, op),
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onPod(cmd, g, args[:1], op+"ed "+args[1], func(p *podman.Podman, name string) error {
				return pod.EditPolicy(cmd.Context(), p, name, op, args[1])
			})
		},
	}
}
