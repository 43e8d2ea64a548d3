package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/pod"
	"github.com/spf13/cobra"
)

func newTrustCommand(g *globalFlags) *cobra.Command {
	var list bool
	var revoke string
	cmd := &cobra.Command{
		Use:   "trust [PATH]",
		Short: "Trust a repository: its devcontainer runs with your trusted values",
		Long: `Trust a local checkout, as an editor trusts a folder you open.

A repository's devcontainer.json runs its code in the workspace: lifecycle
commands (onCreateCommand, postCreateCommand...), its image or Dockerfile, its
features. So up gives the workspace of an untrusted repository nothing of
yours: no [trusted.env] value, no [[mounts]], none of its own host bind mounts,
no host variable it names (${localEnv:NAME} is empty, envAllowlist and
runArgs' --env NAME pass nothing, allowedDomains opens nothing), and its
initializeCommand never runs on this host. The gator and the proxy keep their
credentials: they run none of the repository's code.

A trusted repository's pod gets all of that, as configured. Every repository is
untrusted until you trust it: with this command (remembered for the checkout's
folder), with up --trust (for one up), or by answering up's question on a
terminal. The code of a git URL or a pull request is someone else's: it is
never remembered, only trusted for one up with up --trust.

Trusting a folder trusts whatever is checked out in it later, a branch from
someone else's fork included.`,
		Example: `  devaipod trust .
  devaipod trust ~/src/myproject
  devaipod trust --list
  devaipod trust --revoke ~/src/myproject`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) > 1:
				return errors.New("trust takes one local checkout")
			case (list || revoke != "") && len(args) > 0:
				return errors.New("--list and --revoke take no PATH of their own")
			case list && revoke != "":
				return errors.New("give --list or --revoke, not both")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			store := pod.DefaultTrustStore()
			out := cmd.OutOrStdout()
			switch {
			case list:
				repos, err := store.List()
				if err != nil {
					return err
				}
				if g.json() {
					return writeJSON(out, append([]pod.TrustedRepo{}, repos...))
				}
				if len(repos) == 0 {
					fmt.Fprintln(out, "No repository is trusted (devaipod trust PATH trusts one).")
					return nil
				}
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "REPOSITORY\tTRUSTED SINCE")
				for _, r := range repos {
					fmt.Fprintf(tw, "%s\t%s\n", safetext.Printable(r.Dir), r.At.Local().Format("2006-01-02 15:04"))
				}
				return tw.Flush()
			case revoke != "":
				gone, err := store.Revoke(cmd.Context(), revoke)
				if err != nil {
					return err
				}
				if g.json() {
					return writeJSON(out, gone)
				}
				fmt.Fprintf(out, "%s is no longer trusted: its next pods get nothing of yours (pods made before keep what they were given).\n", safetext.Printable(gone.Dir))
				return nil
			}
			path := "."
			if len(args) == 1 {
				path = args[0]
			}
			entry, already, err := store.Trust(cmd.Context(), path)
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(out, struct {
					pod.TrustedRepo
					Already bool `json:"already"`
				}{entry, already})
			}
			if already {
				fmt.Fprintf(out, "%s is trusted already (since %s).\n", safetext.Printable(entry.Dir), entry.At.Local().Format("2006-01-02 15:04"))
				return nil
			}
			fmt.Fprintf(out, "Trusted %s: its pods' workspaces get your trusted values, mounts and the host variables it names.\n", safetext.Printable(entry.Dir))
			return nil
		},
	}
	cmd.Flags().BoolVar(&list, "list", false, "list the trusted repositories")
	cmd.Flags().StringVar(&revoke, "revoke", "", "stop trusting this checkout (a path in it, or the folder --list shows)")
	cmd.MarkFlagDirname("revoke")
	return cmd
}
