package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/config"
)

// TestNoModel: opencode on devaipod's image with no key, no config and
// its hosted models off the allowlist has no model: a task is refused, a
// pod without one is labelled and warned about; any way to a model, or
// what devaipod cannot see into, clears it.
func TestNoModel(t *testing.T) {
	bare := func() PlanInput {
		in := planInput()
		in.HostEnv = map[string]string{"HOME": "/home/u"}
		in.Config.Trusted = config.TrustedConfig{}
		in.Config.Workspace.Image = config.DefaultImage
		return in
	}
	p, err := Build(bare())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.NoModel, "no LLM key is set") || p.Pod.Labels[LabelNoModel] != p.NoModel ||
		!strings.Contains(strings.Join(p.Warnings, "\n"), "the agent has no model it can reach: no LLM key") {
		t.Errorf("no model: %q, label %q, warnings %q", p.NoModel, p.Pod.Labels[LabelNoModel], p.Warnings)
	}
	in := bare()
	in.Task = "add a README"
	var nm *NoModelError
	if _, err := Build(in); !errors.As(err, &nm) || !strings.Contains(err.Error(), "the task would never get done") {
		t.Errorf("a task without a model: %v", err)
	}
	for name, edit := range map[string]func(*PlanInput){
		"a key":                   func(in *PlanInput) { in.HostEnv["OPENAI_API_KEY"] = "sk" },
		"an opencode config":      func(in *PlanInput) { in.HostEnv["DEVAIPOD_AGENT_OPENCODE_CONFIG_CONTENT"] = "{}" },
		"its hosted models":       func(in *PlanInput) { in.Config.Network.Allow = []string{"opencode.ai"} },
		"another image":           func(in *PlanInput) { in.Image = "localhost/mine:1" },
		"open network":            func(in *PlanInput) { in.Config.Network.Mode = config.NetworkOpen },
		"another provider's key":  func(in *PlanInput) { in.HostEnv["DEVAIPOD_AGENT_DEEPSEEK_API_KEY"] = "sk" },
		"the repository's config": func(in *PlanInput) { in.AgentConfigInRepo = true },
		"a custom agent": func(in *PlanInput) {
			in.Config.Agent.Kind, in.Config.Agent.Command = config.AgentCustom, config.Command{"my-agent"}
		},
		"a host path mounted": func(in *PlanInput) {
			in.Mounts = []HostMount{{Source: "/home/u/.local/share/opencode", Target: "/home/agent/.local/share/opencode", Containers: []string{"agent"}}}
		},
	} {
		in := bare()
		in.Task = "add a README"
		edit(&in)
		if p, err := Build(in); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if p.NoModel != "" {
			t.Errorf("%s: no model %q", name, p.NoModel)
		}
	}
}
