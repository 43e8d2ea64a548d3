package pod

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/devaipod/devaipod/internal/helperargs"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

// Taking the agent's work out runs nothing the agent wrote on the trusted
// side (docs/sandboxing.md, and ../shared/notes/git-trust.md's recipe):
//
//  1. In the agent's container, as the agent, git packs its branches,
//     HEAD and a commit of its uncommitted work into a bundle, without the
//     commit up started from, in a shadow repository that reads the
//     agent's git directory as data (see exportScript): no hook, filter
//     or fsmonitor of the agent's runs even there. The bundle is data.
//  2. The trusted side fetches the bundle with a git that reads no
//     configuration but its own (no system, global or repository config
//     of the agent's, no hooks, no attributes, no submodules), checks every
//     object (transfer.fsckObjects), and takes the refs it names, into a
//     namespace of its own: for diff, a throwaway repository in the
//     workspace container that borrows the trusted .git's objects; for
//     fetch, the user's repository on the host.

// ErrNoWork says the pod has no git repository to take work from.
var ErrNoWork = errors.New("no work to take")

// Refs in the agent's bundle: its branches, HEAD, and the commit of its
// uncommitted work.
const worktreeRef = "refs/devaipod/worktree"

// exportScript runs in the agent's container, in the repository, as the
// agent, with the commit up started from as $1, pathspecs that leave out
// the protected paths after it (read-only to the agent, so unchanged, and
// where up made empty placeholders the repository does not have), and the
// environment of source.TrustedGitEnv. It writes the bundle to standard output; git's
// chatter goes to standard error. Even there nothing the agent planted
// runs: git works in a shadow repository of devaipod's (no configuration,
// no hooks, no attributes file) that borrows the agent's objects and
// copies its branches and HEAD; the agent's own git directory is only read
// (refs, objects), by commands that run no program. Undefined filter and
// diff drivers named by the work tree's .gitattributes run nothing.
//
// The snapshot's index is made afresh from HEAD, not copied from the
// agent's: there its skip-worktree and assume-unchanged bits would keep a
// change out of the snapshot, and so out of devaipod diff, while the
// workspace's git sees it. Only the masked files are skipped: up binds
// /dev/null read-only over each (on podman, the only engine diff and
// fetch serve), and the agent can neither make a
// character device nor move a mount point (a symlink to /dev/null is not
// taken for one). Their blobs, which the agent's objects lack, are in the
// commit up started from and so stay out of the bundle.
const exportScript = `set -e
base="$1"
shift
agent="$(pwd)/.git"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
git init -q --bare --template= "$t/r"
echo "$agent/objects" > "$t/r/objects/info/alternates"
# Above every .gitattributes of the work tree: the snapshot holds the
# files' bytes as they are, not as ident, eol or an encoding would make
# them (the workspace runs the bytes).
mkdir "$t/r/info"
echo '* -text -eol -ident -filter -working-tree-encoding' > "$t/r/info/attributes"
a() { GIT_DIR="$agent" GIT_COMMON_DIR="$agent" git "$@"; }
head=$(a rev-parse --verify -q HEAD^{commit})
a for-each-ref --format='%(objectname) %(refname)' refs/heads/ > "$t/refs"
export GIT_DIR="$t/r" GIT_COMMON_DIR="$t/r" GIT_WORK_TREE="$(pwd)" GIT_INDEX_FILE="$t/index"
while read -r oid ref; do git update-ref "$ref" "$oid"; done < "$t/refs"
git update-ref --no-deref HEAD "$head"
git read-tree HEAD
command -v xargs >/dev/null || { echo "devaipod: the agent's image has no xargs, which diff and fetch need there" >&2; exit 1; }
git ls-files -z | xargs -0 sh -c 'for f; do [ -c "$f" ] && [ ! -L "$f" ] && printf "%s\0" "$f"; done; :' sh |
	git update-index -z --skip-worktree --stdin
git -c core.fsmonitor=false -c core.hooksPath=/dev/null add -A --ignore-errors -- . "$@" >&2 ||
	echo "devaipod: git left some files out of the snapshot (diff lists them as hidden)" >&2
tree=$(git write-tree --missing-ok)
snap=$(GIT_AUTHOR_NAME=devaipod GIT_AUTHOR_EMAIL=devaipod@localhost GIT_COMMITTER_NAME=devaipod GIT_COMMITTER_EMAIL=devaipod@localhost \
	git commit-tree "$tree" -p "$head" -m "devaipod: the agent's uncommitted work")
git update-ref ` + worktreeRef + ` "$snap"
git bundle create "$t/work.bundle" HEAD --branches ` + worktreeRef + ` "^$base" >&2
cat "$t/work.bundle"
`

