package pod

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devaipod/devaipod/pod/plan"
)

// killer is a fake engine that can kill containers.
type killer struct {
	*fakeEngine
	killed []string
	err    error
	remote bool
}

func (k *killer) Kill(_ context.Context, container string) error {
	k.killed = append(k.killed, container)
	return k.err
}

// Local: a fake of a local service, unless remote.
func (k *killer) Local() bool { return !k.remote }

func TestRemovalMark(t *testing.T) {
	ctx := context.Background()
	const short = "mark"
	if st := RemovalState(short); st != "" {
		t.Fatalf("state before = %q", st)
	}
	if r, err := takeRemoval(ctx, short, true); r != nil || err != nil {
		t.Fatalf("takeRemoval of no mark = %v, %v: it must never make one", r, err)
	}
	r, err := markRemoval(ctx, short, true, false)
	if err != nil || !r.KeepVolumes {
		t.Fatalf("markRemoval = %v, %v", r, err)
	}
	if st := RemovalState(short); st != StateRemoving {
		t.Errorf("state while held = %q", st)
	}
	// Nobody else takes it, whether it waits or not.
	if _, err := markRemoval(ctx, short, false, false); !errors.Is(err, ErrBeingRemoved) {
		t.Errorf("second mark = %v, want ErrBeingRemoved", err)
	}
	short1, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	if _, err := takeRemoval(short1, short, true); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting take = %v, want the deadline", err)
	}
	// The process it is handed to (here another open file of it) reads
	// what the mark says.
	f, err := os.Open(removalPath(short))
	if err != nil {
		t.Fatal(err)
	}
	h, err := HeldRemoval(short, f)
	if err != nil || !h.KeepVolumes {
		t.Fatalf("HeldRemoval = %+v, %v", h, err)
	}
	h.Release()

	// A waiter gets nil once the holder is done, and makes nothing.
	got := make(chan error, 1)
	go func() {
		w, err := takeRemoval(ctx, short, true)
		if w != nil {
			err = errors.New("took a mark that was done")
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := r.Done(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Errorf("waiter: %v", err)
	}
	if st := RemovalState(short); st != "" {
		t.Errorf("state after Done = %q", st)
	}

	// A mark let go of without Done is a failed removal, which the next
	// one takes over, with its own choice of volumes.
	r, err = markRemoval(ctx, short, true, false)
	if err != nil {
		t.Fatal(err)
	}
	r.Release()
	if st := RemovalState(short); st != StateRemovalFailed {
		t.Errorf("state of a released mark = %q", st)
	}
	// A look at the state does not make another take fail.
	done := make(chan bool)
	go func() {
		for {
			select {
			case <-done:
				return
			default:
				RemovalState(short)
			}
		}
	}()
	r, err = markRemoval(ctx, short, false, false)
	close(done)
	if err != nil || r.KeepVolumes {
		t.Fatalf("taking a failed mark = %v, %v", r, err)
	}
	r.Release()
	if h, err := takeRemoval(ctx, short, false); err != nil || h == nil || h.KeepVolumes {
		t.Fatalf("the mark does not say what the last delete asked: %+v, %v", h, err)
	} else if err := h.Done(); err != nil {
		t.Fatal(err)
	}
	// A mark of another name is not one this process was handed.
	other, err := markRemoval(ctx, "other-mark", false, false)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Done()
	if _, err := HeldRemoval(short, other.File()); err == nil {
		t.Error("HeldRemoval took another pod's mark")
	}
}

// TestStartAndFinishRemoval: the agent is killed, the pod shows as being
// removed, up and start wait for the removal and gc leaves it to its
// process; once that process is done everything is gone.
func TestStartAndFinishRemoval(t *testing.T) {
	ctx := context.Background()
	pl, src := testPlan(t, "going")
	f := newFake()
	if err := Up(ctx, f, pl, src, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	for k, o := range f.objects {
		if o.Kind == KindContainer {
			o.State = "running"
			f.objects[k] = o
		}
	}
	k := &killer{fakeEngine: f}
	objs, _ := f.Objects(ctx, "going")
	r, _, err := StartRemoval(ctx, k, "going", false)
	if err != nil {
		t.Fatal(err)
	}
	if want := plan.ContainerName("going", plan.RoleAgent); strings.Join(k.killed, " ") != want {
		t.Errorf("killed %v, want only %s", k.killed, want)
	}
	sums, _ := List(ctx, k)
	if len(sums) != 1 || sums[0].State != StateRemoving {
		t.Errorf("list while removing: %+v", sums)
	}
	// podman drops the pod from its list first: the rest still shows it.
	f.mu.Lock()
	delete(f.objects, KindPod+"/"+plan.PodName("going"))
	f.mu.Unlock()
	if sums, _ := List(ctx, k); len(sums) != 1 || sums[0].State != StateRemoving || len(sums[0].Volumes) == 0 {
		t.Errorf("list while removing, the pod gone: %+v", sums)
	}
	if left, _ := Leftovers(ctx, k); len(left) != 0 {
		t.Errorf("gc would take a pod being removed: %v", left)
	}
	if _, _, err := StartRemoval(ctx, k, "going", false); !errors.Is(err, ErrBeingRemoved) {
		t.Errorf("a second delete: %v, want ErrBeingRemoved", err)
	}
	// The process it is handed to.
	h, err := HeldRemoval("going", r.File())
	if err != nil {
		t.Fatal(err)
	}
	before := len(f.calls)
	started := make(chan error, 1)
	go func() { started <- Start(ctx, k, "going", nil) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-started:
		t.Fatalf("start did not wait for the removal: %v", err)
	default:
	}
	removed, err := FinishRemoval(ctx, f, h)
	f.mu.Lock()
	for _, c := range f.calls[before:] {
		if strings.HasPrefix(c, "start ") {
			t.Errorf("start went ahead while the pod was being removed: %v", f.calls)
		}
	}
	f.mu.Unlock()
	if err != nil || len(removed) != len(objs)-1 {
		t.Fatalf("FinishRemoval = %d objects, %v; want %d", len(removed), err, len(objs)-1)
	}
	<-started // (the fake starts what is not there)
	if left, _ := f.Objects(ctx, "going"); len(left) != 0 || RemovalState("going") != "" {
		t.Errorf("left: %v, state %q", left, RemovalState("going"))
	}
}

// TestFailedRemovalIsFinished: a removal whose process died leaves the pod
// marked; list says so, and delete, gc and up's wait finish it, keeping
// the volumes if its delete asked for that.
func TestFailedRemovalIsFinished(t *testing.T) {
	ctx := context.Background()
	for _, finisher := range []string{"delete", "gc", "await"} {
		t.Run(finisher, func(t *testing.T) {
			short := "failed-" + finisher
			pl, src := testPlan(t, short)
			f := newFake()
			if err := Up(ctx, f, pl, src, UpOptions{}); err != nil {
				t.Fatal(err)
			}
			k := &killer{fakeEngine: f}
			r, _, err := StartRemoval(ctx, k, short, true)
			if err != nil {
				t.Fatal(err)
			}
			r.Release() // the process died
			if sums, _ := List(ctx, k); len(sums) != 1 || sums[0].State != StateRemovalFailed {
				t.Errorf("list: %+v", sums)
			}
			switch finisher {
			case "delete":
				_, err = Delete(ctx, k, short, true)
			case "gc":
				var left []Object
				if left, err = Leftovers(ctx, k); err == nil {
					if len(left) == 0 {
						t.Error("gc did not see the failed removal")
					}
					err = RemoveLeftovers(ctx, k, left)
				}
			case "await":
				var unlock func()
				if unlock, err = lockPodNotRemoving(ctx, k, short, nil); err == nil {
					unlock()
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			left, _ := f.Objects(ctx, short)
			for _, o := range left {
				if o.Kind != KindVolume {
					t.Errorf("left: %s %s", o.Kind, o.Name)
				}
			}
			if len(left) == 0 {
				t.Error("the volumes were not kept, as the delete asked")
			}
			if st := RemovalState(short); st != "" {
				t.Errorf("state after = %q", st)
			}
		})
	}
}

// TestStartRemovalKillFails: when the agent cannot be killed the mark is
// let go of, for the caller to remove the pod itself.
func TestStartRemovalKillFails(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	f.add(KindPod, "devaipod-nokill", "nokill", map[string]string{plan.LabelPod: "nokill"})
	f.objects[KindContainer+"/devaipod-nokill-agent"] = Object{Kind: KindContainer, Name: "devaipod-nokill-agent", Pod: "nokill", State: "running"}
	if _, _, err := StartRemoval(ctx, &killer{fakeEngine: f, err: errInjected}, "nokill", false); !errors.Is(err, errInjected) {
		t.Fatalf("StartRemoval = %v", err)
	}
	if _, err := Delete(ctx, &killer{fakeEngine: f}, "nokill", false); err != nil {
		t.Fatal(err)
	}
	if left, _ := f.Objects(ctx, "nokill"); len(left) != 0 || RemovalState("nokill") != "" {
		t.Errorf("left %v, state %q", left, RemovalState("nokill"))
	}
	if _, _, err := StartRemoval(ctx, &killer{fakeEngine: f}, "nokill", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("StartRemoval of nothing = %v", err)
	}
}

// TestDeleteWaitsThenRemovesWhatItAsks: a delete that finds another
// removal waits for it, then removes what it asked for (the volumes the
// other kept); and reports what it removed, not what was there before.
func TestDeleteWaitsThenRemovesWhatItAsks(t *testing.T) {
	ctx := context.Background()
	pl, src := testPlan(t, "twice")
	f := newFake()
	if err := Up(ctx, f, pl, src, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	k := &killer{fakeEngine: f}
	first, _, err := StartRemoval(ctx, k, "twice", true)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []Object, 1)
	go func() {
		removed, err := Delete(ctx, k, "twice", false)
		if err != nil {
			t.Error(err)
		}
		got <- removed
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := FinishRemoval(ctx, f, first); err != nil {
		t.Fatal(err)
	}
	removed := <-got
	for _, o := range removed {
		if o.Kind != KindVolume {
			t.Errorf("the second delete reports %s %s, which the first removed", o.Kind, o.Name)
		}
	}
	if len(removed) == 0 {
		t.Error("the second delete removed nothing: the first kept the volumes")
	}
	if left, _ := f.Objects(ctx, "twice"); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
}

// TestMarksAreForPodmanOnly: an engine that cannot kill (a cluster), or a
// remote podman service, has no removal marks: its delete neither reads
// nor touches a local pod's mark of the same name, and its list and gc do
// not go by it.
func TestMarksAreForPodmanOnly(t *testing.T) {
	ctx := context.Background()
	local, err := markRemoval(ctx, "same", false, false)
	if err != nil {
		t.Fatal(err)
	}
	local.Release() // a failed removal of the podman pod "same"
	defer func() {
		if r, _ := takeRemoval(ctx, "same", false); r != nil {
			r.Done()
		}
	}()
	cluster := newFake()
	cluster.add(KindPod, "devaipod-same", "same", map[string]string{plan.LabelPod: "same"})
	if sums, _ := List(ctx, cluster); len(sums) != 1 || sums[0].State == StateRemovalFailed {
		t.Errorf("the cluster's list shows the podman pod's mark: %+v", sums)
	}
	if _, err := Delete(ctx, cluster, "same", false); err != nil {
		t.Fatal(err)
	}
	if st := RemovalState("same"); st != StateRemovalFailed {
		t.Errorf("the cluster's delete touched the podman pod's mark: state %q", st)
	}
	if _, err := Delete(ctx, cluster, "same", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("a second delete on the cluster = %v, want not found", err)
	}

	// Nor a remote podman service: its pods are not this machine's.
	f := newFake()
	f.add(KindPod, "devaipod-same", "same", map[string]string{plan.LabelPod: "same"})
	for _, role := range []string{plan.RoleWorkspace, plan.RoleAgent} {
		name := plan.ContainerName("same", role)
		f.objects[KindContainer+"/"+name] = Object{Kind: KindContainer, Name: name, Pod: "same", State: "running", Started: true,
			Labels: map[string]string{plan.LabelPod: "same", plan.LabelRole: role}}
	}
	remote := &killer{fakeEngine: f, remote: true}
	if sums, _ := List(ctx, remote); len(sums) != 1 || sums[0].State == StateRemovalFailed {
		t.Errorf("the remote service's list shows the local mark: %+v", sums)
	}
	if left, _ := Leftovers(ctx, remote); len(left) != 0 {
		t.Errorf("gc on the remote service takes its pod for a failed removal: %v", left)
	}
	if _, _, err := StartRemoval(ctx, remote, "same", false); err == nil {
		t.Error("a remote service's delete went to the background")
	}
	if _, err := Delete(ctx, remote, "same", false); err != nil {
		t.Fatal(err)
	}
	if st := RemovalState("same"); st != StateRemovalFailed {
		t.Errorf("the remote service's delete touched the local mark: state %q", st)
	}
}

// TestSweepRemovalMarks: gc deletes a failed mark whose pod has nothing
// left, and old temporary files of cut-short marks; it leaves a held
// mark, a failed mark whose pod still has objects, and a fresh temporary.
func TestSweepRemovalMarks(t *testing.T) {
	ctx := context.Background()
	mk := func(short string) *Removal {
		r, err := markRemoval(ctx, short, false, false)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	held := mk("sweep-held")
	defer held.Done()
	mk("sweep-empty").Release()
	mk("sweep-objects").Release()
	os.WriteFile(RemovalLog("sweep-empty"), []byte("failed\n"), 0o600)
	old := filepath.Join(removalDir(), ".sweep-cut.123")
	fresh := filepath.Join(removalDir(), ".sweep-cut.456")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-time.Hour)
	os.Chtimes(old, long, long)

	sweepRemovalMarks([]Object{{Kind: KindVolume, Name: "devaipod-sweep-objects-workspace", Pod: "sweep-objects"}})
	for _, c := range []struct {
		path string
		kept bool
	}{
		{removalPath("sweep-held"), true},
		{removalPath("sweep-objects"), true},
		{fresh, true},
		{removalPath("sweep-empty"), false},
		{RemovalLog("sweep-empty"), false},
		{old, false},
	} {
		if _, err := os.Stat(c.path); (err == nil) != c.kept {
			t.Errorf("%s: kept = %v, want %v", c.path, err == nil, c.kept)
		}
	}
	if r, _ := takeRemoval(ctx, "sweep-objects", false); r != nil {
		r.Done()
	}
	os.Remove(fresh)
}
