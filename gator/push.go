package gator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/devaipod/devaipod/gator/policy"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// pushUser is the user name sent with the token. GitHub ignores it for
// token authentication but wants one; this is the name it documents for
// app and fine-grained tokens.
const pushUser = "x-access-token"

// gatorRemote names the in-memory remote the push goes through. It is
// never written to the workspace's config.
const gatorRemote = "devaipod-gator"

// pushResult is what push_branch reports.
type pushResult struct {
	Repo   string `json:"repo"`
	Branch string `json:"branch"`
	Commit string `json:"commit"`
	// Action is "created", "updated" (fast-forward) or "up-to-date".
	Action string `json:"action"`
	// PreviousCommit is the branch's commit before an update.
	PreviousCommit string `json:"previous_commit,omitempty"`
}

// pusher pushes the workspace's HEAD to agent/ branches. Its policy on
// history: it never forces. It creates a branch, or fast-forwards one whose
// commit HEAD descends from; any other update, including one over commits
// someone else pushed to the branch, is refused, and the agent is told to
// push to a new agent/ branch instead. That keeps every commit ever pushed
// reachable, whoever pushed it, and makes the gator's pushes append-only.
type pusher struct {
	workspace string   // a git work tree with a .git directory
	gitURL    *url.URL // base for OWNER/REPO.git
	token     string
	protected []string // path patterns no pushed commit may touch
}

// openWorkspace opens the workspace's .git directory through a read-only
// filesystem confined to the workspace (rootFS): the agent controls the
// workspace, and no symlink it plants (.git itself, HEAD, a ref, objects,
// objects/info/alternates) may lead the gator into its own files, such as
// the token. Call the returned function when done.
func openWorkspace(dir string) (*filesystem.Storage, func(), error) {
	root, closeRoots, err := openRootFS(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("open the workspace: %w", err)
	}
	fi, err := root.Lstat(".git")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = fmt.Errorf("the workspace %s is not a git repository (no .git)", dir)
	case err != nil:
		err = fmt.Errorf("open the workspace's repository: %w", err)
	case !fi.IsDir():
		// A .git file (a linked worktree, a submodule) points elsewhere;
		// devaipod clones the workspace with a plain .git directory.
		err = errors.New("the workspace's .git is not a directory; push_branch needs a plain clone")
	}
	if err != nil {
		closeRoots()
		return nil, nil, err
	}
	dotgit, err := root.Chroot(".git")
	if err != nil {
		closeRoots()
		return nil, nil, fmt.Errorf("open the workspace's repository: %w", err)
	}
	st := filesystem.NewStorage(dotgit, cache.NewObjectLRUDefault())
	return st, func() { st.Close(); closeRoots() }, nil
}

// headCommit resolves HEAD to a commit.
func headCommit(st *filesystem.Storage) (*object.Commit, error) {
	ref, err := storer.ResolveReference(st, plumbing.HEAD)
	if err != nil {
		return nil, fmt.Errorf("resolve the workspace's HEAD: %w", err)
	}
	c, err := object.GetCommit(st, ref.Hash())
	if err != nil {
		return nil, fmt.Errorf("read the workspace's HEAD commit %s: %w", ref.Hash(), err)
	}
	return c, nil
}

