package main

import (
	"errors"

	"github.com/devaipod/devaipod/pod"
	"github.com/spf13/cobra"
)

func newGCCommand(g *globalFlags) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what failed or killed ups left behind",
		Long: `Remove leftovers: objects labelled for a pod that no longer exists, and pods
that lack a container or whose containers were never started (an up that was
killed). Pods whose up is still running are left alone. Also the folders that
killed commands left in the temporary directory (an up's clone of the
repository, a podman service's socket).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withEngine(cmd, g, func(p pod.Engine) error {
				left, err := pod.Leftovers(cmd.Context(), p)
				if err != nil {
					return err
				}
				dirs := pod.StaleTempDirs()
				if dryRun {
					left = append(left, pod.TempDirObjects(dirs)...)
					return reportObjects(cmd, g, "leftovers", left, "Would remove "+count(len(left), "leftover object"))
				}
				// The folders go whatever happens to the objects.
				gone, dirErr := pod.RemoveTempDirs(dirs)
				if err := errors.Join(pod.RemoveLeftovers(cmd.Context(), p, left), dirErr); err != nil {
					return err
				}
				left = append(left, pod.TempDirObjects(gone)...)
				return reportObjects(cmd, g, "removed", left, "Removed "+count(len(left), "leftover object"))
			})
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list the leftovers without removing them")
	return cmd
}
