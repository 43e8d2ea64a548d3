package pod

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/devaipod/devaipod/internal/helperargs"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
)

// Summary describes one devaipod pod for list and status.
type Summary struct {
	Name   string `json:"name"`
	Pod    string `json:"pod"`
	State  string `json:"state"`
	Repo   string `json:"repo,omitempty"`
	Commit string `json:"commit,omitempty"`
	Task   string `json:"task,omitempty"`
	// Untrusted: the repository was not trusted, and its pod holds nothing
	// of the person's (plan.LabelUntrusted).
	Untrusted bool `json:"untrusted,omitempty"`
	// NoModel says why the agent has no model it can reach
	// (plan.LabelNoModel): it answers, and does no task.
	NoModel    string             `json:"no_model,omitempty"`
	Created    time.Time          `json:"created"`
	Containers []ContainerSummary `json:"containers"`
	Volumes    []string           `json:"volumes"`
	Secrets    []string           `json:"secrets,omitempty"`
	// Pool says whether a pod of the warm pool waits for a task (idle) or
	// was taken by an up (claimed); "" for a pod made for its task.
	Pool string `json:"pool,omitempty"`
	// AgentReady is set by Status: whether the agent's server answers
	// through the workspace's bridge (nil when not checked).
	AgentReady *bool `json:"agent_ready,omitempty"`
	// Refused is set by Status for a running pod with a proxy: what it
	// refused the agent since the person last looked (see Refusals).
	Refused *Refused `json:"refused,omitempty"`
}

// ContainerSummary is one container of a pod.
type ContainerSummary struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	State string `json:"state"`
}

// List summarises every devaipod pod, sorted by name. Leftovers without a
// pod (see Leftovers) are not listed.
func List(ctx context.Context, eng Engine) ([]Summary, error) {
	objs, err := eng.Objects(ctx, "")
	if err != nil {
		return nil, err
	}
	return summarise(objs, hasMarks(eng)), nil
}

// Status summarises one pod and checks whether its agent answers.
func Status(ctx context.Context, eng Engine, short string) (*Summary, error) {
	objs, err := eng.Objects(ctx, short)
	if err != nil {
		return nil, err
	}
	sums := summarise(objs, hasMarks(eng))
	if len(sums) == 0 {
		return nil, fmt.Errorf("pod %s: %w", short, ErrNotFound)
	}
	s := sums[0]
	if s.State == "running" {
		url := fmt.Sprintf("http://127.0.0.1:%d", config.DefaultAgentPort)
		if u := objsLabel(objs, plan.LabelAgentURL); u != "" {
			url = u
		}
		code, _, err := eng.Exec(ctx, plan.ContainerName(short, plan.RoleWorkspace), ExecSpec{Cmd: plan.HelperCommand(helperargs.WaitHTTP{Timeout: 2 * time.Second, URL: url})})
		ready := err == nil && code == 0
		s.AgentReady = &ready
		if slices.ContainsFunc(s.Containers, func(c ContainerSummary) bool { return c.Role == plan.RoleProxy }) {
			if refused, err := Refusals(ctx, eng, short, s.Created); err == nil {
				s.Refused = &refused
			}
		}
	}
	return &s, nil
}

func objsLabel(objs []Object, key string) string {
	for _, o := range objs {
		if v := o.Labels[key]; v != "" {
			return v
		}
	}
	return ""
}

// newSummary is the summary of o's pod, named podName, in state.
func newSummary(o Object, podName, state string) *Summary {
	return &Summary{Name: o.Pod, Pod: podName, State: state, Repo: o.Labels[plan.LabelRepo],
		Commit: o.Labels[plan.LabelCommit], Containers: []ContainerSummary{}, Volumes: []string{}}
}

// summarise groups objs by pod; with marks, a pod's removal state
// (RemovalState) is its state.
func summarise(objs []Object, marks bool) []Summary {
	removal := map[string]string{}
	if marks {
		for _, o := range objs {
			if _, seen := removal[o.Pod]; !seen {
				removal[o.Pod] = RemovalState(o.Pod)
			}
		}
	}
	byName := map[string]*Summary{}
	for _, o := range objs {
		if o.Kind != KindPod {
			continue
		}
		s := newSummary(o, o.Name, cmp.Or(removal[o.Pod], o.State))
		s.Task, s.Created = o.Labels[plan.LabelTask], o.Created
		s.Untrusted = o.Labels[plan.LabelUntrusted] == "true"
		s.NoModel = o.Labels[plan.LabelNoModel]
		if o.Labels[plan.LabelPool] != "" {
			s.Pool = PoolIdle
		}
		byName[o.Pod] = s
	}
	for _, o := range objs {
		s := byName[o.Pod]
		if s == nil {
			// podman drops a pod from its list as it starts removing it:
			// one being removed is listed until the rest is gone too.
			if removal[o.Pod] == "" {
				continue
			}
			s = newSummary(o, plan.PodName(o.Pod), removal[o.Pod])
			byName[o.Pod] = s
		}
		switch o.Kind {
		case KindContainer:
			s.Containers = append(s.Containers, ContainerSummary{Name: o.Name, Role: o.Labels[plan.LabelRole], State: o.State})
		case KindVolume:
			s.Volumes = append(s.Volumes, o.Name)
			if o.Name == plan.ObjectName(o.Pod, plan.VolumeClaim) {
				// A pool pod's task is on its claim.
				s.Pool, s.Task = PoolClaimed, cmp.Or(s.Task, o.Labels[plan.LabelTask])
			}
		case KindSecret:
			s.Secrets = append(s.Secrets, o.Name)
		}
	}
	out := make([]Summary, 0, len(byName))
	for _, s := range byName {
		sort.Slice(s.Containers, func(i, j int) bool { return s.Containers[i].Name < s.Containers[j].Name })
		sort.Strings(s.Volumes)
		sort.Strings(s.Secrets)
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
