package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestNotifyRunsNoAgentText: the agent writes a request's text; notify
// runs it as one argument, never as shell syntax, whether the command is
// a program or a shell script (sh -c), and whatever quotes the script
// puts around the placeholder.
func TestNotifyRunsNoAgentText(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	out := filepath.Join(dir, "out")
	var r *pod.Pending
	for _, evil := range []string{`/home/me/x';touch ` + marker + `;'`, `x"; touch ` + marker + `; "`, `$(touch ` + marker + `)`, "`touch " + marker + "`", "x; touch " + marker} {
		r = &pod.Pending{Request: approval.Request{Pod: "p", Kind: "path", What: evil, ID: "path-1"}}
		for _, argv := range [][]string{
			{sh, "-c", `printf '%s' '{what}' > ` + out},
			{sh, "-c", `printf '%s' "{what}" > ` + out},
			{sh, "-c", `printf '%s' {what} > ` + out},
			{"/usr/bin/env", "sh", "-c", `printf '%s' "{what}" > ` + out},
			{"printf", "%s", "{what}"},
		} {
			runNotify(context.Background(), argv, r)
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("%q with %q ran the agent's text", argv, evil)
			}
		}
	}
	evil := r.What
	args, env := notifyCommand([]string{"notify-send", "devaipod", "{pod} asks: {what} ({id})"}, r)
	if args[2] != "p asks: "+evil+" (path-1)" || !slices.Contains(env, "DEVAIPOD_WHAT="+evil) {
		t.Errorf("notify-send got %q, env %q", args, env)
	}
	args, _ = notifyCommand([]string{"sh", "-c", `notify-send "{what}"`}, r)
	if args[2] != `notify-send "${DEVAIPOD_WHAT}"` {
		t.Errorf("the script holds the text: %q", args[2])
	}
}
