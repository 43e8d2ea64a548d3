package gator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/devaipod/devaipod/gator/policy"
	"github.com/devaipod/devaipod/internal/gitpack"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
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
	// known are the commits up named as in each repository's history
	// (by lower-case OWNER/REPO; Options.KnownCommits): pushBranch takes
	// those GitHub confirms (knownOnDefault) as the remote's, besides its
	// branches' and tags' tips; confirmed are those it has.
	known map[string][]plumbing.Hash

	mu        sync.Mutex
	confirmed map[string]bool // "OWNER/REPO@SHA"
}

func (p *pusher) isConfirmed(repo string, h plumbing.Hash) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.confirmed[repo+"@"+h.String()]
}

func (p *pusher) confirm(repo string, h plumbing.Hash) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.confirmed == nil {
		p.confirmed = map[string]bool{}
	}
	p.confirmed[repo+"@"+h.String()] = true
}

// ParseKnownCommit parses OWNER/REPO@SHA, a commit that should be in the
// repository's history (SHA: the full id, in lower case), and returns the
// repository in lower case, as GitHub compares names.
func ParseKnownCommit(s string) (repo string, commit plumbing.Hash, err error) {
	name, sha, ok := strings.Cut(s, "@")
	if !ok {
		return "", plumbing.ZeroHash, fmt.Errorf("known commit %q: want OWNER/REPO@SHA", s)
	}
	if _, _, err := policy.SplitRepo(name); err != nil {
		return "", plumbing.ZeroHash, fmt.Errorf("known commit %q: %w", s, err)
	}
	if len(sha) != 40 || strings.Trim(sha, "0123456789abcdef") != "" {
		return "", plumbing.ZeroHash, fmt.Errorf("known commit %q: %q is not a full commit id in lower case", s, sha)
	}
	return strings.ToLower(name), plumbing.NewHash(sha), nil
}

// openWorkspace opens the workspace's .git directory through a read-only
// filesystem confined to the workspace (rootFS): the agent controls the
// workspace, and no symlink it plants (.git itself, HEAD, a ref, objects,
// objects/info/alternates) may lead the gator into its own files, such as
// the token. Every object read is checked against its id (verifiedStorage).
// Call the returned function when done.
func openWorkspace(dir string) (*verifiedStorage, func(), error) {
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
	objects := &objectReader{dir: dotgit.(*rootFS), max: maxObjectSize, made: cache.NewBufferLRU(madeCacheSize)}
	v := &verifiedStorage{Storage: st, objects: objects, cache: cache.NewObjectLRUDefault(), counted: map[plumbing.Hash]bool{}}
	return v, func() { objects.close(); st.Close(); closeRoots() }, nil
}

// Bounds of what the gator reads of the workspace's objects: one object
// (GitHub refuses files over 100 MiB too), and what one push_branch sends,
// which go-git's packing holds in memory together (the gator's memory
// limit is 512 MiB): the files, and the new commits and the trees they
// change (see countTrees). The other commits and trees are not counted:
// go-git's push reads those of the remote's whole history, to know what
// not to send, and lets them go.
const maxObjectSize = 100 << 20

// maxPushRead bounds what one push_branch reads of what it sends (see
// above); a variable for the tests.
var maxPushRead int64 = 256 << 20

// verifiedStorage is the workspace's repository: go-git's storage for its
// references, and objectReader (bounded) for its objects, every one of
// which is checked against its id. Git objects are named by the hash of
// their content, but go-git takes a loose or packed object's content as it
// finds it; the agent owns these files, and could show the checks (the
// protected paths, the commits and files a person approves) one tree and
// push another under the same id. With the check, what the gator examines
// is what the ids name, which is what the remote gets: it recomputes the
// ids of what it receives.
type verifiedStorage struct {
	*filesystem.Storage
	objects *objectReader
	cache   cache.Object // of objects read and checked

	mu      sync.Mutex
	counted map[plumbing.Hash]bool // objects counted, whose sizes make read
	read    int64
	trees   bool // count commits and trees too

	// known are commits the remote has besides its refs' tips (see
	// pusher.known): go-git's push, which counts Shallow's commits as the
	// remote's, then sends none of their history.
	known []plumbing.Hash
}

// Shallow is the workspace's shallow commits and the known ones: what
// go-git's push takes the remote to have besides its refs. (A commit the
// agent lists in .git/shallow only leaves its history out of the push,
// which the remote then refuses as incomplete.)
func (v *verifiedStorage) Shallow() ([]plumbing.Hash, error) {
	shallow, err := v.Storage.Shallow()
	if err != nil {
		return nil, err
	}
	return append(slices.Clip(shallow), v.known...), nil
}

// countTrees makes the reads that follow count commits and trees against
// maxPushRead, or no longer.
func (v *verifiedStorage) countTrees(on bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.trees = on
}

