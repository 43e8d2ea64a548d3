package main

import (
	"errors"
	"fmt"

	"github.com/devaipod/devaipod/pod"
	"github.com/spf13/cobra"
)

func newPoolCommand(g *globalFlags) *cobra.Command {
	f := &upFlags{}
	var size int
	cmd := &cobra.Command{
		Use:   "pool PATH|GIT-URL|PR-URL [--size N]",
		Short: "Keep pods of a repository made and started before they are needed",
		Long: `Keep N pods of a repository made, started and checked before a task needs
one (the warm pool): an up of the same repository, with the same flags and
configuration and without --name, then takes one instead of making a pod, and
is ready in the time it takes to hand the agent its task.

Each pool pod is exactly what that up would make: the same commit, images,
configuration, allow rules and credentials; only its name, its agent's
password and its placeholders are its own. Up takes a pod only when all of
this matches (a fingerprint of the whole plan): after a new commit, or a
change of configuration or of devaipod, it makes a pod as usual, and the next
pool run replaces the stale pods.

A pool pod serves one task. Taken, it is an ordinary pod that devaipod
delete removes; it never goes back to the pool, so nothing of one task can
reach the next. pool fills the pool up to N and removes idle pods of the
repository that are stale or beyond N; --size 0 empties it. list shows the
pool's pods as idle or claimed.

An opencode agent takes its task when claimed; a custom agent reads its task
at start, so up makes a new pod for a task that a custom agent's pool pod
cannot take.`,
		Example: `  devaipod pool . --size 2
  devaipod up . "fix the flaky test"       # takes one of them
  devaipod pool . --size 0                # empties the pool`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return errors.New("pool takes a local git checkout, a git URL or a pull request URL")
			}
			if size < 0 {
				return fmt.Errorf("--size %d: give 0 or more", size)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			cfg, err := g.loadConfig()
			if err != nil {
				return err
			}
			p, err := g.connect(cmd)
			if err != nil {
				return err
			}
			defer p.Close()
			req, output := f.request(cmd, g, cfg, args[0])
			defer output.Flush()
			req.Progress = func(s string) { g.infof(cmd, "%s", s) }
			rep, err := pod.FillPool(cmd.Context(), p, req, size)
			if rep != nil && rep.Source != nil {
				if g.json() {
					if werr := writeJSON(cmd.OutOrStdout(), rep); werr != nil {
						return werr
					}
				} else {
					printPool(cmd, rep, args[0])
				}
			}
			return err
		},
	}
	cmd.Flags().IntVar(&size, "size", 1, "how many idle pods to keep")
	addPodFlags(cmd, f)
	return cmd
}

func printPool(cmd *cobra.Command, rep *pod.PoolReport, input string) {
	out := cmd.OutOrStdout()
	src := rep.Source.Display
	if rep.Source.Commit != "" {
		src += " at " + rep.Source.Commit[:min(12, len(rep.Source.Commit))]
	}
	fmt.Fprintf(out, "The pool holds %d idle pod(s) for %s (made %d, removed %d).\n", len(rep.Idle), src, len(rep.Made), len(rep.Removed))
	for _, name := range rep.Idle {
		fmt.Fprintf(out, "  %s\n", name)
	}
	if len(rep.Idle) > 0 {
		fmt.Fprintf(out, "devaipod up %s [TASK], with the same flags and no --name, takes one.\n", input)
	}
}
