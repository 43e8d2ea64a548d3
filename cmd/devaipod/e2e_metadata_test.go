package main

import (
	"strings"
	"testing"
)

// TestE2EImageMetadata: a repository's image carries a devcontainer.metadata
// label, as the devcontainers collection's images and the devcontainer
// CLI's builds do: its remoteUser, containerEnv, lifecycle hooks (before
// the file's own, by the spec's order) and a feature's entrypoint reach
// the running workspace.
func TestE2EImageMetadata(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	metadata := `[{"remoteUser": "dev", "containerEnv": {"E2E_META": "from-image"}, "onCreateCommand": "echo image >> /tmp/e2e-order"},` +
		`{"id": "e2e/feature", "entrypoint": "/usr/local/bin/e2e-entry.sh", "postCreateCommand": "echo feature >> /tmp/e2e-order"}]`
	commitFiles(t, repo, map[string]string{
		".devcontainer/Dockerfile": "FROM localhost/devaipod-default:latest\n" +
			"RUN useradd -m -u 1500 dev && printf '#!/bin/sh\\necho started > /tmp/e2e-entry\\n' > /usr/local/bin/e2e-entry.sh && chmod +x /usr/local/bin/e2e-entry.sh\n" +
			"LABEL devcontainer.metadata='" + metadata + "'\n",
		".devcontainer/devcontainer.json": `{"build": {"dockerfile": "Dockerfile"}, "onCreateCommand": "echo file >> /tmp/e2e-order"}`,
	})
	name := uniqueName("e2e-meta")
	cleanup(t, name)
	up := mustDevaipod(t, nil, "--config", standInConfig(t, ""), "up", repo, "--name", name, "--trust")
	if !strings.Contains(up.stderr, "entrypoint /usr/local/bin/e2e-entry.sh") {
		t.Errorf("up does not say what the image's metadata gives the workspace:\n%s", up.stderr)
	}
	got := mustDevaipod(t, nil, "exec", name, "--", "sh", "-c", `id -un; echo "$E2E_META"; cat /tmp/e2e-order; cat /tmp/e2e-entry`).stdout
	if got != "dev\nfrom-image\nimage\nfile\nfeature\nstarted\n" {
		t.Errorf("in the workspace: user, containerEnv, the hooks' order, the entrypoint's marker:\n%s", got)
	}
	if r := devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", `echo "[$E2E_META]"`); r.stdout != "[]\n" {
		t.Errorf("the image's containerEnv reached the agent: %s", r)
	}
}
