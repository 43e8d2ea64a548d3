package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestE2EDoctorAndLimits checks that doctor and up tell the truth about
// resource limits on this host, and that the /tmp cap holds everywhere.
// limitsUnenforced tells whether this host's podman ignores resource
// limits (rootless on cgroup v1), and whether it is rootless.
func limitsUnenforced(t *testing.T) (unenforced, rootless bool) {
	t.Helper()
	out, err := exec.Command("podman", "info", "--format", "{{.Host.Security.Rootless}} {{.Host.CgroupsVersion}}").Output()
	if err != nil {
		t.Fatalf("podman info: %v", err)
	}
	return strings.TrimSpace(string(out)) == "true v1", strings.HasPrefix(string(out), "true ")
}

func TestE2EDoctorAndLimits(t *testing.T) {
	e2e(t)
	unenforced, rootless := limitsUnenforced(t)
	mode := map[bool]string{true: "rootless", false: "rootful"}[rootless]

	r := devaipod(t, nil, "doctor", "-o", "json")
	var checks []struct{ Name, Status, Detail string }
	if err := json.Unmarshal([]byte(r.stdout), &checks); err != nil {
		t.Fatalf("doctor json: %v\n%s", err, r)
	}
	status := map[string]string{}
	for _, c := range checks {
		status[c.Name] = c.Status
		if c.Status == "fail" {
			t.Errorf("doctor fails %s: %s", c.Name, c.Detail)
		}
	}
	if status["podman"] != "ok" || status["git"] != "ok" {
		t.Errorf("doctor = %+v", checks)
	}
	if want := map[bool]string{true: "warn", false: "ok"}[unenforced]; status["limits"] != want {
		t.Errorf("doctor limits = %q on a host where rootless+cgroup v1 is %v; want %q", status["limits"], unenforced, want)
	}

	name := uniqueName("e2e-lim")
	cleanup(t, name)
	cfg := standInConfig(t, "[agent.limits]\npids = 128\nmemory = \"256m\"\ntmp_size = \"8m\"\n")
	repo := fixtureRepo(t)
	// A submodule (a gitlink; its commit need not exist): up copies it
	// empty and says how to fetch it.
	for _, args := range [][]string{{"update-index", "--add", "--cacheinfo", "160000," + strings.Repeat("ab", 20) + ",vendor/lib"},
		{"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "submodule"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	os.WriteFile(filepath.Join(repo, "uncommitted.txt"), []byte("left out"), 0o644)
	up := mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", name)
	if !strings.Contains(up.stderr, "uncommitted path(s)") || !strings.Contains(up.stderr, "uncommitted.txt") {
		t.Errorf("up does not warn about the uncommitted file:\n%s", up)
	}
	if !strings.Contains(up.stdout, "is ready (") || !strings.Contains(up.stdout, ", "+mode+" podman).") {
		t.Errorf("up does not say it used %s podman:\n%s", mode, up)
	}
	if !strings.Contains(up.stderr, "submodules (vendor/lib) are not copied") {
		t.Errorf("up does not warn about the submodule:\n%s", up)
	}
	if r := devaipod(t, nil, "exec", name, "--", "test", "-e", "uncommitted.txt"); r.code == 0 {
		t.Error("the uncommitted file was copied into the workspace")
	}
	if warned := strings.Contains(up.stderr, "this host does not enforce the pod's resource limits (agent memory 256m, pids 128; proxy memory 256m, pids 256)"); warned != unenforced {
		t.Errorf("up warned about limits: %v; want %v\n%s", warned, unenforced, up)
	}
	// verify: WARN where the host ignores the limits asked for, not N-A.
	v := devaipod(t, nil, "verify", name, "-o", "json")
	want := map[bool]string{true: "WARN", false: "PASS"}[unenforced]
	if rows := verifyRows(t, v.stdout); v.code != 0 || rows["limit-memory"] != want || rows["limit-pids"] != want {
		t.Errorf("verify limit rows: exit %d, memory %s, pids %s; want %s", v.code, rows["limit-memory"], rows["limit-pids"], want)
	}
	// Filling /tmp stops at its size on every host.
	fill := devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c",
		"dd if=/dev/zero of=/tmp/fill bs=1M count=32 2>&1; du -m /tmp/fill | cut -f1")
	if fill.code != 0 {
		t.Fatalf("%s", fill)
	}
	lines := strings.Split(strings.TrimSpace(fill.stdout), "\n")
	if used := lines[len(lines)-1]; used != "8" && used != "7" {
		t.Errorf("agent wrote %s MiB to an 8 MiB /tmp:\n%s", used, fill)
	}

	// A fork bomb and a memory hog: stopped where the host enforces
	// limits (make test runs this test again as root, on rootful podman),
	// and reported as not enforced by up and doctor (above) elsewhere.
	forks := devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c",
		"n=0; for i in $(seq 300); do sleep 4 & n=$((n+1)); done; echo started $n")
	time.Sleep(5 * time.Second) // the sleeps hold the pids cap until they end
	hog := devaipod(t, nil, "exec", name, "-c", "agent", "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=512M", "count=1")
	t.Logf("limits enforced: %v; 300 forks under pids = 128: exit %d %s%s; a 512 MiB buffer under memory = 256m: exit %d",
		!unenforced, forks.code, forks.stdout, forks.stderr, hog.code)
	if unenforced {
		if forks.code != 0 || !strings.Contains(forks.stdout, "started 300") || hog.code != 0 {
			t.Errorf("limits are not enforced here, yet the fork loop or the allocation failed:\n%s\n%s", forks, hog)
		}
	} else {
		if forks.code == 0 || !strings.Contains(strings.ToLower(forks.stderr), "fork") {
			t.Errorf("the fork loop was not stopped by pids = 128: %s", forks)
		}
		if hog.code != 137 {
			t.Errorf("a 512 MiB allocation under memory = 256m was not killed (want exit 137): %s", hog)
		}
	}
	// The sidecars have limits of their own, enforced where the host
	// enforces limits; every container's log is capped.
	for _, role := range []string{"workspace", "agent", "proxy"} {
		out, err := exec.Command("podman", "inspect", "devaipod-"+name+"-"+role, "--format",
			"{{.HostConfig.LogConfig.Size}} {{.HostConfig.PidsLimit}} {{.HostConfig.Memory}}").Output()
		f := strings.Fields(string(out))
		if err != nil || len(f) != 3 {
			t.Fatalf("podman inspect %s: %v %q", role, err, out)
		}
		if f[0] == "0B" || f[0] == "-1" {
			t.Errorf("%s: log size %s; want a cap", role, f[0])
		}
		if role == "proxy" && !unenforced && (f[1] != "256" || f[2] != "268435456") {
			t.Errorf("proxy: pids %s memory %s; want 256 and 256m", f[1], f[2])
		}
	}
	t.Run("the agent cannot fill the disk through its log", func(t *testing.T) {
		flood := uniqueName("e2e-flood")
		cleanup(t, flood)
		cfg := filepath.Join(t.TempDir(), "devaipod.toml")
		os.WriteFile(cfg, []byte(`[agent]
kind = "custom"
command = ["sh", "-c", "head -c 40000000 /dev/zero | tr '\\0' x; exec busybox httpd -f -p 127.0.0.1:4096 -h /tmp"]
`), 0o644)
		mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", flood, "--timeout", "120s")
		out, err := exec.Command("podman", "inspect", "devaipod-"+flood+"-agent", "--format", "{{.HostConfig.LogConfig.Path}}").Output()
		if err != nil {
			t.Fatalf("podman inspect: %v", err)
		}
		st, err := os.Stat(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("the agent's log: %v", err)
		}
		if st.Size() > 17<<20 {
			t.Errorf("the agent printed 40 MB: its log is %d bytes; want at most the 16 MiB cap", st.Size())
		}
	})
	if mode := os.Getenv("DEVAIPOD_E2E_MODE"); mode == "rootful" && (unenforced || os.Geteuid() != 0) {
		t.Fatalf("DEVAIPOD_E2E_MODE=rootful, but this run is uid %d on a host where limits are enforced: %v", os.Geteuid(), !unenforced)
	}
}

