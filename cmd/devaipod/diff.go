package main

import (
	"errors"
	"strings"

	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/internal/size"
	"github.com/devaipod/devaipod/pod"
	units "github.com/docker/go-units"
	"github.com/spf13/cobra"
)

func newDiffCommand(g *globalFlags) *cobra.Command {
	var stat, noHidden bool
	var commit string
	maxWork := sizeValue(pod.DefaultMaxWork)
	cmd := &cobra.Command{
		Use:   "diff NAME [-- PATHSPEC...]",
		Short: "Show everything the agent changed: its commits and its uncommitted work",
		Long: `Show, as a git diff, everything the pod's agent changed since the commit up
started from: its commits on any branch it is on and its uncommitted work, new
files included; then every branch of its that HEAD's work does not hold; then
the files it can have written that git does not show (an ignore rule hides
them, or they are in a nested repository or git directory), with their text:
code there runs as easily as tracked code (--no-hidden leaves them out).
--stat shows a diffstat instead; pathspecs after -- narrow it.
--commit ID shows instead every commit from the one up started from to ID,
oldest first, each with its patch (merges as combined diffs): what a push of
ID sends, which a push_branch request asks about, before you approve it.

Nothing the agent wrote runs on your side to make it: the agent's own git packs
its work into a bundle in its container (its hooks and filters, if any, run
there, where the agent runs anything anyway); the workspace container fetches
the bundle with a git that reads no configuration but devaipod's and checks
every object, and diffs two commits. On a terminal the diff is coloured and
control characters in it are shown as escapes (\x1b), never obeyed; piped, it is
the plain patch, ready for git apply. The bundle comes to the host first, and
may be at most --max-size.`,
		Example: `  devaipod diff myproject
  devaipod diff myproject --stat
  devaipod diff myproject -- src/
  devaipod diff myproject --commit 1f3c4a...   # what a push request would push
  devaipod diff myproject > work.patch`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return positional("NAME")(cmd, args)
			}
			return nil
		},
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() > 1 || (cmd.ArgsLenAtDash() < 0 && len(args) > 1) {
				return errors.New("diff takes one pod NAME; put pathspecs after --")
			}
			return withPod(cmd, g, args[:1], func(p pod.Engine, short string) error {
				opts := pod.DiffOptions{Stat: stat, Commit: commit, NoHidden: noHidden, Paths: args[1:], MaxWork: int64(maxWork)}
				out := cmd.OutOrStdout()
				if !isTerminal(out) {
					return pod.Diff(cmd.Context(), p, short, opts, out)
				}
				// Each line made printable (the agent wrote it), then
				// coloured by its kind.
				w := &safetext.Writer{W: out, Decorate: colorDiffLine}
				err := pod.Diff(cmd.Context(), p, short, opts, w)
				return errors.Join(err, w.Flush())
			})
		},
	}
	cmd.Flags().BoolVar(&stat, "stat", false, "a diffstat instead of the patch")
	cmd.Flags().StringVar(&commit, "commit", "", "show every commit up to this one (a full id, as a push request shows it), each with its patch, instead of all the work")
	cmd.Flags().BoolVar(&noHidden, "no-hidden", false, "leave out the agent's files that git does not show (ignored, in nested repositories)")
	cmd.Flags().Var(&maxWork, "max-size", "the largest bundle of the agent's work to copy to this host (512m, 2g...)")
	return cmd
}

// sizeValue is a size flag ("512m", "2g"), read as podman reads sizes.
type sizeValue int64

func (v *sizeValue) String() string { return units.BytesSize(float64(*v)) }
func (v *sizeValue) Type() string   { return "SIZE" }

func (v *sizeValue) Set(s string) error {
	n, err := size.Parse(s)
	if err != nil {
		return err
	}
	*v = sizeValue(n)
	return nil
}

// SGR colours of a diff on a terminal, as git uses them.
const (
	sgrBold  = "\x1b[1m"
	sgrCyan  = "\x1b[36m"
	sgrGreen = "\x1b[32m"
	sgrRed   = "\x1b[31m"
	sgrReset = "\x1b[m"
)

// colorDiffLine colours one (printable) line of a unified git diff.
func colorDiffLine(line string) string {
	color := ""
	switch {
	case strings.HasPrefix(line, "diff --git "), strings.HasPrefix(line, "index "),
		strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "+++ "),
		strings.HasPrefix(line, "new file mode"), strings.HasPrefix(line, "deleted file mode"):
		color = sgrBold
	case strings.HasPrefix(line, "@@"):
		color = sgrCyan
	case strings.HasPrefix(line, "+"):
		color = sgrGreen
	case strings.HasPrefix(line, "-"):
		color = sgrRed
	}
	if color == "" || line == "" {
		return line
	}
	return color + line + sgrReset
}
