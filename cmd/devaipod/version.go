package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/devaipod/devaipod/pod/plan"
	"github.com/spf13/cobra"
)

func init() {
	plan.Version = moduleVersion(plan.Version)
}

// moduleVersion is the version to report: the one the build set with
// -ldflags -X (make build: `git describe`), else the module's version Go
// recorded (`go install github.com/devaipod/devaipod/cmd/devaipod@v1.2.3`
// records v1.2.3), else "dev".
func moduleVersion(set string) string {
	if set != "dev" && set != "" {
		return set
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func versionInfo() map[string]string {
	return map[string]string{"version": plan.Version, "go": runtime.Version(),
		"platform": runtime.GOOS + "/" + runtime.GOARCH}
}

// versionLine is what `devaipod version` and `devaipod --version` print.
func versionLine() string {
	v := versionInfo()
	return fmt.Sprintf("devaipod %s (%s, %s)\n", v["version"], v["go"], v["platform"])
}

func newVersionCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print devaipod's version",
		Long: `Print devaipod's version (also 'devaipod --version'). The helper image must be
of the same version: 'devaipod doctor' compares them, and 'make images' in
devaipod's source tree rebuilds the images.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), versionInfo())
			}
			fmt.Fprint(cmd.OutOrStdout(), versionLine())
			return nil
		},
	}
}
