package main

import (
	"errors"

	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/pod"
	"github.com/spf13/cobra"
)

func newVerifyCommand(g *globalFlags) *cobra.Command {
	var fast bool
	cmd := &cobra.Command{
		Use:   "verify NAME",
		Short: "Attack a pod's agent from inside and report which protections hold",
		Long: `Run devaipod's battery of attacks inside the pod's agent container, as a
compromised agent would, and print one row per attack: what was tried, what
was expected, what happened, and PASS, FAIL or N-A with the reason (for
example: a memory limit that rootless podman on cgroup v1 cannot enforce).

The probes are in devaipod's helper binary, so nothing is required of the
image. They never send traffic off this machine. The trusted values of the
workspace are compared by SHA-256 hash, passed on standard input.
docs/verify.md explains each row and what to do when one FAILs.

Exit status: 0 when nothing FAILs, 1 when something does.`,
		Example: `  devaipod verify myproject
  devaipod verify myproject --output json`,
		Args:              positional("NAME"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPodEngine(cmd, g, args, func(eng pod.Engine, short string) error {
				return runVerify(cmd, g, eng, short, fast)
			})
		},
	}
	cmd.Flags().BoolVar(&fast, "fast", false, "run only the fast subset (what up runs before it reports ready)")
	return cmd
}

func runVerify(cmd *cobra.Command, g *globalFlags, eng pod.Engine, short string, fast bool) error {
	// The report is made in the agent's container, and names what it
	// found there: shown printable.
	out := &safetext.Writer{W: cmd.OutOrStdout(), JSON: g.json()}
	vo := pod.VerifyOptions{Fast: fast, Format: g.output, HostEnv: hostEnv()}
	// The trusted values to look for in an untrusted repository's
	// workspace, which does not have them.
	if cfg, err := g.loadConfig(); err != nil {
		g.warnf(cmd, "the configuration's trusted values are not looked for in an untrusted repository's workspace: %v", err)
	} else {
		vo.Config = cfg
	}
	err := errors.Join(pod.Verify(cmd.Context(), eng, short, vo, out), out.Flush())
	if errors.Is(err, pod.ErrVerifyFailed) {
		return &exitError{code: 1} // rows FAILed; the report says which
	}
	return err
}
