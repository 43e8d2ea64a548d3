package pod

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/devaipod/devaipod/pod/plan"
)

// LifecycleError is a lifecycle command that failed, with its output.
type LifecycleError struct {
	Command string // e.g. "postCreateCommand" or "postCreateCommand.npm"
	Code    int
	Output  string
}

func (e *LifecycleError) Error() string {
	return fmt.Sprintf("%s failed (exit %d):\n%s", e.Command, e.Code, strings.TrimRight(e.Output, "\n"))
}

// RunSetup runs up's setup commands (the create stage) and then, when
// there are any, lets the agent start: its init waits for
// plan.SetupDoneFile, which RunSetup writes through the workspace. The
// agent's container runs from the pod's start, but the agent itself only
// from then on, so that the setup commands, on the trusted side, never
// run what it wrote. Without setup commands the agent does not wait.
func RunSetup(ctx context.Context, eng Engine, pl *plan.Plan, out io.Writer) error {
	if !pl.Lifecycle.Has(plan.StageCreate) {
		return nil
	}
	if err := RunLifecycle(ctx, eng, pl.Name, pl.Lifecycle, plan.StageCreate, out); err != nil {
		return err
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: path.Base(plan.SetupDoneFile), Mode: 0o644, Typeflag: tar.TypeReg})
	tw.Close()
	if err := eng.CopyInto(ctx, plan.ContainerName(pl.Name, plan.RoleWorkspace), path.Dir(plan.SetupDoneFile), &b); err != nil {
		return fmt.Errorf("let the agent start after the setup commands: %w", err)
	}
	return nil
}

// RunLifecycle runs a stage's commands in order in the workspace, as the
// devcontainer's remote user and without the trusted variables; the steps
// of an object-form command run in parallel. out hears the output. Up runs
// the create stage before the agent starts (RunSetup).
func RunLifecycle(ctx context.Context, eng Engine, short string, l *plan.Lifecycle, which string, out io.Writer) error {
	return runStages(ctx, eng, plan.ContainerName(short, plan.RoleWorkspace), l, which, out, func(argv []string) ExecSpec {
		user, cmd := plan.ExecAs{User: l.User}.Command(argv, false)
		return ExecSpec{Cmd: cmd, User: user, Workdir: l.Workdir, Output: out}
	})
}

// RunPodLifecycle runs a stage (StageStart or StageAttach) of a pod's
// devcontainer, from what up stored in the pod's label. By then the agent
// has had write access to the repository, and the commands may run its
// edits (a script, a Makefile, package.json): so they run on the agent's
// side, in its container, as its user, without the trusted values and
// with no way out but the proxy. Nothing the agent wrote runs with more
// than the agent has (docs/sandboxing.md).
func RunPodLifecycle(ctx context.Context, eng Engine, short, which string, out io.Writer) error {
	var l plan.Lifecycle
	found, err := readPodLabel(ctx, eng, short, plan.LabelLifecycle, &l)
	if err != nil || !found {
		return err
	}
	return runStages(ctx, eng, plan.ContainerName(short, plan.RoleAgent), &l, which, out, func(argv []string) ExecSpec {
		return ExecSpec{Cmd: argv, Workdir: l.Workdir, Output: out}
	})
}

