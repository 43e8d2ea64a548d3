package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/devaipod/devaipod/cmd/devaipod/internal/fakellm"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/proxy"
)

// TestE2EDefaultLLMBinding: with no [credentials] table at all, the LLM
// key in devaipod's environment becomes a credential bound to its
// provider's API host on port 443, the agent holds a placeholder, and
// opencode's requests to that host arrive with the real key.
//
// The host is the real provider's name, so nothing may ever resolve it
// outside the pod: the pod's /etc/hosts maps it to the pod's own address
// (extra_hosts), where a forwarder of the test's own, a container joined
// to the pod after up, listens on port 443 (which the test user cannot
// bind on the host, and root in the pod's network namespace can) and
// passes each connection to the fake LLM on the host's loopback. The test
// checks that mapping in the pod before anything is sent.
func TestE2EDefaultLLMBinding(t *testing.T) {
	e2e(t)
	const (
		variable = "OPENAI_API_KEY"
		llmKey   = "sk-e2e-default-binding-3b9e"
		task     = "say hello through the default binding"
		// podAddr is the pod's own address on rootless podman's
		// slirp4netns (the only network a pod of Debian 12's podman
		// has): the proxy dials it, the forwarder listens there.
		podAddr = "10.0.2.100"
	)
	llmHost := config.DefaultCredentials[variable][0]
	llm := fakellm.New(fakellm.Turn{Name: "done", Text: "hello through the default binding"})
	ca := newTestCA(t)
	llmPort := serveHTTPS(t, ca, llmHost, llm)

	// The built-in allowlist and bindings as they are; only the address
	// rule for the pod's own address (the guard refuses private
	// addresses a name resolves to unless a rule names them), the name's
	// mapping, and the test's CA upstream.
	cfg := opencodeConfig(t, fmt.Sprintf(`[network]
host_loopback = true
allow = ["%[1]s:443"]
extra_hosts = ["%[2]s:%[1]s"]
upstream_ca = [%[3]q]
`, podAddr, llmHost, ca.file(t)))
	env := []string{"DEVAIPOD_AGENT_OPENCODE_CONFIG_CONTENT=" + fakellm.OpencodeConfig("https://"+llmHost+"/v1", "", "{env:"+variable+"}"),
		variable + "=" + llmKey}
	repo := fixtureRepo(t)
	name := uniqueName("e2e-llm-default")
	cleanup(t, name)
	forwarder := plan.PodName(name) + "-e2e-forward"
	// Registered after cleanup, so it runs before the pod is deleted.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("forwarder log:\n%s", podmanLogs(forwarder))
			t.Logf("agent log:\n%s", devaipod(t, nil, "logs", name, "-c", "agent", "--tail", "100"))
			t.Logf("audit:\n%s", devaipod(t, nil, "audit", name))
		}
		podmanOut(t, "rm", "-f", "-t", "0", forwarder)
	})

	// The plan with the task, whose TaskCommand hands it over as up would.
	var pl plan.Plan
	if err := json.Unmarshal([]byte(mustDevaipod(t, env, "--config", cfg, "up", repo, task, "--name", name, "--dry-run", "-o", "json").stdout), &pl); err != nil {
		t.Fatal(err)
	}
	up := mustDevaipod(t, env, "--config", cfg, "up", repo, "--name", name)
	if !strings.Contains(up.stdout, "credential "+variable+":") || !strings.Contains(up.stdout, "on "+llmHost+"\n") {
		t.Errorf("up does not list the default binding of %s to %s:\n%s", variable, llmHost, up)
	}
	r := devaipod(t, nil, "exec", name, "-c", "agent", "--", "printenv", variable)
	if !strings.HasPrefix(r.stdout, "devaipod-"+variable+"-") || strings.Contains(r.stdout, llmKey) {
		t.Fatalf("the agent's %s is not a placeholder: %s", variable, r)
	}

	// Nothing leaves the machine: the name resolves to the pod's own
	// address in the pod, or the test stops here.
	r = devaipod(t, nil, "exec", name, "--", "getent", "hosts", llmHost)
	if f := strings.Fields(r.stdout); len(f) == 0 || f[0] != podAddr {
		t.Fatalf("%s does not resolve to %s in the pod: %s", llmHost, podAddr, r)
	}
	if r := devaipod(t, nil, "exec", name, "--", "cat", "/proc/net/fib_trie"); !strings.Contains(r.stdout, "|-- "+podAddr+"\n") {
		t.Fatalf("the pod's network has no address %s (slirp4netns's): the forwarder could not be reached there:\n%s", podAddr, r)
	}
	sock := "/tmp/e2e-forward.sock"
	if out, err := exec.Command("podman", "run", "-d", "--pod", plan.PodName(name), "--name", forwarder,
		"--entrypoint", "/devaipod-helper", config.DefaultHelperImage, "init",
		"--forward", "tcp:0.0.0.0:443=unix:"+sock,
		"--expose", fmt.Sprintf("unix:%s=tcp:10.0.2.2:%d", sock, llmPort)).CombinedOutput(); err != nil {
		t.Fatalf("start the forwarder in the pod: %v %s", err, out)
	}
	waitFor(t, 30*time.Second, "the forwarder to listen", func() bool {
		return strings.Contains(podmanLogs(forwarder), "serving until SIGTERM")
	})

	if r := devaipod(t, nil, append([]string{"exec", name, "--user", "root", "--"}, pl.TaskCommand()...)...); r.code != 0 {
		t.Fatalf("hand the task to the agent: %s", r)
	}
	select {
	case <-llm.Finished():
	case <-time.After(3 * time.Minute):
		t.Fatalf("the agent did not finish with the model: %v", llm.Check())
	}
	steps := llm.RequestsOf(fakellm.KindScript)
	if len(steps) == 0 || !strings.Contains(steps[0].LastUser(), task) {
		t.Fatalf("the model did not get the task: %d request(s)", len(steps))
	}
	for _, s := range steps {
		if got := s.Header.Get("Authorization"); got != "Bearer "+llmKey {
			t.Errorf("the model got Authorization %q; want the real key, put in by the proxy", got)
		}
	}
	audit := mustDevaipod(t, nil, "audit", name, "-o", "json")
	injected := 0
	for _, line := range strings.Split(strings.TrimSpace(audit.stdout), "\n") {
		var rec proxy.Record
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Host == llmHost && rec.Port == 443 && strings.Join(rec.Credentials, ",") == variable {
			injected++
		}
	}
	if injected != len(steps) {
		t.Errorf("%d audit record(s) say %s was put in on %s:443, for %d request(s) of the model:\n%s", injected, variable, llmHost, len(steps), audit.stdout)
	}
	for what, out := range map[string]string{"up": up.stdout + up.stderr, "audit": audit.stdout} {
		if strings.Contains(out, llmKey) {
			t.Errorf("%s shows the real key:\n%s", what, out)
		}
	}
}

// podmanLogs is a container's log, or the error that stood in its way.
func podmanLogs(container string) string {
	out, err := exec.Command("podman", "logs", container).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%v: %s", err, out)
	}
	return string(out)
}
