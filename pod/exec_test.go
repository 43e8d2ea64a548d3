package pod

import (
	"context"
	"errors"
	"testing"

	"github.com/devaipod/devaipod/pod/plan"
)

func TestWorkspaceExecAs(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	f.objects["pod/devaipod-plain"] = Object{Kind: KindPod, Name: "devaipod-plain", Pod: "plain", State: "running", Labels: map[string]string{plan.LabelPod: "plain"}}
	f.objects["pod/devaipod-dc"] = Object{Kind: KindPod, Name: "devaipod-dc", Pod: "dc", State: "degraded",
		Labels: map[string]string{plan.LabelPod: "dc", plan.LabelExec: `{"user":"dev"}`}}
	f.objects["pod/devaipod-bad"] = Object{Kind: KindPod, Name: "devaipod-bad", Pod: "bad", State: "running",
		Labels: map[string]string{plan.LabelPod: "bad", plan.LabelExec: `{"user":`}}
	f.objects["pod/devaipod-stopped"] = Object{Kind: KindPod, Name: "devaipod-stopped", Pod: "stopped", State: "exited",
		Labels: map[string]string{plan.LabelPod: "stopped"}}

	if as, err := WorkspaceExecAs(ctx, f, "plain"); err != nil || as.User != "" {
		t.Errorf("a pod without the label: %+v, %v; want the zero value", as, err)
	}
	if as, err := WorkspaceExecAs(ctx, f, "dc"); err != nil || as.User != "dev" {
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
	f.objects["pod/devaipod-half"] = Object{Kind: KindPod, Name: "devaipod-half", Pod: "half", State: "degraded", Labels: map[string]string{plan.LabelPod: "half"}}
	f.objects["container/devaipod-half-workspace"] = Object{Kind: KindContainer, Name: "devaipod-half-workspace", Pod: "half", State: "exited"}
	f.objects["container/devaipod-half-agent"] = Object{Kind: KindContainer, Name: "devaipod-half-agent", Pod: "half", State: "running"}
	if _, err := WorkspaceExecAs(ctx, f, "half"); !errors.As(err, &nr) || err.Error() != "pod half: its workspace container is exited, not running" {
		t.Errorf("a degraded pod without its workspace: %v; want a NotRunningError for the workspace", err)
	}
	if _, err := WorkspaceExecAs(ctx, f, "gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("no such pod: %v; want ErrNotFound", err)
	}
}

// TestSyncBufferMax: with Max, the buffer keeps the last Max bytes
// written, however they come.
func TestSyncBufferMax(t *testing.T) {
	b := SyncBuffer{Max: 8}
	for _, p := range []string{"abc", "defghij", "k", "0123456789ABCDEF", "xy"} {
		if n, err := b.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	if got := b.String(); got != "ABCDEFxy" {
		t.Errorf("kept %q; want the last 8 bytes, %q", got, "ABCDEFxy")
	}
	var all SyncBuffer
	all.Write([]byte("no bound"))
	if all.String() != "no bound" {
		t.Errorf("without Max: %q", all.String())
	}
}
