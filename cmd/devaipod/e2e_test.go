package main

// End-to-end tests: they run the devaipod binary (DEVAIPOD_BIN, built by
// `make test`) against real rootless podman and attack the agent container
// from inside. Under CI=true a missing prerequisite fails the run.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devaipod/devaipod/pod"
)

// e2e skips (or, under CI, fails) when the real-podman prerequisites are
// missing, and returns the devaipod binary.
func e2e(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e test: skipped with -short")
	}
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf("e2e prerequisite missing under CI: "+format, args...)
		}
		t.Skipf("e2e prerequisite missing: "+format, args...)
	}
	bin := os.Getenv("DEVAIPOD_BIN")
	if bin == "" {
		missing("DEVAIPOD_BIN is not set (run `make test`)")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		missing("podman is not installed")
	}
	if out, err := exec.Command("podman", "image", "exists", "localhost/devaipod-helper:latest").CombinedOutput(); err != nil {
		missing("the helper image is missing (run `make images`): %v %s", err, out)
	}
	if out, err := exec.Command("podman", "image", "exists", "localhost/devaipod-default:latest").CombinedOutput(); err != nil {
		missing("the default image is missing (run `make images`): %v %s", err, out)
	}
	return bin
}

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return "exit " + itoa(r.code) + "\nstdout:\n" + r.stdout + "\nstderr:\n" + r.stderr
}

func itoa(n int) string { return strconv.Itoa(n) }

// devaipod runs the binary with args and the test's config.
func devaipod(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Getenv("DEVAIPOD_BIN"), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 10 * time.Second // the timeout ends the run even if a child holds its output
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run devaipod %v: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), code}
}

func mustDevaipod(t *testing.T, env []string, args ...string) result {
	t.Helper()
	r := devaipod(t, env, args...)
	if r.code != 0 {
		t.Fatalf("devaipod %s failed: %s", strings.Join(args, " "), r)
	}
	return r
}

func uniqueName(prefix string) string {
	b := make([]byte, 3)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// fixtureRepo makes a committed git repository with an origin remote.
func fixtureRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fixture")
	os.MkdirAll(dir, 0o755)
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("fixture\n"), 0o644)
	git("add", ".")
	git("commit", "-q", "-m", "fixture")
	git("remote", "add", "origin", "https://git.example.test/org/fixture.git")
	return dir
}

// standInConfig writes a config whose agent is busybox httpd serving the
// agent's /tmp on its loopback (a stand-in for opencode).
func standInConfig(t *testing.T, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "devaipod.toml")
	text := `[agent]
kind = "custom"
command = ["busybox", "httpd", "-f", "-p", "127.0.0.1:4096", "-h", "/tmp"]
` + extra
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// labelled lists every podman object that carries the pod's label.
func labelled(t *testing.T, short string) []string {
	t.Helper()
	filter := "label=io.devaipod.pod=" + short
	var found []string
	for _, args := range [][]string{
		{"pod", "ps", "-q", "--filter", filter},
		{"ps", "-aq", "--filter", filter},
		{"volume", "ls", "-q", "--filter", filter},
	} {
		out, err := exec.Command("podman", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("podman %v: %v %s", args, err, out)
		}
		found = append(found, strings.Fields(string(out))...)
	}
	out, err := exec.Command("podman", "secret", "ls", "--format", "{{.Name}}").CombinedOutput()
	if err != nil {
		t.Fatalf("podman secret ls: %v %s", err, out)
	}
	for _, s := range strings.Fields(string(out)) {
		if strings.HasPrefix(s, "devaipod-"+short+"-") {
			found = append(found, s)
		}
	}
	return found
}

func cleanup(t *testing.T, short string) {
	t.Cleanup(func() {
		devaipod(t, nil, "delete", "--wait", short)
		if left := labelled(t, short); len(left) > 0 {
			t.Errorf("objects left for %s after the test: %v", short, left)
		}
	})
}

