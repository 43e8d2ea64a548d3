package pod

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devaipod/devaipod/internal/helperargs"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

// up is idempotent: asked for a pod name that exists, it uses that pod when
// it was made from the same source (see SameSource) instead of failing
// after the clone, and refuses, touching nothing, when it was not.

// What up does with a pod of the requested name made from the same source.
const (
	// ActionNone: the pod runs; up changes nothing.
	ActionNone = "none"
	// ActionStart: the pod is stopped; up starts it (start's steps:
	// the pod, then the devcontainer's postStartCommand).
	ActionStart = "start"
)

// Existing is a pod of the name up was asked for that exists already and
// was made from the same source. With a dry run, Action is what up would do
// and nothing was done.
type Existing struct {
	Name string `json:"name"`
	Pod  string `json:"pod"`
	// State is the pod's state when up found it.
	State  string `json:"state"`
	Action string `json:"action"`
	// Repo, PR and Commit are what the pod was made from (its labels).
	Repo   string `json:"repo"`
	PR     int    `json:"pr,omitempty"`
	Commit string `json:"commit,omitempty"`
	// Workdir is the repository's folder in the containers, AgentURL
	// where the workspace reaches the agent ("" when the labels do not
	// say: a pod of an older devaipod).
	Workdir  string `json:"workdir,omitempty"`
	AgentURL string `json:"agent_url,omitempty"`
	// Credentials are the names of the agent's placeholder variables.
	Credentials []string `json:"credentials,omitempty"`
	// NotRunning are the containers of a degraded pod that do not run.
	NotRunning []string `json:"not_running,omitempty"`
	// Untrusted: its repository was not trusted when it was made.
	Untrusted bool `json:"untrusted,omitempty"`
}

// Source describes what the pod was made from, for people.
func (e *Existing) Source() string {
	s := describeSource(e.Repo, e.PR)
	if e.Commit != "" {
		s += " at " + shortCommit(e.Commit)
	}
	return s
}

// Why up will not use a pod of the requested name.
const (
	// ReasonSource: the pod was made from another source.
	ReasonSource = "source"
	// ReasonIncomplete: what an up that died half-way left (a pod whose
	// containers never started, or objects without their pod).
	ReasonIncomplete = "incomplete"
	// ReasonState: the pod is in a state up neither uses nor starts
	// (paused, error...).
	ReasonState = "state"
	// ReasonTask: up was given a task, which only a new pod's agent gets;
	// dropping it would lose the person's request without a word.
	ReasonTask = "task"
)

// ExistingPodError is a pod of the requested name that up leaves as it is
// and will not use. It wraps ErrExists.
type ExistingPodError struct {
	Name   string
	Reason string
	// State is the pod's ("" when only its objects are left).
	State string
	// Have is the source the pod was made from; Want the one this up
	// was given (for ReasonSource).
	Have, Want string
}

func (e *ExistingPodError) Error() string {
	switch e.Reason {
	case ReasonSource:
		return fmt.Sprintf("pod %s exists and was made from %s, not from %s: up leaves it as it is", e.Name, e.Have, e.Want)
	case ReasonTask:
		return fmt.Sprintf("pod %s exists (from %s, %s): up gives a task only to a new pod's agent, and left this one as it was", e.Name, e.Have, e.State)
	case ReasonIncomplete:
		if e.State == "" {
			return fmt.Sprintf("objects of a pod %s are left (an up or a delete --keep-volumes of that name): up cannot reuse them", e.Name)
		}
		return fmt.Sprintf("pod %s exists but an up of that name did not finish it (killed before its containers ran, or before its checks passed): up will not use it", e.Name)
	default:
		return fmt.Sprintf("pod %s exists (from %s) and is %s: up can neither use it nor start it", e.Name, e.Have, e.State)
	}
}

func (e *ExistingPodError) Unwrap() error { return ErrExists }

// SameSource tells whether a pod made from repo (its io.devaipod.repo
// label) and pr (io.devaipod.pr, 0 for none) comes from src, a resolved
// request. The rule, which docs/commands.md states:
//
//   - The repository must be the same. The pod's label names it as up
//     labels every pod: a pull request by its base repository, a git URL by
//     itself, a local checkout by its origin remote (by its directory when
//     it has none). Two names of it are the same when they differ only in
//     scheme, user, port, case of the host, a trailing slash or ".git": so
//     a checkout of https://host/o/r and git@host:o/r.git are one source.
//   - The pull request must be the same: the same number, or none on both.
//   - The branch, --ref and commit are not compared: the pod keeps the
//     commit it was made from, and up says when the checkout has moved.
func SameSource(repo string, pr int, src *source.Source) bool {
	return repo != "" && repoKey(repo) == repoKey(sourceRepo(src)) && pr == max(src.PR, 0)
}

// sourceRepo is the repository src names, as plan labels the pod with
// plan.LabelRepo (a test holds the two together).
func sourceRepo(src *source.Source) string {
	return cmp.Or(src.Upstream, src.Remote, src.Display)
}

