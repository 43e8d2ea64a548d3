package pod

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devaipod/devaipod/internal/approval"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

func TestGrants(t *testing.T) {
	g := &Grants{Path: filepath.Join(t.TempDir(), "state", "grants.json")}
	if list, err := g.List(); err != nil || len(list) != 0 {
		t.Fatalf("no file: %v %v", list, err)
	}
	repo := repoKey("https://github.com/octo/app.git")
	for _, n := range []Grant{
		{Repo: repo, Kind: approval.KindNetwork, Rule: "pkg.example.test:443"},
		{Repo: repo, Kind: approval.KindNetwork, Rule: "pkg.example.test:443"}, // kept once
		{Repo: repo, Kind: approval.KindGator, Rule: "push_branch octo/app"},
		{Repo: repoKey("https://github.com/octo/other"), Kind: approval.KindNetwork, Rule: "x.example.test:443"},
	} {
		if err := g.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	list, _ := g.List()
	if len(list) != 3 || list[0].ID != "grant-1" || list[2].ID != "grant-3" {
		t.Fatalf("grants %+v", list)
	}
	// A checkout of the same repository by another name gets them.
	allow, scopes, err := g.For(&source.Source{Remote: "git@github.com:octo/app.git"})
	if err != nil || !slices.Equal(allow, []string{"pkg.example.test:443"}) || !slices.Equal(scopes, []string{"github:octo/app:push-branch"}) {
		t.Errorf("For: %v %v %v", allow, scopes, err)
	}
	if _, err := g.Revoke("grant-1"); err != nil {
		t.Fatal(err)
	}
	if allow, _, _ := g.For(&source.Source{Remote: "https://github.com/octo/app"}); len(allow) != 0 {
		t.Errorf("revoked grant still given: %v", allow)
	}
	if _, err := g.Revoke("grant-9"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Revoke of nothing: %v", err)
	}
}

// approvalEngine has one pod whose proxy holds one request.
type approvalEngine struct {
	Engine
	req   approval.Request
	execs [][]string
}

func (e *approvalEngine) Objects(context.Context, string) ([]Object, error) {
	return []Object{
		{Kind: KindPod, Name: plan.PodName("p"), Pod: "p", Labels: map[string]string{plan.LabelRepo: "https://github.com/octo/app"}},
		{Kind: KindContainer, Name: plan.ContainerName("p", plan.RoleProxy), Pod: "p", State: "running", Labels: map[string]string{plan.LabelRole: plan.RoleProxy}},
		{Kind: KindContainer, Name: plan.ContainerName("p", plan.RoleAgent), Pod: "p", State: "running", Labels: map[string]string{plan.LabelRole: plan.RoleAgent}},
	}, nil
}

func (e *approvalEngine) Exec(_ context.Context, ctr string, s ExecSpec) (int, string, error) {
	e.execs = append(e.execs, append([]string{ctr}, s.Cmd...))
	if slices.Contains(s.Cmd, "list") {
		b, _ := json.Marshal(e.req)
		return 0, string(b) + "\n", nil
	}
	if slices.Contains(s.Cmd, e.req.ID) {
		return 0, "", nil
	}
	return exitNotPending, "", nil
}

func TestApprovalsAndDecide(t *testing.T) {
	e := &approvalEngine{req: approval.Request{ID: "net-0a1b2c3d", Pod: "p", Kind: approval.KindNetwork,
		What: "CONNECT pkg.example.test:443", Rule: "pkg.example.test:443", Created: time.Now()}}
	pending, err := Approvals(context.Background(), e, "")
	if err != nil || len(pending) != 1 || pending[0].Role != plan.RoleProxy || pending[0].Repo != "https://github.com/octo/app" {
		t.Fatalf("Approvals: %+v %v", pending, err)
	}
	if strings.Contains(strings.Join(e.execs[0], " "), plan.RoleAgent) {
		t.Errorf("asked the agent's container: %q", e.execs)
	}
	g := &Grants{Path: filepath.Join(t.TempDir(), "grants.json")}
	if _, err := Decide(context.Background(), e, g, approval.Decision{ID: "net-0a1b2c3d", Approve: true, For: ForRepo, By: "me@host"}, ShareOptions{}); err != nil {
		t.Fatal(err)
	}
	last := strings.Join(e.execs[len(e.execs)-1], " ")
	if !strings.Contains(last, "--dir "+plan.ProxyApprovalDir) || !strings.Contains(last, "--for pod") || !strings.HasSuffix(last, "approve net-0a1b2c3d") {
		t.Errorf("decided with %q", last)
	}
	if list, _ := g.List(); len(list) != 1 || list[0].Rule != "pkg.example.test:443" || list[0].Repo != "github.com/octo/app" {
		t.Errorf("grants %+v", list)
	}
	if _, err := Decide(context.Background(), e, g, approval.Decision{ID: "net-ffffffff"}, ShareOptions{}); !errors.Is(err, approval.ErrNotPending) {
		t.Errorf("Decide of no request: %v", err)
	}
}

// TestGrantsAtOnce: approvals kept by several devaipods at once are all
// kept, each under an id of its own.
func TestGrantsAtOnce(t *testing.T) {
	g := &Grants{Path: filepath.Join(t.TempDir(), "grants.json")}
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A Grants of its own, as another process has.
			other := &Grants{Path: g.Path}
			errs[i] = other.Add(Grant{Repo: "github.com/octo/app", Kind: approval.KindNetwork, Rule: fmt.Sprintf("h%d.example.test:443", i)})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	list, err := g.List()
	ids := map[string]bool{}
	for _, o := range list {
		ids[o.ID] = true
	}
	if err != nil || len(list) != n || len(ids) != n {
		t.Errorf("%d grants with %d ids after %d approvals at once (%v): %+v", len(list), len(ids), n, err, list)
	}
	if left, _ := filepath.Glob(g.Path + ".*.tmp"); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