// TestE2EUpContainment creates a pod and checks each promised property from
// inside its containers, then deletes it and checks nothing is left.
func TestE2EUpContainment(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	const trusted = "ghp_e2eTrustedValue4242"
	cfg := standInConfig(t, `[env.vars]
SHARED_VAR = "shared-value"
[trusted.env]
allowlist = ["E2E_TRUSTED_TOKEN"]
`)
	env := []string{"E2E_TRUSTED_TOKEN=" + trusted, "ANTHROPIC_API_KEY=sk-e2e-agent-key", "DEVAIPOD_AGENT_E2E=agent-only"}
	name := uniqueName("e2e")
	cleanup(t, name)

	up := mustDevaipod(t, env, "--config", cfg, "up", repo, "--trust", "--name", name)
	if !strings.Contains(up.stdout, "is ready") || !strings.Contains(up.stdout, "rootless") {
		t.Errorf("up output does not report a ready rootless pod:\n%s", up)
	}
	inAgent := func(script string) result {
		return devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", script)
	}
	inWorkspace := func(script string) result {
		return devaipod(t, nil, "exec", name, "--", "sh", "-c", script)
	}

	t.Run("agent has no capabilities and no-new-privileges", func(t *testing.T) {
		r := inAgent("grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status")
		for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("agent /proc/self/status lacks %q:\n%s", want, r)
			}
		}
	})
	t.Run("agent network is loopback only", func(t *testing.T) {
		r := inAgent("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
		if strings.TrimSpace(r.stdout) != "lo" {
			t.Errorf("agent interfaces = %q; want only lo", r.stdout)
		}
		if r := inAgent("tail -n +2 /proc/net/route; echo end"); r.code != 0 || strings.TrimSpace(r.stdout) != "end" {
			t.Errorf("agent has routes: %s", r)
		}
		ws := inWorkspace("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
		if !strings.Contains(ws.stdout, "tap0") && !strings.Contains(ws.stdout, "eth0") {
			t.Errorf("workspace has no pod network interface: %s", ws)
		}
	})
	t.Run("agent root filesystem is read-only", func(t *testing.T) {
		for _, path := range []string{"/evil", "/usr/bin/evil", "/etc/evil", "/opt/devaipod/evil"} {
			if r := inAgent("echo x > " + path); r.code == 0 {
				t.Errorf("agent wrote %s", path)
			}
		}
		if r := inAgent("echo x > /tmp/ok && echo x > $HOME/ok"); r.code != 0 {
			t.Errorf("agent cannot write /tmp or HOME: %s", r)
		}
	})
	t.Run("agent is a non-root user with its own HOME", func(t *testing.T) {
		r := inAgent(`echo "$(id -u) $HOME"`)
		if strings.TrimSpace(r.stdout) != "1000 /home/agent" {
			t.Errorf("agent uid/HOME = %q", r.stdout)
		}
		ws := inWorkspace(`echo "$HOME"`)
		if strings.TrimSpace(ws.stdout) == "/home/agent" {
			t.Error("workspace shares the agent's HOME")
		}
		if r := inAgent("ls -A $HOME; echo end"); r.code != 0 || strings.Contains(r.stdout, ".ssh") || strings.Contains(r.stdout, ".aws") {
			t.Errorf("agent HOME has host secrets: %s", r)
		}
		// No socket of the host (podman's above all) and no host home.
		r = inAgent("find / \\( -path /proc -o -path /sys \\) -prune -o -type s -print 2>/dev/null; ls /home; echo end")
		for _, line := range strings.Fields(r.stdout) {
			switch line {
			case "/run/devaipod/agent/agent.sock", "/run/devaipod/proxy/proxy.sock", "agent", "end":
			default:
				t.Errorf("agent sees %s", line)
			}
		}
		if !strings.Contains(r.stdout, "end") {
			t.Errorf("probe did not run: %s", r)
		}
	})
	t.Run("trusted env reaches the workspace only", func(t *testing.T) {
		if r := inWorkspace("printenv E2E_TRUSTED_TOKEN"); strings.TrimSpace(r.stdout) != trusted {
			t.Errorf("workspace E2E_TRUSTED_TOKEN = %q", r.stdout)
		}
		if r := inAgent("printenv E2E_TRUSTED_TOKEN"); r.code != 1 {
			t.Errorf("agent: printenv E2E_TRUSTED_TOKEN: %s; want exit 1 (unset)", r)
		}
		// Any form: environment of every process it can see, any file.
		r := inAgent("cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; echo files:; grep -rsl " + trusted + " /home /workspaces /tmp /run /etc /opt 2>/dev/null; echo done")
		if strings.Contains(r.stdout, trusted) || !strings.HasSuffix(r.stdout, "files:\ndone\n") {
			t.Errorf("agent can read the trusted value (in a process's environment, or in the files listed), or the probe did not run:\n%s", r)
		}
		for _, c := range []string{"workspace", "agent"} {
			out, err := exec.Command("podman", "inspect", "devaipod-"+name+"-"+c).CombinedOutput()
			if err != nil {
				t.Fatalf("podman inspect %s: %v %s", c, err, out)
			}
			if strings.Contains(string(out), trusted) {
				t.Errorf("podman inspect of the %s shows the trusted value", c)
			}
		}
	})
	t.Run("env partition", func(t *testing.T) {
		// The LLM key is the proxy's: the agent holds a placeholder.
		if r := inAgent("printenv SHARED_VAR E2E ANTHROPIC_API_KEY"); !strings.HasPrefix(r.stdout, "shared-value\nagent-only\ndevaipod-ANTHROPIC_API_KEY-") {
			t.Errorf("agent env = %q", r.stdout)
		}
		if r := inWorkspace("printenv SHARED_VAR"); strings.TrimSpace(r.stdout) != "shared-value" {
			t.Errorf("workspace SHARED_VAR = %q", r.stdout)
		}
		if r := inWorkspace("printenv ANTHROPIC_API_KEY E2E DEVAIPOD_AGENT_E2E"); strings.TrimSpace(r.stdout) != "" {
			t.Errorf("workspace has agent-only variables: %q", r.stdout)
		}
	})
	t.Run("repository is in both and writable by both", func(t *testing.T) {
		if r := inWorkspace("cat README.md && git log --oneline | wc -l && git remote get-url origin && git status --porcelain && echo clean"); r.stdout != "fixture\n1\nhttps://git.example.test/org/fixture.git\nclean\n" {
			t.Errorf("workspace repo: %s", r)
		}
		if r := inAgent("echo from-agent >> README.md && pwd"); r.code != 0 || !strings.Contains(r.stdout, "/workspaces/fixture") {
			t.Errorf("agent cannot write the repo: %s", r)
		}
		if r := inWorkspace("grep from-agent README.md && echo from-ws > ws.txt"); r.code != 0 {
			t.Errorf("workspace does not see the agent's write or cannot write: %s", r)
		}
		if r := inAgent("cat ws.txt"); strings.TrimSpace(r.stdout) != "from-ws" {
			t.Errorf("agent does not see the workspace's file: %s", r)
		}
		// What the (root) workspace creates stays writable by the agent.
		if r := inWorkspace("mkdir -p ws-dir/sub && echo x > ws-dir/sub/f && git add -A && git -c user.name=w -c user.email=w@w commit -qm ws"); r.code != 0 {
			t.Fatalf("workspace: %s", r)
		}
		// Each side commits to a git directory of its own: the agent's
		// history has its commit, not the workspace's.
		if r := inAgent("echo more >> ws.txt && echo y > ws-dir/sub/new && echo z >> ws-dir/sub/f && git add -A && git -c user.name=a -c user.email=a@a commit -qm agent && git log --format=%s"); r.code != 0 || r.stdout != "agent\nfixture\n" {
			t.Errorf("agent cannot change what the workspace created, or commit: %s", r)
		}
		if r := inWorkspace("git log --format=%s && git status --porcelain"); r.stdout != "ws\nfixture\n M ws-dir/sub/f\n M ws.txt\n?? ws-dir/sub/new\n" {
			t.Errorf("the workspace's history or its view of the agent's edits: %s", r)
		}
	})
	t.Run("workspace reaches the agent's server through the bridge", func(t *testing.T) {
		if r := inAgent("echo agent-server-says-hi > /tmp/index.html"); r.code != 0 {
			t.Fatalf("%s", r)
		}
		r := inWorkspace(`curl -sf "$DEVAIPOD_AGENT_URL/index.html" && command -v oc`)
		if !strings.Contains(r.stdout, "agent-server-says-hi") || !strings.Contains(r.stdout, "/opt/devaipod/bin/oc") {
			t.Errorf("bridge or oc shim missing: %s", r)
		}
		if r := inWorkspace("touch /run/devaipod/agent/x"); r.code == 0 {
			t.Error("workspace can write the agent's socket dir")
		}
		// The agent owns its socket's directory. Putting a symlink in the
		// socket's place must not make the workspace's bridge follow it.
		if r := inAgent("cd /run/devaipod/agent && mv agent.sock real.sock && ln -s real.sock agent.sock"); r.code != 0 {
			t.Fatalf("%s", r)
		}
		if r := inWorkspace(`curl -sf --max-time 5 "$DEVAIPOD_AGENT_URL/index.html"`); r.code == 0 {
			t.Errorf("the workspace's bridge followed a symlink the agent planted: %s", r)
		}
		if r := inAgent("cd /run/devaipod/agent && rm agent.sock && mv real.sock agent.sock"); r.code != 0 {
			t.Fatalf("%s", r)
		}
	})
	t.Run("status list logs", func(t *testing.T) {
		var st struct {
			Name       string
			State      string
			AgentReady *bool `json:"agent_ready"`
			Containers []struct{ Role, State string }
		}
		r := mustDevaipod(t, nil, "status", "devaipod-"+name, "-o", "json")
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("status json: %v\n%s", err, r)
		}
		if st.Name != name || st.State != "running" || st.AgentReady == nil || !*st.AgentReady || len(st.Containers) != 3 {
			t.Errorf("status = %+v", st)
		}
		r = mustDevaipod(t, nil, "list", "-o", "json")
		if !strings.Contains(r.stdout, `"name": "`+name+`"`) {
			t.Errorf("list lacks %s: %s", name, r)
		}
		mustDevaipod(t, nil, "logs", name, "--tail", "5")
	})
	t.Run("stop and start", func(t *testing.T) {
		start := time.Now()
		mustDevaipod(t, nil, "stop", name)
		if d := time.Since(start); d > 8*time.Second {
			t.Errorf("stop took %s: the init does not forward SIGTERM", d)
		}
		var st struct{ State string }
		json.Unmarshal([]byte(mustDevaipod(t, nil, "status", name, "-o", "json").stdout), &st)
		if st.State == "running" {
			t.Errorf("state after stop = %s", st.State)
		}
		mustDevaipod(t, nil, "start", name)
		if r := inWorkspace("cat ws.txt"); r.stdout != "from-ws\nmore\n" {
			t.Errorf("workspace lost its files across stop/start: %s", r)
		}
	})
	t.Run("delete --wait removes every labelled object", func(t *testing.T) {
		mustDevaipod(t, nil, "delete", "--wait", name)
		if left := labelled(t, name); len(left) > 0 {
			t.Errorf("left after delete: %v", left)
		}
	})
}

