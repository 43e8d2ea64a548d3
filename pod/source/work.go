package source

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/devaipod/devaipod/internal/safetext"
)

// TrustedGitEnv is the environment of a git that reads the agent's work:
// no configuration but the command line's (no system or global config,
// whose drivers the agent's attributes could pick), no prompts, pager or
// lazy fetches, no replace refs or grafts.
var TrustedGitEnv = []string{
	"HOME=/nonexistent", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_ATTR_NOSYSTEM=1",
	"GIT_NO_REPLACE_OBJECTS=1", "GIT_GRAFT_FILE=/dev/null", "GIT_NO_LAZY_FETCH=1", "GIT_TERMINAL_PROMPT=0",
	"GIT_ASKPASS=", "GIT_PAGER=cat", "GIT_ALLOW_PROTOCOL=file", "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C",
	// GIT_GRAFT_FILE makes git advise against grafts on every command.
	"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=advice.graftFileDeprecated", "GIT_CONFIG_VALUE_0=false",
}

// TrustedGitOptions switch off, key by key, what a repository's own
// configuration could make git run or hide, and have a fetch check every
// object it receives.
var TrustedGitOptions = []string{
	"-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.commitGraph=false",
	"-c", "log.showSignature=false", "-c", "diff.ignoreSubmodules=all", "-c", "submodule.recurse=false",
	"-c", "fetch.recurseSubmodules=false", "-c", "credential.helper=", "-c", "gc.auto=0", "-c", "maintenance.auto=false",
	"-c", "transfer.fsckObjects=true", "-c", "fetch.fsck.hasDotgit=error", "-c", "fetch.fsck.hasDotdot=error",
	"-c", "fetch.fsck.fullPathname=error", "-c", "core.quotePath=true",
}

// FetchOptions take no more from a bundle than the refspecs name.
var FetchOptions = []string{"--no-tags", "--no-recurse-submodules", "--no-write-fetch-head", "--no-auto-gc"}

// FetchWork fetches the agent's bundle (made in its container: its
// branches, HEAD and worktreeRef, the commit of its uncommitted work) into
// the repository at dir as the remote-tracking refs of remote: branches
// under refs/remotes/REMOTE/, HEAD as refs/remotes/REMOTE/HEAD. Refs of an
// earlier fetch that the agent no longer has are pruned. It returns the
// refs written and whether the agent has uncommitted work, which it does
// not bring. The repository's hooks and configuration play no part. It
// refuses, fetching nothing, a bundle with an object larger than
// MaxObjectSize (CheckBundle), more than MaxAgentRefs branches, or a
// branch whose name hides what it is.
func FetchWork(ctx context.Context, dir, bundle, remote, worktreeRef string) (map[string]string, bool, error) {
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", append(append([]string{"-C", dir}, TrustedGitOptions...), args...)...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, TrustedGitEnv...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return "", gitError(args[0], err, stderr.String())
		}
		return strings.TrimSpace(stdout.String()), nil
	}
	if _, err := run("rev-parse", "--git-dir"); err != nil {
		return nil, false, fmt.Errorf("%s is not a git repository (give --repo DIR): %w", dir, err)
	}
	if err := CheckBundle(ctx, bundle, MaxObjectSize); err != nil {
		return nil, false, err
	}
	heads, err := run("bundle", "list-heads", bundle)
	if err != nil {
		return nil, false, err
	}
	if err := checkRefNames(heads); err != nil {
		return nil, false, err
	}
	if _, err := run("bundle", "verify", "-q", bundle); err != nil {
		return nil, false, fmt.Errorf("%s lacks the commit the pod started from; fetch it there first (%w)", dir, err)
	}
	prefix := "refs/remotes/" + remote + "/"
	scratch := "refs/devaipod/fetching/" + remote
	args := append(append([]string{"fetch", "-q", "--prune"}, FetchOptions...), bundle,
		"+refs/heads/*:"+prefix+"*", "+"+worktreeRef+":"+scratch)
	if hasHead(heads) {
		args = append(args, "+HEAD:"+prefix+"HEAD")
	}
	if _, err := run(args...); err != nil {
		return nil, false, err
	}
	// The snapshot's parent is the agent's HEAD (the commit up started
	// from, when the agent made none: then the bundle names no HEAD).
	trees, err := run("rev-parse", scratch+"^{tree}", scratch+"^^{tree}")
	if err != nil {
		return nil, false, err
	}
	t := strings.Fields(trees)
	uncommitted := len(t) == 2 && t[0] != t[1]
	if _, err := run("update-ref", "-d", scratch); err != nil {
		return nil, false, err
	}
	list, err := run("for-each-ref", "--format=%(refname) %(objectname)", prefix)
	if err != nil {
		return nil, false, err
	}
	refs := map[string]string{}
	for _, line := range strings.Split(list, "\n") {
		if name, oid, ok := strings.Cut(line, " "); ok {
			refs[name] = oid
		}
	}
	return refs, uncommitted, nil
}

// hasHead tells whether a bundle's list-heads names HEAD.
func hasHead(heads string) bool {
	for _, line := range strings.Split(heads, "\n") {
		if _, name, _ := strings.Cut(line, " "); name == "HEAD" {
			return true
		}
	}
	return false
}

// MaxAgentRefs is how many branches fetch takes from the agent: each
// becomes a ref and a reflog in the user's repository, and the agent
// decides how many there are.
const MaxAgentRefs = 1000

// HiddenRefError is a ref of the agent's whose name has characters that
// hide what it is: controls, bidirectional or invisible ones (a branch
// "main\u200b" reads as main). Fetch refuses all of the agent's work
// rather than write such a name into the user's repository.
type HiddenRefError struct {
	Refs []string // shown printable
}

func (e *HiddenRefError) Error() string {
	return fmt.Sprintf("the agent's refs %s have names with control, bidirectional or invisible characters; nothing was fetched "+
		"(rename them in the agent's container, git branch -m, and fetch again)", strings.Join(e.Refs, ", "))
}

// checkRefNames refuses a bundle's list-heads that names a ref with a
// hidden character or invalid UTF-8.
func checkRefNames(heads string) error {
	lines := strings.Split(heads, "\n")
	branches := 0
	for _, line := range lines {
		if _, name, _ := strings.Cut(line, " "); strings.HasPrefix(name, "refs/heads/") {
			branches++
		}
	}
	if branches > MaxAgentRefs {
		return fmt.Errorf("the agent has %d branches, more than %d; nothing was fetched (delete branches in the agent's container, git branch -D, and fetch again)",
			branches, MaxAgentRefs)
	}
	var bad []string
	for _, line := range lines {
		_, name, _ := strings.Cut(line, " ")
		if shown := safetext.Printable(name); shown != name {
			bad = append(bad, shown)
		}
	}
	if len(bad) > 0 {
		return &HiddenRefError{Refs: bad}
	}
	return nil
}
