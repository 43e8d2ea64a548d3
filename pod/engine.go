package pod

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

// Engine is the part of podman that pod uses. The real one is
// podman.Podman (package pod/podman, the only code that talks to podman);
// tests use fakes. Every method takes the caller's context.
type Engine interface {
	// ImageConfig returns what an image sets for its containers;
	// ErrNotFound if it is absent.
	ImageConfig(ctx context.Context, image string) (plan.ImageConfig, error)
	// PullImage pulls an image from its registry; out hears the progress.
	PullImage(ctx context.Context, ref string, o PullOptions, out io.Writer) error
	// BuildImage builds an image from a Dockerfile and returns its id.
	BuildImage(ctx context.Context, b BuildSpec, out io.Writer) (string, error)
	// Info says what podman knows about the host.
	Info(ctx context.Context) (plan.HostInfo, error)
	// PodExists tells whether a pod with that podman name exists.
	PodExists(ctx context.Context, name string) (bool, error)
	CreatePod(ctx context.Context, p plan.PodSpec) error
	CreateVolume(ctx context.Context, v plan.VolumeSpec) error
	CreateSecret(ctx context.Context, s plan.SecretSpec) error
	CreateContainer(ctx context.Context, pod string, c plan.ContainerSpec) error
	// CopyInto extracts a tar stream at dir in a created container.
	CopyInto(ctx context.Context, container, dir string, tar io.Reader) error
	StartPod(ctx context.Context, name string) error
	StopPod(ctx context.Context, name string, timeout uint) error
	// Exec runs a command in a running container and returns its exit
	// code and combined output (only its last ExecTail bytes when
	// ExecSpec.Output takes it all).
	Exec(ctx context.Context, container string, e ExecSpec) (int, string, error)
	// Attach runs a command in a running container with e's Stdin,
	// Output (standard output) and Stderr, as a terminal when tty, and
	// returns its exit code: for people at a terminal, unlike Exec.
	Attach(ctx context.Context, container string, e ExecSpec, tty bool) (int, error)
	// Logs writes a container's logs; tail < 0 means all of them.
	Logs(ctx context.Context, container string, tail int, follow bool, w io.Writer) error
	// Objects lists what carries the LabelPod label: for one pod when
	// short is not empty, else for every pod.
	Objects(ctx context.Context, short string) ([]Object, error)
	// Remove deletes one object; one that is already gone is not an error.
	Remove(ctx context.Context, o Object) error
}

// ExecSpec is a command for Exec. Empty User, Env and Workdir mean the
// container's own.
type ExecSpec struct {
	Cmd     []string
	User    string
	Env     []string // KEY=value, on top of the container's environment
	Workdir string
	// Output, when set, also receives the output as it comes.
	Output io.Writer
	// Stdin, when set, is the command's standard input. Stderr, when
	// set, receives its standard error, which then stays out of the
	// output Exec returns and out of Output.
	Stdin  io.Reader
	Stderr io.Writer
}

// ErrNotFound is returned when a pod, image or object does not exist.
var ErrNotFound = errors.New("not found")

// Object kinds. removeAll deletes pods first, then containers, volumes and
// secrets.
const (
	KindPod       = "pod"
	KindContainer = "container"
	KindVolume    = "volume"
	KindSecret    = "secret"
)

