package main

import (
	"strings"
	"testing"

	"github.com/devaipod/devaipod/internal/approval"
	"github.com/devaipod/devaipod/pod"
)

func TestSeePush(t *testing.T) {
	commit := strings.Repeat("1f", 20)
	push := pending(approval.KindGator, "push_branch octo/app agent/fix", commit)
	if got, want := seePush(push), "see it: devaipod diff demo --commit "+commit; got != want {
		t.Errorf("seePush = %q, want %q", got, want)
	}
	for _, p := range []pod.Pending{
		pending(approval.KindNetwork, "push_branch x", commit),
		pending(approval.KindGator, "create_draft_pull_request octo/app", commit),
		pending(approval.KindGator, "push_branch octo/app x", "1f3c; rm -rf ~"),
	} {
		if got := seePush(p); got != "" {
			t.Errorf("seePush(%+v) = %q, want nothing", p, got)
		}
	}
}

func pending(kind, what, commit string) pod.Pending {
	return pod.Pending{Request: approval.Request{Pod: "demo", Kind: kind, What: what, Details: map[string]string{"commit": commit}}}
}
