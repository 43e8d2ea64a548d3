package pod

import (
	"context"

	"github.com/devaipod/devaipod/pod/plan"
)

// WorkspaceExecAs reads who a running pod's workspace commands run as from
// the label up put on it.
func WorkspaceExecAs(ctx context.Context, eng Engine, short string) (plan.ExecAs, error) {
	o, err := RunningPod(ctx, eng, short, plan.RoleWorkspace)
	if err != nil {
		return plan.ExecAs{}, err
	}
	var as plan.ExecAs
	_, err = decodePodLabel(o, plan.LabelExec, &as)
	return as, err
}