// Object is one podman object devaipod created.
type Object struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Pod is the short name from the object's label.
	Pod string `json:"pod"`
	// State is the pod's or container's state ("" for volumes, secrets).
	State string `json:"state,omitempty"`
	// Started tells whether a container was ever started. Podman resets
	// the state of containers to "created" after a reboot, so the state
	// alone cannot tell a killed up from a rebooted host.
	Started bool              `json:"started,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	// Created is when podman created it (zero when unknown).
	Created time.Time `json:"created"`
}

// UpOptions tune Up.
type UpOptions struct {
	// ReadyTimeout bounds the wait for the agent's server.
	ReadyTimeout time.Duration
	// KeepOnFailure leaves what was created for inspection.
	KeepOnFailure bool
	// Progress, when set, hears about each step.
	Progress func(step string)
	// Output, when set, hears the output of the devcontainer's lifecycle
	// commands as they run.
	Output io.Writer
}

// ReadyError says the agent's server never answered; Logs holds the last
// lines the agent wrote.
type ReadyError struct {
	Detail string // the probe's output: what it waited for, how long, the last error
	Logs   string
}

func (e *ReadyError) Error() string {
	return "agent did not become ready: " + e.Detail
}

// Up creates everything in the plan, copies tree (the checked-out
// repository, see Source.Checkout; "" for none) into the workspace volume and
// waits until the agent's server answers through the workspace's bridge. It
// is all or nothing: on any failure, including cancellation of ctx, it
// removes what it created (unless opts.KeepOnFailure) and returns the first
// error.
func Up(ctx context.Context, eng Engine, pl *plan.Plan, tree string, opts UpOptions) (err error) {
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 60 * time.Second
	}
	unlock, err := lockPod(pl.Name)
	if err != nil {
		return err
	}
	defer unlock()

	if exists, err := eng.PodExists(ctx, pl.Pod.Name); err != nil {
		return err
	} else if exists {
		return fmt.Errorf("pod %s: %w", pl.Name, ErrExists)
	}

	// Each object is recorded before its create call: a call cancelled by
	// Ctrl-C may still have created it. Removing what does not exist is not
	// an error, so over-recording is safe; an ErrExists (another up won the
	// race for the name) is not ours and is dropped.
	token := rand.Text()
	if err := markUnfinished(pl.Name, token); err != nil {
		return err
	}
	var created []Object
	defer func() {
		if err == nil {
			if err = clearUnfinished(pl.Name, token); err == nil {
				return
			}
		}
		if opts.KeepOnFailure {
			return // unfinished: gc removes it
		}
		// ctx may be cancelled (Ctrl-C): clean up on a context of our own.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		cerr := removeAll(cctx, eng, created)
		if cerr == nil {
			cerr = clearUnfinished(pl.Name, token)
		}
		if cerr != nil {
			err = fmt.Errorf("%w (and cleanup failed: %v)", err, cerr)
		}
	}()
	create := func(kind, name string, call func() error) error {
		created = append(created, Object{Kind: kind, Name: name})
		err := call()
		if errors.Is(err, ErrExists) {
			created = created[:len(created)-1]
		}
		if err != nil {
			return fmt.Errorf("create %s %s: %w", kind, name, err)
		}
		return nil
	}

	progress("creating pod " + pl.Pod.Name)
	podSpec := pl.Pod
	podSpec.Labels = maps.Clone(pl.Pod.Labels)
	if podSpec.Labels == nil {
		podSpec.Labels = map[string]string{}
	}
	podSpec.Labels[plan.LabelUp] = token
	if err := create(KindPod, pl.Pod.Name, func() error { return eng.CreatePod(ctx, podSpec) }); err != nil {
		return err
	}
	for _, v := range pl.Volumes {
		if err := create(KindVolume, v.Name, func() error { return eng.CreateVolume(ctx, v) }); err != nil {
			return err
		}
	}
	for _, s := range pl.Secrets {
		if err := create(KindSecret, s.Name, func() error { return eng.CreateSecret(ctx, s) }); err != nil {
			return err
		}
	}
	// The repository is copied through the workspace container before the
	// others exist: the agent binds paths inside the copy, which must be
	// there when it is created.
	for _, c := range pl.Containers {
		progress("creating container " + c.Name)
		if err := create(KindContainer, c.Name, func() error { return eng.CreateContainer(ctx, pl.Pod.Name, c) }); err != nil {
			return err
		}
		switch {
		case tree == "":
		case c.Role == plan.RoleWorkspace:
			progress("copying the repository into the workspace volume")
			if err := copyTree(ctx, eng, c.Name, tree, filepath.Base(pl.Workdir), pl.Placeholders); err != nil {
				return err
			}
		case c.Role == plan.RoleAgent:
			// After the workspace's copy: its placeholders are in the
			// clone's info/exclude then.
			if err := copyAgentGit(ctx, eng, c.Name, tree, pl.MaskPatterns); err != nil {
				return err
			}
		}
	}
	progress("starting pod")
	if err := eng.StartPod(ctx, pl.Pod.Name); err != nil {
		return fmt.Errorf("start pod: %w", err)
	}
	return AfterStart(ctx, eng, pl, AfterStartOptions{ReadyTimeout: opts.ReadyTimeout, Output: opts.Output, Progress: progress,
		RunCheck: func(_ int, c plan.Check) error { return runCheck(ctx, eng, c) }})
}

// AfterStartOptions are what AfterStart needs of its caller.
type AfterStartOptions struct {
	ReadyTimeout time.Duration
	Output       io.Writer    // the lifecycle commands' output
	Progress     func(string) // never nil
	// RunCheck runs the plan's i-th containment check the engine's way.
	RunCheck func(i int, c plan.Check) error
}

// AfterStart is what follows the start of a pod, on any engine: the
// devcontainer's setup commands and then the wait for the agent (which
// starts once the setup is done), alongside the containment checks; then
// the task.
func AfterStart(ctx context.Context, eng Engine, pl *plan.Plan, o AfterStartOptions) error {
	progress := o.Progress
	// The readiness wait and the containment checks are independent
	// execs: run them at once. The checks do not need the agent's server,
	// and the bridges retry until their targets are up.
	if pl.Lifecycle != nil {
		progress(ProgressLifecycle)
	} else {
		progress(ProgressWaiting)
	}
	errs := make([]error, 3)
	var wg sync.WaitGroup
	wg.Go(func() {
		// The agent starts once the setup commands are done (RunSetup).
		if errs[1] = RunSetup(ctx, eng, pl, o.Output); errs[1] == nil {
			if pl.Lifecycle != nil {
				progress(ProgressWaiting) // up --timings times the wait from here
			}
			errs[0] = waitReady(ctx, eng, pl, o.ReadyTimeout)
		}
	})
	wg.Go(func() { errs[2] = RunChecks(pl.Checks, o.RunCheck) })
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err // readiness first: a dead agent explains failed checks
		}
	}
	// The checks' refusals are up's, not the agent's (status, Refusals).
	markLooked(pl.Name, time.Now())
	return handTask(ctx, eng, pl, progress)
}

// The progress lines of what follows the pod's start, in this order: the
// lifecycle commands, if any, then the wait for the agent, which starts
// once they are done; the containment checks run alongside both.
const (
	ProgressLifecycle = "running the devcontainer's lifecycle commands in the workspace (and checking the pod's containment)"
	ProgressWaiting   = "waiting for the agent's server and checking its containment"
)

// handTask gives an opencode agent the plan's task, the first message of a
// new session (a custom agent has it in $DEVAIPOD_TASK from its start).
func handTask(ctx context.Context, eng Engine, pl *plan.Plan, progress func(string)) error {
	if pl.Task == "" || pl.AgentKind != config.AgentOpencode {
		return nil
	}
	progress("handing the task to the agent")
	code, out, err := eng.Exec(ctx, plan.ContainerName(pl.Name, plan.RoleWorkspace), AsRoot(pl.TaskCommand()))
	if err == nil && code != 0 {
		err = errors.New(strings.TrimSpace(out))
	}
	if err != nil {
		return fmt.Errorf("hand the task to the agent: %w", err)
	}
	return nil
}

// RunChecks runs checks with run (given each one's index): the gates
// first, at once, then, once they have passed, the others at once. It
// returns the first error in checks' order, a gate's if one failed.
func RunChecks(checks []plan.Check, run func(i int, c plan.Check) error) error {
	errs := make([]error, len(checks))
	for _, gates := range []bool{true, false} {
		var wg sync.WaitGroup
		for i, c := range checks {
			if c.Gate == gates {
				wg.Go(func() { errs[i] = run(i, c) })
			}
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func runCheck(ctx context.Context, eng Engine, c plan.Check) error {
	code, out, err := eng.Exec(ctx, c.Container, ExecSpec{Cmd: c.Command})
	if err != nil {
		return fmt.Errorf("containment check in %s: %w", c.Container, err)
	}
	if code != 0 {
		return &CheckError{Check: c, Output: strings.TrimSpace(out)}
	}
	return nil
}

// CheckError says a containment check failed: up refuses to report such a
// pod ready.
type CheckError struct {
	Check  plan.Check
	Output string
}

func (e *CheckError) Error() string {
	return fmt.Sprintf("containment check failed in %s (%s): %s", e.Check.Container, e.Check.What, e.Output)
}

// ErrExists is returned when a pod of that name exists already.
var ErrExists = errors.New("already exists")

func copyTree(ctx context.Context, eng Engine, container, dir, project string, placeholders []string) error {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(source.TarTree(ctx, pw, dir, project, plan.AgentUID, plan.AgentGID, placeholders))
	}()
	err := eng.CopyInto(ctx, container, plan.WorkspacesDir, pr)
	pr.CloseWithError(err) // unblocks the writer if the copy stopped early
	if err != nil {
		return fmt.Errorf("copy repository into %s: %w", container, err)
	}
	return nil
}

// copyAgentGit makes the agent's own git directory from the clone in tree
// (without the masked files' blobs) and copies it into its volume, through
// the agent's container (see plan.AgentGitCopyDir).
func copyAgentGit(ctx context.Context, eng Engine, container, tree string, mask []string) error {
	// Next to the clone, in the folder Create made for it: if up is
	// killed, gc removes it with the clone (see MakeTempDir).
	tmp, err := os.MkdirTemp(filepath.Dir(tree), "agent-git-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := source.AgentGitDir(ctx, tree, tmp, mask); err != nil {
		return fmt.Errorf("make the agent's git directory: %w", err)
	}
	// The tar's root entry is the volume's root: MkdirTemp's 0700 would
	// shut out the gator, another uid, which pushes the agent's commits.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(source.TarGitDir(pw, tmp, plan.AgentUID, plan.AgentGID)) }()
	err = eng.CopyInto(ctx, container, plan.AgentGitCopyDir, pr)
	pr.CloseWithError(err)
	if err != nil {
		return fmt.Errorf("copy the agent's git directory into %s: %w", container, err)
	}
	return nil
}

// waitReady asks the workspace's helper to poll the agent's URL: this checks
// the whole path a user's `oc` takes (bridge, socket, agent server).
func waitReady(ctx context.Context, eng Engine, pl *plan.Plan, timeout time.Duration) error {
	ws := plan.ContainerName(pl.Name, plan.RoleWorkspace)
	code, out, err := eng.Exec(ctx, ws, AsRoot(pl.ReadyProbe(timeout)))
	if err != nil {
		return fmt.Errorf("wait for agent: %w", err)
	}
	if code == 0 {
		return nil
	}
	var logs strings.Builder
	_ = eng.Logs(ctx, plan.ContainerName(pl.Name, plan.RoleAgent), 20, false, &logs)
	return &ReadyError{Detail: strings.TrimSpace(out), Logs: logs.String()}
}

// AsRoot is a workspace command that reads a secret file (the agent's
// password, a trusted variable): they are root-only, whoever the workspace
// runs as.
func AsRoot(cmd []string) ExecSpec { return ExecSpec{Cmd: cmd, User: "0"} }

// removeAll deletes objects in dependency order: pods (with their
// containers), containers, volumes, secrets. It tries every object and
// joins the errors.
func removeAll(ctx context.Context, eng Engine, objs []Object) error {
	// Pods first, one by one (a pod takes its containers with it); then
	// everything else at once.
	var pods, rest []Object
	for _, o := range objs {
		if o.Kind == KindPod {
			pods = append(pods, o)
		} else {
			rest = append(rest, o)
		}
	}
	var mu sync.Mutex
	var errs []error
	remove := func(o Object) {
		if err := eng.Remove(ctx, o); err != nil && !errors.Is(err, ErrNotFound) {
			mu.Lock()
			errs = append(errs, fmt.Errorf("remove %s %s: %w", o.Kind, o.Name, err))
			mu.Unlock()
		}
	}
	for _, o := range pods {
		remove(o)
	}
	// Containers before the volumes and secrets they use, which go
	// together.
	for _, kinds := range [][]string{{KindContainer}, {KindVolume, KindSecret}} {
		var wg sync.WaitGroup
		for _, o := range rest {
			if slices.Contains(kinds, o.Kind) {
				wg.Add(1)
				go func() { defer wg.Done(); remove(o) }()
			}
		}
		wg.Wait()
	}
	return errors.Join(errs...)
}

// Delete removes everything labelled for the pod and returns it. With
// keepVolumes the volumes (the workspace copy and the agent's HOME) stay.
// On podman it waits for a removal that another process is doing (see
// StartRemoval), then removes what is left, and finishes a removal that
// failed.
func Delete(ctx context.Context, eng Engine, short string, keepVolumes bool) ([]Object, error) {
	objs, err := eng.Objects(ctx, short)
	if err != nil {
		return nil, err
	}
	marks := hasMarks(eng)
	if len(objs) == 0 && (!marks || RemovalState(short) == "") {
		return nil, fmt.Errorf("pod %s: %w", short, ErrNotFound)
	}
	if !marks {
		return removePod(ctx, eng, objs, keepVolumes)
	}
	r, err := markRemoval(ctx, short, keepVolumes, true)
	if err != nil {
		return nil, err
	}
	return FinishRemoval(ctx, eng, r)
}

// removePod removes the pod's objects (but its volumes, with keepVolumes),
// then its unfinished mark, and returns what it removed.
func removePod(ctx context.Context, eng Engine, objs []Object, keepVolumes bool) ([]Object, error) {
	gone := doomed(objs, keepVolumes)
	if err := removeAll(ctx, eng, gone); err != nil {
		return gone, err
	}
	return gone, clearUnfinishedOf(objs)
}

// doomed is what a delete removes of objs: all of them, but the volumes
// with keepVolumes.
func doomed(objs []Object, keepVolumes bool) []Object {
	var out []Object
	for _, o := range objs {
		if !keepVolumes || o.Kind != KindVolume {
			out = append(out, o)
		}
	}
	return out
}

// Leftovers finds what a killed or failed up left behind: objects of pods
// that no longer exist, and pods missing a container or whose containers
// were never started; and what a removal that failed left. Pods whose up
// or removal is still running are skipped.
func Leftovers(ctx context.Context, eng Engine) ([]Object, error) {
	objs, err := eng.Objects(ctx, "")
	if err != nil {
		return nil, err
	}
	byPod := map[string][]Object{}
	for _, o := range objs {
		byPod[o.Pod] = append(byPod[o.Pod], o)
	}
	var left []Object
	marks := hasMarks(eng)
	for _, group := range sortedGroups(byPod) {
		short := group[0].Pod
		if podLocked(short) {
			continue
		}
		st := ""
		if marks {
			st = RemovalState(short)
		}
		if st == StateRemovalFailed || (st == "" && halfCreated(group)) {
			left = append(left, group...)
		}
	}
	return left, nil
}

// RemoveLeftovers removes what Leftovers found, holding each pod's lock so
// that an up starting meanwhile under the same name waits for nothing and
// fails cleanly instead of losing objects.
func RemoveLeftovers(ctx context.Context, eng Engine, left []Object) error {
	byPod := map[string][]Object{}
	for _, o := range left {
		byPod[o.Pod] = append(byPod[o.Pod], o)
	}
	var errs []error
	marks := hasMarks(eng)
	for _, group := range sortedGroups(byPod) {
		short := group[0].Pod
		unlock, err := lockPod(short)
		if err != nil {
			errs = append(errs, err) // an up took it since: leave it alone
			continue
		}
		// Under the lock, what is there now: an up of that name may have
		// made and finished a pod since the list was made, and its
		// objects have the same names.
		if now, err := eng.Objects(ctx, short); err != nil {
			errs = append(errs, err)
		} else if len(now) > 0 && (halfCreated(now) || (marks && RemovalState(short) != "")) {
			// A failed removal's mark goes with it (its delete may have
			// kept the volumes); one that a delete holds is left to it.
			var r *Removal
			if marks {
				r, err = takeRemoval(ctx, short, false)
			}
			switch {
			case errors.Is(err, ErrBeingRemoved):
			case err != nil:
				errs = append(errs, err)
			case r != nil:
				_, err = FinishRemoval(ctx, eng, r)
				errs = append(errs, err)
			default:
				_, err = removePod(ctx, eng, now, false)
				errs = append(errs, err)
			}
		}
		unlock()
	}
	if all, err := eng.Objects(ctx, ""); err == nil && marks {
		sweepRemovalMarks(all)
	}
	return errors.Join(errs...)
}

func sortedGroups(m map[string][]Object) [][]Object {
	var out [][]Object
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}

// halfCreated tells whether a pod's objects are what an up that did not
// finish left: no pod, a container missing or never started, or the pod
// still marked unfinished.
func halfCreated(group []Object) bool {
	var hasPod bool
	roles := map[string]bool{}
	for _, o := range group {
		switch o.Kind {
		case KindPod:
			if unfinished(o) {
				return true
			}
			hasPod = true
		case KindContainer:
			roles[o.Labels[plan.LabelRole]] = true
			if !o.Started {
				return true // never started: up died between create and start
			}
		}
	}
	return !hasPod || !roles[plan.RoleWorkspace] || !roles[plan.RoleAgent]
}