// TestE2EUpFailuresLeaveNothing makes up fail for real at several steps.
func TestE2EUpFailuresLeaveNothing(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	cfg := standInConfig(t, "")
	tests := []struct {
		name string
		args []string
		cfg  string
		want string
	}{
		{"bad image", []string{"--image", "localhost/devaipod-no-such-image:1"}, cfg, "is not in podman's storage: build it, or name another with --image"},
		{"clone failure", []string{"--source", "file:///nonexistent/repo.git"}, cfg, "clone"},
		{"agent never ready", []string{"--timeout", "3s"}, standInConfig(t, ""), "did not become ready"},
		// Fails creating the workspace container, after the pod, the
		// volumes and a secret exist.
		{"container create fails", []string{"--trust"}, standInConfig(t, "[trusted.env]\nsecrets = [\"X=e2e-no-such-secret\"]\n[trusted.env.vars]\nY = \"y\"\n"), "create container"},
	}
	// The never-ready agent exits at once.
	never := filepath.Join(t.TempDir(), "never.toml")
	os.WriteFile(never, []byte("[agent]\nkind = \"custom\"\ncommand = [\"sh\", \"-c\", \"echo agent-is-broken; exit 3\"]\n"), 0o644)
	tests[2].cfg = never
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := uniqueName("e2e-fail")
			args := []string{"--config", tt.cfg, "up", repo, "--name", name}
			for i := 0; i < len(tt.args); i++ {
				if tt.args[i] == "--source" {
					args[3] = tt.args[i+1]
					i++
					continue
				}
				args = append(args, tt.args[i])
			}
			r := devaipod(t, nil, args...)
			if r.code == 0 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("up: %s\nwant failure mentioning %q", r, tt.want)
			}
			if tt.name == "agent never ready" && !strings.Contains(r.stderr, "agent-is-broken") {
				t.Errorf("the error does not show the agent's log: %s", r.stderr)
			}
			if left := labelled(t, name); len(left) > 0 {
				t.Errorf("failed up left %v", left)
			}
		})
	}
}

