package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devaipod/devaipod/cmd/devaipod/internal/fakellm"
	"github.com/devaipod/devaipod/proxy"
)

// TestE2EAgentWithFakeLLM proves devaipod's mission end to end with the real agent: `up REPO
// TASK` starts opencode (the default agent kind, in the default image) in its sandbox, hands it
// the task, and opencode, driven by a scripted model (fakellm) that it reaches only through the
// pod's proxy, writes a file, runs a shell command and tries a host off the allowlist. The test
// then checks the effects where the user sees them (the workspace), who did the work (the agent's
// uid), what the proxy let through and refused (the audit log, and a server that must see
// nothing), the task in status, and that the agent's server wants its password.
//
// The model and the off-list host are servers on this machine's loopback; the pod's proxy
// reaches them at 10.0.2.2 ([network] host_loopback), under names the pod's /etc/hosts maps
// there (extra_hosts). The model's host needs two rules: its name and port, and the address
// 10.0.2.2 on that port, without which the proxy's private-address guard refuses it.
func TestE2EAgentWithFakeLLM(t *testing.T) {
	e2e(t)
	start := time.Now()

	const (
		llmHost    = "llm.test"
		deniedHost = "denied.test"
		workdir    = "/workspaces/fixture"
		task       = "write hello.txt and run the script"
		hello      = "hello from the scripted model\n"
		// scriptTimeout bounds the agent's work after up returns: a few seconds on an idle
		// machine, so minutes only on a loaded one.
		scriptTimeout = 3 * time.Minute
		llmKey        = "sk-e2e-real-llm-key-5d1e"
	)

	// The off-list host: a server that must never be reached.
	var deniedHits atomic.Int64
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deniedHits.Add(1)
		fmt.Fprintln(w, "the proxy let this through")
	}))
	t.Cleanup(denied.Close)
	deniedPort := port(t, denied.URL)

	script := []fakellm.Turn{
		{Name: "write", ToolCalls: []fakellm.ToolCall{{ID: "call_write", Name: "write",
			Args: map[string]any{"filePath": workdir + "/hello.txt", "content": hello}}}},
		{Name: "bash", ToolCalls: []fakellm.ToolCall{{ID: "call_bash", Name: "bash",
			Args: map[string]any{"command": "cd " + workdir + " && echo ran > ran.txt && id -u > uid.txt && echo uid=$(cat uid.txt)"}}}},
		{Name: "egress", ToolCalls: []fakellm.ToolCall{
			{ID: "call_curl", Name: "bash", Args: map[string]any{
				"command": fmt.Sprintf("curl -sS -m 5 http://%s:%d/from-curl; echo curl-exit=$?", deniedHost, deniedPort)}},
			{ID: "call_webfetch", Name: "webfetch", Args: map[string]any{
				"url": fmt.Sprintf("https://%s:%d/from-webfetch", deniedHost, deniedPort), "format": "text"}},
		}},
		{Name: "done", Text: "Wrote hello.txt, ran the script; the other host is off the allowlist."},
	}
	llm := fakellm.New(script...)
	// HTTPS with a CA of the test's own, which the pod's proxy trusts
	// (upstream_ca) and the agent does not: the agent's OPENAI_API_KEY is
	// a placeholder that the proxy, which terminates TLS for llm.test as
	// the agent's trusted CA, replaces with llmKey.
	ca := newTestCA(t)
	llmPort := serveHTTPS(t, ca, llmHost, llm)

	cfg := opencodeConfig(t, fmt.Sprintf(`[network]
host_loopback = true
no_default_allow = true
allow = ["%[1]s:%[3]d", "10.0.2.2:%[3]d"]
extra_hosts = ["%[1]s:10.0.2.2", "%[2]s:10.0.2.2"]
upstream_ca = [%[4]q]
[credentials.OPENAI_API_KEY]
hosts = ["%[1]s:%[3]d"]
`, llmHost, deniedHost, llmPort, ca.file(t)))
	name := uniqueName("e2e-agent")
	cleanup(t, name)
	// Registered after cleanup, so it runs before the pod is deleted.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("fake LLM requests:\n%s", describeLLMRequests(llm.Requests()))
		t.Logf("agent log:\n%s", devaipod(t, nil, "logs", name, "-c", "agent", "--tail", "200"))
		t.Logf("audit:\n%s", devaipod(t, nil, "audit", name))
		// opencode logs to files in its data directory, and keeps what went wrong in a
		// session's messages.
		t.Logf("opencode's log:\n%s", devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c",
			"tail -n 60 $HOME/.local/share/opencode/log/*.log"))
		t.Logf("opencode's sessions:\n%s", devaipod(t, nil, "exec", name, "--", "sh", "-c",
			`a="opencode:$(cat /run/devaipod/secrets/DEVAIPOD_AGENT_PASSWORD)"; u=http://127.0.0.1:4096
for id in $(curl -s -u "$a" $u/session | grep -o '"id":"ses_[^"]*"' | cut -d'"' -f4); do
  echo "session $id:"; curl -s -u "$a" $u/session/$id/message | head -c 6000; echo
done`))
	})

	baseURL := fmt.Sprintf("https://%s:%d/v1", llmHost, llmPort)
	env := []string{"DEVAIPOD_AGENT_OPENCODE_CONFIG_CONTENT=" + fakellm.OpencodeConfig(baseURL, "", "{env:OPENAI_API_KEY}"),
		"OPENAI_API_KEY=" + llmKey}
	// --keep-on-failure: if up fails, the agent's log above still has something to show; the
	// cleanup removes the pod either way.
	up := mustDevaipod(t, env, "--config", cfg, "up", fixtureRepo(t), task, "--name", name,
		"--timeout", "150s", "--keep-on-failure")
	if !strings.Contains(up.stderr, "handing the task to the agent") || !strings.Contains(up.stdout, "is ready") {
		t.Errorf("up did not hand over the task or report a ready pod:\n%s", up)
	}
	upReturned := time.Now()
	t.Logf("up took %s", upReturned.Sub(start).Round(100*time.Millisecond))

	select {
	case <-llm.Finished():
		t.Logf("the script was played through %s after up returned", time.Since(upReturned).Round(100*time.Millisecond))
	case <-time.After(scriptTimeout):
		t.Fatalf("the agent did not play the script through in %s (%d of %d turns): %v",
			scriptTimeout, llm.Used(), len(script), llm.Check())
	}

	inWorkspace := func(shell string) result {
		return devaipod(t, nil, "exec", name, "--", "sh", "-c", shell)
	}
	inAgent := func(shell string) result {
		return devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", shell)
	}

	t.Run("the agent's key is a placeholder, and the model got the real one from the proxy", func(t *testing.T) {
		reqs := llm.Requests()
		if len(reqs) == 0 {
			t.Fatal("no request reached the model")
		}
		for i, r := range reqs {
			if got := r.Header.Get("Authorization"); got != "Bearer "+llmKey {
				t.Errorf("request %d to the model carried %q, want the real key", i, got)
			}
		}
		r := inAgent(`printf %s "$OPENAI_API_KEY"; cat /proc/*/environ 2>/dev/null | tr '\0' '\n' | grep -c ` + llmKey)
		if !strings.HasPrefix(r.stdout, "devaipod-OPENAI_API_KEY-") || strings.Contains(r.stdout, llmKey) {
			t.Errorf("the agent's OPENAI_API_KEY: %s", r)
		}
	})
	t.Run("the model saw the task and opencode's loop", func(t *testing.T) {
		if err := llm.Check(); err != nil {
			t.Errorf("script: %v", err)
		}
		steps := llm.RequestsOf(fakellm.KindScript)
		if len(steps) != len(script) {
			t.Fatalf("%d scripted requests, want %d", len(steps), len(script))
		}
		first := steps[0]
		if !strings.Contains(first.LastUser(), task) {
			t.Errorf("the first request's user message is %q; want the task %q", first.LastUser(), task)
		}
		if wd := first.WorkingDirectory(); wd != workdir {
			t.Errorf("opencode's working directory is %q, want %s", wd, workdir)
		}
		if first.Model != fakellm.DefaultModel {
			t.Errorf("first request: model %q, Authorization %q; want the configured model",
				first.Model, first.Header.Get("Authorization"))
		}
		for _, tool := range []string{"write", "bash", "webfetch"} {
			if !first.HasTool(tool) {
				t.Errorf("opencode did not offer %s; offered %v", tool, first.ToolNames())
			}
		}
		if out, _ := steps[2].ToolResult("call_bash"); !strings.Contains(out, "uid=1000") {
			t.Errorf("the bash tool's result %q does not carry the command's output uid=1000", out)
		}
	})

	t.Run("the agent's work is in the workspace", func(t *testing.T) {
		if r := inWorkspace("cat " + workdir + "/hello.txt"); r.code != 0 || r.stdout != hello {
			t.Errorf("hello.txt in the workspace: %s\nwant %q", r, hello)
		}
		if r := inWorkspace("cd " + workdir + " && cat ran.txt uid.txt"); r.code != 0 || r.stdout != "ran\n1000\n" {
			t.Errorf("the bash tool's files in the workspace: %s\nwant ran.txt = ran, uid.txt = 1000", r)
		}
		// The agent's uid owns what it made (as the agent container sees it).
		if r := inAgent("cd " + workdir + " && stat -c '%n %u:%g' hello.txt ran.txt uid.txt"); r.stdout != "hello.txt 1000:1000\nran.txt 1000:1000\nuid.txt 1000:1000\n" {
			t.Errorf("owners of the agent's files: %s\nwant 1000:1000 (the agent)", r)
		}
		if r := inWorkspace("cd " + workdir + " && git status --porcelain"); r.stdout != "?? hello.txt\n?? ran.txt\n?? uid.txt\n" {
			t.Errorf("git status in the workspace: %s\nwant the agent's three new files and nothing else", r)
		}
	})

	t.Run("the proxy let the model through and refused the other host", func(t *testing.T) {
		// The request answered by the last turn carries the results of the egress turn's calls.
		steps := llm.RequestsOf(fakellm.KindScript)
		if len(steps) != len(script) {
			t.Fatalf("%d scripted requests, want %d", len(steps), len(script))
		}
		egress := steps[3]
		curlOut, _ := egress.ToolResult("call_curl")
		fetchOut, _ := egress.ToolResult("call_webfetch")
		t.Logf("curl tool result: %q", curlOut)
		t.Logf("webfetch tool result: %q", fetchOut)
		if !strings.Contains(curlOut, "devaipod proxy") || !strings.Contains(curlOut, "devaipod allow "+name) {
			t.Errorf("curl's result %q: want the proxy's refusal naming the pod", curlOut)
		}
		if !strings.Contains(fetchOut, "403") {
			t.Errorf("webfetch's result %q: want the proxy's 403", fetchOut)
		}
		if n := deniedHits.Load(); n != 0 {
			t.Errorf("the off-list server got %d request(s)", n)
		}

		// The proxy logs a plain-HTTP exchange when it ends: the answer to the last model
		// call may still be on its way when the script's last turn is handed out.
		want := len(llm.Requests())
		var recs []proxy.Record
		deadline := time.Now().Add(30 * time.Second)
		for {
			recs = auditRecords(t, name)
			if countRecords(recs, func(r proxy.Record) bool { return r.Host == llmHost && r.Decision == "allow" }) >= want ||
				time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		var allowedLLM int
		var deniedSeen []string
		for _, r := range recs {
			switch {
			case r.Host == llmHost && r.Decision == "allow":
				allowedLLM++
				if r.Method != http.MethodPost || r.Port != llmPort || r.Status != http.StatusOK || r.BytesDown == 0 || r.Rule == "" {
					t.Errorf("allowed model call %+v: want POST to port %d answered 200 with a body, and its rule", r, llmPort)
				}
			case r.Decision == "deny" && r.Host == deniedHost:
				deniedSeen = append(deniedSeen, fmt.Sprintf("%s %s:%d", r.Method, r.Host, r.Port))
				if r.Reason == "" {
					t.Errorf("denial %+v has no reason", r)
				}
			case r.Decision == "deny" && upProbes[r.Host] && recordedBefore(t, r, upReturned):
				// up's own containment checks (egress-check, verify --fast) try these.
			default:
				t.Errorf("unexpected egress %+v: the agent reached for something the task did not ask for", r)
			}
		}
		if allowedLLM != want {
			t.Errorf("%d allowed model calls in the audit log, the fake LLM saw %d", allowedLLM, want)
		}
		sort.Strings(deniedSeen)
		wantDenied := []string{
			fmt.Sprintf("CONNECT %s:%d", deniedHost, deniedPort), // webfetch
			fmt.Sprintf("GET %s:%d", deniedHost, deniedPort),     // curl
		}
		if strings.Join(deniedSeen, ",") != strings.Join(wantDenied, ",") {
			t.Errorf("denials of %s: %v, want %v", deniedHost, deniedSeen, wantDenied)
		}
	})

	t.Run("status shows the task", func(t *testing.T) {
		if r := mustDevaipod(t, nil, "status", name); !strings.Contains(r.stdout, "Task:     "+task+"\n") {
			t.Errorf("status lacks the task:\n%s", r)
		}
		var st struct {
			Task       string
			AgentReady *bool `json:"agent_ready"`
		}
		r := mustDevaipod(t, nil, "status", name, "-o", "json")
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("status json: %v\n%s", err, r)
		}
		if st.Task != task || st.AgentReady == nil || !*st.AgentReady {
			t.Errorf("status: task %q, agent ready %v; want %q and a ready agent", st.Task, st.AgentReady, task)
		}
	})

	t.Run("the agent's server wants its password", func(t *testing.T) {
		const health = "http://127.0.0.1:4096/global/health"
		if r := inWorkspace("curl -s -o /dev/null -w '%{http_code}' " + health); r.stdout != "401" {
			t.Errorf("without the password: %s\nwant 401", r)
		}
		if r := inWorkspace("curl -s -o /dev/null -w '%{http_code}' -u opencode:wrong-password " + health); r.stdout != "401" {
			t.Errorf("with a wrong password: %s\nwant 401", r)
		}
		// The control: with the pod's password (the workspace's secret file) it answers,
		// and the session up created is titled after the task.
		auth := `-u "opencode:$(cat /run/devaipod/secrets/DEVAIPOD_AGENT_PASSWORD)"`
		if r := inWorkspace("curl -s -o /dev/null -w '%{http_code}' " + auth + " " + health); r.stdout != "200" {
			t.Errorf("with the pod's password: %s\nwant 200", r)
		}
		r := inWorkspace("curl -sf " + auth + " http://127.0.0.1:4096/session")
		var sessions []struct{ ID, Title string }
		if err := json.Unmarshal([]byte(r.stdout), &sessions); err != nil || len(sessions) != 1 || sessions[0].Title != task {
			t.Errorf("GET /session: %v %s\nwant one session titled %q", err, r, task)
		}
	})

	t.Logf("TestE2EAgentWithFakeLLM took %s", time.Since(start).Round(100*time.Millisecond))
}