func (v *verifiedStorage) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (_ plumbing.EncodedObject, err error) {
	o, ok := v.cache.Get(h)
	if !ok {
		if o, err = v.readObject(h); err != nil {
			return nil, err
		}
		v.cache.Put(o)
	}
	if err := v.count(o); err != nil {
		return nil, err
	}
	if t != plumbing.AnyObject && o.Type() != t {
		return nil, plumbing.ErrObjectNotFound
	}
	return o, nil
}

// count counts o against maxPushRead, once, if it is a file or trees are
// counted (see countTrees).
func (v *verifiedStorage) count(o plumbing.EncodedObject) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if (o.Type() == plumbing.BlobObject || v.trees) && !v.counted[o.Hash()] {
		v.counted[o.Hash()] = true
		v.read += o.Size()
	}
	if v.read > maxPushRead {
		return fmt.Errorf("the push needs more than %d MiB of the workspace's files, commits and trees, which the gator would hold in memory at once; push less at a time", maxPushRead>>20)
	}
	return nil
}

// readObject reads h with objectReader and checks it against h.
func (v *verifiedStorage) readObject(h plumbing.Hash) (_ plumbing.EncodedObject, err error) {
	defer func() {
		// The agent wrote every byte that the reader parses: a bug there
		// fails the call, not the gator (go-git's packing calls this in
		// a goroutine of its own, where a panic would end the process).
		if p := recover(); p != nil {
			err = fmt.Errorf("read the workspace's object %s: %v", h, p)
		}
	}()
	typ, data, err := v.objects.read(h)
	var large *gitpack.TooLargeError
	switch {
	case errors.As(err, &large):
		return nil, fmt.Errorf("the workspace's object %s is %d MiB, more than the %d MiB the gator takes (GitHub refuses files over 100 MiB too)",
			h, large.Size>>20, large.Max>>20)
	case errors.Is(err, plumbing.ErrObjectNotFound):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("read the workspace's object %s: %w", h, err)
	}
	m := &plumbing.MemoryObject{}
	m.SetType(typ)
	m.Write(data)
	if m.Hash() != h {
		return nil, fmt.Errorf("the workspace's object %s does not match its id: the repository is damaged or was tampered with", h)
	}
	return m, nil
}

// Config is a default configuration, not the workspace's: go-git's push
// reads only its packing window from it, and the agent's window could make
// the packing compare every object with billions of others. Without a
// window the push sends whole objects, as they are.
func (v *verifiedStorage) Config() (*config.Config, error) {
	c := config.NewConfig()
	c.Pack.Window = 0
	return c, nil
}

// DeltaObject is EncodedObject: the packfile encoder of a push asks for
// objects this way, which the embedded storage would answer unchecked.
func (v *verifiedStorage) DeltaObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	return v.EncodedObject(t, h)
}

// HasEncodedObject and EncodedObjectSize answer from objectReader too:
// the embedded storage would read the packs' indexes itself, unchecked.
func (v *verifiedStorage) HasEncodedObject(h plumbing.Hash) error { return v.objects.has(h) }

func (v *verifiedStorage) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	o, err := v.EncodedObject(plumbing.AnyObject, h)
	if err != nil {
		return 0, err
	}
	return o.Size(), nil
}

// IterEncodedObjects is not needed by a push, and would read every object
// unchecked.
func (v *verifiedStorage) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errors.New("the gator does not list the workspace's objects")
}

