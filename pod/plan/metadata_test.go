package plan

import (
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/devcontainer"
)

// TestBuildImageMetadata: what the workspace image's devcontainer.metadata
// says reaches the workspace (its user, hooks, privileges, entrypoints),
// never the agent; for an untrusted repository, its privileges are
// withheld as the file's would be.
func TestBuildImageMetadata(t *testing.T) {
	label := `[{"remoteUser": "vscode", "onCreateCommand": "echo image"},
		{"id": "dind", "privileged": true, "entrypoint": "/usr/local/share/docker-init.sh", "containerEnv": {"DOCKER_BUILDKIT": "1"},
		 "mounts": [{"type": "bind", "source": "/home/me/.ssh", "target": "/ssh"}]}]`
	build := func(untrusted bool) *Plan {
		t.Helper()
		in := planInput()
		dc, err := devcontainer.Parse([]byte(`{"image": "img", "postCreateCommand": "make"}`), "dc.json")
		if err != nil {
			t.Fatal(err)
		}
		in.Devcontainer, in.Untrusted = dc, untrusted
		in.ResolveImage = imageWith(ImageConfig{Labels: map[string]string{devcontainer.MetadataLabel: label}})
		p, err := Build(in)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := build(false)
	ws, agent := p.Container(RoleWorkspace), p.Container(RoleAgent)
	if !ws.Privileged || agent.Privileged || ws.Env["DOCKER_BUILDKIT"] != "1" || agent.Env["DOCKER_BUILDKIT"] != "" {
		t.Errorf("workspace privileged %v env %v; agent privileged %v", ws.Privileged, ws.Env["DOCKER_BUILDKIT"], agent.Privileged)
	}
	if script := strings.Join(ws.Entrypoint, " "); !strings.Contains(script, "-- /bin/sh -c cd /\n/usr/local/share/docker-init.sh\nwhile sleep 86400") {
		t.Errorf("workspace entrypoint %q", script)
	}
	if p.Pod.Labels[LabelExec] != `{"user":"vscode"}` || p.Lifecycle.User != "vscode" {
		t.Errorf("exec label %s, lifecycle user %s", p.Pod.Labels[LabelExec], p.Lifecycle.User)
	}
	var names []string
	for _, s := range p.Lifecycle.Stages(StageCreate) {
		if s.Cmd != nil {
			names = append(names, s.Name)
		}
	}
	if strings.Join(names, ",") != "onCreateCommand of the image,postCreateCommand" {
		t.Errorf("stages %q", names)
	}
	if w := strings.Join(p.Warnings, "\n"); !strings.Contains(w, "privileged, entrypoint /usr/local/share/docker-init.sh") ||
		!strings.Contains(w, "asks to bind the host's /home/me/.ssh at /ssh: not bound") {
		t.Errorf("warnings %q", w)
	}
	for _, bind := range ws.Binds {
		if bind.HostPath == "/home/me/.ssh" {
			t.Errorf("the image's metadata bound a host path: %+v", bind)
		}
	}
	if u := build(true); u.Container(RoleWorkspace).Privileged {
		t.Error("an untrusted repository's image metadata made the workspace privileged")
	}
}
