package pod

import (
	"context"
	"encoding/json"
	"fmt"
)

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
	objs, err := eng.Objects(ctx, short)
	if err != nil {
		return ExecAs{}, err
	}
	for _, o := range objs {
		if o.Kind != KindPod || o.Labels[LabelExec] == "" {
			continue
		}
		var as ExecAs
		if err := json.Unmarshal([]byte(o.Labels[LabelExec]), &as); err != nil {
			return ExecAs{}, fmt.Errorf("pod label %s: %w", LabelExec, err)
		}
		return as, nil
	}
	return ExecAs{}, nil
}
