package pod

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/internal/gittest"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

func TestRepoKey(t *testing.T) {
	same := [][2]string{
		{"https://github.com/o/r", "https://github.com/o/r.git"},
		{"https://github.com/o/r", "https://github.com/o/r/"},
		{"https://github.com/o/r", "git@github.com:o/r.git"},
		{"https://github.com/o/r", "ssh://git@github.com:22/o/r.git"},
		{"https://github.com/o/r", "https://GitHub.com/o/r"},
		{"http://user@github.com/o/r", "git://github.com/o/r"},
		{"/home/u/src/r", "/home/u/src/r/"},
		{"/home/u/src/r", "file:///home/u/src/r"},
		{"/home/u/src/r", "/home/u/src/./r"},
	}
	for _, p := range same {
		if repoKey(p[0]) != repoKey(p[1]) {
			t.Errorf("%s and %s: keys %q and %q differ; want the same repository", p[0], p[1], repoKey(p[0]), repoKey(p[1]))
		}
	}
	different := [][2]string{
		{"https://github.com/o/r", "https://github.com/o/r2"},
		{"https://github.com/o/r", "https://github.com/fork/r"},
		{"https://github.com/o/r", "https://gitlab.com/o/r"},
		{"https://github.com/o/r", "/o/r"},
		{"git@github.com:o/r.git", "git@example.com:o/r.git"},
		{"/home/u/src/r", "/home/u/src/r2"},
		{"/home/u/src/r", "file:///srv/r"},
	}
	for _, p := range different {
		if repoKey(p[0]) == repoKey(p[1]) {
			t.Errorf("%s and %s: both key %q; want different repositories", p[0], p[1], repoKey(p[0]))
		}
	}
}

func TestSameSource(t *testing.T) {
	url := &source.Source{Display: "https://h/o/r.git", Remote: "https://h/o/r.git", Project: "r"}
	local := &source.Source{Display: "/src/r", Dir: "/src/r", Local: true, Remote: "git@h:o/r.git", Project: "r"}
	bare := &source.Source{Display: "/src/r", Dir: "/src/r", Local: true, Project: "r"}
	pr := &source.Source{Display: "https://h/o/r/pull/7", Remote: "https://h/fork/r.git", Upstream: "https://h/o/r.git", PR: 7, Project: "r"}
	for _, tc := range []struct {
		repo string
		pr   int
		src  *source.Source
		want bool
	}{
		{"https://h/o/r.git", 0, url, true},
		{"https://h/o/r.git", 0, local, true}, // a checkout of the URL
		{"https://h/o/r2.git", 0, url, false},
		{"/src/r", 0, bare, true},
		{"/src/r", 0, local, false}, // the checkout has a remote now
		{"https://h/o/r.git", 7, pr, true},
		{"https://h/o/r.git", 8, pr, false},  // another pull request
		{"https://h/o/r.git", 0, pr, false},  // the repository, not the pull request
		{"https://h/o/r.git", 7, url, false}, // the pull request, not the repository
		{"", 0, url, false},                  // a pod without the label: unknown
	} {
		if got := SameSource(tc.repo, tc.pr, tc.src); got != tc.want {
			t.Errorf("SameSource(%q, %d, %s) = %v; want %v", tc.repo, tc.pr, tc.src.Display, got, tc.want)
		}
	}
}

// TestSourceRepoIsPlanLabel holds sourceRepo to the label plan puts on
// pods: SameSource compares the two.
func TestSourceRepoIsPlanLabel(t *testing.T) {
	ctx := context.Background()
	withRemote := gittest.Repo(t)
	gittest.Git(t, withRemote, []string{"remote", "add", "origin", "https://git.example.test/o/r.git"})
	var srcs []*source.Source
	for _, in := range []string{withRemote, gittest.Repo(t), "https://git.example.test/o/r2.git"} {
		src, err := source.Resolve(ctx, in, source.Options{})
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, src)
	}
	srcs = append(srcs, &source.Source{Display: "https://h/o/r/pull/7", Remote: "https://h/fork/r.git", Upstream: "https://h/o/r.git", PR: 7, Project: "r"})
	for _, src := range srcs {
		pl, err := plan.Build(plan.PlanInput{Name: "x", Source: src})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sourceRepo(src), pl.Pod.Labels[plan.LabelRepo]; got != want || got == "" {
			t.Errorf("source %s: sourceRepo %q, the pod's label %q", src.Display, got, want)
		}
	}
}

