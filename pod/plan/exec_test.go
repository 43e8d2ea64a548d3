package plan

import (
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/devcontainer"
)

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
		// remoteEnv's values are in the workspace's environment, never
		// in a label (a ${localEnv:TOKEN} there is a secret).
		{"remoteEnv with image USER", "dev", &devcontainer.Config{Image: "img", RemoteEnv: map[string]string{"EDITOR": "vi", "TOKEN": "s3cret"}},
			`{"user":"dev"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := planInput()
			in.ResolveImage, in.Devcontainer = imageWith(ImageConfig{User: tt.imageUser}), tt.dc
			plan, err := Build(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := plan.Pod.Labels[LabelExec]; got != tt.want {
				t.Errorf("label %s = %q, want %q", LabelExec, got, tt.want)
			}
			if tt.dc != nil && tt.dc.RemoteEnv != nil {
				ws := plan.Container(RoleWorkspace)
				if ws.Env["TOKEN"] != "s3cret" || plan.Redacted().Container(RoleWorkspace).Env["TOKEN"] != "<redacted>" {
					t.Errorf("remoteEnv in the workspace: %q; redacted %q", ws.Env["TOKEN"], plan.Redacted().Container(RoleWorkspace).Env["TOKEN"])
				}
				for k, v := range plan.Pod.Labels {
					if strings.Contains(v, "s3cret") {
						t.Errorf("label %s holds a remoteEnv value: %s", k, v)
					}
				}
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
		{"another user, as root then switched, with the agent's group", ExecAs{User: "dev"}, true, "0",
			HelperBin + " secret-env --dir " + SecretDir + " --umask 0002 --user dev --group-add 1000 -- git status"},
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
