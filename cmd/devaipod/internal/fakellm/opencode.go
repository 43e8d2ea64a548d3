package fakellm

import (
	"encoding/json"
	"strings"
)

// OpencodeProviderID is the provider id OpencodeConfig gives the fake server; opencode names
// the model OpencodeProviderID + "/" + the model id.
const OpencodeProviderID = "fakellm"

// OpencodeConfig is opencode (1.18) configuration, for the environment variable
// OPENCODE_CONFIG_CONTENT, that makes the fake server at baseURL (ending in /v1) opencode's only
// provider and its default and small model (model, DefaultModel when empty), lets every tool run
// without asking, and turns off what would reach the network on its own: autoupdate, sharing,
// LSP and formatter downloads. docs/notes-opencode.md explains each key. apiKey is what opencode
// sends as its bearer token ("fakellm-key" when empty); "{env:NAME}" makes it the agent's
// variable NAME.
func OpencodeConfig(baseURL, model, apiKey string) string {
	if model == "" {
		model = DefaultModel
	}
	if apiKey == "" {
		apiKey = "fakellm-key"
	}
	cfg := map[string]any{
		"$schema":           "https://opencode.ai/config.json",
		"enabled_providers": []string{OpencodeProviderID},
		"provider": map[string]any{
			OpencodeProviderID: map[string]any{
				"npm":  "@ai-sdk/openai-compatible",
				"name": "fakellm",
				"options": map[string]any{
					"baseURL": strings.TrimSuffix(baseURL, "/"),
					"apiKey":  apiKey,
				},
				"models": map[string]any{
					model: map[string]any{
						"name":        model,
						"tool_call":   true,
						"attachment":  false,
						"reasoning":   false,
						"temperature": true,
						"limit":       map[string]any{"context": 128000, "output": 8192},
					},
				},
			},
		},
		"model":       OpencodeProviderID + "/" + model,
		"small_model": OpencodeProviderID + "/" + model,
		"autoupdate":  false,
		"share":       "disabled",
		"lsp":         false,
		"formatter":   false,
		// opencode applies the last rule that matches; encoding/json writes map keys sorted,
		// so "*" comes first and is the fallback, and "question" (the agent asking the user,
		// which would stall a headless run) stays denied.
		"permission": map[string]any{
			"*":                  "allow",
			"read":               "allow",
			"edit":               "allow",
			"bash":               "allow",
			"webfetch":           "allow",
			"external_directory": "allow",
			"doom_loop":          "allow",
			"question":           "deny",
		},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		panic("fakellm: marshalling a constant config: " + err.Error()) // cannot happen: only maps, strings, numbers
	}
	return string(b)
}

// OpencodeOfflineEnv are environment variables (KEY=value) that stop opencode 1.18 from reaching
// the network on its own: the models.dev metadata fetch at startup and every hour, the update
// check, LSP server downloads and sharing. One startup fetch remains, which no variable turns
// off: the npm install of @opencode-ai/plugin into each writable config directory
// (docs/notes-opencode.md says how to make it unnecessary; it only logs a warning when it fails).
func OpencodeOfflineEnv() []string {
	return []string{
		"OPENCODE_DISABLE_MODELS_FETCH=1",
		"OPENCODE_DISABLE_AUTOUPDATE=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1",
		"OPENCODE_DISABLE_SHARE=1",
	}
}
