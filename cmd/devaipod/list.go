package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/devaipod/devaipod/pod"
	"github.com/spf13/cobra"
)

func newListCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List devaipod pods",
		Long: `List devaipod pods: name, state, repository and age.

With --quiet (-q), only the names, one per line (for scripts:
devaipod list -q | xargs -n1 devaipod stop); -o json gives every field.

With --engine kube: the pods in the namespace (--namespace, else the
context's). A pod's state sums up its Pods: running, degraded (some
containers do not run), pending (scheduling, pulling images, or waiting
for up's copy), exited, terminating.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withAnyEngine(cmd, g, func(eng pod.Engine) error {
				sums, err := pod.List(cmd.Context(), eng)
				if err != nil {
					return err
				}
				if g.json() {
					return writeJSON(cmd.OutOrStdout(), sums)
				}
				if g.quiet {
					for _, s := range sums {
						fmt.Fprintln(cmd.OutOrStdout(), s.Name)
					}
					return nil
				}
				if len(sums) == 0 {
					if os.Geteuid() == 0 {
						// Root's podman is rootful, and its pods are root's
						// alone: the demo's are another user's.
						g.infof(cmd, "No devaipod pods in root's podman (rootful). Pods another user made are in that user's podman (make demo and make test make theirs as devaipod-test: hack/as-test-user bin/devaipod list). Create one here with `devaipod up PATH-OR-URL`.")
						return nil
					}
					g.infof(cmd, "No devaipod pods. Create one with `devaipod up PATH-OR-URL`.")
					return nil
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tSTATE\tREPO\tCREATED")
				for _, s := range sums {
					state := s.State
					if s.Pool != "" {
						state += " (pool: " + s.Pool + ")"
					}
					if s.NoModel != "" {
						state += " (no model)"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, state, s.Repo, age(s.Created))
				}
				return tw.Flush()
			})
		},
	}
}

func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return d.String() + " ago"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Format("2006-01-02")
}

// count is "1 file", "2 files", "3 git directories".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if rest, ok := strings.CutSuffix(noun, "y"); ok {
		noun = rest + "ie"
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