// headCommit resolves HEAD to a commit.
func headCommit(st *verifiedStorage) (*object.Commit, error) {
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

// refuseGitRedirects makes go-git's HTTP transport, which every push and
// listing of the gator uses, follow no redirect (see refuseRedirect):
// go-git's default follows one on info/refs and pushes there.
var refuseGitRedirects = sync.OnceFunc(func() {
	c := githttp.NewClient(&http.Client{Transport: http.DefaultTransport, CheckRedirect: refuseRedirect})
	client.InstallProtocol("https", c)
	client.InstallProtocol("http", c)
})

// pushPlan is a push worked out and checked, not yet made. Its commit is
// fixed when it is made: nothing after reads HEAD again, so a person who
// approves the push of one commit never lets another through.
type pushPlan struct {
	st     *verifiedStorage
	done   func()
	remote *git.Remote
	auth   *githttp.BasicAuth
	dst    plumbing.ReferenceName
	head   *object.Commit
	res    pushResult
	news   newCommits
}

// close closes the workspace.
func (pl *pushPlan) close() { pl.done() }

// plan works out the push of commit at (the workspace's HEAD when at is
// zero) to refs/heads/BRANCH of owner/repo, and makes every check: a
// fast-forward or a new branch, no protected path touched. A refusal is a
// deniedError. The caller has checked the branch name
// (policy.CheckAgentBranch) and that it is not the repository's default
// branch. Known gives the commits the remote has besides its refs' tips,
// where the walk of the new commits stops too; it is called only when
// there is something to push. A plan whose res.Action is "up-to-date" has
// nothing to push. Close the plan when done.
func (p *pusher) plan(ctx context.Context, owner, repo, branch string, at plumbing.Hash, known func() []plumbing.Hash) (_ *pushPlan, err error) {
	if err := policy.CheckAgentBranch(branch); err != nil {
		return nil, err // policy.Decide checked already; a second look costs nothing
	}
	refuseGitRedirects()
	st, done, err := openWorkspace(p.workspace)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			done()
		}
	}()
	var head *object.Commit
	if at.IsZero() {
		head, err = headCommit(st)
	} else if head, err = object.GetCommit(st, at); err != nil {
		err = fmt.Errorf("read commit %s of the workspace: %w", at, err)
	}
	if err != nil {
		return nil, err
	}
	target := p.gitURL.JoinPath(owner, repo+".git").String()
	pl := &pushPlan{
		st:     st,
		done:   done,
		remote: git.NewRemote(st, &config.RemoteConfig{Name: gatorRemote, URLs: []string{target}}),
		auth:   &githttp.BasicAuth{Username: pushUser, Password: p.token},
		dst:    plumbing.NewBranchReferenceName(branch),
		head:   head,
		res:    pushResult{Repo: owner + "/" + repo, Branch: branch, Commit: head.Hash.String()},
	}

	// Look first, so that a refusal can say why in words, and the result
	// can say whether the branch is new.
	refs, err := pl.remote.ListContext(ctx, &git.ListOptions{Auth: pl.auth})
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return nil, fmt.Errorf("list the branches of %s: %w", pl.res.Repo, err)
	}
	pl.res.Action = "created"
	for _, r := range refs {
		if r.Name() != pl.dst {
			continue
		}
		old := r.Hash()
		pl.res.PreviousCommit = old.String()
		switch {
		case old == head.Hash:
			pl.res.Action = "up-to-date"
			return pl, nil
		case !isAncestor(st, old, head):
			return nil, &deniedError{reason: fmt.Sprintf(
				"refused: %s on %s is at %s, which the workspace's HEAD (%s) does not contain; the gator never force-pushes, so push to a new %s branch instead",
				branch, pl.res.Repo, short(old), short(head.Hash), policy.AgentBranchPrefix)}
		}
		pl.res.Action = "updated"
	}

	// What walkNew reads is the new commits and the trees they change
	// (and their parents' trees, which it compares them with): go-git's
	// packing will hold the new ones with the files, so they count.
	st.countTrees(true)
	st.known = known()
	pl.news, err = walkNew(ctx, head, refs, st.known, p.protected)
	st.countTrees(false)
	if err != nil {
		return nil, err
	}
	if len(pl.news.protected) > 0 {
		return nil, &deniedError{reason: fmt.Sprintf(
			"refused: the commits to push change %s, which CI runs with the repository's secrets; a person pushes such changes (the protected paths are [gator.github] protected_paths)",
			strings.Join(pl.news.protected, ", "))}
	}
	return pl, nil
}

// push makes the push the plan worked out: its commit, to its branch.
func (pl *pushPlan) push(ctx context.Context) (pushResult, error) {
	res := pl.res
	if res.Action == "up-to-date" {
		return res, nil
	}
	// No "+": go-git checks the update is a fast-forward too, so a branch
	// that moved since the listing is refused rather than overwritten.
	spec := config.RefSpec(pl.head.Hash.String() + ":" + pl.dst.String())
	err := pl.remote.PushContext(ctx, &git.PushOptions{
		RemoteName: gatorRemote,
		RefSpecs:   []config.RefSpec{spec},
		Auth:       pl.auth,
	})
	switch {
	case errors.Is(err, git.NoErrAlreadyUpToDate):
		res.Action = "up-to-date"
	case err != nil && strings.Contains(err.Error(), "non-fast-forward"):
		return pushResult{}, &deniedError{reason: fmt.Sprintf(
			"refused: %s on %s moved to commits the workspace's HEAD does not contain; the gator never force-pushes, so push to a new %s branch instead",
			res.Branch, res.Repo, policy.AgentBranchPrefix)}
	case err != nil:
		return pushResult{}, fmt.Errorf("push %s to %s of %s: %w", short(pl.head.Hash), res.Branch, res.Repo, err)
	}
	return res, nil
}

