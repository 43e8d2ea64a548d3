package pod

import (
	"fmt"
	"strings"
	"time"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

// Step is one thing up does, in the order it does them: a dry run lists
// them all (Result.Steps), so that what runs on the host (the clone, an
// initializeCommand, the devcontainer CLI) and what reaches a registry
// (pulls) shows before anything does.
type Step struct {
	// Kind names the step: clone, initialize, build, features, image,
	// create, copy, start, lifecycle, ready, check or task.
	Kind string `json:"step"`
	// What says what it does, with the names and commands it uses.
	What string `json:"what"`
}

// Step kinds.
const (
	StepClone      = "clone"
	StepInitialize = "initialize"
	StepFeatures   = "features"
	StepBuild      = "build"
	StepImage      = "image"
	StepCreate     = "create"
	StepCopy       = "copy"
	StepStart      = "start"
	StepLifecycle  = "lifecycle"
	StepReady      = "ready"
	StepCheck      = "check"
	StepTask       = "task"
)

// step records a step that up takes (or, in a dry run, would take).
func (c *creation) step(kind, format string, args ...any) {
	c.steps = append(c.steps, Step{Kind: kind, What: fmt.Sprintf(format, args...)})
}

// cloneStep describes Source.Checkout.
func cloneStep(src *source.Source) string {
	switch {
	case src.PR > 0:
		return fmt.Sprintf("clone the base repository of pull request #%d (%s) with this host's git and your credentials, and check out its head on branch %s", src.PR, src.PRURL, src.Branch)
	case src.Local:
		what := "the committed HEAD"
		if src.Branch != "" {
			what = "branch " + src.Branch
		}
		return fmt.Sprintf("clone %s of %s at commit %s with this host's git (uncommitted changes are left out)", what, src.Dir, shortCommit(src.Commit))
	case src.Ref != "":
		return fmt.Sprintf("clone %s, %s, with this host's git and your credentials", src.Display, src.Ref)
	}
	return fmt.Sprintf("clone %s, its default branch, with this host's git and your credentials", src.Display)
}

// imageSteps describes how up makes sure of the plan's images (see
// imageSet.ensure); built are the images an earlier step builds.
func imageSteps(pl *plan.Plan, policy string, built, anonymous map[string]bool) []Step {
	var steps []Step
	for _, img := range pl.Images() {
		if built[img] {
			continue
		}
		var what string
		switch {
		case !Pullable(img):
			what = "use " + img + ", which must be on this host (built here: never pulled)"
		case policy == PullAlways:
			what = "pull " + img + " (--pull always)"
		case policy == PullNever:
			what = "use " + img + ", which must be on this host (--pull never)"
		default:
			what = "pull " + img + " if it is not on this host"
		}
		if anonymous[img] && Pullable(img) && policy != PullNever {
			what += ", without your registry logins (the repository is not trusted)"
		}
		steps = append(steps, Step{Kind: StepImage, What: what})
	}
	return steps
}

// upSteps describes Up for a plan: what it creates, copies, starts, runs
// and checks.
func upSteps(pl *plan.Plan, commit string, readyTimeout time.Duration) []Step {
	var steps []Step
	add := func(kind, format string, args ...any) {
		steps = append(steps, Step{Kind: kind, What: fmt.Sprintf(format, args...)})
	}
	add(StepCreate, "create pod %s", pl.Pod.Name)
	if len(pl.Volumes) > 0 {
		names := make([]string, len(pl.Volumes))
		for i, v := range pl.Volumes {
			names[i] = v.Name
		}
		add(StepCreate, "create volumes %s", strings.Join(names, ", "))
	}
	for _, sec := range pl.Secrets {
		add(StepCreate, "create podman secret %s (its value is not shown)", sec.Name)
	}
	for _, c := range pl.Containers {
		add(StepCreate, "create container %s (%s, image %s)", c.Name, c.Role, c.Image)
		switch c.Role {
		case plan.RoleWorkspace:
			add(StepCopy, "copy the repository (commit %s) into the workspace volume, at %s", shortCommit(commit), pl.Workdir)
		case plan.RoleAgent:
			what := "make the agent's own git directory from the clone and copy it into its volume"
			if len(pl.MaskPatterns) > 0 {
				what += " (without the content of files matching " + strings.Join(pl.MaskPatterns, " ") + ", at any commit)"
			}
			add(StepCopy, "%s", what)
		}
	}
	add(StepStart, "start pod %s", pl.Pod.Name)
	for _, s := range pl.Lifecycle.Stages(plan.StageCreate) {
		if s.Cmd == nil {
			continue
		}
		var cmds []string
		for _, st := range s.Cmd.Steps {
			cmds = append(cmds, st.String())
		}
		add(StepLifecycle, "run the devcontainer's %s in the workspace: %s", s.Name, strings.Join(cmds, "; "))
	}
	if pl.Lifecycle.Has(plan.StageCreate) {
		add(StepLifecycle, "then let the agent start (it waits for %s until the setup commands are done)", plan.SetupDoneFile)
	}
	if readyTimeout == 0 {
		readyTimeout = 60 * time.Second
	}
	add(StepReady, "wait up to %s for the agent's server to answer %s%s through the workspace", readyTimeout, pl.AgentURL, pl.AgentHealth)
	for _, c := range pl.Checks {
		where := c.Container
		if c.Gate {
			where += ", before the others"
		}
		add(StepCheck, "check in %s: %s", where, c.What)
	}
	if pl.Task != "" && pl.AgentKind == config.AgentOpencode {
		add(StepTask, "hand the task to the agent (a new session with it as the first message)")
	}
	return steps
}
