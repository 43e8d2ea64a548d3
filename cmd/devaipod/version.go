package main

import (
	"fmt"
	"runtime"

	"github.com/devaipod/devaipod/pod/plan"
	"github.com/spf13/cobra"
)

func newVersionCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print devaipod's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := map[string]string{"version": plan.Version, "go": runtime.Version(),
				"platform": runtime.GOOS + "/" + runtime.GOARCH}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "devaipod %s (%s, %s)\n", v["version"], v["go"], v["platform"])
			return nil
		},
	}
}
