package pod

import (
	"context"
	"slices"
	"testing"
)

func TestWorkspaceExecAs(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	f.objects["pod/devaipod-plain"] = Object{Kind: KindPod, Name: "devaipod-plain", Pod: "plain", Labels: map[string]string{LabelPod: "plain"}}
	f.objects["pod/devaipod-dc"] = Object{Kind: KindPod, Name: "devaipod-dc", Pod: "dc",
		Labels: map[string]string{LabelPod: "dc", LabelExec: `{"user":"dev","env":["EDITOR=vi"]}`}}
	f.objects["pod/devaipod-bad"] = Object{Kind: KindPod, Name: "devaipod-bad", Pod: "bad",
		Labels: map[string]string{LabelPod: "bad", LabelExec: `{"user":`}}

	if as, err := WorkspaceExecAs(ctx, f, "plain"); err != nil || as.User != "" || as.Env != nil {
		t.Errorf("a pod without the label: %+v, %v; want the zero value", as, err)
	}
	if as, err := WorkspaceExecAs(ctx, f, "dc"); err != nil || as.User != "dev" || !slices.Equal(as.Env, []string{"EDITOR=vi"}) {
		t.Errorf("a devcontainer's pod: %+v, %v", as, err)
	}
	if _, err := WorkspaceExecAs(ctx, f, "bad"); err == nil {
		t.Error("a broken label is not an error")
	}
}
