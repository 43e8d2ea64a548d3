package podman

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/specgen"
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
)

// TestContainerSpec checks the translation of the plan's hardening into
// podman's spec: dropping a field here would pass every other unit test.
func TestContainerSpec(t *testing.T) {
	// The plan package's golden plan is the contract between the two.
	data, err := os.ReadFile("../plan/testdata/plan-default.json")
	if err != nil {
		t.Fatal(err)
	}
	var pl plan.Plan
	if err := json.Unmarshal(data, &pl); err != nil {
		t.Fatal(err)
	}
	byRole := map[string]*specgen.SpecGenerator{}
	for _, c := range pl.Containers {
		s, err := containerSpec(pl.Pod.Name, c, hostSide{mountpoints: map[string]string{plan.ObjectName(pl.Name, "workspace"): "/vol"}, seccompProfile: "/profile.json"})
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if s.Pod != pl.Pod.Name || s.Name != c.Name || s.StopTimeout == nil || *s.StopTimeout != 5 {
			t.Errorf("%s: pod %q name %q stop timeout %v", c.Name, s.Pod, s.Name, s.StopTimeout)
		}
		if s.LogConfiguration == nil || s.LogConfiguration.Size != plan.LogSizeMax {
			t.Errorf("%s: log configuration %+v; want the size capped", c.Name, s.LogConfiguration)
		}
		if r := s.ResourceLimits; (c.Role == plan.RoleProxy || c.Role == plan.RoleGator) && (r == nil || r.Memory == nil || r.Pids == nil) {
			t.Errorf("%s: a sidecar without memory and pids limits: %+v", c.Name, r)
		}
		byRole[c.Role] = s
	}
	agent := byRole[plan.RoleAgent]
	if agent.NetNS.NSMode != specgen.NoNetwork || agent.IpcNS.NSMode != specgen.Private {
		t.Errorf("agent netns %v ipcns %v", agent.NetNS, agent.IpcNS)
	}
	if len(agent.CapDrop) != 1 || agent.CapDrop[0] != "ALL" || len(agent.CapAdd) != 0 {
		t.Errorf("agent caps drop %v add %v", agent.CapDrop, agent.CapAdd)
	}
	if !*agent.NoNewPrivileges || !*agent.ReadOnlyFilesystem || *agent.ReadWriteTmpfs {
		t.Errorf("agent no-new-privileges %v read-only %v rw-tmpfs %v", *agent.NoNewPrivileges, *agent.ReadOnlyFilesystem, *agent.ReadWriteTmpfs)
	}
	if agent.User != "1000:1000" || len(agent.Secrets) != 0 || len(agent.EnvSecrets) != 0 {
		t.Errorf("agent user %q secrets %v %v", agent.User, agent.Secrets, agent.EnvSecrets)
	}
	if agent.ResourceLimits == nil || agent.ResourceLimits.Pids == nil || agent.ResourceLimits.Pids.Limit != 512 ||
		agent.ResourceLimits.Memory == nil || *agent.ResourceLimits.Memory.Limit != 4<<30 {
		t.Errorf("agent limits = %+v", agent.ResourceLimits)
	}
	var tmp bool
	binds := map[string]string{}
	for _, m := range agent.Mounts {
		if m.Destination == "/tmp" && m.Type == "tmpfs" {
			tmp = true
		}
		if m.Type == "bind" {
			binds[m.Destination] = m.Source + " " + strings.Join(m.Options, ",")
		}
	}
	if !tmp {
		t.Errorf("agent has no tmpfs /tmp: %v", agent.Mounts)
	}
	// The protected paths are read-only binds of the same path in the
	// volume; the repository's folder is pinned read-write. Nothing of the
	// workspace's .git is bound: the agent's .git is a volume of its own.
	if len(binds) != 5 { // the folder and the four protected paths
		t.Errorf("agent binds %v", binds)
	}
	for dest, want := range map[string]string{
		pl.Workdir:                    "/vol/demo rbind,rw",
		pl.Workdir + "/.devcontainer": "/vol/demo/.devcontainer rbind,ro",
	} {
		if binds[dest] != want {
			t.Errorf("agent bind at %s = %q, want %q", dest, binds[dest], want)
		}
	}
	if agent.SeccompProfilePath != "/profile.json" || byRole[plan.RoleWorkspace].SeccompProfilePath != "" {
		t.Errorf("seccomp profiles: agent %q workspace %q", agent.SeccompProfilePath, byRole[plan.RoleWorkspace].SeccompProfilePath)
	}
	volumes := map[string]string{}
	for _, v := range agent.Volumes {
		ro := len(v.Options) == 1 && v.Options[0] == "ro"
		if (v.Dest == plan.ProxySocketDir) != ro {
			t.Errorf("agent volume %s at %s options %v", v.Name, v.Dest, v.Options)
		}
		volumes[v.Dest] = v.Name
	}
	if volumes[pl.Workdir+"/.git"] != plan.ObjectName(pl.Name, plan.VolumeAgentGit) {
		t.Errorf("the agent's .git is %q, not its own volume", volumes[pl.Workdir+"/.git"])
	}
	if len(agent.ImageVolumes) != 1 || agent.ImageVolumes[0].ReadWrite {
		t.Errorf("agent image mounts %+v", agent.ImageVolumes)
	}

	ws := byRole[plan.RoleWorkspace]
	if len(ws.EnvSecrets) != 0 {
		t.Errorf("workspace uses env secrets (podman 4.3's inspect shows them): %v", ws.EnvSecrets)
	}
	for _, sec := range ws.Secrets {
		if sec.Mode != 0o400 || sec.Target[:len(plan.SecretDir)] != plan.SecretDir {
			t.Errorf("workspace secret %+v", sec)
		}
	}
	if len(ws.Secrets) != 3 {
		t.Errorf("workspace secrets = %d; want 3", len(ws.Secrets))
	}
	proxy := byRole[plan.RoleProxy]
	if proxy.User == "" || proxy.User == agent.User || !*proxy.ReadOnlyFilesystem || len(proxy.CapDrop) != 1 {
		t.Errorf("proxy user %q read-only %v caps %v", proxy.User, *proxy.ReadOnlyFilesystem, proxy.CapDrop)
	}
}