// TestE2EBadInput checks one-line errors and non-zero exits.
func TestE2EBadInput(t *testing.T) {
	e2e(t)
	notGit := t.TempDir()
	badCfg := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(badCfg, []byte("[agent]\nimage = \"x\"\ncomand = \"typo\"\n"), 0o644)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"up", filepath.Join(notGit, "missing")}, "does not exist"},
		{[]string{"up", notGit}, "is not a git repository"},
		{[]string{"up", "ftp://host/repo.git"}, "unsupported git URL scheme"},
		{[]string{"up", notGit, "--name", "Bad_Name"}, "invalid"},
		{[]string{"status", "no-such-pod-x"}, "not found"},
		{[]string{"delete", "devaipod-no-such-pod-x"}, "not found"},
		{[]string{"logs", "x", "-c", "nope"}, "unknown container"},
		{[]string{"logs", "no-such-pod-x"}, "pod no-such-pod-x: not found"},
		{[]string{"up", notGit, "--pull", "sometimes"}, `--pull: "sometimes" is not a pull policy: use missing, always or never`},
		{[]string{"--config", badCfg, "up", notGit}, badCfg + ":3: agent.comand: unknown key"},
		{[]string{"list", "-o", "yaml"}, "--output must be text or json"},
	}
	for _, tt := range tests {
		r := devaipod(t, nil, tt.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("devaipod %v: %s\nwant a failure mentioning %q", tt.args, r, tt.want)
		}
		if first, _, _ := strings.Cut(r.stderr, "\n"); !strings.HasPrefix(first, "Error: ") {
			t.Errorf("devaipod %v: first stderr line %q is not an error line", tt.args, first)
		}
	}
}

