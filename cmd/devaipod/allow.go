package main

import (
	"fmt"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/spf13/cobra"
)

func newPolicyCommand(g *globalFlags, op string) *cobra.Command {
	short := map[string]string{
		pod.PolicyAllow: "Let a running pod's agent reach a host (no restart)",
		pod.PolicyDeny:  "Take a host off a running pod's allowlist (no restart)",
	}[op]
	var force bool
	cmd := &cobra.Command{
		Use:   op + " NAME HOST",
		Short: short,
		Long: short + `.

HOST is a proxy rule: "host" (port 443), "*.suffix" (any subdomain), "host:port",
"host:*", or an IP address, which also lets names that resolve to it through
the private-address guard. The change is persisted for that pod and appears in
its audit log. To change the default for new pods, edit [network] allow in the
configuration file.`,
		Example:           fmt.Sprintf("  devaipod %s myproject api.example.test\n  devaipod %s myproject '*.pkg.example.test'\n  devaipod %s myproject git.example.test:22", op, op, op),
		Args:              positional("NAME", "HOST"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if op == pod.PolicyAllow {
				if err := config.ValidateRule(args[1]); err != nil {
					return err
				}
				// A wildcard over a public suffix lets the agent send to
				// anybody's host there.
				switch msg, whole := config.RuleWarning(args[1]); {
				case whole && !force:
					return fmt.Errorf("%s; name the hosts, or pass --force to allow it all the same", msg)
				case msg != "":
					g.warnf(cmd, "%s", msg)
				}
			}
			done := map[string]string{pod.PolicyAllow: "allowed", pod.PolicyDeny: "denied"}[op]
			return onPod(cmd, g, args[:1], done+" "+args[1], func(p pod.Engine, name string) error {
				return pod.EditPolicy(cmd.Context(), p, name, op, args[1])
			})
		},
	}
	if op == pod.PolicyAllow {
		cmd.Long += `

A wildcard over a public suffix ('*.com', '*.co.uk') lets the agent send to
anybody's host there: it is refused unless --force; one over a company's
suffix whose names its customers get ('*.github.io') is allowed with a
warning.`
		cmd.Flags().BoolVar(&force, "force", false, "accept a rule that opens a whole public suffix, such as '*.com'")
	}
	return cmd
}
