package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestE2EGatorAsk: with ask:push-branch, a push waits for a person on the
// host. Approved, the gator pushes exactly the commit it asked about, even
// though the agent moved on meanwhile; the agent's next push asks again,
// about its new commit, and a rejection reaches the agent with its reason.
func TestE2EGatorAsk(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	forge := startPushForge(t, repo)
	hostGit(t, repo, "remote", "set-url", "origin", inPod(forge.git.URL)+"/owner/repo.git")
	cfg := standInConfig(t, `[trusted.env.vars]
GH_TOKEN = "`+e2eGatorToken+`"
[network]
host_loopback = true
ask_timeout = "60s"
[forge]
url = "`+inPod(forge.git.URL)+`"
api_url = "`+inPod(forge.api.URL)+`/"
`)
	name := uniqueName("e2e-gask")
	cleanup(t, name)
	mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", name, "--gator", "github:owner/repo:read,ask:push-branch,ask:comment")
	inAgent := func(script string) result {
		t.Helper()
		return devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", script)
	}
	commit := func(file string) string {
		t.Helper()
		r := inAgent("echo " + file + " > " + file + " && git add -A && " + agentGitID + " commit -qm " + file + " && git rev-parse HEAD")
		if r.code != 0 {
			t.Fatalf("commit: %s", r)
		}
		return strings.TrimSpace(r.stdout)
	}
	// pushInBackground starts push_branch agent/work; its answer lands in
	// /tmp/OUT when the person has decided.
	callInBackground := func(out, call string) {
		t.Helper()
		script := mcpScript(call)
		if r := inAgent("(sh -c '" + strings.ReplaceAll(script, "'", `'\''`) + "' > /tmp/" + out + ".part 2>&1; mv /tmp/" + out + ".part /tmp/" + out + ") >/dev/null 2>&1 &"); r.code != 0 {
			t.Fatalf("start the call: %s", r)
		}
	}
	pushInBackground := func(out string) {
		t.Helper()
		callInBackground(out, `{"name":"push_branch","arguments":{"owner":"owner","repo":"repo","branch":"agent/work"}}`)
	}
	type pending struct {
		ID, Pod, Kind, What string
		Details             map[string]string
	}
	waiting := func() pending {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			var list []pending
			json.Unmarshal([]byte(mustDevaipod(t, nil, "approvals", name, "-o", "json").stdout), &list)
			if len(list) > 0 {
				return list[0]
			}
		}
		t.Fatal("no push waits for a decision")
		return pending{}
	}
	answer := func(out string) mcpAnswer {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if r := inAgent("cat /tmp/" + out + " 2>/dev/null"); r.code == 0 && r.stdout != "" {
				return parseMCPAnswers(t, r.stdout, 1)[0]
			}
		}
		t.Fatalf("the push %s never answered", out)
		return mcpAnswer{}
	}

	a := commit("a.txt")
	pushInBackground("push1")
	p := waiting()
	if p.Kind != "gator" || !strings.Contains(p.What, "push_branch") || !strings.Contains(strings.Join(mapValues(p.Details), " "), a) {
		t.Fatalf("the request does not name the commit %s: %+v", a, p)
	}
	// The agent moves on while the person looks.
	b := commit("b.txt")
	// The person sees how to look at exactly that commit, and it is a.txt
	// alone, though the agent's HEAD is b.txt by now.
	see := "see it: devaipod diff " + name + " --commit " + a
	if shown := mustDevaipod(t, nil, "approvals", name).stdout; !strings.Contains(shown, see) {
		t.Errorf("approvals does not say %q:\n%s", see, shown)
	}
	if d := mustDevaipod(t, nil, "diff", name, "--commit", a, "--stat").stdout; !strings.Contains(d, "a.txt") || strings.Contains(d, "b.txt") {
		t.Errorf("diff --commit %s --stat:\n%s", a, d)
	}
	mustDevaipod(t, nil, "approve", p.ID)
	if ans := answer("push1"); ans.IsError {
		t.Fatalf("the approved push: %+v", ans)
	}
	if got := hostGit(t, forge.bare, "rev-parse", "refs/heads/agent/work"); got != a {
		t.Errorf("the forge has agent/work at %s; the person approved %s (the agent's HEAD was %s)", got, a, b)
	}

	pushInBackground("push2")
	p2 := waiting()
	if p2.ID == p.ID || !strings.Contains(strings.Join(mapValues(p2.Details), " "), b) {
		t.Fatalf("the second push does not ask about %s: %+v", b, p2)
	}
	mustDevaipod(t, nil, "reject", p2.ID, "--reason", "not yet: tests fail")
	if ans := answer("push2"); !ans.IsError || !strings.Contains(ans.Text, "not yet: tests fail") {
		t.Errorf("the rejected push: %+v", ans)
	}
	if got := hostGit(t, forge.bare, "rev-parse", "refs/heads/agent/work"); got != a {
		t.Errorf("after the rejection the forge has agent/work at %s, want %s", got, a)
	}
	audit := mustDevaipod(t, nil, "audit", name)
	if !strings.Contains(audit.stdout, "approved") || !strings.Contains(audit.stdout, "rejected") {
		t.Errorf("audit lacks the decisions:\n%s", audit.stdout)
	}

	// A comment under ask: the person reads all of it, a line each, with
	// what would fool a terminal escaped (the gator used to show its first
	// 300 bytes).
	long := strings.Repeat("x", 400)
	callInBackground("comment1", `{"name":"add_issue_comment","arguments":{"owner":"owner","repo":"repo","number":1,"body":"First line\n`+long+` \u001b[2J\nthe last line, past 400 bytes"}}`)
	pc := waiting()
	shown := mustDevaipod(t, nil, "approvals", name).stdout
	for _, want := range []string{"add_issue_comment owner/repo #1", "    | First line\n", "    | " + long + ` \x1b[2J` + "\n", "    | the last line, past 400 bytes\n"} {
		if !strings.Contains(shown, want) {
			t.Errorf("approvals lacks %q:\n%s", want, shown)
		}
	}
	if strings.Contains(shown, "\x1b") {
		t.Errorf("approvals let an escape through:\n%q", shown)
	}
	mustDevaipod(t, nil, "reject", pc.ID)
	if ans := answer("comment1"); !ans.IsError {
		t.Errorf("the rejected comment: %+v", ans)
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
