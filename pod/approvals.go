package pod

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/devaipod/devaipod/gator/policy"
	"github.com/devaipod/devaipod/internal/approval"
	"github.com/devaipod/devaipod/internal/helperargs"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

// Requests that wait for a person (docs/approvals.md): the proxy and the
// gator file them in their state volumes (internal/approval), which only
// they mount; devaipod reads and decides them with podman exec in those
// containers. The agent has no way to either.

// approvalDirs are the sidecars that file requests, and where.
var approvalDirs = map[string]string{plan.RoleProxy: plan.ProxyApprovalDir, plan.RoleGator: plan.GatorApprovalDir}

// exitNotPending is devaipod-helper approvals' exit code for a request
// that is not (or no longer) pending.
const exitNotPending = 3

// Pending is a request that waits, with where it waits.
type Pending struct {
	approval.Request
	Container string `json:"container"`
	Role      string `json:"role"` // proxy or gator
	// Repo is the pod's repository (its io.devaipod.repo label);
	// SourceDir the checkout it was made from, for a local one.
	Repo      string `json:"repo,omitempty"`
	SourceDir string `json:"source_dir,omitempty"`
}

// Approvals lists the requests that wait for a decision in pod short's
// sidecars (every pod's when short is ""), oldest first.
func Approvals(ctx context.Context, eng Engine, short string) ([]Pending, error) {
	objs, err := eng.Objects(ctx, short)
	if err != nil {
		return nil, err
	}
	pods := map[string]Object{}
	for _, o := range objs {
		if o.Kind == KindPod {
			pods[o.Pod] = o
		}
	}
	var (
		mu   sync.Mutex
		all  []Pending
		errs []error
		wg   sync.WaitGroup
	)
	for _, o := range objs {
		dir, ok := approvalDirs[o.Labels[plan.LabelRole]]
		if o.Kind != KindContainer || !ok || o.State != "running" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs, err := listApprovals(ctx, eng, o.Name, dir)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			for _, r := range reqs {
				pl := pods[o.Pod].Labels
				all = append(all, Pending{Request: r, Container: o.Name, Role: o.Labels[plan.LabelRole], Repo: pl[plan.LabelRepo], SourceDir: pl[plan.LabelSourceDir]})
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(all, func(a, b Pending) int { return a.Created.Compare(b.Created) })
	return all, errors.Join(errs...)
}

func listApprovals(ctx context.Context, eng Engine, ctr, dir string) ([]approval.Request, error) {
	var stderr bytes.Buffer
	code, out, err := eng.Exec(ctx, ctr, ExecSpec{Cmd: append([]string{plan.ProxyBin}, helperargs.Approvals{Dir: dir, Op: "list"}.Args()...), Stderr: &stderr})
	if err == nil && code != 0 {
		err = errors.New(strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		return nil, fmt.Errorf("list the requests waiting in %s: %w", ctr, err)
	}
	var reqs []approval.Request
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var r approval.Request
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.ID != "" {
			reqs = append(reqs, r)
		}
	}
	if err := sc.Err(); err != nil {
		// Not the requests read so far as if they were all: one that
		// waits would go unseen.
		return nil, fmt.Errorf("list the requests waiting in %s: %w", ctr, err)
	}
	return reqs, nil
}

// Scopes of an approval as people give them: once and pod as the sidecar
// knows them, repo for every future pod of the repository as well.
const ForRepo = "repo"

// Decide approves or rejects the pending request d.ID, wherever it waits.
// With d.For == ForRepo the approval holds for the pod's life and is
// kept, in grants, for every pod up makes of the same repository. An
// approved path request is shared first (Share, with share; writable
// only with d.RW, whatever the agent asked); when it cannot be, the
// request is rejected with the reason. It returns the
// request decided.
func Decide(ctx context.Context, eng Engine, grants *Grants, d approval.Decision, share ShareOptions) (Pending, error) {
	pending, err := Approvals(ctx, eng, "")
	i := slices.IndexFunc(pending, func(p Pending) bool { return p.ID == d.ID })
	if i < 0 {
		if err != nil {
			return Pending{}, err
		}
		return Pending{}, fmt.Errorf("%s: %w", d.ID, approval.ErrNotPending)
	}
	p := pending[i]
	forRepo := d.For == ForRepo
	if forRepo {
		d.For = approval.ForPod
		if p.Repo == "" || p.Rule == "" {
			return p, fmt.Errorf("%s cannot be approved for the repository: the pod has no repository label or the request no rule", d.ID)
		}
	}
	var shareErr error
	if p.Kind == approval.KindPath && d.Approve {
		if forRepo {
			return p, fmt.Errorf("%s: a path is shared with one pod: approve it once", d.ID)
		}
		share.RW = d.RW
		if _, shareErr = Share(ctx, eng, p.Pod, p.Rule, share); shareErr != nil {
			d.Approve, d.For, d.Reason = false, "", "it cannot be shared: "+shareErr.Error()
		}
	}
	op := "reject"
	if d.Approve {
		op = "approve"
	}
	var stderr bytes.Buffer
	code, _, err := eng.Exec(ctx, p.Container, ExecSpec{Cmd: append([]string{plan.ProxyBin}, helperargs.Approvals{
		Dir: approvalDirs[p.Role], Op: op, ID: d.ID, For: d.For, RW: d.RW, Reason: d.Reason, By: d.By}.Args()...), Stderr: &stderr})
	switch {
	case err != nil:
		return p, fmt.Errorf("decide %s: %w", d.ID, err)
	case code == exitNotPending:
		return p, fmt.Errorf("%s: %w", d.ID, approval.ErrNotPending)
	case code != 0:
		return p, fmt.Errorf("decide %s: %s", d.ID, strings.TrimSpace(stderr.String()))
	}
	if shareErr != nil {
		return p, fmt.Errorf("%s rejected: %w", d.ID, shareErr)
	}
	if forRepo && d.Approve {
		if err := grants.Add(Grant{Repo: repoKey(p.Repo), Kind: p.Kind, Rule: p.Rule, By: d.By}); err != nil {
			return p, fmt.Errorf("approved %s for this pod, but not for the repository: %w", d.ID, err)
		}
	}
	return p, nil
}

// Grant is an approval for every pod of a repository: a network rule the
// proxy allows, or a gator tool ("TOOL OWNER/REPO") it needs not ask for.
type Grant struct {
	ID   string    `json:"id"`
	Repo string    `json:"repo"` // as repoKey makes it
	Kind string    `json:"kind"`
	Rule string    `json:"rule"`
	By   string    `json:"by,omitempty"`
	At   time.Time `json:"at"`
}

// Grants is the file of grants in devaipod's state directory.
type Grants struct{ Path string }

// DefaultGrants is $XDG_STATE_HOME/devaipod/grants.json, else
// ~/.local/state/devaipod/grants.json.
func DefaultGrants() *Grants {
	return &Grants{Path: filepath.Join(stateDir(), "grants.json")}
}

// stateDir is $XDG_STATE_HOME/devaipod, else ~/.local/state/devaipod:
// what devaipod keeps on this host across reboots.
func stateDir() string {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "devaipod")
}

// List returns every grant.
func (g *Grants) List() ([]Grant, error) { return g.file().load() }

func (g *Grants) file() listFile[Grant] { return listFile[Grant]{path: g.Path} }

// Add keeps a grant (one of the same repository, kind and rule is kept
// once).
func (g *Grants) Add(n Grant) error {
	return g.file().update(func(list []Grant) ([]Grant, error) {
		if slices.ContainsFunc(list, func(o Grant) bool { return o.Repo == n.Repo && o.Kind == n.Kind && o.Rule == n.Rule }) {
			return list, nil
		}
		next := 1
		for _, o := range list {
			var k int
			if _, err := fmt.Sscanf(o.ID, "grant-%d", &k); err == nil && k >= next {
				next = k + 1
			}
		}
		n.ID, n.At = fmt.Sprintf("grant-%d", next), time.Now().UTC()
		return append(list, n), nil
	})
}

// Revoke removes the grant of that id.
func (g *Grants) Revoke(id string) (gone Grant, err error) {
	err = g.file().update(func(list []Grant) ([]Grant, error) {
		i := slices.IndexFunc(list, func(o Grant) bool { return o.ID == id })
		if i < 0 {
			return nil, fmt.Errorf("no grant %q (devaipod approvals --granted lists them): %w", id, ErrNotFound)
		}
		gone = list[i]
		return slices.Delete(list, i, i+1), nil
	})
	return gone, err
}

// For returns what the grants give a new pod of src: the network rules
// to allow, and the gator scopes to add ("github:OWNER/REPO:PERM").
func (g *Grants) For(src *source.Source) (allow, scopes []string, err error) {
	list, err := g.List()
	if err != nil {
		return nil, nil, err
	}
	repo := repoKey(sourceRepo(src))
	for _, o := range list {
		if o.Repo != repo {
			continue
		}
		switch o.Kind {
		case approval.KindNetwork:
			allow = append(allow, o.Rule)
		case approval.KindGator:
			tool, target, _ := strings.Cut(o.Rule, " ")
			if perm, ok := policy.ToolPermissions[tool]; ok && target != "" {
				scopes = append(scopes, "github:"+target+":"+string(perm))
			}
		}
	}
	return allow, scopes, nil
}
