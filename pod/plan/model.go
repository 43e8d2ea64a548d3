package plan

import (
	"slices"
	"strings"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/proxy/rule"
)

// opencodeZen is where opencode's own hosted models answer: what it uses
// when it has no provider of the person's.
const opencodeZen = "opencode.ai"

// opencodeConfigVars give opencode a configuration, which may name a
// provider.
var opencodeConfigVars = []string{"OPENCODE_CONFIG", "OPENCODE_CONFIG_CONTENT", "OPENCODE_CONFIG_DIR"}

// noModel tells why the pod's opencode has no model it can reach, or ""
// when it has one or may have (what devaipod cannot see: a config or login
// baked into an image other than its own, a host path the agent is given,
// the repository's own opencode config).
// With no key, opencode falls back to its hosted models, which the proxy
// refuses unless a rule allows them: the agent would answer and never
// work.
func (b *builder) noModel(p *Plan, agent ContainerSpec) string {
	switch {
	case p.AgentKind != config.AgentOpencode, b.mode != config.NetworkAllowlist,
		agent.Image != config.DefaultImage, len(b.hostBinds(RoleAgent)) > 0, len(p.Credentials) > 0:
		return ""
	}
	if b.in.AgentConfigInRepo {
		return ""
	}
	for k, v := range agent.Env {
		// Any provider's key: opencode knows more providers than
		// LLMKeyVars names.
		if v != "" && (strings.HasSuffix(k, "_API_KEY") || slices.Contains(LLMKeyVars, k) || slices.Contains(opencodeConfigVars, k)) {
			return ""
		}
	}
	rules, _ := rule.ParseAll(p.Allow)
	if _, ok := rule.NewMatcher(rules...).Match(opencodeZen, 443); ok {
		return ""
	}
	return "no LLM key is set where devaipod runs (ANTHROPIC_API_KEY, OPENAI_API_KEY, OPENROUTER_API_KEY, ...)" +
		", no [credentials] entry names one, opencode was given no config (DEVAIPOD_AGENT_OPENCODE_CONFIG_CONTENT), " +
		"and its own hosted models (" + opencodeZen + ") are not on the allowlist"
}

// NoModelError: up was given a task for an agent with no model it can
// reach, which would answer and never do it.
type NoModelError struct{ Reason string }

func (e *NoModelError) Error() string {
	return "the agent has no model it can reach, so the task would never get done: " + e.Reason
}
