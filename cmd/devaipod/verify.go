package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/podman"
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
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPod(cmd, g, args, func(p *podman.Podman, short string) error {
				return runVerify(cmd, g, p, short, fast)
			})
		},
	}
	cmd.Flags().BoolVar(&fast, "fast", false, "run only the fast subset (what up runs before it reports ready)")
	return cmd
}

func runVerify(cmd *cobra.Command, g *globalFlags, p *podman.Podman, short string, fast bool) error {
	ctx := cmd.Context()
	o, err := pod.RunningPod(ctx, p, short, plan.RoleAgent)
	if err != nil {
		return err
	}
	labels := o.Labels
	var verifyArgs []string
	if err := json.Unmarshal([]byte(labels[plan.LabelVerify]), &verifyArgs); err != nil {
		return fmt.Errorf("pod %s was created by a devaipod without verify (label %s): recreate it", short, plan.LabelVerify)
	}
	// The trusted values, hashed in the workspace; the agent's own
	// password is shared with it by design.
	code, out, err := p.Exec(ctx, plan.ContainerName(short, plan.RoleWorkspace),
		pod.AsRoot([]string{plan.HelperBin, "secret-env", "--dir", plan.SecretDir, "--print-hashes"}))
	if err == nil && code != 0 {
		err = errors.New(strings.TrimSpace(out))
	}
	if err != nil {
		return fmt.Errorf("read the workspace's trusted values: %w", err)
	}
	var hashes strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, hash, ok := strings.Cut(line, " ")
		if !ok || name == plan.PasswordVar {
			continue
		}
		verifyArgs = append(verifyArgs, "--secret-var", name)
		fmt.Fprintln(&hashes, hash)
	}
	argv := append([]string{plan.HelperBin, "verify", "--output", g.output, "--secret-hashes-file", "-"}, verifyArgs...)
	if fast {
		argv = append(argv, "--fast")
	}
	bin, err := exec.LookPath("podman")
	if err != nil {
		return errors.New("verify needs the podman command on this host: install podman")
	}
	run := exec.CommandContext(ctx, bin, append([]string{"--remote", "--url", p.URI, "exec", "-i",
		plan.ContainerName(short, plan.RoleAgent)}, argv...)...)
	var stderr bytes.Buffer
	run.Stdin, run.Stdout, run.Stderr = strings.NewReader(hashes.String()), cmd.OutOrStdout(), &stderr
	err = run.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return &exitError{code: 1} // rows FAILed; the table says which
	case err != nil:
		return fmt.Errorf("verify in the agent: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
