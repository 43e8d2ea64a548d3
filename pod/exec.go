package pod

import "context"

// ExecAs is who workspace commands of `devaipod exec` and attach run as, as
// the devcontainer spec asks of tools that run commands in the container:
// the remote user (remoteUser, else containerUser, else runArgs' --user)
// with remoteEnv. The zero value is the container's own user and
// environment.
type ExecAs struct {
	User string   `json:"user,omitempty"`
	Env  []string `json:"env,omitempty"` // NAME=value
}

// WorkspaceExecAs reads who a pod's workspace commands run as from the label
// up put on it.
func WorkspaceExecAs(ctx context.Context, eng Engine, short string) (ExecAs, error) {
	var as ExecAs
	_, err := readPodLabel(ctx, eng, short, LabelExec, &as)
	return as, err
}