// upRequest is a Create request for repo on the fake engine.
func upRequest(repo, name string, log *[]string) Request {
	return Request{Source: repo, Name: name, Progress: func(s string) { *log = append(*log, s) },
		Warn: func(s string) { *log = append(*log, "warning: "+s) }}
}

func mutating(f *fakeEngine) []string {
	var out []string
	for _, c := range f.calls {
		if c != "exec" {
			out = append(out, c)
		}
	}
	return out
}

func TestCreateExistingPod(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	ctx := context.Background()
	repo := gittest.Repo(t)
	gittest.Git(t, repo, []string{"remote", "add", "origin", "https://git.example.test/o/r.git"})
	f := newFake()
	var log []string
	first, err := Create(ctx, f, upRequest(repo, "again", &log))
	if err != nil {
		t.Fatal(err)
	}
	if first.Existing != nil || first.Plan == nil {
		t.Fatalf("first up: existing %v, plan %v; want a new pod", first.Existing, first.Plan)
	}
	objects, calls := len(f.objects), len(mutating(f))

	t.Run("running, same source: nothing changes", func(t *testing.T) {
		log = nil
		// Another spelling of the same repository and a flag.
		req := upRequest(repo, "devaipod-again", &log)
		req.Image = "localhost/other"
		res, err := Create(ctx, f, req)
		if err != nil {
			t.Fatal(err)
		}
		ex := res.Existing
		if ex == nil || res.Plan != nil {
			t.Fatalf("second up: existing %v, plan %v; want the existing pod", ex, res.Plan)
		}
		if ex.Action != ActionNone || ex.State != "running" || ex.Name != "again" || ex.Pod != "devaipod-again" {
			t.Errorf("existing = %+v; want running, action none", ex)
		}
		if ex.Repo != "https://git.example.test/o/r.git" || ex.Commit != first.Source.Commit || ex.Workdir != first.Plan.Workdir || ex.AgentURL != first.Plan.AgentURL {
			t.Errorf("existing = %+v; want the first pod's repo, commit %s, workdir %s and agent URL %s", ex, first.Source.Commit, first.Plan.Workdir, first.Plan.AgentURL)
		}
		if len(f.objects) != objects || len(mutating(f)) != calls {
			t.Errorf("second up changed podman: %d objects (had %d), calls %v", len(f.objects), objects, mutating(f)[calls:])
		}
		joined := strings.Join(log, "\n")
		if strings.Contains(joined, "cloning") {
			t.Errorf("second up cloned:\n%s", joined)
		}
		if !strings.Contains(joined, "ignored --image, which only a new pod takes") {
			t.Errorf("second up did not warn about --image:\n%s", joined)
		}

		// A task: refused, not dropped, and nothing changes.
		req.Task = "do it"
		_, err = Create(ctx, f, req)
		var xe *ExistingPodError
		if !errors.As(err, &xe) || xe.Reason != ReasonTask || !strings.Contains(err.Error(), "pod again exists (from https://git.example.test/o/r.git at ") ||
			!strings.Contains(err.Error(), "running): up gives a task only to a new pod's agent") {
			t.Errorf("second up with a task: %v; want the task refused", err)
		}
		if len(f.objects) != objects || len(mutating(f)) != calls {
			t.Errorf("second up with a task changed podman: %v", mutating(f)[calls:])
		}
	})

	t.Run("a checkout that moved on: warned, not updated", func(t *testing.T) {
		gittest.WriteFile(t, filepath.Join(repo, "new.txt"), "x\n")
		gittest.Git(t, repo, []string{"add", "."}, []string{"commit", "-q", "-m", "more"})
		log = nil
		res, err := Create(ctx, f, upRequest(repo, "again", &log))
		if err != nil || res.Existing == nil {
			t.Fatalf("up: %v, %+v", err, res)
		}
		if res.Existing.Commit != first.Source.Commit {
			t.Errorf("existing commit %s; want the pod's %s", res.Existing.Commit, first.Source.Commit)
		}
		if !strings.Contains(strings.Join(log, "\n"), "was made from commit "+shortCommit(first.Source.Commit)) {
			t.Errorf("no warning that the checkout moved on:\n%s", strings.Join(log, "\n"))
		}
	})

	t.Run("another source: refused, nothing touched", func(t *testing.T) {
		other := gittest.Repo(t)
		gittest.Git(t, other, []string{"remote", "add", "origin", "https://git.example.test/o/other.git"})
		log = nil
		_, err := Create(ctx, f, upRequest(other, "again", &log))
		var xe *ExistingPodError
		if !errors.As(err, &xe) || xe.Reason != ReasonSource || !errors.Is(err, ErrExists) {
			t.Fatalf("up of another source: %v; want an ExistingPodError for the source", err)
		}
		for _, want := range []string{"https://git.example.test/o/r.git", "https://git.example.test/o/other.git", other, "pod again"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %s", err, want)
			}
		}
		if len(f.objects) != objects || len(mutating(f)) != calls {
			t.Errorf("refused up changed podman: calls %v", mutating(f)[calls:])
		}
		if strings.Contains(strings.Join(log, "\n"), "cloning") {
			t.Errorf("refused up cloned first:\n%s", strings.Join(log, "\n"))
		}
	})

	t.Run("stopped, same source: started", func(t *testing.T) {
		for k, o := range f.objects {
			if o.Kind == KindPod || o.Kind == KindContainer {
				o.State = "exited"
				f.objects[k] = o
			}
		}
		dry := upRequest(repo, "again", &log)
		dry.DryRun = true
		res, err := Create(ctx, f, dry)
		if err != nil || res.Existing == nil || res.Existing.Action != ActionStart || res.Plan != nil {
			t.Fatalf("dry run: %v, %+v; want the pod, action start, no plan", err, res)
		}
		if len(mutating(f)) != calls {
			t.Fatalf("dry run changed podman: %v", mutating(f)[calls:])
		}
		res, err = Create(ctx, f, upRequest(repo, "again", &log))
		if err != nil {
			t.Fatal(err)
		}
		if res.Existing == nil || res.Existing.Action != ActionStart || res.Existing.State != "exited" {
			t.Fatalf("existing = %+v; want exited, action start", res.Existing)
		}
		if got := mutating(f)[calls:]; !slices.Equal(got, []string{"start devaipod-again"}) {
			t.Errorf("calls = %v; want the pod started and nothing else", got)
		}
		if f.objects[KindPod+"/devaipod-again"].State != "running" || len(f.objects) != objects {
			t.Errorf("after up: pod %+v, %d objects (had %d)", f.objects[KindPod+"/devaipod-again"], len(f.objects), objects)
		}
	})

	t.Run("another up making it: refused", func(t *testing.T) {
		unlock, err := lockPod("again")
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		if _, err := Create(ctx, f, upRequest(repo, "again", &log)); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "being created") {
			t.Errorf("up while another up holds the name: %v; want being created", err)
		}
		dry := upRequest(repo, "again", &log)
		dry.DryRun = true
		if _, err := Create(ctx, f, dry); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "being created") {
			t.Errorf("dry run while another up holds the name: %v; want being created", err)
		}
	})

	t.Run("no --name: a new pod", func(t *testing.T) {
		res, err := Create(ctx, f, upRequest(repo, "", &log))
		if err != nil || res.Existing != nil || res.Plan == nil || res.Plan.Name == "again" {
			t.Fatalf("up without --name: %v, %+v; want a new pod", err, res)
		}
	})
}