// push pushes HEAD to refs/heads/BRANCH of owner/repo. The caller has
// checked the branch name (policy.CheckAgentBranch) and that it is not the
// repository's default branch.
func (p *pusher) push(ctx context.Context, owner, repo, branch string) (pushResult, error) {
	if err := policy.CheckAgentBranch(branch); err != nil {
		return pushResult{}, err // policy.Decide checked already; a second look costs nothing
	}
	st, done, err := openWorkspace(p.workspace)
	if err != nil {
		return pushResult{}, err
	}
	defer done()
	head, err := headCommit(st)
	if err != nil {
		return pushResult{}, err
	}
	target := p.gitURL.JoinPath(owner, repo+".git").String()
	remote := git.NewRemote(st, &config.RemoteConfig{Name: gatorRemote, URLs: []string{target}})
	auth := &githttp.BasicAuth{Username: pushUser, Password: p.token}
	res := pushResult{Repo: owner + "/" + repo, Branch: branch, Commit: head.Hash.String()}
	dst := plumbing.NewBranchReferenceName(branch)

	// Look first, so that a refusal can say why in words, and the result
	// can say whether the branch is new.
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth})
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return pushResult{}, fmt.Errorf("list the branches of %s: %w", res.Repo, err)
	}
	res.Action = "created"
	for _, r := range refs {
		if r.Name() != dst {
			continue
		}
		old := r.Hash()
		res.PreviousCommit = old.String()
		switch {
		case old == head.Hash:
			res.Action = "up-to-date"
			return res, nil
		case !isAncestor(st, old, head):
			return pushResult{}, &deniedError{reason: fmt.Sprintf(
				"refused: %s on %s is at %s, which the workspace's HEAD (%s) does not contain; the gator never force-pushes, so push to a new %s branch instead",
				branch, res.Repo, short(old), short(head.Hash), policy.AgentBranchPrefix)}
		}
		res.Action = "updated"
	}

	touched, err := protectedChanges(ctx, head, refs, p.protected)
	if err != nil {
		return pushResult{}, err
	}
	if len(touched) > 0 {
		return pushResult{}, &deniedError{reason: fmt.Sprintf(
			"refused: the commits to push change %s, which CI runs with the repository's secrets; a person pushes such changes (the protected paths are [gator.github] protected_paths)",
			strings.Join(touched, ", "))}
	}

	// No "+": go-git checks the update is a fast-forward too, so a branch
	// that moved since the listing is refused rather than overwritten.
	spec := config.RefSpec(head.Hash.String() + ":" + dst.String())
	err = remote.PushContext(ctx, &git.PushOptions{
		RemoteName: gatorRemote,
		RefSpecs:   []config.RefSpec{spec},
		Auth:       auth,
	})
	switch {
	case errors.Is(err, git.NoErrAlreadyUpToDate):
		res.Action = "up-to-date"
	case err != nil && strings.Contains(err.Error(), "non-fast-forward"):
		return pushResult{}, &deniedError{reason: fmt.Sprintf(
			"refused: %s on %s moved to commits the workspace's HEAD does not contain; the gator never force-pushes, so push to a new %s branch instead",
			branch, res.Repo, policy.AgentBranchPrefix)}
	case err != nil:
		return pushResult{}, fmt.Errorf("push %s to %s of %s: %w", short(head.Hash), branch, res.Repo, err)
	}
	return res, nil
}

// maxPushCommits bounds the commits protectedChanges looks at.
const maxPushCommits = 10000

// protectedChanges lists the protected paths that the commits to push add,
// change or remove: every commit from head back to those the remote has
// (any of its refs), each against its parents, so that a file added in one
// commit and removed in the next counts too.
func protectedChanges(ctx context.Context, head *object.Commit, remote []*plumbing.Reference, patterns []string) ([]string, error) {
	known := map[plumbing.Hash]bool{}
	for _, r := range remote {
		known[r.Hash()] = true
	}
	found := map[string]bool{}
	seen := map[plumbing.Hash]bool{}
	queue := []*object.Commit{head}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if seen[c.Hash] || known[c.Hash] {
			continue
		}
		if seen[c.Hash] = true; len(seen) > maxPushCommits {
			return nil, &deniedError{reason: fmt.Sprintf("refused: more than %d commits to push", maxPushCommits)}
		}
		tree, err := c.Tree()
		if err != nil {
			return nil, fmt.Errorf("read commit %s: %w", short(c.Hash), err)
		}
		parents := []*object.Tree{nil} // a root commit: against nothing
		if c.NumParents() > 0 {
			parents = nil
			err := c.Parents().ForEach(func(p *object.Commit) error {
				pt, err := p.Tree()
				parents = append(parents, pt)
				queue = append(queue, p)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("read the parents of %s: %w", short(c.Hash), err)
			}
		}
		for _, pt := range parents {
			changes, err := object.DiffTreeWithOptions(ctx, pt, tree, nil)
			if err != nil {
				return nil, fmt.Errorf("compare commit %s: %w", short(c.Hash), err)
			}
			for _, ch := range changes {
				for _, name := range []string{ch.From.Name, ch.To.Name} {
					if name != "" && policy.Protected(patterns, name) {
						found[name] = true
					}
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(found)), nil
}

// isAncestor reports whether old is head or one of its ancestors in the
// workspace. A commit the workspace does not have is not.
func isAncestor(st *filesystem.Storage, old plumbing.Hash, head *object.Commit) bool {
	if _, err := object.GetCommit(st, old); err != nil {
		return false
	}
	found := false
	iter := object.NewCommitPreorderIter(head, nil, nil)
	_ = iter.ForEach(func(c *object.Commit) error {
		if c.Hash == old {
			found = true
			return storer.ErrStop
		}
		return nil
	})
	return found
}

func short(h plumbing.Hash) string { return h.String()[:12] }

// deniedError is a refusal decided while running a call (the default
// branch, a push that would not be a fast-forward): it is audited as a
// deny, not as a failure.
type deniedError struct{ reason string }

func (e *deniedError) Error() string { return e.reason }