// diffScript runs in the workspace container as root, with the bundle on
// standard input and $1 the repository, $2 the base, $3 "stat" or "patch",
// $4 the commit to show (empty: the agent's work, uncommitted included),
// $5 the number of words after it that are the helper's hidden-files
// command (0 for none), the pathspecs after those. It fetches the bundle
// into a throwaway repository whose only tie to the trusted .git is
// borrowing its objects, then diffs two commits (the base and HEAD's work,
// then the base and every branch whose commits HEAD's work does not hold,
// each under its name: what fetch brings, diff shows), or shows each commit
// from the base to $4 with its patch (no work tree, so no attributes or
// filters). Last, the hidden-files command lists the agent's files that
// HEAD's work does not hold, which no git command would show.
var diffScript = `set -e
repo="$1" base="$2" what="$3" commit="$4" n="$5"
shift 5
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
cat > "$t/work.bundle"
git init -q --bare --template= "$t/r"
echo "$repo/.git/objects" > "$t/r/objects/info/alternates"
g() { git --git-dir="$t/r" ` + strings.Join(source.TrustedGitOptions, " ") + ` "$@"; }
g fetch -q ` + strings.Join(source.FetchOptions, " ") + ` "$t/work.bundle" "+` + worktreeRef + `:refs/work" "+refs/heads/*:refs/branches/*" >&2
if [ -n "$commit" ]; then
	# The fetch took the bundle's whole pack: every commit of the
	# agent's branches and of its HEAD's history is here.
	g cat-file -e "$commit^{commit}" 2>/dev/null || { echo "the agent's repository has no commit $commit on a branch or in HEAD's history" >&2; exit 3; }
	shift "$n"
	case "$what" in
	stat) g log --reverse --stat=200 --no-ext-diff --no-textconv --no-color --no-renames "$base..$commit" -- "$@" ;;
	*) g log --reverse -p --cc --text --no-ext-diff --no-textconv --no-color --no-renames "$base..$commit" -- "$@" ;;
	esac
	exit
fi
d() {
	r=$1
	shift
	shift "$n"
	case "$what" in
	stat) g diff --stat=200 --text --no-ext-diff --no-textconv --no-color --no-renames "$base" "$r" -- "$@" ;;
	*) g diff --text --no-ext-diff --no-textconv --no-color --no-renames "$base" "$r" -- "$@" ;;
	esac
}
d refs/work "$@"
# Every branch fetch would bring, under its name: its changes, unless
# HEAD's work holds its commits.
g for-each-ref --format='%(refname)' refs/branches/ | while read -r ref; do
	name=${ref#refs/branches/}
	if [ "$(g rev-parse "$ref")" = "$(g rev-parse "$base^{commit}")" ]; then
		printf '\n=== branch %s: no commit since up\n' "$name"
	elif g merge-base --is-ancestor "$ref" refs/work; then
		printf '\n=== branch %s: its commits are in the diff above\n' "$name"
	else
		printf '\n=== branch %s: not in the diff above (fetch brings it)\n' "$name"
		d "$ref" "$@"
	fi
done
if [ "$n" -gt 0 ]; then
	g ls-tree -r -z --name-only --full-tree refs/work | "$@"
fi
`