// ask is what a person is shown before the push: the branch, the commit,
// the commits the remote does not have yet and the files they touch.
func (pl *pushPlan) ask() askRequest {
	res := pl.res
	d := map[string]string{"branch": res.Branch, "commit": res.Commit, "action": "create " + res.Branch}
	if res.Action == "updated" {
		d["action"] = fmt.Sprintf("fast-forward %s from %s", res.Branch, res.PreviousCommit)
	}
	var lines []string
	for _, c := range pl.news.list {
		subject, _, _ := strings.Cut(strings.TrimSpace(c.Message), "\n")
		lines = append(lines, short(c.Hash)+" "+clip(printable(subject), maxAskSubject))
	}
	d["commits"] = fmt.Sprintf("%d new %s, from the pushed one back:\n%s", len(pl.news.hashes), plural(len(pl.news.hashes), "commit"),
		listLines(lines, len(pl.news.hashes), maxAskCommits))
	files := slices.Sorted(maps.Keys(pl.news.files))
	for i, f := range files {
		files[i] = clip(printable(f), maxAskFileName)
	}
	count := strconv.Itoa(len(files))
	if pl.news.moreFiles {
		count = "more than " + count
	}
	d["files"] = fmt.Sprintf("%s %s changed by these commits:\n%s", count, plural(len(files), "file"), listLines(files, len(files), maxAskFiles))
	return askRequest{What: fmt.Sprintf("push_branch %s %s", res.Repo, res.Branch), Details: d, Commit: res.Commit}
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// maxPushCommits bounds the commits walkNew looks at; maxPushFiles the
// files it remembers for a person to see (it checks them all).
const (
	maxPushCommits = 10000
	maxPushFiles   = 10000
)

// newCommits are the commits a push would give the remote, and what they
// change.
type newCommits struct {
	hashes map[plumbing.Hash]bool
	// list holds the first maxAskCommits, from head back.
	list []*object.Commit
	// files are the paths the commits add, change or remove (at most
	// maxPushFiles; moreFiles says there were more).
	files     map[string]bool
	moreFiles bool
	// protected are the protected paths among them, sorted.
	protected []string
}

// notIn names one commit of n that old does not have ("" if none).
func (n newCommits) notIn(old newCommits) string {
	for h := range n.hashes {
		if !old.hashes[h] {
			return short(h)
		}
	}
	return ""
}

// walkNew walks the commits to push: every commit from head back to those
// the remote has on its branches and tags, or that are known to be in its
// history (alsoKnown), each against its parents, so
// that a file added in one commit and removed in the next counts too. It
// notes the protected paths they change. Other refs do not count: GitHub
// lists a fork's pull requests as refs/pull/N/head, commits of anyone's
// making, which a push on top of one would bring into the repository's
// branches unchecked.
func walkNew(ctx context.Context, head *object.Commit, remote []*plumbing.Reference, alsoKnown []plumbing.Hash, patterns []string) (newCommits, error) {
	known := map[plumbing.Hash]bool{}
	for _, h := range alsoKnown {
		known[h] = true
	}
	for _, r := range remote {
		if r.Name().IsBranch() || r.Name().IsTag() {
			known[r.Hash()] = true
		}
	}
	news := newCommits{hashes: map[plumbing.Hash]bool{}, files: map[string]bool{}}
	found := map[string]bool{}
	queue := []*object.Commit{head}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if news.hashes[c.Hash] || known[c.Hash] {
			continue
		}
		if news.hashes[c.Hash] = true; len(news.hashes) > maxPushCommits {
			return newCommits{}, &deniedError{reason: fmt.Sprintf("refused: more than %d commits to push", maxPushCommits)}
		}
		if len(news.list) < maxAskCommits {
			news.list = append(news.list, c)
		}
		tree, err := c.Tree()
		if err != nil {
			return newCommits{}, fmt.Errorf("read commit %s: %w", short(c.Hash), err)
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
				return newCommits{}, fmt.Errorf("read the parents of %s: %w", short(c.Hash), err)
			}
		}
		for _, pt := range parents {
			changes, err := object.DiffTreeWithOptions(ctx, pt, tree, nil)
			if err != nil {
				return newCommits{}, fmt.Errorf("compare commit %s: %w", short(c.Hash), err)
			}
			for _, ch := range changes {
				for _, name := range []string{ch.From.Name, ch.To.Name} {
					if name == "" {
						continue
					}
					if policy.Protected(patterns, name) {
						found[name] = true
					}
					if news.files[name] {
						continue
					}
					if len(news.files) < maxPushFiles {
						news.files[name] = true
					} else {
						news.moreFiles = true
					}
				}
			}
		}
	}
	news.protected = slices.Sorted(maps.Keys(found))
	return news, nil
}

// isAncestor reports whether old is head or one of its ancestors in the
// workspace. A commit the workspace does not have is not.
func isAncestor(st *verifiedStorage, old plumbing.Hash, head *object.Commit) bool {
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
