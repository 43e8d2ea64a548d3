package main

import (
	"cmp"
	"fmt"
	"os"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/spf13/cobra"
)

func newShareCommand(g *globalFlags) *cobra.Command {
	var rw, withGit bool
	cmd := &cobra.Command{
		Use:   "share NAME PATH [--rw] [--with-git]",
		Short: "Copy a host path into a running pod, where its agent sees it at /host/PATH",
		Long: `Copy the host file or folder PATH into the pod, where its agent finds it at
/host/PATH: what an approved path request (devaipod approvals) does, without a
request. Symlinks in PATH are resolved first, and the result is checked: a
credential store (~/.ssh, ~/.aws, ...), devaipod's config and state, and
podman's storage and sockets, or a folder holding one, are refused as [[mounts]]
refuses them. It is a copy, made now: the agent sees what PATH holds at this
moment, and nothing it does reaches your files. Read-only unless --rw (then
the agent may change its copy, still not yours). The files your [agent] mask
names (.env, keys...) are left out, as in the pod's own tree, and so are the
git directories PATH holds (a history keeps what its files no longer show, a
config its remotes' tokens) unless --with-git. At most 1 GiB or 100,000
files. Share again to refresh it.`,
		Example: `  devaipod share myproject ~/datasets/sample.csv
  devaipod share myproject ~/src/shared-lib --rw`,
		Args:              positional("NAME", "PATH"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			share, err := g.shareOptions(withGit)
			if err != nil {
				return err
			}
			share.RW = rw
			return withPod(cmd, g, args[:1], func(p pod.Engine, short string) error {
				sh, err := pod.Share(cmd.Context(), p, short, args[1], share)
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
				fmt.Fprintf(cmd.OutOrStdout(), "Shared %s with pod %s: the agent sees it at %s (%s; %s, %s; left out: %s, %s).\n",
					sh.Resolved, short, sh.At, mode, count(sh.Files, "file"), count(int(sh.Bytes), "byte"), count(sh.Masked, "masked file"), count(sh.GitDirs, "git directory"))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&rw, "rw", false, "let the agent change its copy")
	cmd.Flags().BoolVar(&withGit, "with-git", false, "share the git directories (.git) PATH holds too")
	return cmd
}

// shareOptions are what share and approve copy a host path with: the
// paths none may expose, and [agent] mask from the configuration.
func (g *globalFlags) shareOptions(withGit bool) (pod.ShareOptions, error) {
	cfg, err := g.loadConfig()
	if err != nil {
		return pod.ShareOptions{}, err
	}
	return pod.ShareOptions{Forbidden: g.forbiddenMounts(), Mask: config.MaskPatterns(cfg), Git: withGit}, nil
}

// forbiddenMounts are the host paths no share nor mount may expose:
// devaipod's config and state, podman's storage and sockets, credential
// stores.
func (g *globalFlags) forbiddenMounts() []string {
	home, _ := os.UserHomeDir()
	return pod.ForbiddenMounts(home, cmp.Or(g.config, config.DefaultConfigPath()), os.Getenv("XDG_RUNTIME_DIR"))
}