func TestFindExistingStates(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	ctx := context.Background()
	src := &source.Source{Display: "https://h/o/r.git", Remote: "https://h/o/r.git", Project: "r"}
	labels := func(role string) map[string]string {
		l := map[string]string{plan.LabelPod: "p", plan.LabelRepo: "https://h/o/r"}
		if role != "" {
			l[plan.LabelRole] = role
		}
		return l
	}
	setup := func(podState string, started bool, agentState string) *fakeEngine {
		f := newFake()
		f.objects["pod/devaipod-p"] = Object{Kind: KindPod, Name: "devaipod-p", Pod: "p", State: podState, Labels: labels("")}
		f.objects["container/devaipod-p-workspace"] = Object{Kind: KindContainer, Name: "devaipod-p-workspace", Pod: "p", State: "running", Started: started, Labels: labels(plan.RoleWorkspace)}
		f.objects["container/devaipod-p-agent"] = Object{Kind: KindContainer, Name: "devaipod-p-agent", Pod: "p", State: agentState, Started: started, Labels: labels(plan.RoleAgent)}
		f.objects["volume/devaipod-p-workspace"] = Object{Kind: KindVolume, Name: "devaipod-p-workspace", Pod: "p", Labels: labels("")}
		return f
	}

	if ex, err := findExisting(ctx, newFake(), "p", src); ex != nil || err != nil {
		t.Errorf("no pod: %+v, %v; want nil, nil", ex, err)
	}
	ex, err := findExisting(ctx, setup("degraded", true, "exited"), "p", src)
	if err != nil || ex.Action != ActionNone || !slices.Equal(ex.NotRunning, []string{"devaipod-p-agent"}) {
		t.Errorf("degraded: %+v, %v; want action none, the agent not running", ex, err)
	}
	ex, err = findExisting(ctx, setup("created", true, "created"), "p", src)
	if err != nil || ex.Action != ActionStart {
		t.Errorf("created after a reboot: %+v, %v; want action start", ex, err)
	}
	var xe *ExistingPodError
	_, err = findExisting(ctx, setup("created", false, "created"), "p", src)
	if !errors.As(err, &xe) || xe.Reason != ReasonIncomplete {
		t.Errorf("never started: %v; want incomplete", err)
	}
	_, err = findExisting(ctx, setup("paused", true, "paused"), "p", src)
	if !errors.As(err, &xe) || xe.Reason != ReasonState || xe.State != "paused" {
		t.Errorf("paused: %v; want the state refused", err)
	}
	left := setup("running", true, "running")
	delete(left.objects, "pod/devaipod-p")
	delete(left.objects, "container/devaipod-p-workspace")
	delete(left.objects, "container/devaipod-p-agent")
	_, err = findExisting(ctx, left, "p", src)
	if !errors.As(err, &xe) || xe.Reason != ReasonIncomplete || xe.State != "" {
		t.Errorf("a volume left without its pod: %v; want incomplete", err)
	}
}

func TestWorkspaceFolder(t *testing.T) {
	pl, _ := testPlan(t, "wf")
	f := newFake()
	f.objects["pod/"+pl.Pod.Name] = Object{Kind: KindPod, Name: pl.Pod.Name, Pod: "wf", State: "running", Labels: pl.Pod.Labels}
	container, folder, err := WorkspaceFolder(context.Background(), f, "wf")
	if err != nil || container != "devaipod-wf-workspace" || folder != pl.Workdir || folder == "" {
		t.Errorf("WorkspaceFolder = %q, %q, %v; want devaipod-wf-workspace, %q", container, folder, err, pl.Workdir)
	}
	o := f.objects["pod/"+pl.Pod.Name]
	o.State = "exited"
	f.objects["pod/"+pl.Pod.Name] = o
	if _, _, err := WorkspaceFolder(context.Background(), f, "wf"); !errors.As(err, new(*NotRunningError)) {
		t.Errorf("stopped pod: %v; want NotRunningError", err)
	}
}