// TestE2EConcurrentUp runs two ups of the same name at once: one wins, the
// other fails cleanly without touching the winner.
func TestE2EConcurrentUp(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	cfg := standInConfig(t, "")
	name := uniqueName("e2e-race")
	cleanup(t, name)
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = devaipod(t, nil, "--config", cfg, "up", repo, "--name", name)
		}()
	}
	wg.Wait()
	wins := 0
	for _, r := range results {
		if r.code == 0 {
			wins++
		} else if !strings.Contains(r.stderr, "already exists") && !strings.Contains(r.stderr, "being created") {
			t.Errorf("loser's error is unclear: %s", r)
		}
	}
	if wins != 1 {
		t.Fatalf("%d ups won; want exactly 1: %v", wins, results)
	}
	var st struct{ State string }
	json.Unmarshal([]byte(mustDevaipod(t, nil, "status", name, "-o", "json").stdout), &st)
	if st.State != "running" {
		t.Errorf("winner's pod is %q after the race", st.State)
	}
}

// TestE2EInterruptAndGC interrupts one up with SIGINT (Ctrl-C) while it
// waits for the agent, and kills another with SIGKILL between creating its
// containers and starting them: the first cleans up after itself, gc finds
// and removes what the second left.
func TestE2EInterruptAndGC(t *testing.T) {
	bin := e2e(t)
	repo := fixtureRepo(t)
	slow := filepath.Join(t.TempDir(), "slow.toml")
	os.WriteFile(slow, []byte("[agent]\nkind = \"custom\"\ncommand = [\"sleep\", \"600\"]\n"), 0o644)

	// A lifecycle command that runs on: an exec, which podman's bindings
	// would wait for whatever the context says.
	lifecycleRepo := fixtureRepo(t)
	commitFiles(t, lifecycleRepo, map[string]string{".devcontainer/devcontainer.json": `{"image": "localhost/devaipod-default:latest", "postCreateCommand": "sleep 600"}`})

	// How up is started: as it is, with SIGHUP at its default whatever
	// this test inherited (a closed terminal), or under nohup (SIGHUP
	// ignored, which up must keep).
	const (
		plain = iota
		hangable
		nohup
	)
	tests := []struct {
		name         string
		sig          syscall.Signal
		after        string // the progress line at which the signal is sent
		repo, config string
		delay        time.Duration // after the line, before the signal
		launch       int
	}{
		{"SIGINT waiting for the agent", syscall.SIGINT, "waiting for the agent", repo, slow, 0, plain},
		{"SIGHUP waiting for the agent", syscall.SIGHUP, "waiting for the agent", repo, slow, 0, hangable},
		{"SIGHUP under nohup", syscall.SIGHUP, "waiting for the agent", repo, slow, 0, nohup},
		// (The line comes just before the exec: wait until it runs.)
		{"SIGINT in a lifecycle command", syscall.SIGINT, "running postCreateCommand", lifecycleRepo, standInConfig(t, ""), 2 * time.Second, plain},
		{"SIGKILL", syscall.SIGKILL, "creating container", repo, slow, 0, plain},
		// Past the pod's start: it runs with every container, but its
		// checks never passed.
		{"SIGKILL after the pod started", syscall.SIGKILL, "waiting for the agent", repo, slow, time.Second, plain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := uniqueName("e2e-sig")
			cleanup(t, name)
			clonesBefore, _ := filepath.Glob(filepath.Join(os.TempDir(), pod.CloneDirPrefix+"*"))
			args := []string{"--config", tt.config, "up", tt.repo, "--name", name, "--timeout", "60s"}
			cmd := exec.Command(bin, args...)
			switch tt.launch {
			case hangable:
				self, err := os.Executable()
				if err != nil {
					t.Fatal(err)
				}
				cmd = exec.Command(self, args...)
				cmd.Env = append(os.Environ(), execHangableEnv+"="+bin)
			case nohup:
				cmd = exec.Command("nohup", append([]string{bin}, args...)...)
			}
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var log strings.Builder
			sent := false
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				log.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), tt.after) {
					time.Sleep(tt.delay)
					// SIGSTOP first freezes up right at this step, so
					// SIGKILL lands before it can start the pod.
					if tt.sig == syscall.SIGKILL {
						cmd.Process.Signal(syscall.SIGSTOP)
					}
					cmd.Process.Signal(tt.sig)
					sent = true
					break
				}
			}
			restc := make(chan []byte, 1)
			go func() { rest, _ := io.ReadAll(stderr); restc <- rest }()
			if tt.launch == nohup && sent {
				// It goes on; Ctrl-C still ends it.
				select {
				case rest := <-restc:
					t.Fatalf("up under nohup ended on SIGHUP:\n%s%s", log.String(), rest)
				case <-time.After(3 * time.Second):
				}
				cmd.Process.Signal(syscall.SIGINT)
			}
			// up must end at once, whatever podman is running for it.
			start := time.Now()
			timer := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
			log.Write(<-restc)
			if !sent {
				t.Fatalf("up never reached %q, so no signal was sent:\n%s", tt.after, log.String())
			}
			err = cmd.Wait()
			timer.Stop()
			if took := time.Since(start); took > 25*time.Second {
				t.Errorf("up took %v to end after %s", took.Round(time.Second), tt.sig)
			}
			if err == nil {
				t.Fatalf("up exited 0 after %s", tt.sig)
			}
			if tt.sig != syscall.SIGKILL {
				if !strings.Contains(log.String(), "interrupted") {
					t.Errorf("up did not say it was interrupted:\n%s", log.String())
				}
				if left := labelled(t, name); len(left) > 0 {
					t.Errorf("Ctrl-C left %v\nstderr: %s", left, log.String())
				}
				return
			}
			if left := labelled(t, name); len(left) == 0 {
				t.Fatalf("SIGKILL left nothing, so this test proves nothing about gc\n%s", log.String())
			}
			// Its clone of the repository, in the temporary directory,
			// is a leftover too: its lock went with it.
			var clones []string
			for _, dir := range pod.StaleTempDirs() {
				if strings.HasPrefix(filepath.Base(dir), pod.CloneDirPrefix) && !slices.Contains(clonesBefore, dir) {
					clones = append(clones, dir)
				}
			}
			if len(clones) == 0 {
				t.Errorf("the killed up left no clone folder that gc takes for a leftover")
			}
			if r := devaipod(t, nil, "--config", tt.config, "up", tt.repo, "--name", name); r.code == 0 || !strings.Contains(r.stderr, "did not finish it") {
				t.Errorf("up of the killed up's pod: want it refused as unfinished: %s", r)
			}
			r := mustDevaipod(t, nil, "gc", "-o", "json")
			if !strings.Contains(r.stdout, "devaipod-"+name) {
				t.Errorf("gc did not report the leftovers: %s", r)
			}
			if left := labelled(t, name); len(left) > 0 {
				t.Errorf("gc left %v", left)
			}
			for _, dir := range clones {
				if !strings.Contains(r.stdout, dir) {
					t.Errorf("gc did not report the killed up's clone folder %s: %s", dir, r)
				}
				if _, err := os.Lstat(dir); err == nil {
					t.Errorf("gc left the killed up's clone folder %s", dir)
				}
			}
		})
	}
}

// execHangableEnv names the devaipod that the test binary, started with it
// set, runs in its own place with SIGHUP at its default: exec resets a
// signal the process catches, not one it ignores (a test run under nohup
// or setsid would pass SIGHUP on ignored).
const execHangableEnv = "DEVAIPOD_TEST_EXEC_HANGABLE"

func TestMain(m *testing.M) {
	if bin := os.Getenv(execHangableEnv); bin != "" {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
		env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, execHangableEnv+"=") })
		err := syscall.Exec(bin, append([]string{bin}, os.Args[1:]...), env)
		fmt.Fprintln(os.Stderr, "exec", bin+":", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}
