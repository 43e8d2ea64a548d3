package pod

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/plan"
)

// TestPoolFillAndClaim runs the pool on the fake engine: a fill makes one
// pod labelled with its fingerprint, a second fill makes none, an up
// without a name claims it (its claim volume carries the task), and a
// claim whose hand-over of the task fails removes the claimed pod, as a
// failed up removes what it made.
func TestPoolFillAndClaim(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	repo := repoWith(t, map[string]string{"main.go": "package main\n"})
	eng := newFake()
	req := Request{Source: repo, HostEnv: map[string]string{"DEVAIPOD_AGENT_OPENCODE_CONFIG_CONTENT": "{}"}, NoVerify: true}

	fill := func() *PoolReport {
		t.Helper()
		rep, err := FillPool(context.Background(), eng, req, 1)
		if err != nil {
			t.Fatalf("FillPool: %v", err)
		}
		return rep
	}
	rep := fill()
	if len(rep.Made) != 1 || len(rep.Idle) != 1 || rep.Key == "" {
		t.Fatalf("first fill: %+v; want one pod made and idle", rep)
	}
	if again := fill(); len(again.Made) != 0 || again.Key != rep.Key {
		t.Errorf("second fill: %+v; want nothing made, key %s", again, rep.Key)
	}
	short := rep.Idle[0]
	if got := eng.objects[KindPod+"/"+plan.PodName(short)].Labels[plan.LabelPool]; got != rep.Key {
		t.Errorf("pool pod's label %s = %q; want %s", plan.LabelPool, got, rep.Key)
	}

	// The claim: Objects, the claim volume, the readiness exec, then the
	// task's exec, which fails here.
	eng.failAt = len(eng.calls) + 3
	task := "fix the flaky test"
	claim := req
	claim.Task = task
	_, err := Create(context.Background(), eng, claim)
	if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "hand the task to the agent") {
		t.Fatalf("claim with a failing task hand-over: %v; want the injected error", err)
	}
	if left, _ := eng.Objects(context.Background(), short); len(left) != 0 {
		t.Errorf("the claimed pod is left after the failed hand-over: %v", left)
	}
	if !slices.Contains(eng.calls, "volume "+plan.ObjectName(short, plan.VolumeClaim)) {
		t.Errorf("no claim volume was created: %v", eng.calls)
	}

	// A new pool pod, claimed for good: the claim volume has the task.
	eng.failAt = 0
	short = fill().Idle[0]
	res, err := Create(context.Background(), eng, claim)
	if err != nil || !res.Claimed || res.Plan.Name != short {
		t.Fatalf("claim: %+v, %v; want pod %s claimed", res, err, short)
	}
	sums, _ := List(context.Background(), eng)
	if len(sums) != 1 || sums[0].Pool != PoolClaimed || sums[0].Task != task {
		t.Errorf("list after the claim: %+v; want one claimed pod with the task", sums)
	}
	if rep := fill(); len(rep.Made) != 1 {
		t.Errorf("fill after the claim made %v; want one pod (a claimed pod is not idle)", rep.Made)
	}
}

