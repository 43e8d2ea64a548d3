package main

import (
	"strings"
	"testing"
)

// TestE2ENoModel: opencode on the default image with no LLM key, no
// config and its hosted models off the allowlist would answer and never
// work. up with a task refuses before it creates anything; without one it
// warns, and status says so, with what the proxy refused the agent since
// the last look (not up's own probes).
func TestE2ENoModel(t *testing.T) {
	e2e(t)
	cfg := opencodeConfig(t, "")
	// No key of the test's environment reaches the plan.
	var noKeys []string
	for _, k := range []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY", "AZURE_OPENAI_API_KEY",
		"OPENROUTER_API_KEY", "GROQ_API_KEY", "MISTRAL_API_KEY", "COHERE_API_KEY", "XAI_API_KEY", "TOGETHER_API_KEY"} {
		noKeys = append(noKeys, k+"=")
	}
	repo := fixtureRepo(t)
	name := uniqueName("e2e-nomodel")
	cleanup(t, name)

	r := devaipod(t, noKeys, "--config", cfg, "up", repo, "add a README", "--name", name)
	if r.code == 0 || !strings.Contains(r.stderr, "the agent has no model it can reach, so the task would never get done: no LLM key is set") ||
		!strings.Contains(r.stderr, "Hint: nothing was created. Give the agent a model") {
		t.Errorf("up with a task and no model:\n%s", r)
	}
	if left := labelled(t, name); len(left) > 0 {
		t.Fatalf("the refused up left %v", left)
	}

	up := mustDevaipod(t, noKeys, "--config", cfg, "up", repo, "--name", name)
	if !strings.Contains(up.stderr, "the agent has no model it can reach: no LLM key") {
		t.Errorf("up without a model does not warn:\n%s", up)
	}
	// The agent reaches for hosts the proxy refuses (.invalid: refused
	// before any lookup).
	for range 2 {
		devaipod(t, nil, "exec", name, "-c", "agent", "--", "curl", "-s", "-o", "/dev/null", "http://e2e-refused.devaipod-test.invalid/")
	}
	st := mustDevaipod(t, nil, "status", name)
	if !strings.Contains(st.stdout, "at up it had no model it could reach") ||
		!strings.Contains(st.stdout, "Refused:  2 of the agent's requests since the last look") || !strings.Contains(st.stdout, "e2e-refused.devaipod-test.invalid x2") {
		t.Errorf("status:\n%s", st)
	}
	if again := mustDevaipod(t, nil, "status", name); strings.Contains(again.stdout, "Refused:") {
		t.Errorf("status shows the same refusals twice:\n%s", again.stdout)
	}
	if list := mustDevaipod(t, nil, "list"); !strings.Contains(list.stdout, "running (no model)") {
		t.Errorf("list:\n%s", list.stdout)
	}
}
