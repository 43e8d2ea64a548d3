package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestE2EAnotherPodIsOutOfReach attacks another task's pod from an agent
// (the threat table's last row). Pod B has two things worth stealing: a
// server in its workspace published on the host's loopback (forwardPorts),
// serving a marker file from B's workspace volume, and its agent's server,
// serving a marker from the agent's /tmp. Each is first shown reachable
// where it should be (the control: the host for the published port, B's
// workspace for B's agent). Then pod A's agent tries every way to them:
// directly, through its proxy as plain HTTP and as CONNECT, by the names
// and addresses the host's loopback goes by; and looks for B's files and
// processes. None gets a marker.
func TestE2EAnotherPodIsOutOfReach(t *testing.T) {
	e2e(t)
	port := freePort(t)
	wsMarker := fmt.Sprintf("workspace-of-b-%d", time.Now().UnixNano())
	agentMarker := "agent-of-" + wsMarker
	repoB := fixtureRepo(t)
	commitFiles(t, repoB, map[string]string{
		"marker.txt": wsMarker + "\n",
		".devcontainer/devcontainer.json": fmt.Sprintf(`{"image": "localhost/devaipod-default:latest",
  "postStartCommand": "(busybox httpd -p 0.0.0.0:%d -h /workspaces/fixture &)",
  "forwardPorts": [%d]}
`, port, port),
	})
	cfg := standInConfig(t, "")
	b := uniqueName("e2e-pod-b")
	cleanup(t, b)
	// Trusted: an untrusted repository's ports are not published.
	mustDevaipod(t, nil, "--config", cfg, "up", repoB, "--name", b, "--trust")
	// Pod A's allowlist names the host's loopback names, as a careless
	// rule might: the proxy still refuses them by the address they
	// resolve to.
	cfgA := standInConfig(t, fmt.Sprintf("[network]\nallow = [\"localhost:%d\", \"host.containers.internal:%d\", \"localhost:4096\"]\n", port, port))
	a := uniqueName("e2e-pod-a")
	cleanup(t, a)
	mustDevaipod(t, nil, "--config", cfgA, "up", fixtureRepo(t), "--name", a)

	// The controls.
	var body string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/marker.txt", port))
		if err == nil {
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if body = string(got); strings.Contains(body, wsMarker) {
				break
			}
		}
	}
	if !strings.Contains(body, wsMarker) {
		t.Fatalf("control: pod B's published port %d does not serve its marker to the host: %q", port, body)
	}
	mustDevaipod(t, nil, "exec", b, "-c", "agent", "--", "sh", "-c", "echo "+agentMarker+" > /tmp/agent-marker")
	if r := mustDevaipod(t, nil, "exec", b, "--", "curl", "-sS", "--max-time", "5", "http://127.0.0.1:4096/agent-marker"); !strings.Contains(r.stdout, agentMarker) {
		t.Fatalf("control: pod B's workspace does not reach its agent's marker: %s", r)
	}

	// The attacks, from pod A's agent. Each line: what was tried, the
	// HTTP status (and the proxy's answer to a CONNECT), what came back.
	var attacks []string
	for _, target := range []string{
		fmt.Sprintf("127.0.0.1:%d/marker.txt", port),
		fmt.Sprintf("localhost:%d/marker.txt", port),
		fmt.Sprintf("10.0.2.2:%d/marker.txt", port),
		fmt.Sprintf("host.containers.internal:%d/marker.txt", port),
		"127.0.0.1:4096/agent-marker",
		"localhost:4096/agent-marker",
	} {
		attacks = append(attacks,
			fmt.Sprintf(`try "direct %[1]s" curl -s --max-time 3 --noproxy '*' http://%[1]s`, target),
			fmt.Sprintf(`try "proxy %[1]s" curl -s --max-time 3 --noproxy '' -x "$HTTP_PROXY" http://%[1]s`, target),
			fmt.Sprintf(`try "connect %[1]s" curl -s --max-time 3 --noproxy '' -p -x "$HTTP_PROXY" http://%[1]s`, target))
	}
	script := `try() { what=$1; shift; out=$("$@" -o /tmp/attack-body -w '%{http_code}/%{http_connect}' 2>/dev/null); echo "$what: $out: $(head -c 200 /tmp/attack-body 2>/dev/null | tr '\n' ' ')"; rm -f /tmp/attack-body; }
` + strings.Join(attacks, "\n") + `
echo "files: $(ls /workspaces/fixture)"
echo "found: $(grep -rlsF ` + wsMarker + ` /workspaces /home /tmp /run /mnt /media /srv /opt /var 2>/dev/null | grep -v '^/tmp/attack-body$')"
echo "processes: $(ps -eo args | grep -c '[h]ttpd -p 0.0.0.0')"
`
	r := devaipod(t, nil, "exec", a, "-c", "agent", "--", "sh", "-c", script)
	t.Logf("attacks from pod A's agent:\n%s", r.stdout)
	if strings.Contains(r.stdout, wsMarker) {
		t.Errorf("pod A's agent got a marker of pod B:\n%s", r.stdout)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != len(attacks)+3 {
		t.Fatalf("the attack script did not run to the end: %s", r)
	}
	for _, line := range lines[:len(attacks)] {
		what, rest, _ := strings.Cut(line, ": ")
		status, _, _ := strings.Cut(rest, ": ")
		switch {
		case strings.HasPrefix(what, "direct "):
			// No network of its own: nothing connects.
			if status != "000/000" && !strings.Contains(what, ":4096/") {
				t.Errorf("%s: connected (%s)", what, status)
			}
		case strings.HasPrefix(what, "proxy "):
			if status != "403/000" {
				t.Errorf("%s: the proxy answered %s; want 403", what, status)
			}
		case strings.HasPrefix(what, "connect "):
			if !strings.HasSuffix(status, "/403") {
				t.Errorf("%s: the proxy answered the CONNECT with %s; want 403", what, status)
			}
		}
	}
	for i, want := range []string{"files: README.md", "found:", "processes: 0"} {
		if got := strings.TrimSpace(lines[len(attacks)+i]); got != want {
			t.Errorf("pod A's agent: %q; want %q", got, want)
		}
	}
}