// TestE2EDryRun prints the plan and creates nothing.
func TestE2EDryRun(t *testing.T) {
	e2e(t)
	name := uniqueName("e2e-dry")
	r := mustDevaipod(t, []string{"E2E_DRY_SECRET=do-not-print", "ANTHROPIC_API_KEY=sk-do-not-print"}, "--config",
		standInConfig(t, "[trusted.env]\nallowlist = [\"E2E_DRY_SECRET\"]\n"), "up", fixtureRepo(t), "--trust", "--name", name, "--dry-run", "-o", "json")
	var plan struct {
		Pod        struct{ Name string }
		Containers []struct {
			Role, Network string
			CapDrop       []string `json:"cap_drop"`
		}
		Secrets []struct{ Name string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatalf("dry-run json: %v\n%s", err, r)
	}
	// Two secrets: the trusted variable (the workspace's) and the LLM key
	// (the proxy's).
	if plan.Pod.Name != "devaipod-"+name || len(plan.Containers) != 3 || plan.Containers[1].Network != "none" || len(plan.Secrets) != 2 {
		t.Errorf("plan = %+v", plan)
	}
	if strings.Contains(r.stdout, "do-not-print") {
		t.Errorf("dry-run printed a secret value:\n%s", r.stdout)
	}
	text := mustDevaipod(t, nil, "--config", standInConfig(t, ""), "up", fixtureRepo(t), "--name", name, "--dry-run")
	for _, want := range []string{"nothing created", "network      none", "drop ALL", "read-only root true"} {
		if !strings.Contains(text.stdout, want) {
			t.Errorf("dry-run text lacks %q:\n%s", want, text.stdout)
		}
	}
	if left := labelled(t, name); len(left) > 0 {
		t.Errorf("dry-run created %v", left)
	}
}

// TestE2EGitURL clones a git URL (a bare repository served as file://) at
// a branch.
func TestE2EGitURL(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	bare := filepath.Join(t.TempDir(), "served.git")
	for _, args := range [][]string{
		{"-C", repo, "checkout", "-q", "-b", "feature"},
		{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "on feature"},
		{"clone", "-q", "--bare", repo, bare},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	name := uniqueName("e2e-url")
	cleanup(t, name)
	url := "file://" + bare
	mustDevaipod(t, nil, "--config", standInConfig(t, ""), "up", url, "--ref", "feature", "--name", name)
	r := mustDevaipod(t, nil, "exec", name, "--", "sh", "-c", "pwd; git rev-parse --abbrev-ref HEAD; git log -1 --format=%s; git remote get-url origin")
	if want := "/workspaces/served\nfeature\non feature\n" + url + "\n"; r.stdout != want {
		t.Errorf("workspace = %q; want %q", r.stdout, want)
	}
	var st struct{ Repo, Commit string }
	json.Unmarshal([]byte(mustDevaipod(t, nil, "status", name, "-o", "json").stdout), &st)
	if st.Repo != url || len(st.Commit) != 40 {
		t.Errorf("status repo/commit = %+v", st)
	}
}

// TestE2EConnection checks the podman connection fallbacks: a bad
// --connection is one clear error; without any socket devaipod starts a
// service for itself and says so; without podman it says to install it.
func TestE2EConnection(t *testing.T) {
	e2e(t)
	r := devaipod(t, nil, "--connection", "unix:///nonexistent/podman.sock", "list")
	if r.code == 0 || !strings.Contains(r.stderr, "cannot reach the podman service at unix:///nonexistent/podman.sock") || !strings.Contains(r.stderr, "Hint:") {
		t.Errorf("bad --connection: %s", r)
	}

	// A podman of its own (empty storage, private runtime dir), so that no
	// socket answers and the shared service of the other tests is left
	// alone.
	tmp := t.TempDir()
	conf := filepath.Join(tmp, "config", "containers")
	os.MkdirAll(conf, 0o755)
	os.WriteFile(filepath.Join(conf, "containers.conf"), []byte("[engine]\nruntime = \"runc\"\n"), 0o644)
	os.WriteFile(filepath.Join(conf, "storage.conf"), []byte(fmt.Sprintf(
		"[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(tmp, "graph"), filepath.Join(tmp, "run"))), 0o644)
	runtimeDir := filepath.Join(tmp, "xdg-run")
	os.MkdirAll(runtimeDir, 0o700)
	private := []string{"CONTAINER_HOST=", "XDG_RUNTIME_DIR=" + runtimeDir, "XDG_CONFIG_HOME=" + filepath.Join(tmp, "config"),
		"XDG_DATA_HOME=" + filepath.Join(tmp, "data"), "CONTAINERS_STORAGE_CONF=" + filepath.Join(conf, "storage.conf")}

	// The private podman leaves its rootless pause process behind.
	t.Cleanup(func() {
		if pid, err := os.ReadFile(filepath.Join(runtimeDir, "libpod", "tmp", "pause.pid")); err == nil {
			exec.Command("kill", strings.TrimSpace(string(pid))).Run()
		}
	})
	// Every service that a devaipod started for that podman ends with it,
	// whichever way: a rootless podman runs the service in a child of its
	// own, which outlived a SIGKILL of its parent alone.
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			left := podmanServices(runtimeDir)
			if len(left) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("podman services that devaipod started are still running: pids %v", left)
				for _, pid := range left {
					syscall.Kill(pid, syscall.SIGKILL)
				}
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "devaipod-podman-*"))
	start := time.Now()
	r = devaipod(t, private, "list", "-o", "json")
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("list with a self-started service took %s", d)
	}
	if r.code != 0 || !strings.Contains(r.stderr, "started one for this command") || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("no socket: %s", r)
	}
	after, _ := filepath.Glob(filepath.Join(os.TempDir(), "devaipod-podman-*"))
	for _, dir := range after {
		if !slices.Contains(before, dir) {
			t.Errorf("the started service's directory %s is left behind", dir)
		}
	}
	r = devaipod(t, append(private, "PATH=/nonexistent"), "list")
	if r.code == 0 || !strings.Contains(r.stderr, "podman is not installed") {
		t.Errorf("no podman: %s", r)
	}

	// That podman's processes killed while it has a container running, as
	// a reboot that keeps the runtime directory leaves them: its service
	// cannot start, and devaipod says so at once, with podman's remedy.
	t.Run("stale podman state", func(t *testing.T) {
		busybox, err := exec.LookPath("busybox")
		if err != nil {
			t.Fatalf("busybox (static) is needed for a container without an image: %v", err)
		}
		rootfs := filepath.Join(tmp, "rootfs")
		os.MkdirAll(filepath.Join(rootfs, "bin"), 0o755)
		if out, err := exec.Command("cp", busybox, filepath.Join(rootfs, "bin", "busybox")).CombinedOutput(); err != nil {
			t.Fatalf("cp busybox: %v %s", err, out)
		}
		// Even an empty CONTAINER_HOST makes podman a remote client.
		local := slices.DeleteFunc(slices.Clone(private), func(kv string) bool { return strings.HasPrefix(kv, "CONTAINER_HOST=") })
		podman := func(args ...string) string {
			t.Helper()
			cmd := exec.Command("podman", args...)
			cmd.Env = append(os.Environ(), local...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("podman %v: %v", args, err)
			}
			return strings.TrimSpace(string(out))
		}
		id := podman("run", "-d", "--network", "none", "--rootfs", rootfs, "/bin/busybox", "sleep", "600")
		pids := strings.Fields(podman("inspect", "--format", "{{.State.ConmonPid}} {{.State.Pid}}", id))
		pause, err := os.ReadFile(filepath.Join(runtimeDir, "libpod", "tmp", "pause.pid"))
		if err != nil || len(pids) != 2 {
			t.Fatalf("the private podman's pause process and container: %v %v", pids, err)
		}
		pids = append(pids, strings.TrimSpace(string(pause)))
		if out, err := exec.Command("kill", append([]string{"-9"}, pids...)...).CombinedOutput(); err != nil {
			t.Fatalf("kill %v: %v %s", pids, err, out)
		}
		// The cleanup above must not signal whoever gets that pid next.
		defer os.Remove(filepath.Join(runtimeDir, "libpod", "tmp", "pause.pid"))
		start := time.Now()
		r := devaipod(t, private, "list")
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("list took %s to report a podman service that died at start", d)
		}
		if r.code == 0 || !strings.Contains(r.stderr, "invalid internal status") || !strings.Contains(r.stderr, "Hint: podman kept state from processes that are gone") ||
			!strings.Contains(r.stderr, "run `podman system migrate`") {
			t.Errorf("list with stale podman state: %s", r)
		}
	})
}

// TestE2EVersionAndCompletion covers the small commands.
func TestE2EVersionAndCompletion(t *testing.T) {
	e2e(t)
	if r := mustDevaipod(t, nil, "version"); !strings.HasPrefix(r.stdout, "devaipod ") {
		t.Errorf("version: %s", r)
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if r := mustDevaipod(t, nil, "completion", shell); !strings.Contains(r.stdout, "devaipod") {
			t.Errorf("completion %s: %s", shell, r)
		}
	}
	if r := mustDevaipod(t, nil, "up", "--help"); !strings.Contains(r.stdout, "--dry-run") || !strings.Contains(r.stdout, "Example") && !strings.Contains(r.stdout, "Examples") {
		t.Errorf("up --help: %s", r)
	}
}

// podmanServices are the processes of `podman system service` whose
// XDG_RUNTIME_DIR is runtimeDir.
func podmanServices(runtimeDir string) []int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, dir := range procs {
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte("\x00system\x00service\x00")) {
			continue
		}
		environ, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil || !slices.Contains(strings.Split(string(environ), "\x00"), "XDG_RUNTIME_DIR="+runtimeDir) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(dir)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
