package pod

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/devcontainer"
)

func TestWorkspaceExecAs(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	f.objects["pod/devaipod-plain"] = Object{Kind: KindPod, Name: "devaipod-plain", Pod: "plain", State: "running", Labels: map[string]string{LabelPod: "plain"}}
	f.objects["pod/devaipod-dc"] = Object{Kind: KindPod, Name: "devaipod-dc", Pod: "dc", State: "degraded",
		Labels: map[string]string{LabelPod: "dc", LabelExec: `{"user":"dev","env":["EDITOR=vi"]}`}}
	f.objects["pod/devaipod-bad"] = Object{Kind: KindPod, Name: "devaipod-bad", Pod: "bad", State: "running",
		Labels: map[string]string{LabelPod: "bad", LabelExec: `{"user":`}}
	f.objects["pod/devaipod-stopped"] = Object{Kind: KindPod, Name: "devaipod-stopped", Pod: "stopped", State: "exited",
		Labels: map[string]string{LabelPod: "stopped"}}

	if as, err := WorkspaceExecAs(ctx, f, "plain"); err != nil || as.User != "" || as.Env != nil {
		t.Errorf("a pod without the label: %+v, %v; want the zero value", as, err)
	}
	if as, err := WorkspaceExecAs(ctx, f, "dc"); err != nil || as.User != "dev" || !slices.Equal(as.Env, []string{"EDITOR=vi"}) {
		t.Errorf("a devcontainer's pod: %+v, %v", as, err)
	}
	if _, err := WorkspaceExecAs(ctx, f, "bad"); err == nil {
		t.Error("a broken label is not an error")
	}
	var nr *NotRunningError
	if _, err := WorkspaceExecAs(ctx, f, "stopped"); !errors.As(err, &nr) || err.Error() != "pod stopped is exited, not running" {
		t.Errorf("a stopped pod: %v; want a NotRunningError", err)
	}
	// A degraded pod whose workspace is the container that stopped.
	f.objects["pod/devaipod-half"] = Object{Kind: KindPod, Name: "devaipod-half", Pod: "half", State: "degraded", Labels: map[string]string{LabelPod: "half"}}
	f.objects["container/devaipod-half-workspace"] = Object{Kind: KindContainer, Name: "devaipod-half-workspace", Pod: "half", State: "exited"}
	f.objects["container/devaipod-half-agent"] = Object{Kind: KindContainer, Name: "devaipod-half-agent", Pod: "half", State: "running"}
	if _, err := WorkspaceExecAs(ctx, f, "half"); !errors.As(err, &nr) || err.Error() != "pod half: its workspace container is exited, not running" {
		t.Errorf("a degraded pod without its workspace: %v; want a NotRunningError for the workspace", err)
	}
	if _, err := WorkspaceExecAs(ctx, f, "gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("no such pod: %v; want ErrNotFound", err)
	}
}

// TestBuildLabelsExecAs checks who up says workspace commands run as: the
// devcontainer's remote user, else the image's USER, else nobody in
// particular (the container's user, root).
func TestBuildLabelsExecAs(t *testing.T) {
	tests := []struct {
		name      string
		imageUser string
		dc        *devcontainer.Config
		want      string // the label; "" for none
	}{
		{"image without USER", "", nil, ""},
		{"image USER", "dev", nil, `{"user":"dev"}`},
		{"containerUser over image USER", "dev", &devcontainer.Config{Image: "img", ContainerUser: "app"}, `{"user":"app"}`},
		{"remoteUser over containerUser", "dev", &devcontainer.Config{Image: "img", ContainerUser: "app", RemoteUser: "vscode"}, `{"user":"vscode"}`},
		{"remoteEnv with image USER", "dev", &devcontainer.Config{Image: "img", RemoteEnv: map[string]string{"EDITOR": "vi"}},
			`{"user":"dev","env":["EDITOR=vi"]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := planInput()
			in.ImageUser, in.Devcontainer = tt.imageUser, tt.dc
			plan, err := Build(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := plan.Pod.Labels[LabelExec]; got != tt.want {
				t.Errorf("label %s = %q, want %q", LabelExec, got, tt.want)
			}
		})
	}
}

func TestExecAsCommand(t *testing.T) {
	tests := []struct {
		name     string
		as       ExecAs
		secrets  bool
		wantUser string
		wantCmd  string
	}{
		{"container's user with secrets", ExecAs{}, true, "",
			HelperBin + " secret-env --dir " + SecretDir + " --umask 0002 -- git status"},
		{"another user, as root then switched, with the agent's group", ExecAs{User: "dev", Env: []string{"EDITOR=vi"}}, true, "0",
			HelperBin + " secret-env --dir " + SecretDir + " --umask 0002 --user dev --group-add 1000 --env EDITOR=vi -- git status"},
		{"a lifecycle command: no secrets", ExecAs{User: "dev"}, false, "0",
			HelperBin + " secret-env --dir  --umask 0002 --user dev --group-add 1000 -- git status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			user, cmd := tt.as.Command([]string{"git", "status"}, tt.secrets)
			if got := strings.Join(cmd, " "); user != tt.wantUser || got != tt.wantCmd {
				t.Errorf("Command() = %q, %q\nwant %q, %q", user, got, tt.wantUser, tt.wantCmd)
			}
		})
	}
}
