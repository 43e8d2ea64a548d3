package main

import (
	"cmp"
	"fmt"
	"os"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/spf13/cobra"
)

func newShareCommand(g *globalFlags) *cobra.Command {
	var rw bool
	cmd := &cobra.Command{
		Use:   "share NAME PATH [--rw]",
		Short: "Copy a host path into a running pod, where its agent sees it at /host/PATH",
		Long: `Copy the host file or folder PATH into the pod, where its agent finds it at
/host/PATH: what an approved path request (devaipod approvals) does, without a
request. Symlinks in PATH are resolved first, and the result is checked: a
credential store (~/.ssh, ~/.aws, ...), devaipod's config and state, and
podman's storage and sockets, or a folder holding one, are refused as [[mounts]]
refuses them. It is a copy, made now: the agent sees what PATH holds at this
moment, and nothing it does reaches your files. Read-only unless --rw (then
the agent may change its copy, still not yours). At most 1 GiB or 100,000
files. Share again to refresh it.`,
		Example: `  devaipod share myproject ~/datasets/sample.csv
  devaipod share myproject ~/src/shared-lib --rw`,
		Args:              positional("NAME", "PATH"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPod(cmd, g, args[:1], func(p *podman.Podman, short string) error {
				sh, err := pod.Share(cmd.Context(), p, short, args[1], rw, g.forbiddenMounts())
				if err != nil {
					return err
				}
				if g.json() {
					return writeJSON(cmd.OutOrStdout(), sh)
				}
				mode := "read-only"
				if sh.RW {
					mode = "writable copy"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Shared %s with pod %s: the agent sees it at %s (%s; %d files, %d bytes).\n", sh.Resolved, short, sh.At, mode, sh.Files, sh.Bytes)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&rw, "rw", false, "let the agent change its copy")
	return cmd
}

// forbiddenMounts are the host paths no share nor mount may expose:
// devaipod's config and state, podman's storage and sockets, credential
// stores.
func (g *globalFlags) forbiddenMounts() []string {
	home, _ := os.UserHomeDir()
	return pod.ForbiddenMounts(home, cmp.Or(g.config, config.DefaultConfigPath()), os.Getenv("XDG_RUNTIME_DIR"))
}