// repoKey is a repository's name without what does not tell two
// repositories apart: host/path for URLs (scheme, user and port dropped,
// the host in lower case), the path for file URLs and local directories;
// without a trailing slash or ".git".
func repoKey(s string) string {
	s = strings.TrimSpace(s)
	host, p := "", s
	switch {
	case strings.Contains(s, "://"):
		u, err := url.Parse(s)
		if err != nil {
			return s
		}
		if u.Scheme != "file" {
			host = strings.ToLower(u.Hostname())
		}
		p = u.Path
	case source.IsGitURL(s): // [user@]host:path
		userHost, rest, _ := strings.Cut(s, ":")
		if i := strings.LastIndexByte(userHost, '@'); i >= 0 {
			userHost = userHost[i+1:]
		}
		host, p = strings.ToLower(userHost), rest
	}
	p = strings.TrimSuffix(path.Clean("/"+p), "/")
	return host + strings.TrimSuffix(p, ".git")
}

// describeSource names a pod's source for people.
func describeSource(repo string, pr int) string {
	repo = cmp.Or(repo, "an unknown source")
	if pr > 0 {
		return fmt.Sprintf("%s pull request #%d", repo, pr)
	}
	return repo
}

// describeRequest names the source up was given, as describeSource names
// a pod's, plus the checkout's directory when the repository is its remote.
func describeRequest(src *source.Source) string {
	s := describeSource(sourceRepo(src), src.PR)
	if src.Local && src.Dir != "" && src.Dir != sourceRepo(src) {
		s += " (checkout " + src.Dir + ")"
	}
	return s
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// findExisting looks for a pod named short before up makes one. It
// returns nil, nil when nothing of that name exists; the pod when it was
// made from src and up can use it (Action says how); else an
// *ExistingPodError. The caller holds the pod's lock, or has checked that
// no up holds it.
func findExisting(ctx context.Context, eng Engine, short string, src *source.Source) (*Existing, error) {
	objs, err := eng.Objects(ctx, short)
	if err != nil || len(objs) == 0 {
		return nil, err
	}
	i := slices.IndexFunc(objs, func(o Object) bool { return o.Kind == KindPod })
	if i < 0 {
		return nil, &ExistingPodError{Name: short, Reason: ReasonIncomplete}
	}
	o := objs[i]
	repo := o.Labels[plan.LabelRepo]
	pr, _ := strconv.Atoi(o.Labels[plan.LabelPR])
	if !SameSource(repo, pr, src) {
		return nil, &ExistingPodError{Name: short, Reason: ReasonSource, State: o.State,
			Have: describeSource(repo, pr), Want: describeRequest(src)}
	}
	if halfCreated(objs) {
		return nil, &ExistingPodError{Name: short, Reason: ReasonIncomplete, State: o.State}
	}
	ex := &Existing{Name: short, Pod: o.Name, State: o.State, Repo: repo, PR: pr,
		Commit: o.Labels[plan.LabelCommit], Workdir: podWorkdir(o), AgentURL: o.Labels[plan.LabelAgentURL],
		Credentials: podCredentials(o), Untrusted: o.Labels[plan.LabelUntrusted] == "true"}
	switch o.State {
	case "running":
		ex.Action = ActionNone
	case "degraded":
		// Some containers run: up does not restart the others behind
		// the back of those that run (the agent fetched the proxy's CA
		// when it started, for one). It says which.
		ex.Action = ActionNone
		for _, c := range objs {
			if c.Kind == KindContainer && c.State != "running" {
				ex.NotRunning = append(ex.NotRunning, c.Name)
			}
		}
	case "exited", "stopped", "created":
		// created: podman resets a started pod to created on a reboot
		// (halfCreated caught one that never started).
		ex.Action = ActionStart
	default:
		return nil, &ExistingPodError{Name: short, Reason: ReasonState, State: o.State, Have: describeSource(repo, pr)}
	}
	return ex, nil
}

// useExisting is Create's way with a pod of the requested name: nil, nil
// when there is none (Create goes on and makes it), else what
// findExisting says, with a stopped pod started (unless a dry run). It
// holds the pod's lock while it looks and starts, so that no other up
// makes or gc removes the pod meanwhile.
func (c *creation) useExisting(ctx context.Context, eng Engine, short string, src *source.Source) (*Existing, error) {
	// A pod that a delete is removing is gone as far as up is concerned:
	// up waits for it rather than start it again.
	if c.req.DryRun {
		if hasMarks(eng) && RemovalState(short) != "" {
			return nil, nil
		}
		if podLocked(short) {
			return nil, fmt.Errorf("pod %s is being created or started by another devaipod: %w", short, ErrExists)
		}
	} else {
		unlock, err := lockPodNotRemoving(ctx, eng, short, c.progress)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	ex, err := findExisting(ctx, eng, short, src)
	if ex == nil || err != nil {
		return nil, err
	}
	if c.req.Task != "" {
		return nil, &ExistingPodError{Name: short, Reason: ReasonTask, State: ex.State, Have: ex.Source()}
	}
	c.noteIgnored(ex, src)
	if len(ex.NotRunning) > 0 {
		c.warn(fmt.Sprintf("pod %s is degraded: %s not running (`devaipod logs %s -c ROLE` says why; `devaipod stop %s` then `devaipod start %s` restarts the pod)",
			short, strings.Join(ex.NotRunning, ", "), short, short, short))
	}
	if c.req.DryRun || ex.Action != ActionStart {
		return ex, nil
	}
	c.progress("pod " + short + " is " + ex.State + ": starting it...")
	if err := startLocked(ctx, eng, short, c.out); err != nil {
		return nil, fmt.Errorf("start pod %s: %w", short, err)
	}
	if ex.AgentURL != "" {
		c.progress("waiting for the agent's server...")
		timeout := cmp.Or(c.req.ReadyTimeout, 60*time.Second)
		probe := plan.HelperCommand(helperargs.WaitHTTP{Timeout: timeout, URL: ex.AgentURL})
		code, out, err := eng.Exec(ctx, plan.ContainerName(short, plan.RoleWorkspace), ExecSpec{Cmd: probe})
		if err == nil && code != 0 {
			err = fmt.Errorf("%s", strings.TrimSpace(out))
		}
		if err != nil {
			c.warn(fmt.Sprintf("pod %s started, but its agent's server did not answer: %v (`devaipod status %s`, `devaipod logs %s`)", short, err, short, short))
		}
	}
	return ex, nil
}

// noteIgnored warns about what of the request an existing pod does not
// take: the flags that shape a new pod, and a checkout that has moved on
// since the pod was made.
func (c *creation) noteIgnored(ex *Existing, src *source.Source) {
	r := c.req
	var flags []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"--image", r.Image != ""}, {"--ref", r.Ref != ""}, {"--allow", len(r.Allow) > 0},
		{"--gator", len(r.Gator) > 0}, {"--workspace-access", r.WorkspaceAccess != ""},
		{"--devcontainer", r.Devcontainer != ""}, {"--allow-host-commands", r.AllowHostCommands},
		{"--no-verify", r.NoVerify}, {"--pull", r.Pull != "" && r.Pull != PullMissing}, {"--trust", r.Trust},
	} {
		if f.set {
			flags = append(flags, f.name)
		}
	}
	if len(flags) > 0 {
		c.warn(fmt.Sprintf("pod %s exists: ignored %s, which only a new pod takes (`devaipod delete %s` first, or another --name, for a new one)",
			ex.Name, strings.Join(flags, ", "), ex.Name))
	}
	if src.Local && src.Commit != "" && ex.Commit != "" && src.Commit != ex.Commit {
		c.warn(fmt.Sprintf("pod %s was made from commit %s; %s is at %s now: the pod keeps its own copy, which up does not update (another --name makes a new pod)",
			ex.Name, shortCommit(ex.Commit), src.Dir, shortCommit(src.Commit)))
	}
}

