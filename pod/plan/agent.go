package plan

import (
	"strconv"
	"unicode/utf8"

	"github.com/devaipod/devaipod/pod/config"
)

// agentPreset is what an [agent] kind means.
type agentPreset struct {
	// command starts the agent's server on the agent's loopback.
	command func(port int) config.Command
	// health is the path up polls until it answers 2xx; "" means any
	// answer at the agent's URL will do.
	health string
	// passwordEnv is the variable through which the server learns the
	// pod's password ("" when it has none).
	passwordEnv string
	// passwordUser is the basic-auth user name clients send with it.
	passwordUser string
	// env is set in the agent before the user's own variables.
	env map[string]string
}

var agentPresets = map[string]agentPreset{
	config.AgentOpencode: {
		command: func(port int) config.Command {
			return config.Command{"opencode", "serve", "--hostname", "127.0.0.1", "--port", strconv.Itoa(port)}
		},
		health:       "/global/health",
		passwordEnv:  "OPENCODE_SERVER_PASSWORD",
		passwordUser: "opencode",
		// What opencode would fetch or send on its own: model metadata,
		// updates, LSP servers, plugins from npm, shared sessions. In the
		// sandbox the proxy would deny these anyway; turning them off
		// keeps the audit log to what the agent asked for. The user's
		// own variables come later and can turn any back on.
		env: map[string]string{
			"OPENCODE_DISABLE_MODELS_FETCH":    "1",
			"OPENCODE_DISABLE_AUTOUPDATE":      "1",
			"OPENCODE_DISABLE_LSP_DOWNLOAD":    "1",
			"OPENCODE_DISABLE_SHARE":           "1",
			"OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
			"OPENCODE_DISABLE_CLAUDE_CODE":     "1",
			"OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
		},
	},
	config.AgentCustom: {},
}

// presetOf is the config's agent kind, opencode by default.
func presetOf(a config.AgentConfig) agentPreset {
	if a.Kind == "" {
		return agentPresets[config.AgentOpencode]
	}
	return agentPresets[a.Kind]
}

// PasswordVar holds the agent's password in the workspace (a secret file,
// see SecretDir) for the shims and devaipod's own requests.
const PasswordVar = "DEVAIPOD_AGENT_PASSWORD"

// MaxTaskLabel bounds the task stored in the pod's label; the agent gets
// all of it.
const MaxTaskLabel = 1024

// taskLabel shortens a task for the pod's label at a character boundary.
func taskLabel(task string) string {
	if len(task) <= MaxTaskLabel {
		return task
	}
	cut := MaxTaskLabel - len("…")
	for cut > 0 && !utf8.RuneStart(task[cut]) {
		cut--
	}
	return task[:cut] + "…"
}