// serveHTTPS serves h over HTTPS on the host's loopback (10.0.2.2 from a
// pod with host_loopback) with a certificate of ca for host, until the
// test ends; it returns the port.
func serveHTTPS(t *testing.T, ca *testCA, host string, h http.Handler) int {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = ca.serverTLS(t, host)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return port(t, srv.URL)
}

// opencodeConfig writes a config holding only text: no [agent] section, so the agent is the
// default kind, opencode, in the default image (not standInConfig's busybox).
func opencodeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "devaipod.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// upProbes are the hosts up's containment checks ask the proxy for, all of which it must refuse:
// devaipod-helper egress-check's plain-HTTP probe and verify --fast's denied host, IP literal
// and private name (cmd/devaipod-helper/egress.go, verify.go).
var upProbes = map[string]bool{
	"egress-check.devaipod.invalid": true,
	"verify.devaipod.invalid":       true,
	"192.0.2.1":                     true,
	"localhost":                     true,
}

// recordedBefore reports whether the proxy logged r before t.
func recordedBefore(tt *testing.T, r proxy.Record, t time.Time) bool {
	tt.Helper()
	at, err := time.Parse(time.RFC3339Nano, r.Time)
	if err != nil {
		tt.Errorf("audit record %+v: time: %v", r, err)
		return false
	}
	return at.Before(t)
}

// auditRecords are the pod's proxy decisions.
func auditRecords(t *testing.T, name string) []proxy.Record {
	t.Helper()
	r := mustDevaipod(t, nil, "audit", name, "-o", "json")
	var recs []proxy.Record
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if line == "" {
			continue
		}
		var rec proxy.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		recs = append(recs, rec)
	}
	return recs
}

func countRecords(recs []proxy.Record, keep func(proxy.Record) bool) int {
	n := 0
	for _, r := range recs {
		if keep(r) {
			n++
		}
	}
	return n
}

// describeLLMRequests summarises the fake LLM's requests for a failure message.
func describeLLMRequests(reqs []fakellm.Request) string {
	var b strings.Builder
	for i, r := range reqs {
		last := ""
		if n := len(r.Messages); n > 0 {
			last = r.Messages[n-1].Role + ": " + r.Messages[n-1].Content
		}
		fmt.Fprintf(&b, "  %d: %s turn %d (%s), %d messages, %d tool results, last %.300q\n",
			i, r.Kind, r.Turn, r.TurnName, len(r.Messages), len(r.ToolResults()), last)
	}
	return b.String()
}
