package main

import (
	"strings"
	"testing"
)

// TestE2EUpRefusesAnAgentHoldingATrustedValue: the repository's
// devcontainer.json asks for a host variable for the agent
// (envAllowlist) that holds the same value as a trusted one under another
// name, as GITHUB_TOKEN and GH_TOKEN often do. up's containment check
// finds the value in the agent by its hash, refuses the pod and removes
// everything it made; the same up with a different value is ready (the
// control).
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
	r := devaipod(t, []string{"E2E_GH_TOKEN=" + value, "CI_TOKEN=" + value}, "--config", cfg, "up", repo, "--name", name)
	if r.code == 0 || !strings.Contains(r.stderr, "containment check failed") || !strings.Contains(r.stderr, "CI_TOKEN holds a trusted value") {
		t.Errorf("up of a pod whose agent holds a trusted value: %s", r)
	}
	if strings.Contains(r.stdout+r.stderr, value) {
		t.Errorf("up printed the value:\n%s", r)
	}
	if left := labelled(t, name); len(left) > 0 {
		t.Errorf("up left objects behind: %v", left)
	}

	control := uniqueName("e2e-guarded")
	cleanup(t, control)
	mustDevaipod(t, []string{"E2E_GH_TOKEN=" + value, "CI_TOKEN=another-value"}, "--config", cfg, "up", repo, "--name", control)
}
