package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/spf13/cobra"
)

func newStopCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:               "stop NAME",
		Short:             "Stop a pod's containers (the workspace volume and the agent's HOME stay)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onPod(cmd, g, args, "stopped", func(p *podman.Podman, short string) error {
				return p.StopPod(cmd.Context(), plan.PodName(short), 10)
			})
		},
	}
}

func newStartCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:               "start NAME",
		Short:             "Start a stopped pod",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onPod(cmd, g, args, "started", func(p *podman.Podman, short string) error {
				if err := p.StartPod(cmd.Context(), plan.PodName(short)); err != nil {
					return err
				}
				// The devcontainer's postStartCommand runs on every start.
				return pod.RunPodLifecycle(cmd.Context(), p, short, plan.StageStart, cmd.ErrOrStderr())
			})
		},
	}
}

// withPod validates the NAME argument, connects to podman and runs fn.
func withPod(cmd *cobra.Command, g *globalFlags, args []string, fn func(p *podman.Podman, short string) error) error {
	short, err := podArg(args)
	if err != nil {
		return err
	}
	p, err := g.connect(cmd)
	if err != nil {
		return err
	}
	defer p.Close()
	return fn(p, short)
}

// onPod runs fn on the named pod and reports done.
func onPod(cmd *cobra.Command, g *globalFlags, args []string, done string, fn func(*podman.Podman, string) error) error {
	return withPod(cmd, g, args, func(p *podman.Podman, short string) error {
		if err := fn(p, short); err != nil {
			if err := missingPod(cmd.Context(), p, short, err); err != nil {
				return err
			}
			if msg := err.Error(); strings.HasPrefix(msg, "pod "+short+" ") || strings.HasPrefix(msg, "pod "+short+":") {
				return err // it names the pod already
			}
			return fmt.Errorf("pod %s: %w", short, err)
		}
		if g.json() {
			return writeJSON(cmd.OutOrStdout(), map[string]string{"name": short, "result": done})
		}
		if !g.quiet {
			fmt.Fprintf(cmd.OutOrStdout(), "Pod %s %s.\n", short, done)
		}
		return nil
	})
}

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
	cmd.Flags().BoolVar(&keepVolumes, "keep-volumes", false, "keep the workspace and agent-home volumes")
	return cmd
}

func newGCCommand(g *globalFlags) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what failed or killed ups left behind",
		Long: `Remove leftovers: objects labelled for a pod that no longer exists, and pods
that lack a container or whose containers were never started (an up that was
killed). Pods whose up is still running are left alone.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := g.connect(cmd)
			if err != nil {
				return err
			}
			defer p.Close()
			left, err := pod.Leftovers(cmd.Context(), p)
			if err != nil {
				return err
			}
			if dryRun {
				return reportObjects(cmd, g, "leftovers", left, fmt.Sprintf("Would remove %d leftover object(s)", len(left)))
			}
			if err := pod.RemoveLeftovers(cmd.Context(), p, left); err != nil {
				return err
			}
			return reportObjects(cmd, g, "removed", left, fmt.Sprintf("Removed %d leftover object(s)", len(left)))
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list the leftovers without removing them")
	return cmd
}

// reportObjects prints objects as {key: [...]} in JSON, else a summary
// line and one line per object.
func reportObjects(cmd *cobra.Command, g *globalFlags, key string, objs []pod.Object, summary string) error {
	if g.json() {
		if objs == nil {
			objs = []pod.Object{}
		}
		return writeJSON(cmd.OutOrStdout(), map[string]any{key: objs})
	}
	if g.quiet {
		return nil
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "%s.\n", summary)
	for _, o := range objs {
		fmt.Fprintf(w, "  %-9s %s\n", o.Kind, o.Name)
	}
	return nil
}

// missingPod turns err, a not-found error from an operation on pod short,
// into "pod short: not found" when the pod itself is what is missing (the
// operation's own error names a container, or is podman's wording); nil
// otherwise.
func missingPod(ctx context.Context, p *podman.Podman, short string, err error) error {
	if !errors.Is(err, pod.ErrNotFound) {
		return nil
	}
	if exists, perr := p.PodExists(ctx, plan.PodName(short)); perr == nil && !exists {
		return fmt.Errorf("pod %s: %w", short, pod.ErrNotFound)
	}
	return nil
}
