package pod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/devaipod/devaipod/internal/gittest"
	"github.com/devaipod/devaipod/pod/devcontainer"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

// fakeEngine keeps objects in memory and can fail the n-th mutating call.
// The methods no test needs panic (the embedded interface is nil).
type fakeEngine struct {
	Engine
	mu      sync.Mutex        // up and delete call it from several goroutines
	objects map[string]Object // kind/name -> object
	calls   []string
	failAt  int // 1-based index of the mutating call that fails; 0 = never
	cancel  context.CancelFunc
	// readyCode is what the readiness exec returns.
	readyCode int
	copied    int64
}

func newFake() *fakeEngine { return &fakeEngine{objects: map[string]Object{}} }

var errInjected = errors.New("injected failure")

func (f *fakeEngine) step(name string) error {
	f.calls = append(f.calls, name)
	if f.failAt == len(f.calls) {
		if f.cancel != nil {
			f.cancel() // simulate Ctrl-C at this step
			return context.Canceled
		}
		return errInjected
	}
	return nil
}

func (f *fakeEngine) add(kind, name, pod string, labels map[string]string) {
	f.objects[kind+"/"+name] = Object{Kind: kind, Name: name, Pod: pod, Labels: labels, State: "created"}
}

func (f *fakeEngine) ImageConfig(context.Context, string) (plan.ImageConfig, error) {
	return plan.ImageConfig{}, nil
}

// Info is a host that enforces limits, of an unknown podman: no warning.
func (f *fakeEngine) Info(context.Context) (plan.HostInfo, error) { return plan.HostInfo{}, nil }
func (f *fakeEngine) PodExists(_ context.Context, name string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.objects[KindPod+"/"+name]
	return ok, nil
}
func (f *fakeEngine) CreatePod(_ context.Context, p plan.PodSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.step("pod " + p.Name); err != nil {
		return err
	}
	f.add(KindPod, p.Name, p.Labels[plan.LabelPod], p.Labels)
	return nil
}
func (f *fakeEngine) CreateVolume(_ context.Context, v plan.VolumeSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.step("volume " + v.Name); err != nil {
		return err
	}
	f.add(KindVolume, v.Name, v.Labels[plan.LabelPod], v.Labels)
	return nil
}
func (f *fakeEngine) CreateSecret(_ context.Context, s plan.SecretSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.step("secret " + s.Name); err != nil {
		return err
	}
	f.add(KindSecret, s.Name, s.Labels[plan.LabelPod], s.Labels)
	return nil
}
func (f *fakeEngine) CreateContainer(_ context.Context, _ string, c plan.ContainerSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.step("container " + c.Name); err != nil {
		return err
	}
	f.add(KindContainer, c.Name, c.Labels[plan.LabelPod], c.Labels)
	return nil
}
func (f *fakeEngine) CopyInto(_ context.Context, _, _ string, r io.Reader) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := io.Copy(io.Discard, r)
	f.copied = n
	if err != nil {
		return err
	}
	return f.step("copy")
}
func (f *fakeEngine) StartPod(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.step("start " + name); err != nil {
		return err
	}
	for k, o := range f.objects {
		if o.Kind == KindContainer || o.Kind == KindPod {
			o.State, o.Started = "running", true
			f.objects[k] = o
		}
	}
	return nil
}
func (f *fakeEngine) StopPod(context.Context, string, uint) error { return nil }
func (f *fakeEngine) Exec(context.Context, string, ExecSpec) (int, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.step("exec"); err != nil {
		return 0, "", err
	}
	return f.readyCode, "connection refused", nil
}
func (f *fakeEngine) Logs(_ context.Context, _ string, _ int, _ bool, w io.Writer) error {
	_, err := io.WriteString(w, "agent: cannot start\n")
	return err
}
func (f *fakeEngine) Objects(_ context.Context, short string) ([]Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Object
	for _, o := range f.objects {
		if short == "" || o.Pod == short {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind+out[i].Name < out[j].Kind+out[j].Name })
	return out, nil
}
func (f *fakeEngine) Remove(_ context.Context, o Object) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := o.Kind + "/" + o.Name
	if _, ok := f.objects[key]; !ok {
		return ErrNotFound
	}
	delete(f.objects, key)
	if o.Kind == KindPod { // a pod takes its containers with it
		for k, c := range f.objects {
			if c.Kind == KindContainer && c.Pod == o.Pod {
				delete(f.objects, k)
			}
		}
	}
	return nil
}

