package pod

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/devaipod/devaipod/pod/devcontainer"
)

// Lifecycle holds a devcontainer's lifecycle commands, which run in the
// workspace as the remote user. up creates a fresh workspace volume every
// time, so onCreate, updateContent and postCreate run once per volume by
// running in up only; postStart runs in up and in every start, postAttach
// in attach.
type Lifecycle struct {
	User          string                         `json:"user,omitempty"`
	Workdir       string                         `json:"workdir"`
	Env           []string                       `json:"env,omitempty"`
	OnCreate      *devcontainer.LifecycleCommand `json:"onCreate,omitempty"`
	UpdateContent *devcontainer.LifecycleCommand `json:"updateContent,omitempty"`
	PostCreate    *devcontainer.LifecycleCommand `json:"postCreate,omitempty"`
	PostStart     *devcontainer.LifecycleCommand `json:"postStart,omitempty"`
	PostAttach    *devcontainer.LifecycleCommand `json:"postAttach,omitempty"`
}

// Lifecycle stages.
const (
	StageCreate = "create" // onCreate, updateContent, postCreate, postStart
	StageStart  = "start"  // postStart
	StageAttach = "attach" // postAttach
)

// stage is one named command of a stage.
type stage struct {
	name string
	cmd  *devcontainer.LifecycleCommand
}

func (l *Lifecycle) stages(which string) []stage {
	if l == nil {
		return nil
	}
	switch which {
	case StageCreate:
		return []stage{{"onCreateCommand", l.OnCreate}, {"updateContentCommand", l.UpdateContent},
			{"postCreateCommand", l.PostCreate}, {"postStartCommand", l.PostStart}}
	case StageStart:
		return []stage{{"postStartCommand", l.PostStart}}
	case StageAttach:
		return []stage{{"postAttachCommand", l.PostAttach}}
	}
	return nil
}

// Empty tells whether there is nothing to run at all.
func (l *Lifecycle) Empty() bool {
	for _, w := range []string{StageCreate, StageAttach} {
		for _, s := range l.stages(w) {
			if s.cmd != nil && len(s.cmd.Steps) > 0 {
				return false
			}
		}
	}
	return true
}

// LifecycleError is a lifecycle command that failed, with its output.
type LifecycleError struct {
	Command string // e.g. "postCreateCommand" or "postCreateCommand.npm"
	Code    int
	Output  string
}

func (e *LifecycleError) Error() string {
	return fmt.Sprintf("%s failed (exit %d):\n%s", e.Command, e.Code, strings.TrimRight(e.Output, "\n"))
}

// RunLifecycle runs a stage's commands in order in the workspace; the
// steps of an object-form command run in parallel. out hears the output.
func RunLifecycle(ctx context.Context, eng Engine, short string, l *Lifecycle, which string, out io.Writer) error {
	ws := ContainerName(short, RoleWorkspace)
	for _, s := range l.stages(which) {
		if s.cmd == nil {
			continue
		}
		errs := make([]error, len(s.cmd.Steps))
		var wg sync.WaitGroup
		for i, step := range s.cmd.Steps {
			name := s.name
			if step.Name != "" {
				name += "." + step.Name
			}
			run := func() {
				if out != nil {
					fmt.Fprintf(out, "running %s: %s\n", name, step)
				}
				// The repository's commands: without the trusted variables.
				user, cmd := ExecAs{User: l.User, Env: l.Env}.Command(step.Args, false)
				spec := ExecSpec{Cmd: cmd, User: user, Workdir: l.Workdir, Output: out}
				code, output, err := eng.Exec(ctx, ws, spec)
				if err == nil && code != 0 {
					err = &LifecycleError{Command: name, Code: code, Output: output}
				} else if err != nil {
					err = fmt.Errorf("%s: %w", name, err)
				}
				errs[i] = err
			}
			if !s.cmd.Parallel {
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

// lifecycleLabel keeps what start and attach need (user, env, postStart,
// postAttach) on the pod, so that they need no plan.
func lifecycleLabel(l *Lifecycle) (string, error) {
	kept := Lifecycle{User: l.User, Workdir: l.Workdir, Env: l.Env, PostStart: l.PostStart, PostAttach: l.PostAttach}
	if kept.PostStart == nil && kept.PostAttach == nil {
		return "", nil
	}
	b, err := json.Marshal(kept)
	return string(b), err
}

// RunPodLifecycle runs a stage (StageStart or StageAttach) of a pod's
// devcontainer, from what up stored in the pod's label.
func RunPodLifecycle(ctx context.Context, eng Engine, short, which string, out io.Writer) error {
	var l Lifecycle
	found, err := readPodLabel(ctx, eng, short, LabelLifecycle, &l)
	if err != nil || !found {
		return err
	}
	return RunLifecycle(ctx, eng, short, &l, which, out)
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
		if role != "" && o.Kind == KindContainer && o.Name == ContainerName(short, role) && o.State != "running" {
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