// podWorkdir reads where the repository is in the pod's containers from
// the labels up put on it: the verify battery's --workspace, else the
// lifecycle's workdir; "" when neither says.
func podWorkdir(o Object) string {
	var args []string
	if json.Unmarshal([]byte(o.Labels[plan.LabelVerify]), &args) == nil {
		for i, a := range args {
			if a == "--workspace" && i+1 < len(args) {
				return args[i+1]
			}
		}
	}
	var l plan.Lifecycle
	if ok, err := decodePodLabel(o, plan.LabelLifecycle, &l); ok && err == nil {
		return l.Workdir
	}
	return ""
}

// podCredentials reads the names of the agent's placeholder variables
// from the verify battery's label.
func podCredentials(o Object) []string {
	var args, names []string
	if json.Unmarshal([]byte(o.Labels[plan.LabelVerify]), &args) != nil {
		return nil
	}
	for i, a := range args {
		if a == "--credential-var" && i+1 < len(args) {
			names = append(names, args[i+1])
		}
	}
	return names
}

// WorkspaceFolder returns the podman name of a running pod's workspace
// container and the repository's folder in it (the containers' working
// directory): from the pod's labels, else by asking the container.
func WorkspaceFolder(ctx context.Context, eng Engine, short string) (container, folder string, err error) {
	o, err := RunningPod(ctx, eng, short, plan.RoleWorkspace)
	if err != nil {
		return "", "", err
	}
	container = plan.ContainerName(short, plan.RoleWorkspace)
	if folder = podWorkdir(o); folder != "" {
		return container, folder, nil
	}
	code, out, err := eng.Exec(ctx, container, ExecSpec{Cmd: []string{"/bin/sh", "-c", "pwd"}})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(out))
	}
	if err != nil {
		return "", "", fmt.Errorf("find the repository's folder in %s: %w", container, err)
	}
	return container, strings.TrimSpace(out), nil
}