func TestVersions(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		less bool
	}{{"4.3.1", "4.3.0", false}, {"4.2.9", "4.3.0", true}, {"4.10.0", "4.3.0", false}, {"5.0.0-rc1", "4.3.0", false}, {"4.3.0", "4.3.0", false}} {
		if got := versionLess(tt.a, tt.b); got != tt.less {
			t.Errorf("versionLess(%q, %q) = %v", tt.a, tt.b, got)
		}
	}
}

// TestStartServiceFails runs startService against a stand-in podman whose
// service dies at once, as podman's does on stale rootless state: the
// failure comes without waiting out the start timeout, with podman's last
// line and the remedy for that state.
func TestStartServiceFails(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\necho 'level=error msg=\"invalid internal status, try resetting the pause process with \\\"podman system migrate\\\": could not find any running process\"' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "podman"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	t.Setenv("TMPDIR", t.TempDir())
	start := time.Now()
	_, err := startService(context.Background(), errors.New("no socket"))
	var ce *ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("startService = %v; want a ConnectError", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("startService took %s to notice the service had exited", took)
	}
	if !strings.Contains(ce.Error(), "invalid internal status") || !strings.Contains(ce.Error(), "no socket") {
		t.Errorf("error = %q; want the service's last line and the cause", ce.Error())
	}
	if !strings.Contains(ce.Hint, "run `podman system migrate`") {
		t.Errorf("hint = %q; want podman system migrate", ce.Hint)
	}
	if left, _ := filepath.Glob(filepath.Join(os.Getenv("TMPDIR"), "devaipod-podman-*")); len(left) > 0 {
		t.Errorf("startService left %v", left)
	}
	if got := serviceHint("Error: something else"); !strings.Contains(got, "podman info") {
		t.Errorf("serviceHint(other) = %q; want podman info", got)
	}
}

func TestPullable(t *testing.T) {
	for ref, want := range map[string]bool{
		"registry.example.test/org/image:1":  true,
		"127.0.0.1:5000/e2e/busybox:1":       true,
		"debian:12":                          true, // a short name: podman resolves it
		"localhost/devaipod-default":         false,
		"localhost/devaipod-build-x:abc":     false,
		"0123456789ab":                       false, // an image id
		"sha256:" + strings.Repeat("ab", 32): false,
		"cafe":                               true, // too short for an id: a name
	} {
		if got := pod.Pullable(ref); got != want {
			t.Errorf("Pullable(%q) = %v; want %v", ref, got, want)
		}
	}
}

func TestRootlessFromSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "podman.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rootless, known := (&Podman{URI: "unix://" + sock}).Rootless()
	if !known || rootless != (os.Getuid() != 0) {
		t.Errorf("Rootless() of a socket owned by uid %d = %v, %v", os.Getuid(), rootless, known)
	}
	for _, uri := range []string{"ssh://u@host/run/podman/podman.sock", "unix:///nonexistent/podman.sock"} {
		if _, known := (&Podman{URI: uri}).Rootless(); known {
			t.Errorf("Rootless() of %s claims to know", uri)
		}
	}
}

// TestExecEndsWithItsContext: the bindings read an upgraded attach without
// looking at the context, so a command that never ends would hold Ctrl-C
// and every timeout. Exec returns when its context ends, and what the
// attach gets after that reaches none of the caller's writers.
func TestExecEndsWithItsContext(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "podman.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Libpod-API-Version", "4.3.1")
		w.Header().Set("API-Version", "1.41")
		w.Header().Set("Content-Type", "application/json")
		switch path.Base(r.URL.Path) {
		case "_ping":
			w.Write([]byte("OK"))
		case "exec":
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"Id":"abc"}`))
		case "json":
			w.Write([]byte(`{"ID":"abc","ProcessConfig":{"tty":false},"Running":true}`))
		case "start":
			// The command starts, writes a line, and runs on.
			c, bw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			bw.WriteString("HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
			bw.Write(append([]byte{1, 0, 0, 0, 0, 0, 0, 6}, "early\n"...))
			bw.Flush()
			<-release
			bw.Write(append([]byte{1, 0, 0, 0, 0, 0, 0, 5}, "late\n"...))
			bw.Flush()
		default:
			w.Write([]byte(`{}`))
		}
	})
	go http.Serve(l, mux)
	p, err := Connect(context.Background(), "unix://"+sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var got pod.SyncBuffer
	res := make(chan error, 1)
	go func() {
		_, _, err := p.Exec(ctx, "c", pod.ExecSpec{Cmd: []string{"sleep", "infinity"}, Output: &got})
		res <- err
	}()
	select {
	case err := <-res:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Exec returned %v; want the context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Exec still waits for its command 9 s after its context ended")
	}
	release <- struct{}{}
	time.Sleep(100 * time.Millisecond)
	if got.String() != "early\n" {
		t.Errorf("the caller's writer got %q; want only what came before the deadline", got.String())
	}
}

func TestParentPid(t *testing.T) {
	got, err := parentPid(os.Getpid())
	if err != nil || got != os.Getppid() {
		t.Errorf("parentPid(self) = %d, %v; want %d", got, err, os.Getppid())
	}
	if _, err := parentPid(-1); err == nil {
		t.Error("parentPid of no process did not fail")
	}
	// A command name with spaces and parentheses in /proc/PID/stat.
	odd := filepath.Join(t.TempDir(), "x) 1 (y")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(odd, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(odd, "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if got, err := parentPid(cmd.Process.Pid); err != nil || got != os.Getpid() {
		t.Errorf("parentPid of %q = %d, %v; want %d", odd, got, err, os.Getpid())
	}
}

func TestInitOfItsNamespace(t *testing.T) {
	if initOfItsNamespace(os.Getpid()) || initOfItsNamespace(-1) {
		t.Error("this test process, or no process, taken for the init of a PID namespace")
	}
	// sleep as pid 1 of a PID namespace of its own (unshare forks it).
	cmd := exec.Command("unshare", "-rpf", "sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var child int
	for deadline := time.Now().Add(5 * time.Second); child == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		if f := strings.Fields(string(b)); len(f) > 0 {
			child, _ = strconv.Atoi(f[0])
		}
	}
	if child == 0 {
		t.Fatal("unshare started no child")
	}
	if !initOfItsNamespace(child) {
		t.Errorf("pid %d, pid 1 of its namespace, not taken for an init", child)
	}
}