// TestPoolPodBeingMadeIsLeftAlone: a pool pod runs before its up has
// checked it, and those checks may yet remove it. While that up runs (it
// holds the pod's lock), an up does not claim the pod, and another fill
// neither counts nor deletes it.
func TestPoolPodBeingMadeIsLeftAlone(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	repo := repoWith(t, map[string]string{"main.go": "package main\n"})
	eng := newFake()
	req := Request{Source: repo, HostEnv: map[string]string{"DEVAIPOD_AGENT_OPENCODE_CONFIG_CONTENT": "{}"}, NoVerify: true}
	rep, err := FillPool(context.Background(), eng, req, 1)
	if err != nil || len(rep.Idle) != 1 {
		t.Fatalf("fill: %+v, %v", rep, err)
	}
	making := rep.Idle[0]
	unlock, err := lockPod(making) // as its up, still checking it
	if err != nil {
		t.Fatal(err)
	}
	res, err := Create(context.Background(), eng, req)
	if err != nil || res.Claimed || res.Plan.Name == making {
		t.Errorf("up while the pool pod is being made: %+v, %v; want a pod of its own", res, err)
	}
	if again, err := FillPool(context.Background(), eng, req, 1); err != nil || slices.Contains(again.Removed, making) || len(again.Made) != 1 {
		t.Errorf("fill while a pool pod is being made: %+v, %v; want it neither removed nor counted", again, err)
	}
	unlock()
	if left, _ := eng.Objects(context.Background(), making); len(left) == 0 {
		t.Error("the pod being made was removed")
	}
	res, err = Create(context.Background(), eng, req)
	if err != nil || !res.Claimed {
		t.Errorf("up once the pool pod is made: %+v, %v; want it claimed", res, err)
	}
}

// lostClaimEngine answers the create of a claim volume with an error that
// is not ErrExists, having made the volume (as a service does when the
// client's context ends mid-call), or having found another up's there.
type lostClaimEngine struct {
	*fakeEngine
	othersFirst bool
}

func (e lostClaimEngine) CreateVolume(ctx context.Context, v plan.VolumeSpec) error {
	if !strings.HasSuffix(v.Name, "-"+plan.VolumeClaim) {
		return e.fakeEngine.CreateVolume(ctx, v)
	}
	if e.othersFirst {
		other := maps.Clone(v.Labels)
		other[plan.LabelClaimed] = "another up's claim"
		e.fakeEngine.CreateVolume(ctx, plan.VolumeSpec{Name: v.Name, Labels: other})
	} else {
		e.fakeEngine.CreateVolume(ctx, v)
	}
	return context.Canceled
}

// TestFailedClaimGivesBackOnlyItsOwn: a claim whose create failed but was
// made gives the pod back to the pool; another up's claim stays.
func TestFailedClaimGivesBackOnlyItsOwn(t *testing.T) {
	for _, othersFirst := range []bool{false, true} {
		f := newFake()
		f.add(KindPod, plan.PodName("p"), "p", map[string]string{plan.LabelPod: "p"})
		eng := lostClaimEngine{f, othersFirst}
		if ok, err := claimPod(context.Background(), eng, "p", "a task"); ok || !errors.Is(err, context.Canceled) {
			t.Fatalf("othersFirst=%v: claim = %v, %v; want the create's error", othersFirst, ok, err)
		}
		_, claimed := f.objects[KindVolume+"/"+plan.ObjectName("p", plan.VolumeClaim)]
		if claimed != othersFirst {
			t.Errorf("othersFirst=%v: the claim volume is there: %v", othersFirst, claimed)
		}
	}
}

// TestPoolKeepsItsPodForATaskWithoutModel: a task the agent has no model
// for is refused before a pool pod is claimed; the pod stays idle.
func TestPoolKeepsItsPodForATaskWithoutModel(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	repo := repoWith(t, map[string]string{"main.go": "package main\n"})
	eng := newFake()
	req := Request{Source: repo, HostEnv: map[string]string{}, NoVerify: true}
	rep, err := FillPool(context.Background(), eng, req, 1)
	if err != nil || len(rep.Idle) != 1 {
		t.Fatalf("FillPool: %v %+v", err, rep)
	}
	claim := req
	claim.Task = "fix the flaky test"
	var nm *plan.NoModelError
	if _, err := Create(context.Background(), eng, claim); !errors.As(err, &nm) {
		t.Fatalf("a task without a model: %v", err)
	}
	if again, err := FillPool(context.Background(), eng, req, 1); err != nil || len(again.Idle) != 1 || len(again.Made) != 0 {
		t.Errorf("the pool after the refusal: %v %+v; want its pod idle", err, again)
	}
}
