package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/pod"
	"github.com/spf13/cobra"
)

func newFetchCommand(g *globalFlags) *cobra.Command {
	var repo string
	maxWork := sizeValue(pod.DefaultMaxWork)
	cmd := &cobra.Command{
		Use:   "fetch NAME [--repo DIR]",
		Short: "Bring the agent's commits into a local git repository",
		Long: `Bring the commits of the pod's agent into the git repository DIR (default: the
current directory) as if fetched from a remote named devaipod-NAME: its
branches under refs/remotes/devaipod-NAME/, its HEAD at
refs/remotes/devaipod-NAME/HEAD. Then, in DIR:

  git log devaipod-NAME
  git diff main...devaipod-NAME
  git switch -c review devaipod-NAME

Uncommitted work is not fetched: fetch says when there is some (devaipod diff
shows it). DIR must have the commit the pod started from.

Nothing the agent wrote runs: its own git packs its work into a bundle in its
container; the bundle is fetched into DIR by a git that uses none of DIR's
configuration or hooks, nor any system or global configuration, and checks
every object (transfer.fsckObjects). Only refs under refs/remotes/devaipod-NAME/
are written (those of an earlier fetch that the agent no longer has are
pruned); DIR's branches, work tree, configuration and hooks are untouched. A
branch whose name has a control, bidirectional or invisible character (one
that reads as main but is not) makes fetch refuse, and bring nothing; so does
a bundle larger than --max-size, which comes to the host first.`,
		Example: `  devaipod fetch myproject
  devaipod fetch myproject --repo ~/src/myproject`,
		Args:              positional("NAME"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPod(cmd, g, args, func(p pod.Engine, short string) error {
				res, err := pod.Fetch(cmd.Context(), p, short, repo, int64(maxWork))
				if err != nil {
					return err
				}
				if g.json() {
					return writeJSON(cmd.OutOrStdout(), res)
				}
				out := cmd.OutOrStdout()
				for _, ref := range slices.Sorted(maps.Keys(res.Refs)) {
					// Branch names are the agent's: shown, not obeyed.
					fmt.Fprintf(out, "%s  %s\n", res.Refs[ref][:12], safetext.Printable(strings.TrimPrefix(ref, "refs/remotes/")))
				}
				if len(res.Refs) == 0 {
					fmt.Fprintln(out, "The agent has made no commits.")
				} else {
					fmt.Fprintf(out, "See them with: git log %s\n", res.Remote)
				}
				if res.Uncommitted {
					fmt.Fprintf(out, "The agent also has uncommitted work, which is not fetched: devaipod diff %s\n", short)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&repo, "repo", ".", "the git repository to fetch into")
	cmd.MarkFlagDirname("repo")
	cmd.Flags().Var(&maxWork, "max-size", "the largest bundle of the agent's work to copy to this host (512m, 2g...)")
	return cmd
}
