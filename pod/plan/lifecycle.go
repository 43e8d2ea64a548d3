package plan

import (
	"encoding/json"

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
// Stage is one lifecycle command with its devcontainer.json name.
type Stage struct {
	Name string
	Cmd  *devcontainer.LifecycleCommand
}

func (l *Lifecycle) Stages(which string) []Stage {
	if l == nil {
		return nil
	}
	var named []Stage
	switch which {
	case StageCreate:
		named = []Stage{{"onCreateCommand", l.OnCreate}, {"updateContentCommand", l.UpdateContent},
			{"postCreateCommand", l.PostCreate}, {"postStartCommand", l.PostStart}}
	case StageStart:
		named = []Stage{{"postStartCommand", l.PostStart}}
	case StageAttach:
		named = []Stage{{"postAttachCommand", l.PostAttach}}
	}
	// The image's metadata's commands of each property first, each a
	// stage of its own (see devcontainer.LifecycleCommand.Before).
	var out []Stage
	for _, s := range named {
		if s.Cmd == nil {
			out = append(out, s)
			continue
		}
		for _, b := range s.Cmd.Before {
			out = append(out, Stage{s.Name + " of " + b.From, b})
		}
		if len(s.Cmd.Steps) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// Has tells whether stage which has a command.
func (l *Lifecycle) Has(which string) bool {
	for _, s := range l.Stages(which) {
		if s.Cmd != nil && len(s.Cmd.Steps) > 0 {
			return true
		}
	}
	return false
}

// Empty tells whether there is nothing to run at all (StageStart's
// command is in StageCreate's).
func (l *Lifecycle) Empty() bool { return !l.Has(StageCreate) && !l.Has(StageAttach) }

// lifecycleLabel keeps what start and attach need (user, env, postStart,
// postAttach) on the pod, so that they need no plan.
func lifecycleLabel(l *Lifecycle) (string, error) {
	kept := Lifecycle{User: l.User, Workdir: l.Workdir, PostStart: l.PostStart, PostAttach: l.PostAttach}
	if kept.PostStart == nil && kept.PostAttach == nil {
		return "", nil
	}
	b, err := json.Marshal(kept)
	return string(b), err
}