// testPlan returns a plan and a checked-out tree to copy.
func testPlan(t *testing.T, name string) (*plan.Plan, string) {
	t.Helper()
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	src, err := source.Resolve(context.Background(), gittest.Repo(t), source.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(t.TempDir(), "tree")
	if err := src.Checkout(context.Background(), tree); err != nil {
		t.Fatal(err)
	}
	in := plan.PlanInput{Name: name, Source: src}
	pl, err := plan.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	return pl, tree
}

func TestUpSucceeds(t *testing.T) {
	pl, src := testPlan(t, "ok")
	f := newFake()
	if err := Up(context.Background(), f, pl, src, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	want := 1 + len(pl.Volumes) + len(pl.Secrets) + len(pl.Containers)
	if len(f.objects) != want {
		t.Errorf("%d objects after up; want %d", len(f.objects), want)
	}
	if f.copied == 0 {
		t.Error("nothing copied into the workspace")
	}
	if err := Up(context.Background(), f, pl, src, UpOptions{}); !errors.Is(err, ErrExists) {
		t.Errorf("second up with the same name: %v; want ErrExists", err)
	}
}

// TestUpProgressWithLifecycle: the wait for the agent is a step of its own,
// after the lifecycle commands (up --timings times each from its line).
func TestUpProgressWithLifecycle(t *testing.T) {
	pl, src := testPlan(t, "lc")
	pl.Lifecycle = &plan.Lifecycle{Workdir: "/workspaces/x", PostCreate: &devcontainer.LifecycleCommand{Steps: []devcontainer.Step{{Args: []string{"true"}}}}}
	var lines []string
	if err := Up(context.Background(), newFake(), pl, src, UpOptions{Progress: func(s string) { lines = append(lines, s) }}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(lines, "\n")
	if !strings.HasSuffix(got, "starting pod\nrunning the devcontainer's lifecycle commands in the workspace (and checking the pod's containment)\nwaiting for the agent's server and checking its containment") {
		t.Errorf("progress:\n%s", got)
	}
}

// TestUpRollsBack fails every step of up in turn, as an error and as a
// cancellation, and checks that nothing is left.
func TestUpRollsBack(t *testing.T) {
	pl, src := testPlan(t, "rb")
	probe := newFake()
	if err := Up(context.Background(), probe, pl, src, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	steps := probe.calls
	for _, cancel := range []bool{false, true} {
		for i := range steps {
			name := fmt.Sprintf("%s/cancel=%v", strings.Fields(steps[i])[0], cancel)
			t.Run(name, func(t *testing.T) {
				f := newFake()
				f.failAt = i + 1
				ctx := context.Background()
				if cancel {
					var stop context.CancelFunc
					ctx, stop = context.WithCancel(ctx)
					defer stop()
					f.cancel = stop
				}
				err := Up(ctx, f, pl, src, UpOptions{})
				if err == nil {
					t.Fatalf("up succeeded although step %d (%s) failed", i+1, steps[i])
				}
				if len(f.objects) != 0 {
					t.Errorf("after failing at %q, left: %v", steps[i], f.objects)
				}
			})
		}
	}
}

// TestRunChecksGatesFirst: the agent's failure to reach the canary proves
// something only once the canary answers, so its check (a gate) has
// passed before any other starts, and when it fails no other runs.
func TestRunChecksGatesFirst(t *testing.T) {
	checks := []plan.Check{{What: "agent"}, {What: "canary", Gate: true}, {What: "verify"}}
	for _, gateFails := range []bool{false, true} {
		var mu sync.Mutex
		var started []string
		gateDone := false
		err := RunChecks(checks, func(i int, c plan.Check) error {
			mu.Lock()
			defer mu.Unlock()
			if checks[i].What != c.What {
				t.Errorf("check %d given as %q", i, c.What)
			}
			if !c.Gate && !gateDone {
				t.Errorf("%s started before the gate passed", c.What)
			}
			started = append(started, c.What)
			if c.Gate {
				gateDone = true
				if gateFails {
					return errors.New("refused")
				}
			}
			if c.What == "verify" {
				return errors.New("verify failed")
			}
			return nil
		})
		switch {
		case gateFails && (err == nil || err.Error() != "refused" || len(started) != 1):
			t.Errorf("failing gate: err %v, started %v; want the gate's error and nothing else run", err, started)
		case !gateFails && (err == nil || err.Error() != "verify failed" || len(started) != 3):
			t.Errorf("err %v, started %v; want all three run and verify's error", err, started)
		}
	}
}

func TestUpNotReady(t *testing.T) {
	pl, src := testPlan(t, "slow")
	f := newFake()
	f.readyCode = 1
	err := Up(context.Background(), f, pl, src, UpOptions{})
	var re *ReadyError
	if !errors.As(err, &re) || !strings.Contains(re.Logs, "cannot start") {
		t.Fatalf("up = %v; want a ReadyError with the agent's log", err)
	}
	if len(f.objects) != 0 {
		t.Errorf("left after readiness failure: %v", f.objects)
	}

	f = newFake()
	f.readyCode = 1
	if err := Up(context.Background(), f, pl, src, UpOptions{KeepOnFailure: true}); err == nil {
		t.Fatal("up succeeded")
	}
	if len(f.objects) == 0 {
		t.Error("--keep-on-failure removed the objects")
	}
}

func TestDeleteAndLeftovers(t *testing.T) {
	pl, src := testPlan(t, "del")
	f := newFake()
	if err := Up(context.Background(), f, pl, src, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	// An unrelated pod and a half-created one.
	other, _ := testPlan(t, "other")
	if err := Up(context.Background(), f, other, "", UpOptions{}); err != nil {
		t.Fatal(err)
	}
	f.add(KindVolume, "devaipod-ghost-workspace", "ghost", map[string]string{plan.LabelPod: "ghost"})
	f.add(KindPod, "devaipod-half", "half", map[string]string{plan.LabelPod: "half"})
	f.add(KindContainer, "devaipod-half-workspace", "half", map[string]string{plan.LabelPod: "half", plan.LabelRole: plan.RoleWorkspace})

	left, err := Leftovers(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range left {
		names = append(names, o.Name)
	}
	sort.Strings(names)
	if got := strings.Join(names, " "); got != "devaipod-ghost-workspace devaipod-half devaipod-half-workspace" {
		t.Errorf("Leftovers = %s", got)
	}

	if _, err := Delete(context.Background(), f, "del", true); err != nil {
		t.Fatal(err)
	}
	objs, _ := f.Objects(context.Background(), "del")
	for _, o := range objs {
		if o.Kind != KindVolume {
			t.Errorf("delete --keep-volumes left %s %s", o.Kind, o.Name)
		}
	}
	if len(objs) != len(pl.Volumes) {
		t.Errorf("delete --keep-volumes kept %d objects; want the %d volumes", len(objs), len(pl.Volumes))
	}
	if _, err := Delete(context.Background(), f, "del", false); err != nil {
		t.Fatal(err)
	}
	if objs, _ := f.Objects(context.Background(), "del"); len(objs) != 0 {
		t.Errorf("delete left %v", objs)
	}
	if objs, _ := f.Objects(context.Background(), "other"); len(objs) == 0 {
		t.Error("delete of one pod removed another's objects")
	}
	if _, err := Delete(context.Background(), f, "nope", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete of an unknown pod: %v; want ErrNotFound", err)
	}
}

func TestLeftoversSkipsLockedPod(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	f := newFake()
	f.add(KindVolume, "devaipod-busy-workspace", "busy", map[string]string{plan.LabelPod: "busy"})
	unlock, err := lockPod("busy")
	if err != nil {
		t.Fatal(err)
	}
	left, _ := Leftovers(context.Background(), f)
	if len(left) != 0 {
		t.Errorf("Leftovers took a pod whose up holds the lock: %v", left)
	}
	if _, err := lockPod("busy"); err == nil {
		t.Error("a second lock of the same pod succeeded")
	}
	unlock()
	left, _ = Leftovers(context.Background(), f)
	if len(left) != 1 {
		t.Errorf("after unlock, Leftovers = %v", left)
	}
	if err := RemoveLeftovers(context.Background(), f, left); err != nil || len(f.objects) != 0 {
		t.Errorf("RemoveLeftovers: %v, left %v", err, f.objects)
	}
}

// TestLockDirIgnoresTMPDIR: every devaipod of a user finds the same locks,
// whether or not its environment has XDG_RUNTIME_DIR or another TMPDIR
// (cron's gc against an interactive up).
func TestLockDirIgnoresTMPDIR(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", t.TempDir())
	a := lockDir()
	t.Setenv("TMPDIR", t.TempDir())
	if b := lockDir(); a != b || strings.HasPrefix(a, os.TempDir()) {
		t.Errorf("lock dirs %s and %s under two TMPDIRs; want one, outside TMPDIR", a, b)
	}
	run := fmt.Sprintf("/run/user/%d", os.Getuid())
	if st, err := os.Stat(run); err == nil && st.IsDir() && a != run+"/devaipod" {
		t.Errorf("lock dir %s; want the user's runtime directory %s, as with XDG_RUNTIME_DIR", a, run)
	}
}

// TestKilledUpIsALeftover: an up killed after its pod started leaves a
// pod that runs with every container, yet never passed its checks; its
// mark says so to gc (and to the next up), and the removal clears it. A
// finished up leaves no mark.
func TestKilledUpIsALeftover(t *testing.T) {
	pl, src := testPlan(t, "killed")
	f := newFake()
	if err := Up(context.Background(), f, pl, src, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	objs, _ := f.Objects(context.Background(), pl.Name)
	if unfinished(podOf(t, objs)) {
		t.Fatal("a finished up left its pod marked unfinished")
	}
	if left, _ := Leftovers(context.Background(), f); len(left) != 0 {
		t.Fatalf("a finished pod is a leftover: %v", left)
	}
	markUnfinished(pl.Name, podOf(t, objs).Labels[plan.LabelUp]) // as an up killed while it checked the pod
	if !halfCreated(objs) {
		t.Error("the killed up's pod is taken for complete (by up, which would report it running)")
	}
	left, _ := Leftovers(context.Background(), f)
	if len(left) != len(objs) {
		t.Fatalf("Leftovers = %v; want the killed up's %d objects", left, len(objs))
	}
	if err := RemoveLeftovers(context.Background(), f, left); err != nil || len(f.objects) != 0 || unfinished(podOf(t, objs)) {
		t.Errorf("RemoveLeftovers: %v, left %v, marked %v", err, f.objects, unfinished(podOf(t, objs)))
	}
}

// podOf is the pod among objs.
func podOf(t *testing.T, objs []Object) Object {
	t.Helper()
	i := slices.IndexFunc(objs, func(o Object) bool { return o.Kind == KindPod })
	if i < 0 {
		t.Fatalf("no pod among %v", objs)
	}
	return objs[i]
}

// TestUnfinishedMarkNamesItsPod: the unfinished marks are this user's
// for every podman service and cluster, and pods of two services may have
// the same name. An up killed on one service leaves a mark that counts
// for its own pod only: not for a whole pod of the name on another, nor a
// pod without a token (the kube engine's); an up of the name there, which
// finishes, leaves it, and so does deleting the other pod.
func TestUnfinishedMarkNamesItsPod(t *testing.T) {
	pl, src := testPlan(t, "elsewhere")
	// A killed up's pod, as on another service.
	killed := newFake()
	if err := Up(context.Background(), killed, pl, src, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	killedObjs, _ := killed.Objects(context.Background(), pl.Name)
	killedPod := podOf(t, killedObjs)
	if killedPod.Labels[plan.LabelUp] == "" {
		t.Fatalf("the pod has no %s label", plan.LabelUp)
	}
	markUnfinished(pl.Name, killedPod.Labels[plan.LabelUp])

	// An up of the same name here finishes.
	here := newFake()
	if err := Up(context.Background(), here, pl, src, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	objs, _ := here.Objects(context.Background(), pl.Name)
	untokened := Object{Kind: KindPod, Name: pl.Pod.Name, Pod: pl.Name, Labels: map[string]string{plan.LabelPod: pl.Name}}
	for name, p := range map[string]Object{"this service's pod": podOf(t, objs), "a pod without a token": untokened} {
		if unfinished(p) {
			t.Errorf("%s is taken for the killed up's", name)
		}
	}
	if halfCreated(objs) {
		t.Error("a whole pod is taken for a leftover by another service's mark")
	}
	if left, _ := Leftovers(context.Background(), here); len(left) != 0 {
		t.Errorf("Leftovers = %v; want none", left)
	}
	if _, err := Delete(context.Background(), here, pl.Name, false); err != nil {
		t.Fatal(err)
	}
	if !unfinished(killedPod) || !halfCreated(killedObjs) {
		t.Error("an up of the name elsewhere, and deleting its pod, cleared the killed up's mark")
	}

	// A devaipod before tokens left a file named by the pod only; a label
	// that is not a token would make the mark's name a path.
	os.WriteFile(filepath.Join(filepath.Dir(unfinishedPath(pl.Name, "X")), pl.Name), nil, 0o600)
	if unfinished(untokened) || unfinished(podOf(t, objs)) {
		t.Error("a mark from before tokens counts for a pod")
	}
	escaping := untokened
	escaping.Labels = map[string]string{plan.LabelPod: pl.Name, plan.LabelUp: "x/../../" + pl.Name}
	os.WriteFile(unfinishedPath(pl.Name, escaping.Labels[plan.LabelUp]), nil, 0o600)
	if upToken(escaping) != "" || unfinished(escaping) {
		t.Error("a label that is not a token names a mark")
	}
}

// TestRemoveLeftoversLooksAgain: between gc's list and its removal, an up
// of the same name may finish a pod whose objects have the listed names;
// the removal looks again under the pod's lock and leaves a finished pod.
func TestRemoveLeftoversLooksAgain(t *testing.T) {
	pl, src := testPlan(t, "again")
	f := newFake()
	f.add(KindVolume, plan.ObjectName("again", plan.VolumeWorkspace), "again", map[string]string{plan.LabelPod: "again"})
	left, err := Leftovers(context.Background(), f)
	if err != nil || len(left) != 1 {
		t.Fatalf("Leftovers = %v, %v; want the lone volume", left, err)
	}
	// The up: it would refuse a name whose pod exists, not one whose
	// volume is left; here it makes the pod from scratch.
	f.objects = map[string]Object{}
	if err := Up(context.Background(), f, pl, src, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	before := len(f.objects)
	if err := RemoveLeftovers(context.Background(), f, left); err != nil || len(f.objects) != before {
		t.Errorf("RemoveLeftovers after the up finished the pod: %v; %d of %d objects left", err, len(f.objects), before)
	}
}