// runStages runs a stage's commands in container, each as spec says.
func runStages(ctx context.Context, eng Engine, container string, l *plan.Lifecycle, which string, out io.Writer, spec func(argv []string) ExecSpec) error {
	for _, s := range l.Stages(which) {
		if s.Cmd == nil {
			continue
		}
		errs := make([]error, len(s.Cmd.Steps))
		var wg sync.WaitGroup
		for i, step := range s.Cmd.Steps {
			name := s.Name
			if step.Name != "" {
				name += "." + step.Name
			}
			run := func() {
				if out != nil {
					fmt.Fprintf(out, "running %s: %s\n", name, step)
				}
				code, output, err := eng.Exec(ctx, container, spec(step.Args))
				if err == nil && code != 0 {
					err = &LifecycleError{Command: name, Code: code, Output: output}
				} else if err != nil {
					err = fmt.Errorf("%s: %w", name, err)
				}
				errs[i] = err
			}
			if !s.Cmd.Parallel {
				run()
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); run() }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}

// NotRunningError is a pod, or the container of it that was asked for,
// that must run for what was asked, and does not.
type NotRunningError struct {
	Name  string // the pod's
	Role  string // the container's role, "" for the pod
	State string
}

func (e *NotRunningError) Error() string {
	if e.Role != "" {
		return fmt.Sprintf("pod %s: its %s container is %s, not running", e.Name, e.Role, e.State)
	}
	return fmt.Sprintf("pod %s is %s, not running", e.Name, e.State)
}

// RunningPod returns the object of pod short when it runs: all its
// containers, or some (degraded) as long as the container of role is one of
// them (role "": any). Else a NotRunningError, or ErrNotFound. A pod without
// a container of that role passes: the operation reports it.
func RunningPod(ctx context.Context, eng Engine, short, role string) (Object, error) {
	objs, err := eng.Objects(ctx, short)
	if err != nil {
		return Object{}, err
	}
	i := slices.IndexFunc(objs, func(o Object) bool { return o.Kind == KindPod })
	if i < 0 {
		return Object{}, fmt.Errorf("pod %s: %w", short, ErrNotFound)
	}
	p := objs[i]
	if p.State != "running" && p.State != "degraded" {
		return p, &NotRunningError{Name: short, State: p.State}
	}
	for _, o := range objs {
		if role != "" && o.Kind == KindContainer && o.Name == plan.ContainerName(short, role) && o.State != "running" {
			return p, &NotRunningError{Name: short, Role: role, State: o.State}
		}
	}
	return p, nil
}

// readPodLabel decodes the JSON that up stored in the pod's label key into
// v; false when the pod has no such label.
func readPodLabel(ctx context.Context, eng Engine, short, key string, v any) (bool, error) {
	objs, err := eng.Objects(ctx, short)
	if err != nil {
		return false, err
	}
	for _, o := range objs {
		if o.Kind == KindPod {
			return decodePodLabel(o, key, v)
		}
	}
	return false, nil
}

// decodePodLabel decodes the JSON in the label key of the pod object o
// into v; false when it has no such label.
func decodePodLabel(o Object, key string, v any) (bool, error) {
	if o.Labels[key] == "" {
		return false, nil
	}
	if err := json.Unmarshal([]byte(o.Labels[key]), v); err != nil {
		return false, fmt.Errorf("pod label %s: %w", key, err)
	}
	return true, nil
}

// MissingPod turns err, a not-found error from an operation on pod short,
// into "pod short: not found" when the pod itself is what is missing (the
// operation's own error names a container, or is podman's wording); nil
// otherwise.
func MissingPod(ctx context.Context, eng Engine, short string, err error) error {
	if !errors.Is(err, ErrNotFound) {
		return nil
	}
	if exists, perr := eng.PodExists(ctx, plan.PodName(short)); perr == nil && !exists {
		return fmt.Errorf("pod %s: %w", short, ErrNotFound)
	}
	return nil
}

// Start starts a stopped pod and runs the devcontainer's postStartCommand,
// which runs on every start; out hears its output.
func Start(ctx context.Context, eng Engine, short string, out io.Writer) error {
	// A pod that a delete is removing is not started again.
	unlock, err := lockPodNotRemoving(ctx, eng, short, nil)
	if err != nil {
		return err
	}
	defer unlock()
	return startLocked(ctx, eng, short, out)
}

// startLocked is Start for a caller that holds the pod's lock.
func startLocked(ctx context.Context, eng Engine, short string, out io.Writer) error {
	if err := eng.StartPod(ctx, plan.PodName(short)); err != nil {
		return err
	}
	return RunPodLifecycle(ctx, eng, short, plan.StageStart, out)
}

// Stop stops a pod's containers; its volumes stay.
func Stop(ctx context.Context, eng Engine, short string) error {
	return eng.StopPod(ctx, plan.PodName(short), 10)
}

// Logs writes the logs of the pod's container of role to w; tail < 0
// means all of them.
func Logs(ctx context.Context, eng Engine, short, role string, tail int, follow bool, w io.Writer) error {
	if !slices.Contains(plan.Roles, role) {
		return fmt.Errorf("unknown container %q: use one of %s", role, strings.Join(plan.Roles, ", "))
	}
	err := eng.Logs(ctx, plan.ContainerName(short, role), tail, follow, w)
	if !errors.Is(err, ErrNotFound) {
		return err
	}
	if err := MissingPod(ctx, eng, short, err); err != nil {
		return err
	}
	return fmt.Errorf("pod %s has no %s container (the proxy exists in network mode allowlist, the gator when the pod has gator scopes)", short, role)
}
