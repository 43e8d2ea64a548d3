package main

import (
	"strings"
	"testing"
)

// TestE2EUpRefusesAnAgentHoldingATrustedValue: the repository's
// devcontainer.json asks for a host variable for the agent (envAllowlist)
// that holds the same value as a trusted one under another name, as
// GITHUB_TOKEN and GH_TOKEN often do. up refuses before it creates
// anything, names both variables and never the value; the same up with a
// value of its own is ready, and its agent has it (the control).
func TestE2EUpRefusesAnAgentHoldingATrustedValue(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	commitFiles(t, repo, map[string]string{
		".devcontainer/devcontainer.json": `{"image": "localhost/devaipod-default:latest",
  "customizations": {"devaipod": {"envAllowlist": ["CI_TOKEN"]}}}
`,
	})
	cfg := standInConfig(t, "[trusted.env]\nallowlist = [\"E2E_GH_TOKEN\"]\n")
	const value = "ghp_e2eGuardedValue4711"

	name := uniqueName("e2e-guarded")
	cleanup(t, name)
	r := devaipod(t, []string{"E2E_GH_TOKEN=" + value, "CI_TOKEN=" + value}, "--config", cfg, "up", repo, "--trust", "--name", name)
	if r.code == 0 || !strings.Contains(r.stderr, "the agent's variable CI_TOKEN would hold the value of trusted variable E2E_GH_TOKEN") {
		t.Errorf("up of a pod whose agent would hold a trusted value: %s", r)
	}
	if strings.Contains(r.stdout+r.stderr, value) {
		t.Errorf("up printed the value:\n%s", r)
	}
	if left := labelled(t, name); len(left) > 0 {
		t.Errorf("up left objects behind: %v", left)
	}

	control := uniqueName("e2e-guarded")
	cleanup(t, control)
	mustDevaipod(t, []string{"E2E_GH_TOKEN=" + value, "CI_TOKEN=a-value-of-its-own"}, "--config", cfg, "up", repo, "--trust", "--name", control)
	got := mustDevaipod(t, nil, "exec", control, "-c", "agent", "--", "printenv", "CI_TOKEN")
	if strings.TrimSpace(got.stdout) != "a-value-of-its-own" {
		t.Errorf("the control's agent has CI_TOKEN=%q", got.stdout)
	}
}
