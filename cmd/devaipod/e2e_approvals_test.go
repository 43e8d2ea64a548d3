package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devaipod/devaipod/proxy"
)

// TestE2EApprovals: the agent's requests to hosts that [network] ask
// covers wait for a person on the host, who decides with devaipod
// approve and reject; the agent cannot decide for itself.
func TestE2EApprovals(t *testing.T) {
	e2e(t)
	inet := startInternet(t)
	port := inet.tlsPort
	// Approvals kept for the repository live in devaipod's state
	// directory: the test's own.
	env := []string{"XDG_STATE_HOME=" + t.TempDir()}
	cfg := standInConfig(t, fmt.Sprintf(`[network]
host_loopback = true
no_default_allow = true
allow = ["10.0.2.2:*"]
ask = ["*.ask.test:%d"]
ask_timeout = "15s"
extra_hosts = ["one.ask.test:10.0.2.2", "pod.ask.test:10.0.2.2", "repo.ask.test:10.0.2.2", "late.ask.test:10.0.2.2"]
`, port))
	repo := fixtureRepo(t)
	name := uniqueName("e2e-ask")
	cleanup(t, name)
	mustDevaipod(t, env, "--config", cfg, "up", repo, "--name", name)
	agent := func(script string) result {
		return devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", script)
	}
	// ask starts a request in the agent's background, its outcome in
	// /tmp/OUT: the CONNECT's status, then the body.
	ask := func(host, out string) {
		t.Helper()
		script := fmt.Sprintf("(curl -sk -w '\\n%%{http_connect} %%{http_code}' https://%s:%d/%s > /tmp/%s.part 2>&1; mv /tmp/%s.part /tmp/%s) >/dev/null 2>&1 &", host, port, out, out, out, out)
		if r := agent(script); r.code != 0 {
			t.Fatalf("start the request: %s", r)
		}
	}
	outcome := func(out string) string {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if r := agent("cat /tmp/" + out + " 2>/dev/null"); r.code == 0 && r.stdout != "" {
				return r.stdout
			}
		}
		t.Fatalf("the request %s never ended", out)
		return ""
	}
	type pending struct{ ID, Pod, Kind, What, Rule string }
	waiting := func(host string) pending {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			var list []pending
			r := mustDevaipod(t, env, "approvals", "-o", "json")
			if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
				t.Fatalf("approvals -o json: %v\n%s", err, r.stdout)
			}
			for _, p := range list {
				if p.Pod == name && strings.Contains(p.What, host) {
					return p
				}
			}
		}
		t.Fatalf("no request for %s waits", host)
		return pending{}
	}

	t.Run("a held CONNECT approved once goes through, and the next one asks again", func(t *testing.T) {
		ask("one.ask.test", "a1")
		p := waiting("one.ask.test")
		if p.Kind != "network" || !strings.HasPrefix(p.ID, "net-") || p.Rule != fmt.Sprintf("one.ask.test:%d", port) {
			t.Errorf("request %+v", p)
		}
		table := mustDevaipod(t, env, "approvals", name)
		if !strings.Contains(table.stdout, p.ID) || !strings.Contains(table.stdout, "one.ask.test") {
			t.Errorf("approvals table:\n%s", table.stdout)
		}
		// The agent tries to decide for itself: the helper is in its
		// container, but the requests are not.
		if r := agent("/opt/devaipod/devaipod-helper approvals --dir /var/lib/devaipod/proxy/approvals approve " + p.ID +
			"; ls /var/lib/devaipod/proxy 2>&1; curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:3128/devaipod/approve/" + p.ID); !strings.HasSuffix(r.stdout, "400") {
			t.Errorf("the agent's tries: %s", r)
		}
		if again := waiting("one.ask.test"); again.ID != p.ID {
			t.Errorf("the request changed: %+v", again)
		}
		mustDevaipod(t, env, "approve", p.ID)
		if got := outcome("a1"); !strings.Contains(got, "hello from one.ask.test") || !strings.HasSuffix(got, "200 200") {
			t.Errorf("approved request: %q", got)
		}
		ask("one.ask.test", "a2")
		p2 := waiting("one.ask.test")
		if p2.ID == p.ID {
			t.Fatal("the second request has the first one's id")
		}
		mustDevaipod(t, env, "reject", p2.ID, "--reason", "use the mirror\x1b[2J")
		if got := outcome("a2"); !strings.HasSuffix(got, "403 000") && !strings.Contains(got, "403") {
			t.Errorf("rejected request: %q", got)
		}
	})
	t.Run("no decision in time: refused", func(t *testing.T) {
		ask("late.ask.test", "late")
		waiting("late.ask.test")
		if got := outcome("late"); !strings.Contains(got, "403") {
			t.Errorf("timed out request: %q", got)
		}
	})
	t.Run("approved for the pod: the next one does not ask", func(t *testing.T) {
		ask("pod.ask.test", "p1")
		mustDevaipod(t, env, "approve", waiting("pod.ask.test").ID, "--for", "pod")
		if got := outcome("p1"); !strings.HasSuffix(got, "200 200") {
			t.Errorf("approved request: %q", got)
		}
		r := agent(fmt.Sprintf("curl -sk -m 10 -w ' %%{http_code}' https://pod.ask.test:%d/p2", port))
		if !strings.HasSuffix(r.stdout, " 200") {
			t.Errorf("after --for pod: %s", r)
		}
	})
	t.Run("every ask and decision is audited", func(t *testing.T) {
		r := mustDevaipod(t, env, "audit", name, "-o", "json")
		seen := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var rec proxy.Record
			if json.Unmarshal([]byte(line), &rec) == nil && strings.HasSuffix(rec.Host, ".ask.test") {
				seen[rec.Decision+" "+rec.Reason]++
				if rec.Decision != "ask" && rec.Reason != proxy.ReasonAskTimeout && rec.Rule != "" && strings.HasPrefix(rec.Rule, "ask:") && rec.DecidedBy == "" {
					t.Errorf("a decision without who made it: %+v", rec)
				}
			}
		}
		if seen["ask "] < 4 || seen["allow "] < 2 || seen["deny rejected"] != 1 || seen["deny "+proxy.ReasonAskTimeout] != 1 {
			t.Errorf("audit of the asks: %v\n%s", seen, r.stdout)
		}
		if strings.Contains(r.stdout, "\x1b") {
			t.Error("the reason's escape reached the audit")
		}
	})
	t.Run("approvals --watch: one key approves, and notify runs per new request", func(t *testing.T) {
		notified := filepath.Join(t.TempDir(), "notified")
		watchCfg := filepath.Join(t.TempDir(), "watch.toml")
		os.WriteFile(watchCfg, []byte(`[approvals]
notify = ["sh", "-c", "echo \"$1 $2\" >> `+notified+`", "notify", "{id}", "{kind}"]
`), 0o644)
		ask("one.ask.test", "w1")
		p := waiting("one.ask.test")
		// A terminal for --watch (script gives it one); the key comes once
		// the request is on screen, then q.
		cmd := exec.Command("script", "-qfec", os.Getenv("DEVAIPOD_BIN")+" --config "+watchCfg+" approvals "+name+" --watch", "/dev/null")
		cmd.Env = append(os.Environ(), env...)
		stdin, _ := cmd.StdinPipe()
		var out lockedBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// A key typed before the request is on screen is no decision: the
		// first goes unseen, the one after the prompt approves.
		stdin.Write([]byte("a"))
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "[q]uit? ") && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		}
		time.Sleep(100 * time.Millisecond)
		if strings.Contains(out.String(), "approved") {
			t.Fatalf("a key typed before the request was shown approved it:\n%s", out.String())
		}
		stdin.Write([]byte("a"))
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "approved") && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		}
		stdin.Write([]byte("q"))
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("approvals --watch: %v\n%s", err, out.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("approvals --watch did not quit on q:\n%s", out.String())
		}
		if got := outcome("w1"); !strings.HasSuffix(got, "200 200") {
			t.Errorf("the request approved with a key: %q\n%s", got, out.String())
		}
		if b, _ := os.ReadFile(notified); !strings.Contains(string(b), p.ID+" network") {
			t.Errorf("notify ran with %q, want %q", b, p.ID+" network")
		}
	})
	t.Run("approved for the repository: a new pod of it does not ask", func(t *testing.T) {
		ask("repo.ask.test", "r1")
		mustDevaipod(t, env, "approve", waiting("repo.ask.test").ID, "--for", "repo")
		outcome("r1")
		granted := mustDevaipod(t, env, "approvals", "--granted")
		if !strings.Contains(granted.stdout, fmt.Sprintf("repo.ask.test:%d", port)) {
			t.Errorf("approvals --granted:\n%s", granted.stdout)
		}
		mustDevaipod(t, env, "delete", name)
		mustDevaipod(t, env, "--config", cfg, "up", repo, "--name", name)
		r := agent(fmt.Sprintf("curl -sk -m 10 -w ' %%{http_code}' https://repo.ask.test:%d/r2", port))
		if !strings.HasSuffix(r.stdout, " 200") {
			t.Errorf("in the new pod: %s", r)
		}
		mustDevaipod(t, env, "revoke", "grant-1")
		if g := mustDevaipod(t, env, "approvals", "--granted"); strings.Contains(g.stdout, "repo.ask.test") {
			t.Errorf("after revoke:\n%s", g.stdout)
		}
	})
}

// lockedBuffer is a bytes.Buffer that a command writes while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
