package main

import (
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
)

// TestPrintPlanShowsWhatWidensAContainer: the text plan (up --dry-run) is
// for a person to check the pod's security before anything runs, so it
// shows every setting that gives a container more than podman's defaults,
// and every host path it binds.
func TestPrintPlanShowsWhatWidensAContainer(t *testing.T) {
	p := &plan.Plan{Pod: plan.PodSpec{Name: "devaipod-x"}, Containers: []plan.ContainerSpec{{
		Name: "devaipod-x-workspace", Role: plan.RoleWorkspace, Privileged: true,
		CapDrop: []string{"NET_RAW"}, CapAdd: []string{"SYS_PTRACE"}, Devices: []string{"/dev/fuse"},
		SecurityOpt: []string{"seccomp=unconfined"},
		Binds: []plan.Bind{{HostPath: "/home/u/data", Dest: "/data"},
			{Volume: "devaipod-x-workspace", SubPath: "x/.envrc", Dest: "/workspaces/x/.envrc", ReadOnly: true}},
		Limits: &config.Limits{Memory: "2g"},
	}}}
	var out strings.Builder
	printPlan(&out, p, nil)
	for _, want := range []string{
		"capabilities drop NET_RAW, add SYS_PTRACE;",
		"PRIVILEGED",
		"seccomp      podman's default",
		"security-opt seccomp=unconfined",
		"device       /dev/fuse",
		"bind         host /home/u/data -> /data (rw)",
		"bind         devaipod-x-workspace:x/.envrc -> /workspaces/x/.envrc (ro)",
		"limits       memory 2g cpus none pids none",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the plan lacks %q:\n%s", want, out.String())
		}
	}
}