// workOf is what taking work needs of a running pod: the repository's
// folder (in both containers), the commit up started from and the
// protected paths, all from the labels up put on it.
func workOf(ctx context.Context, eng Engine, short string) (w work, err error) {
	o, err := RunningPod(ctx, eng, short, plan.RoleAgent)
	if err != nil {
		return work{}, err
	}
	w.base = o.Labels[plan.LabelCommit]
	var args []string
	if err := json.Unmarshal([]byte(o.Labels[plan.LabelVerify]), &args); err == nil {
		for i := 0; i+1 < len(args); i++ {
			switch args[i] {
			case "--workspace":
				w.dir = args[i+1]
			case "--protect":
				w.protected = append(w.protected, args[i+1])
			}
		}
	}
	if w.base == "" || w.dir == "" {
		return work{}, fmt.Errorf("pod %s has no record of its repository or of the commit it started from (made by an older devaipod?): %w", short, ErrNoWork)
	}
	return w, nil
}

type work struct {
	dir, base string
	protected []string
}

// DefaultMaxWork bounds the bundle of the agent's work that diff and fetch
// copy to the host: the agent decides how large it is.
const DefaultMaxWork = 1 << 30

// WorkTooLargeError: the agent's work, as a bundle, is larger than the
// caller allowed.
type WorkTooLargeError struct{ Max int64 }

func (e *WorkTooLargeError) Error() string {
	return fmt.Sprintf("the agent's work is larger than %d bytes as a bundle; nothing was taken", e.Max)
}

// exportWork packs the agent's work into a bundle (see exportScript),
// written to w; more than max bytes of it is an error.
func exportWork(ctx context.Context, eng Engine, short string, wk work, w io.Writer, max int64) error {
	stderr := SyncBuffer{Max: ExecTail} // the agent's side's: bounded
	argv := append(append([]string{"env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin"}, source.TrustedGitEnv...),
		"sh", "-c", exportScript, "devaipod-export", wk.base)
	for _, p := range wk.protected {
		argv = append(argv, ":(exclude,literal)"+p)
	}
	capped := &cappedWriter{w: w, left: max}
	code, _, err := eng.Exec(ctx, plan.ContainerName(short, plan.RoleAgent), ExecSpec{Cmd: argv, Workdir: wk.dir, Output: capped, Stderr: &stderr})
	if capped.over {
		return &WorkTooLargeError{Max: max}
	}
	if err != nil {
		return fmt.Errorf("pack the agent's work: %w", err)
	}
	if code != 0 {
		return &WorkError{Step: "pack the agent's work in its container", Output: stderr.String()}
	}
	return nil
}

// cappedWriter passes on at most left bytes, then fails.
type cappedWriter struct {
	w    io.Writer
	left int64
	over bool
}

var errOverCap = errors.New("over the size bound")

