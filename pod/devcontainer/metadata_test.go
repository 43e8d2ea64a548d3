package devcontainer

import (
	"slices"
	"strings"
	"testing"
)

// TestWithMetadata: an image's devcontainer.metadata merges under the
// file by the spec's rules.
func TestWithMetadata(t *testing.T) {
	c, err := Parse([]byte(`{"image": "img", "containerUser": "root", "containerEnv": {"A": "file"},
		"capAdd": ["SYS_PTRACE"], "postCreateCommand": "make", "mounts": ["type=volume,source=cache,target=/cache"]}`), "dc.json")
	if err != nil {
		t.Fatal(err)
	}
	label := `[
		{"remoteUser": "vscode", "containerEnv": {"A": "image", "B": "image"}, "onCreateCommand": "echo image"},
		{"id": "ghcr.io/devcontainers/features/docker-in-docker:2", "privileged": true, "init": true,
		 "entrypoint": "/usr/local/share/docker-init.sh", "capAdd": ["SYS_PTRACE", "NET_ADMIN"],
		 "mounts": [{"type": "volume", "source": "dind-var-lib-docker", "target": "/var/lib/docker"}],
		 "onCreateCommand": {"a": "echo a", "b": "echo b"}, "customizations": {"vscode": {}}},
		{"id": "local/feature", "remoteUser": "dev", "postCreateCommand": "make", "shutdownAction": "none"}
	]`
	m, err := c.WithMetadata(label, Vars{})
	if err != nil {
		t.Fatal(err)
	}
	if m.RemoteUser != "dev" || m.ContainerUser != "root" || !m.Privileged || !m.Init {
		t.Errorf("users %q %q, privileged %v, init %v", m.RemoteUser, m.ContainerUser, m.Privileged, m.Init)
	}
	if m.ContainerEnv["A"] != "file" || m.ContainerEnv["B"] != "image" {
		t.Errorf("containerEnv %v", m.ContainerEnv)
	}
	if !slices.Equal(m.CapAdd, []string{"SYS_PTRACE", "NET_ADMIN"}) || !slices.Equal(m.Entrypoints, []string{"/usr/local/share/docker-init.sh"}) {
		t.Errorf("capAdd %v, entrypoints %v", m.CapAdd, m.Entrypoints)
	}
	var targets []string
	for _, mt := range m.Mounts {
		targets = append(targets, mt.Target)
	}
	if !slices.Equal(targets, []string{"/var/lib/docker", "/cache"}) {
		t.Errorf("mounts %v", targets)
	}
	// onCreate: the image's, then the feature's (its steps at once); the
	// file has none of its own. postCreate: the feature's copy of the
	// file's "make" runs once.
	oc := m.OnCreateCommand
	if oc == nil || len(oc.Steps) != 0 || len(oc.Before) != 2 || oc.Before[0].From != "the image" ||
		oc.Before[1].From != "ghcr.io/devcontainers/features/docker-in-docker:2" || !oc.Before[1].Parallel || len(oc.Before[1].Steps) != 2 {
		t.Errorf("onCreateCommand %+v", oc)
	}
	if pc := m.PostCreateCommand; pc == nil || len(pc.Before) != 0 || pc.Steps[0].String() != "make" {
		t.Errorf("postCreateCommand %+v", pc)
	}
	if w := strings.Join(m.Warnings, "\n"); !strings.Contains(w, "(local/feature): shutdownAction is not supported") || strings.Contains(w, "customizations") {
		t.Errorf("warnings %q", w)
	}
	// The file itself is unchanged.
	if c.RemoteUser != "" || c.OnCreateCommand != nil || c.Privileged {
		t.Errorf("the file's config changed: %+v", c)
	}
	// One object, not an array, is allowed; garbage is an error.
	if m, err := c.WithMetadata(`{"remoteUser": "node"}`, Vars{}); err != nil || m.RemoteUser != "node" {
		t.Errorf("one object: %v %v", m, err)
	}
	for _, bad := range []string{`nope`, `[{"remoteUser": 1}]`, `"x"`} {
		if _, err := c.WithMetadata(bad, Vars{}); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestWithMetadataVariables: an entry's variables are the container's
// (workspace folder, devcontainerId), never the host's; the label is
// bounded.
func TestWithMetadataVariables(t *testing.T) {
	c, err := Parse([]byte(`{"image": "img"}`), "dc.json")
	if err != nil {
		t.Fatal(err)
	}
	label := `[{"id": "dind", "mounts": [{"type": "volume", "source": "dind-var-lib-docker-${devcontainerId}", "target": "/var/lib/docker"}],
		"onCreateCommand": "echo ${containerWorkspaceFolder} [${localEnv:HOME}]"}]`
	m, err := c.WithMetadata(label, Vars{ContainerWorkspaceFolder: "/workspaces/p", DevcontainerID: "id1", LocalEnv: map[string]string{"HOME": "/home/me"}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Mounts[0].Source != "dind-var-lib-docker-id1" {
		t.Errorf("mount source %q", m.Mounts[0].Source)
	}
	if got := m.OnCreateCommand.Before[0].Steps[0].Args[2]; got != "echo /workspaces/p []" {
		t.Errorf("onCreateCommand %q: the host's HOME must not reach it", got)
	}
	many := "[" + strings.Repeat(`{"init": true},`, maxMetadataEntries) + `{"init": true}]`
	if _, err := c.WithMetadata(many, Vars{}); err == nil || !strings.Contains(err.Error(), "more than 100 entries") {
		t.Errorf("a label of %d entries: %v", maxMetadataEntries+1, err)
	}
}
