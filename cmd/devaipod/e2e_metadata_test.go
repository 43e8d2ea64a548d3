package main

import (
	"os"
	"path/filepath"
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

// TestE2ELocalFeature: a repository's own feature, built by the
// devcontainer CLI, with an entrypoint and a lifecycle hook: the CLI keeps
// both in the image's devcontainer.metadata (and the file's own hook too),
// and up runs the entrypoint when the workspace starts and the feature's
// hook before the file's, each once.
func TestE2ELocalFeature(t *testing.T) {
	e2e(t)
	cli := os.Getenv("DEVAIPOD_DEVCONTAINER_CLI_BIN")
	if cli == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("DEVAIPOD_DEVCONTAINER_CLI_BIN is not set under CI: make test installs the devcontainer CLI (hack/install-devcontainer-cli.sh)")
		}
		t.Skip("DEVAIPOD_DEVCONTAINER_CLI_BIN is not set (make test installs the devcontainer CLI)")
	}
	repo := fixtureRepo(t)
	install := filepath.Join(repo, ".devcontainer/e2e-feature/install.sh")
	os.MkdirAll(filepath.Dir(install), 0o755)
	script := "#!/bin/sh\nset -e\nprintf '#!/bin/sh\\necho started > /tmp/e2e-entry\\nexec \"$@\"\\n' > /usr/local/share/e2e-entry.sh\nchmod +x /usr/local/share/e2e-entry.sh\n"
	if err := os.WriteFile(install, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	commitFiles(t, repo, map[string]string{
		".devcontainer/devcontainer.json": `{"image": "localhost/devaipod-default:latest", "features": {"./e2e-feature": {}}, "postCreateCommand": "echo file >> /tmp/e2e-order"}`,
		".devcontainer/e2e-feature/devcontainer-feature.json": `{"id": "e2e-feature", "version": "1.0.0", "name": "e2e",
			"entrypoint": "/usr/local/share/e2e-entry.sh", "onCreateCommand": "echo feature >> /tmp/e2e-order"}`,
	})
	name := uniqueName("e2e-feat")
	cleanup(t, name)
	mustDevaipod(t, []string{"DEVAIPOD_DEVCONTAINER_CLI=" + cli}, "--config", standInConfig(t, ""), "up", repo, "--name", name, "--trust")
	got := mustDevaipod(t, nil, "exec", name, "--", "sh", "-c", `cat /tmp/e2e-order /tmp/e2e-entry`).stdout
	if got != "feature\nfile\nstarted\n" {
		t.Errorf("the feature's hook, then the file's, each once, and the entrypoint's marker:\n%s", got)
	}
}