func (c *cappedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		c.over = true
		return 0, errOverCap
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// WorkError is a step of taking the agent's work that failed, with git's
// output. The output is the agent's side's: show it with care.
type WorkError struct {
	Step   string
	Output string
}

func (e *WorkError) Error() string {
	return fmt.Sprintf("%s: %s", e.Step, lastLines(strings.TrimSpace(e.Output), 5))
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// DiffOptions choose what Diff shows.
type DiffOptions struct {
	Stat bool // a diffstat instead of the patch
	// Commit, a full commit id, shows every commit from the one up
	// started from to it, oldest first, each with its patch (merges as
	// combined diffs), instead of the agent's work: what a push of it
	// sends (a push_branch request names it). It must be on one of the
	// agent's branches or in its HEAD's history, or in the repository up
	// cloned (whose objects the diff borrows).
	Commit string
	// NoHidden leaves out the last section of the agent's work: the files
	// that the agent can have written and git does not show (an ignore
	// rule hides them, or they are in a nested repository or git
	// directory).
	NoHidden bool
	Paths    []string // pathspecs; none for everything
	MaxWork  int64    // the bound on the agent's work as a bundle (see Fetch); 0 for DefaultMaxWork
}

// Diff writes what the agent of pod short changed since the commit up
// started from, its commits and its uncommitted work, new files included,
// as a git diff (or diffstat) to w, then the files git does not show that
// the agent can have written (see DiffOptions.NoHidden). The text is the
// agent's: the caller makes it safe to show.
func Diff(ctx context.Context, eng Engine, short string, opts DiffOptions, w io.Writer) error {
	if opts.Commit != "" && !IsCommitID(opts.Commit) {
		return fmt.Errorf("%q is not a full commit id (40 or 64 hexadecimal digits, as a push_branch request shows it)", opts.Commit)
	}
	wk, err := workOf(ctx, eng, short)
	if err != nil {
		return err
	}
	bundle, err := os.CreateTemp("", "devaipod-work-*.bundle")
	if err != nil {
		return err
	}
	defer os.Remove(bundle.Name())
	defer bundle.Close()
	if err := exportWork(ctx, eng, short, wk, bundle, cmp.Or(opts.MaxWork, DefaultMaxWork)); err != nil {
		return err
	}
	// The workspace's git would hold each object whole (the workspace
	// has no memory limit).
	if err := source.CheckBundle(ctx, bundle.Name(), source.MaxObjectSize); err != nil {
		return err
	}
	if _, err := bundle.Seek(0, io.SeekStart); err != nil {
		return err
	}
	what := "patch"
	if opts.Stat {
		what = "stat"
	}
	argv := append([]string{"env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin"}, source.TrustedGitEnv...)
	var hidden []string
	if !opts.NoHidden && opts.Commit == "" {
		// Owned by the agent's uid: made by the agent (it has no
		// CAP_CHOWN); or changed since made.
		hidden = append(plan.HelperCommand(helperargs.HiddenFiles{Workspace: wk.dir, Protect: wk.protected,
			UID: plan.AgentUID, Stat: opts.Stat}), "--")
	}
	argv = append(argv, "sh", "-c", diffScript, "devaipod-diff", wk.dir, wk.base, what, strings.ToLower(opts.Commit), strconv.Itoa(len(hidden)))
	argv = append(append(argv, hidden...), opts.Paths...)
	stderr := SyncBuffer{Max: ExecTail}
	spec := AsRoot(argv)
	spec.Stdin, spec.Output, spec.Stderr = bundle, w, &stderr
	code, _, err := eng.Exec(ctx, plan.ContainerName(short, plan.RoleWorkspace), spec)
	if err != nil {
		return fmt.Errorf("diff in the workspace: %w", err)
	}
	if code != 0 {
		return &WorkError{Step: "diff the agent's work in the workspace", Output: stderr.String()}
	}
	return nil
}

// IsCommitID reports whether s is a full commit id, SHA-1 or SHA-256.
func IsCommitID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

// FetchResult says what Fetch brought into the repository.
type FetchResult struct {
	Remote string `json:"remote"` // devaipod-NAME: refs/remotes/devaipod-NAME/...
	// Refs are the refs written, by full name, with their commits.
	Refs map[string]string `json:"refs"`
	// Uncommitted tells that the agent has work it did not commit, which
	// Fetch does not bring (devaipod diff shows it).
	Uncommitted bool `json:"uncommitted"`
}

// Fetch brings the commits of pod short's agent into the git repository
// at repoDir, as if fetched from a remote devaipod-NAME: its branches under
// refs/remotes/devaipod-NAME/, its HEAD as refs/remotes/devaipod-NAME/HEAD.
// Nothing of repoDir's configuration or hooks is used or changed. The
// agent's work is copied to a temporary file first, as a bundle of at most
// maxWork bytes (0 for DefaultMaxWork).
func Fetch(ctx context.Context, eng Engine, short, repoDir string, maxWork int64) (FetchResult, error) {
	wk, err := workOf(ctx, eng, short)
	if err != nil {
		return FetchResult{}, err
	}
	bundle, err := os.CreateTemp("", "devaipod-work-*.bundle")
	if err != nil {
		return FetchResult{}, err
	}
	defer os.Remove(bundle.Name())
	err = exportWork(ctx, eng, short, wk, bundle, cmp.Or(maxWork, DefaultMaxWork))
	if cerr := bundle.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return FetchResult{}, err
	}
	remote := "devaipod-" + short
	refs, uncommitted, err := source.FetchWork(ctx, repoDir, bundle.Name(), remote, worktreeRef)
	if err != nil {
		return FetchResult{}, err
	}
	return FetchResult{Remote: remote, Refs: refs, Uncommitted: uncommitted}, nil
}
