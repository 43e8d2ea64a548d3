package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devaipod/devaipod/proxy"
)

// The probes read a fake container under a t.TempDir() root. Writes that a
// read-only mount would refuse are refused by fakeFS (the tests may run as
// root, where file modes refuse nothing), and every syscall and network
// send is a fake unless a test says otherwise.

// testOptions parses verify's flags as the command would.
func testOptions(t *testing.T, args ...string) *verifyOptions {
	t.Helper()
	var stderr bytes.Buffer
	o, err := parseVerifyFlags(args, &stderr)
	if err != nil {
		t.Fatalf("parseVerifyFlags(%q): %v\n%s", args, err, stderr.String())
	}
	return o
}

// fakeFS refuses writes below its read-only paths (container paths) with
// EROFS, like a read-only bind mount.
type fakeFS struct {
	root     string
	readOnly []string
}

func (f *fakeFS) openFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE) != 0 {
		p := "/" + filepath.ToSlash(strings.TrimPrefix(strings.TrimPrefix(name, f.root), "/"))
		for _, ro := range f.readOnly {
			if p == ro || strings.HasPrefix(p, strings.TrimSuffix(ro, "/")+"/") {
				return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EROFS}
			}
		}
	}
	return os.OpenFile(name, flag, perm)
}

// testVerifier is a verifier of the fake container at root. Its sends fail
// the test: a test that wants one sets v.send.
func testVerifier(t *testing.T, root string, o *verifyOptions) (*verifier, *fakeFS) {
	t.Helper()
	ffs := &fakeFS{root: root}
	v := &verifier{
		opts:     o,
		root:     root,
		pid:      100,
		home:     "/home/agent",
		openFile: ffs.openFile,
		send: func(ctx context.Context, network, address string, payload []byte, timeout time.Duration) (sendResult, error) {
			t.Errorf("unexpected send to %s %s", network, address)
			return sendResult{}, errRouteExists
		},
		interfaces: func() ([]net.Interface, error) {
			return []net.Interface{{Index: 1, Name: "lo", Flags: net.FlagUp | net.FlagLoopback}}, nil
		},
		dialCluster: func(ctx context.Context, network, address string, timeout time.Duration) (net.Conn, error) {
			if ap, err := netip.ParseAddrPort(address); err != nil || !ap.Addr().IsLoopback() {
				t.Errorf("dial to %s %s: a test sends to loopback only", network, address)
				return nil, syscall.ENETUNREACH
			}
			return dialCluster(ctx, network, address, timeout)
		},
		sys: verifySyscalls{
			mountTmpfs: func(string) error { return syscall.EPERM },
			rawSockets: func() []namedErr { return []namedErr{{"AF_INET SOCK_RAW", syscall.EPERM}} },
			readMemory: func(int) error { return syscall.EPERM },
			run:        func(context.Context, []string, bool) error { return syscall.EPERM },
			statfs:     func(string) (fsInfo, error) { return fsInfo{tmpfs: true, bytes: 512 << 20}, nil },
			signal:     func(int) error { return syscall.ESRCH },
		},
		selfCommand: []string{"/opt/devaipod/devaipod-helper", "version"},
	}
	return v, ffs
}

// writeTree creates files under root; a value starting with "->" makes a
// symlink, a key ending in "/" a folder.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			os.Remove(p)
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func wantResult(t *testing.T, what string, got verifyResult, detail string, want verifyResult, detailHas ...string) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %s (%s); want %s", what, got, detail, want)
		return
	}
	for _, s := range detailHas {
		if !strings.Contains(detail, s) {
			t.Errorf("%s detail %q; want it to mention %q", what, detail, s)
		}
	}
}

func TestVerifyFlags(t *testing.T) {
	bad := []struct{ args []string }{
		{[]string{"--output", "yaml"}},
		{[]string{"--limit", "cpu=2"}},
		{[]string{"--limit", "memory=lots"}},
		{[]string{"--limit", "pids=0"}},
		{[]string{"--secret-value-sha256", "abc"}},
		{[]string{"--secret-var", "NOT-A-NAME"}},
		{[]string{"--protect", "/etc/passwd"}},
		{[]string{"--protect", "../x"}},
		{[]string{"--proxy", "socks5://127.0.0.1:1080"}},
		{[]string{"--proxy", "http://127.0.0.1"}},
		{[]string{"--canary", "nonsense"}},
		{[]string{"--cluster-canary", "10.0.0.5"}},
		{[]string{"--cluster-canary", "pod.example.test:3129"}},
		{[]string{"--cluster-canary", "192.0.2.1:3129"}},     // public (documentation): never probed
		{[]string{"--cluster-canary", "[2001:db8::1]:3129"}}, // likewise
		{[]string{"--cluster-canary", "10.0.0.5:0"}},
		{[]string{"--workspace", "relative/dir"}},
		{[]string{"--only", "no-such-probe"}},
		{[]string{"extra"}},
	}
	for _, tt := range bad {
		var stdout, stderr bytes.Buffer
		if code := runVerify(context.Background(), tt.args, &stdout, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("verify %q: exit %d, stderr %q; want 2 and a message", tt.args, code, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := runVerify(context.Background(), []string{"-h"}, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "-secret-value-sha256") {
		t.Errorf("verify -h: exit %d\n%s", code, stderr.String())
	}

	o := testOptions(t, "--limit", "memory=8g", "--limit", "tmp=512m", "--limit", "pids=4096",
		"--secret-value-sha256", strings.ToUpper(sha("x")), "--workspace", "/workspaces/project/")
	if o.limits["memory"] != 8<<30 || o.limits["tmp"] != 512<<20 || o.limits["pids"] != 4096 {
		t.Errorf("limits = %v", o.limits)
	}
	if o.secretHashes[0] != sha("x") {
		t.Errorf("hash not lower-cased: %q", o.secretHashes[0])
	}
	if o.workspace != "/workspaces/project" {
		t.Errorf("workspace = %q", o.workspace)
	}
	if !slices.Equal(o.protect, defaultProtect) || !slices.Equal(o.podmanSockets, defaultPodmanSockets) {
		t.Errorf("defaults: protect %q, sockets %q", o.protect, o.podmanSockets)
	}
	hashes := filepath.Join(t.TempDir(), "hashes")
	os.WriteFile(hashes, []byte("# trusted values\n"+sha("a")+"\n\n"+strings.ToUpper(sha("b"))+"\n"), 0o600)
	o = testOptions(t, "--secret-hashes-file", hashes, "--secret-value-sha256", sha("c"))
	if !slices.Equal(o.secretHashes, []string{sha("c"), sha("a"), sha("b")}) {
		t.Errorf("hashes from the file and the flag: %q", o.secretHashes)
	}
	os.WriteFile(hashes, []byte("not a hash\n"), 0o600)
	if code := runVerify(context.Background(), []string{"--secret-hashes-file", hashes}, &stdout, &stderr); code != 2 {
		t.Errorf("a bad hashes file: exit %d", code)
	}
	if code := runVerify(context.Background(), []string{"--secret-hashes-file", hashes + ".missing"}, &stdout, &stderr); code != 2 {
		t.Errorf("a missing hashes file: exit %d", code)
	}

	o = testOptions(t, "--protect", ".githooks/", "--protect", "Makefile", "--podman-socket", "/x.sock")
	if !slices.Equal(o.protect, []string{".githooks", "Makefile"}) || !slices.Equal(o.podmanSockets, []string{"/x.sock"}) {
		t.Errorf("given lists must replace the defaults: protect %q, sockets %q", o.protect, o.podmanSockets)
	}
}

func TestVerifyFastSubsetAndOnly(t *testing.T) {
	o := testOptions(t, "--fast")
	var ids []string
	for _, p := range selectProbes(o) {
		ids = append(ids, p.id)
	}
	for _, want := range []string{"trusted-env", "net-interfaces", "net-routes", "canary", "proxy-denied-host",
		"podman-api", "capabilities", "no-new-privs", "rootfs-write", "persist:.devcontainer", "trusted-git", "proc-mem"} {
		if !slices.Contains(ids, want) {
			t.Errorf("--fast lacks %s: %q", want, ids)
		}
	}
	for _, slow := range []string{"trusted-env-files", "processes", "setuid", "unshare", "other-pods"} {
		if slices.Contains(ids, slow) {
			t.Errorf("--fast runs the slow probe %s", slow)
		}
	}
	o = testOptions(t, "--only", "persist", "--only", "mount")
	ids = nil
	for _, p := range selectProbes(o) {
		ids = append(ids, p.id)
	}
	if len(ids) != len(defaultProtect)+1 || !slices.Contains(ids, "mount") || !slices.Contains(ids, "persist:.envrc") {
		t.Errorf("--only persist --only mount selected %q", ids)
	}
}

func TestVerifyHostSecrets(t *testing.T) {
	root := t.TempDir()
	v, _ := testVerifier(t, root, testOptions(t))
	writeTree(t, root, map[string]string{"home/agent/": "", "home/agent/.ssh/": "", "root/": ""})
	res, detail := v.hostSecrets(context.Background())
	wantResult(t, "empty ~/.ssh", res, detail, verifyPass, "/home/agent/.ssh")

	writeTree(t, root, map[string]string{"home/agent/.ssh/id_ed25519": "KEY"})
	res, detail = v.hostSecrets(context.Background())
	wantResult(t, "a key in ~/.ssh", res, detail, verifyFail, "/home/agent/.ssh (1 entries)")

	root = t.TempDir()
	v, _ = testVerifier(t, root, testOptions(t))
	writeTree(t, root, map[string]string{
		"home/vscode/.config/devaipod.toml":  "[trusted.env]",
		"run/user/1000/containers/auth.json": "{}",
	})
	res, detail = v.hostSecrets(context.Background())
	wantResult(t, "other homes and globbed places", res, detail, verifyFail,
		"/home/vscode/.config/devaipod.toml", "/run/user/1000/containers")
}

func TestVerifyTrustedEnv(t *testing.T) {
	const value = "s3cr3t-value-123"
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"proc/1/stat":    "1 (devaipod-helpe) S 0 1 1 0 -1 4194560 0 0",
		"proc/1/environ": "PATH=/bin\x00HOME=/home/agent\x00",
		"proc/1/cmdline": "/opt/devaipod/devaipod-helper\x00init\x00",
		"proc/7/stat":    "7 (opencode) S 1 1 1 0 -1 4194560 0 0",
		"proc/7/environ": "PATH=/bin\x00",
		"proc/7/cmdline": "opencode\x00serve\x00",
	})
	run := func(env []string, args ...string) (verifyResult, string) {
		v, _ := testVerifier(t, root, testOptions(t, args...))
		v.environ = env
		return v.trustedEnv(context.Background())
	}
	res, detail := run(nil)
	wantResult(t, "nothing to look for", res, detail, verifyNA)

	res, detail = run([]string{"PATH=/bin"}, "--secret-var", "GH_TOKEN", "--secret-value-sha256", sha(value))
	wantResult(t, "clean", res, detail, verifyPass, "1 names and 1 hashes", "2 readable")

	res, detail = run([]string{"GH_TOKEN=x"}, "--secret-var", "GH_TOKEN")
	wantResult(t, "name in own environment", res, detail, verifyFail, "own environment: GH_TOKEN is set")

	writeTree(t, root, map[string]string{"proc/7/environ": "PATH=/bin\x00RENAMED=" + value + "\x00"})
	res, detail = run(nil, "--secret-value-sha256", sha(value))
	wantResult(t, "value under another name", res, detail, verifyFail, "PID 7 (opencode) environment: RENAMED holds a trusted value")
	if strings.Contains(detail, value) {
		t.Errorf("the detail shows the value: %s", detail)
	}

	writeTree(t, root, map[string]string{"proc/7/environ": "PATH=/bin\x00", "proc/7/cmdline": "curl\x00--token=" + value + "\x00"})
	res, detail = run(nil, "--secret-value-sha256", sha(value))
	wantResult(t, "value on a command line", res, detail, verifyFail, "PID 7 (opencode) command line")
}

func TestVerifyTrustedEnvFiles(t *testing.T) {
	const value = "s3cr3t-value-123"
	for _, text := range []string{
		"export API_KEY=\"" + value + "\"\n",
		`{"token": "` + value + `",` + "\n",
		"x\n  " + value + "  \n",
		"token: " + value + "\n",
		"curl -H 'Authorization: Bearer " + value + "'\n",
	} {
		if !(secretMatcher{hashes: map[string]bool{sha(value): true}}).inText([]byte(text)) {
			t.Errorf("inText missed the value in %q", text)
		}
	}
	if (secretMatcher{hashes: map[string]bool{sha(value): true}}).inText([]byte("s3cr3t-value-1234\n")) {
		t.Error("inText matched a longer word")
	}

	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"workspaces/project/README.md":            "nothing here\n",
		"workspaces/project/.git/objects/ab/cdef": value, // skipped: compressed objects
		"home/agent/notes.txt":                    "GH_TOKEN is a name, not a value\n",
	})
	v, _ := testVerifier(t, root, testOptions(t, "--workspace", "/workspaces/project"))
	res, detail := v.trustedEnvFiles(context.Background())
	wantResult(t, "no hash", res, detail, verifyNA)

	v, _ = testVerifier(t, root, testOptions(t, "--workspace", "/workspaces/project", "--secret-value-sha256", sha(value)))
	res, detail = v.trustedEnvFiles(context.Background())
	wantResult(t, "clean", res, detail, verifyPass, "not in 2 files")

	writeTree(t, root, map[string]string{"tmp/leak.env": "GH_TOKEN=" + value + "\n"})
	res, detail = v.trustedEnvFiles(context.Background())
	wantResult(t, "value in /tmp", res, detail, verifyFail, "/tmp/leak.env")
	if strings.Contains(detail, value) {
		t.Errorf("the detail shows the value: %s", detail)
	}
}

// procTree is a fake /proc with this process (PID 100) and PID 1, both in
// mount namespace 1.
func procTree(t *testing.T) string {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"proc/self/ns/mnt": "->mnt:[1]",
		"proc/self/cgroup": "0::/\n",
		"proc/self/status": "Name:\tdevaipod-helpe\nNoNewPrivs:\t1\nSeccomp:\t2\n",
		"proc/1/stat":      "1 (devaipod-helpe) S 0 1 1 0 -1 4194560 0 0",
		"proc/1/status":    "Uid:\t1000\t1000\t1000\t1000\n",
		"proc/1/ns/mnt":    "->mnt:[1]",
		"proc/100/stat":    "100 (devaipod-helpe) R 0 100 100 0 -1 4194560 0 0",
		"proc/100/status":  "Uid:\t1000\t1000\t1000\t1000\n",
		"proc/100/ns/mnt":  "->mnt:[1]",
	})
	return root
}

func TestVerifyProcesses(t *testing.T) {
	root := procTree(t)
	v, _ := testVerifier(t, root, testOptions(t))
	res, detail := v.processes(context.Background())
	wantResult(t, "own container only", res, detail, verifyPass, "2 processes visible")

	writeTree(t, root, map[string]string{
		"proc/2/stat":   "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0",
		"proc/2/status": "Uid:\t0\t0\t0\t0\n",
	})
	res, detail = v.processes(context.Background())
	wantResult(t, "kernel thread", res, detail, verifyFail, "PID 2 kthreadd (uid 0): a kernel thread")

	os.RemoveAll(filepath.Join(root, "proc/2"))
	writeTree(t, root, map[string]string{
		"proc/3/stat":   "3 (bash (workspace)) S 0 3 3 0 -1 4194560 0 0",
		"proc/3/status": "Uid:\t1000\t1000\t1000\t1000\n",
		"proc/3/ns/mnt": "->mnt:[2]",
	})
	v.sys.signal = func(pid int) error {
		if pid == 3 {
			return nil
		}
		return syscall.EPERM
	}
	res, detail = v.processes(context.Background())
	wantResult(t, "another container's shell", res, detail, verifyFail,
		"PID 3 bash (workspace) (uid 1000): another mount namespace, can be signalled", "(1 can be signalled)")
}

func TestVerifyPtrace(t *testing.T) {
	root := procTree(t)
	writeTree(t, root, map[string]string{
		"proc/101/stat":                     "101 (devaipod-helpe) R 100 100 100 0 -1 4194560 0 0",
		"proc/sys/kernel/yama/ptrace_scope": "0\n",
	})
	v, _ := testVerifier(t, root, testOptions(t))
	var tried []int
	v.sys.readMemory = func(pid int) error {
		tried = append(tried, pid)
		return syscall.EPERM
	}
	res, detail := v.ptrace(context.Background())
	wantResult(t, "denied", res, detail, verifyPass, "operation not permitted: itself, PID 1", "ptrace_scope=0", "seccomp mode 2")
	if !slices.Equal(tried, []int{v.pid, 1}) {
		t.Errorf("tried PIDs %v; want itself (the profile's test), then only 1 (not its child)", tried)
	}

	v.sys.readMemory = func(pid int) error {
		if pid == v.pid {
			return syscall.EPERM
		}
		return nil
	}
	res, detail = v.ptrace(context.Background())
	wantResult(t, "granted", res, detail, verifyFail, "PID 1 (devaipod-helpe)")

	// Its own memory: only devaipod's seccomp profile refuses that.
	v.sys.readMemory = func(int) error { return nil }
	res, detail = v.ptrace(context.Background())
	wantResult(t, "no profile", res, detail, verifyFail, "seccomp profile is not in force")
	v.sys.readMemory = func(int) error { return syscall.EPERM }

	os.RemoveAll(filepath.Join(root, "proc/1"))
	res, detail = v.ptrace(context.Background())
	wantResult(t, "nobody to attach to", res, detail, verifyNA)
}

// TestVerifyProcMem: the row opens /proc/PID/mem of devaipod's processes
// only (not itself, not the agent's programs) and FAILs when one opens.
func TestVerifyProcMem(t *testing.T) {
	root := procTree(t)
	writeTree(t, root, map[string]string{"proc/7/stat": "7 (opencode) S 1 7 7 0 -1 4194560 0 0"})
	v, _ := testVerifier(t, root, testOptions(t))
	var tried []int
	v.sys.openMemory = func(pid int) error {
		tried = append(tried, pid)
		return syscall.EACCES
	}
	res, detail := v.procMem(context.Background())
	wantResult(t, "denied", res, detail, verifyPass, "permission denied: PID 1 (devaipod-helpe)")
	if !slices.Equal(tried, []int{1}) {
		t.Errorf("opened the mem of %v; want only PID 1 (devaipod's, not itself, not the agent's)", tried)
	}

	v.sys.openMemory = func(int) error { return nil }
	res, detail = v.procMem(context.Background())
	wantResult(t, "opened", res, detail, verifyFail, "opened /proc/PID/mem of PID 1 (devaipod-helpe)")

	os.RemoveAll(filepath.Join(root, "proc/1"))
	res, detail = v.procMem(context.Background())
	wantResult(t, "nobody to open", res, detail, verifyNA)
}

func TestVerifyRoutesAndInterfaces(t *testing.T) {
	root := t.TempDir()
	const header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
	const v6lo = "00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo\n" +
		"00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n"
	writeTree(t, root, map[string]string{"proc/net/route": header, "proc/net/ipv6_route": v6lo})
	v, _ := testVerifier(t, root, testOptions(t))
	res, detail := v.netRoutes(context.Background())
	wantResult(t, "loopback only", res, detail, verifyPass)

	root = t.TempDir()
	writeTree(t, root, map[string]string{
		"proc/net/route":      header + "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n",
		"proc/net/ipv6_route": v6lo,
	})
	v, _ = testVerifier(t, root, testOptions(t))
	res, detail = v.netRoutes(context.Background())
	wantResult(t, "default route", res, detail, verifyFail, "0.0.0.0 via 192.0.2.1 dev eth0")

	root = t.TempDir()
	writeTree(t, root, map[string]string{
		"proc/net/route":      header,
		"proc/net/ipv6_route": "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n",
	})
	v, _ = testVerifier(t, root, testOptions(t))
	res, detail = v.netRoutes(context.Background())
	wantResult(t, "IPv6 route", res, detail, verifyFail, "fd00::/64 dev eth0")

	for _, tt := range []struct {
		ifaces []net.Interface
		want   verifyResult
		has    string
	}{
		{[]net.Interface{{Name: "lo", Flags: net.FlagUp | net.FlagLoopback}}, verifyPass, "only loopback"},
		{[]net.Interface{{Name: "lo", Flags: net.FlagUp | net.FlagLoopback}, {Name: "tunl0"}}, verifyPass, "down: tunl0"},
		{[]net.Interface{{Name: "lo", Flags: net.FlagUp | net.FlagLoopback}, {Name: "eth0", Flags: net.FlagUp}}, verifyFail, "eth0"},
	} {
		res, detail := judgeInterfaces(tt.ifaces)
		wantResult(t, "interfaces", res, detail, tt.want, tt.has)
	}
}

// noRouteTree is a fake network namespace with nothing but loopback.
func noRouteTree(t *testing.T, files map[string]string) string {
	root := t.TempDir()
	files["proc/net/route"] = "Iface\tDestination\tGateway \tFlags\n"
	writeTree(t, root, files)
	return root
}

func TestVerifyDirectEgress(t *testing.T) {
	ctx := context.Background()
	unreachable := &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}

	// A route: nothing is sent, every direct probe FAILs.
	root := t.TempDir()
	writeTree(t, root, map[string]string{"proc/net/route": "Iface\tDestination\n" + "eth0\t00000000\t010200C0\t0003\n",
		"etc/resolv.conf": "nameserver 10.0.2.3\n"})
	v, _ := testVerifier(t, root, testOptions(t)) // its send fails the test
	for name, probe := range map[string]func(*verifier, context.Context) (verifyResult, string){
		"tcp": (*verifier).tcpDirect, "udp": (*verifier).udpDirect, "ipv6": (*verifier).ipv6Direct, "dns": (*verifier).dnsDirect,
	} {
		res, detail := probe(v, ctx)
		wantResult(t, name+" with a route", res, detail, verifyFail, "not tried")
	}

	// No route: the kernel's refusal is a PASS, any success a FAIL.
	root = noRouteTree(t, map[string]string{"etc/resolv.conf": "# podman\nnameserver 127.0.0.53\nnameserver 10.0.2.3\n"})
	v, _ = testVerifier(t, root, testOptions(t))
	var sent []string
	v.send = func(_ context.Context, network, address string, payload []byte, _ time.Duration) (sendResult, error) {
		sent = append(sent, network+" "+address)
		if address == "127.0.0.53:53" {
			return sendResult{connected: true, sent: true}, &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNREFUSED)}
		}
		return sendResult{}, unreachable
	}
	for name, probe := range map[string]func(*verifier, context.Context) (verifyResult, string){
		"tcp": (*verifier).tcpDirect, "udp": (*verifier).udpDirect, "ipv6": (*verifier).ipv6Direct,
	} {
		res, detail := probe(v, ctx)
		wantResult(t, name+" without a route", res, detail, verifyPass, "network is unreachable")
	}
	res, detail := v.dnsDirect(ctx)
	wantResult(t, "dns without a route", res, detail, verifyPass, "connection refused: 127.0.0.53:53", "network is unreachable: 10.0.2.3:53")
	slices.Sort(sent)
	if want := []string{"tcp 192.0.2.1:443", "udp 10.0.2.3:53", "udp 127.0.0.53:53", "udp4 192.0.2.1:53", "udp6 [2001:db8::1]:53"}; !slices.Equal(sent, want) {
		t.Errorf("sent %q; want %q", sent, want)
	}

	v.send = func(_ context.Context, network, address string, payload []byte, _ time.Duration) (sendResult, error) {
		if network == "tcp" {
			return sendResult{connected: true}, nil
		}
		if address == "127.0.0.53:53" {
			return sendResult{connected: true, sent: true, answered: true}, nil
		}
		return sendResult{connected: true, sent: true}, nil
	}
	res, detail = v.tcpDirect(ctx)
	wantResult(t, "tcp connects", res, detail, verifyFail, "connected to 192.0.2.1:443")
	res, detail = v.udpDirect(ctx)
	wantResult(t, "udp sent", res, detail, verifyFail, "the kernel sent it")
	res, detail = v.dnsDirect(ctx)
	wantResult(t, "a resolver answers", res, detail, verifyFail, "127.0.0.53:53 answered")

	root = noRouteTree(t, map[string]string{})
	v, _ = testVerifier(t, root, testOptions(t))
	res, detail = v.dnsDirect(ctx)
	wantResult(t, "no resolv.conf", res, detail, verifyPass, "no nameserver")
}

// TestSendWithoutRoute checks the guard of the one function that sends:
// where this machine has a route it refuses, and where it has none it
// reaches a loopback server.
func TestSendWithoutRoute(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 64)
		n, from, err := pc.ReadFrom(buf)
		if err == nil {
			pc.WriteTo(buf[:n], from)
		}
	}()
	routes, err := routeTable("")
	res, sendErr := sendWithoutRoute(context.Background(), "udp", pc.LocalAddr().String(), []byte("x"), time.Second)
	if err != nil || len(routes) > 0 {
		if !errors.Is(sendErr, errRouteExists) || res.connected {
			t.Errorf("with routes %q (%v): send = %+v, %v; want errRouteExists and nothing sent", routes, err, res, sendErr)
		}
		return
	}
	if !res.answered {
		t.Errorf("no route: the loopback echo server did not answer: %+v, %v", res, sendErr)
	}
}

func TestVerifyCanary(t *testing.T) {
	addr := freeAddr(t)
	stop, err := startCanary(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	v, _ := testVerifier(t, t.TempDir(), testOptions(t, "--canary", addr))
	res, detail := v.canaryProbe(context.Background())
	wantResult(t, "reachable canary", res, detail, verifyFail, "shares the pod's network")

	v, _ = testVerifier(t, t.TempDir(), testOptions(t, "--canary", freeAddr(t), "--timeout", "200ms"))
	res, detail = v.canaryProbe(context.Background())
	wantResult(t, "nothing there", res, detail, verifyPass, "refused")

	v, _ = testVerifier(t, t.TempDir(), testOptions(t))
	res, detail = v.canaryProbe(context.Background())
	wantResult(t, "no canary", res, detail, verifyNA)
}

// TestVerifyClusterEgress: the cluster canary, live on loopback, is
// reached over TCP (the canary's token) and UDP (nothing listens: the
// kernel's port unreachable is the proof of arrival); a network that
// refuses or drops both passes.
func TestVerifyClusterEgress(t *testing.T) {
	ctx := context.Background()
	addr := freeAddr(t)
	stop, err := startCanary(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	v, _ := testVerifier(t, t.TempDir(), testOptions(t, "--cluster-canary", addr))
	res, detail := v.clusterEgress(ctx)
	wantResult(t, "reachable cluster canary", res, detail, verifyFail,
		"tcp "+addr+": reached (the canary answered)", "udp "+addr+": reached (port unreachable came back")
	if strings.Contains(detail, "not reached") {
		t.Errorf("detail %q: both reached it", detail)
	}

	// A UDP server that reads and never answers: a network that drops.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	silent := pc.LocalAddr().String()
	v, _ = testVerifier(t, t.TempDir(), testOptions(t, "--cluster-canary", silent, "--timeout", "200ms"))
	res, detail = v.clusterEgress(ctx)
	wantResult(t, "TCP refused, UDP dropped", res, detail, verifyPass,
		"tcp "+silent+": not reached (connection refused)", "udp "+silent+": not reached (no answer and no refusal within 200ms)")

	// No route (the agent Pod with --network none): the kernel refuses
	// both before anything is sent.
	v, _ = testVerifier(t, t.TempDir(), testOptions(t, "--cluster-canary", "10.88.0.5:3129", "--cluster-canary", "[fd00::5]:3129"))
	var (
		mu      sync.Mutex // the probes dial at once
		dialled []string
	)
	v.dialCluster = func(_ context.Context, network, address string, _ time.Duration) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		dialled = append(dialled, network+" "+address)
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}
	}
	res, detail = v.clusterEgress(ctx)
	wantResult(t, "no route", res, detail, verifyPass, "tcp 10.88.0.5:3129: not reached (network is unreachable)", "udp [fd00::5]:3129: not reached")
	if len(dialled) != 4 {
		t.Errorf("dialled %q: want TCP and UDP to each", dialled)
	}

	v, _ = testVerifier(t, t.TempDir(), testOptions(t))
	res, detail = v.clusterEgress(ctx)
	wantResult(t, "no cluster canary", res, detail, verifyNA)
}

func TestCheckClusterCanary(t *testing.T) {
	for in, want := range map[string]string{
		"10.244.1.7:3129": "10.244.1.7:3129", "172.16.0.1:1": "172.16.0.1:1", "192.168.1.2:3129": "192.168.1.2:3129",
		"100.64.3.4:3129": "100.64.3.4:3129", "127.0.0.1:3129": "127.0.0.1:3129", "[fd12::1]:3129": "[fd12::1]:3129",
		"[::ffff:10.0.0.1]:3129": "10.0.0.1:3129", "[fe80::1]:3129": "[fe80::1]:3129",
	} {
		if got, err := checkClusterCanary(in); err != nil || got != want {
			t.Errorf("checkClusterCanary(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"203.0.113.8:53", "192.0.2.1:443", "[2001:db8::1]:53", "10.0.0.1", "localhost:3129", "0.0.0.0:3129"} {
		if _, err := checkClusterCanary(in); err == nil {
			t.Errorf("checkClusterCanary(%q) accepted", in)
		}
	}
}

// verifyResolver maps names for the proxy under test: nothing is looked up.
type verifyResolver map[string][]netip.Addr

func (r verifyResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "not in the test's map", Name: host, IsNotFound: true}
}

func TestVerifyProxyAgainstDevaipodProxy(t *testing.T) {
	srv, err := proxy.New(proxy.Options{
		Pod:      "verifytest",
		Allow:    []string{"private.verify.test"},
		Resolver: verifyResolver{"private.verify.test": {netip.MustParseAddr("10.1.2.3")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	url := "http://" + ln.Addr().String()

	v, _ := testVerifier(t, t.TempDir(), testOptions(t, "--proxy", url, "--private-host", "private.verify.test"))
	res, detail := v.proxyDeniedHost(ctx)
	wantResult(t, "denied host", res, detail, verifyPass, "CONNECT: 403 not-allowed", "plain HTTP: 403")
	res, detail = v.proxyIPLiteral(ctx)
	wantResult(t, "IP literal", res, detail, verifyPass, "403 ip-literal")
	res, detail = v.proxyPrivateHost(ctx)
	wantResult(t, "allowed name of a private address", res, detail, verifyPass, "403 private-address")

	v, _ = testVerifier(t, t.TempDir(), testOptions(t, "--proxy", url))
	res, detail = v.proxyPrivateHost(ctx)
	wantResult(t, "localhost, on no list", res, detail, verifyPass, "address guard was not reached")
}

func TestVerifyProxyAnswers(t *testing.T) {
	serve := func(h http.HandlerFunc) string {
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		return s.URL
	}
	open := serve(func(w http.ResponseWriter, r *http.Request) {})
	foreign := serve(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "squid says no", http.StatusForbidden) })
	upstream := serve(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Devaipod-Proxy", proxy.ReasonUpstreamError)
		http.Error(w, "devaipod proxy: cannot reach", http.StatusBadGateway)
	})
	connectOnly := serve(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			w.Header().Set("X-Devaipod-Proxy", proxy.ReasonNotAllowed)
			http.Error(w, "devaipod proxy: no", http.StatusForbidden)
		}
	})
	for _, tt := range []struct {
		name, proxy string
		probe       func(*verifier, context.Context) (verifyResult, string)
		want        verifyResult
		has         string
	}{
		{"tunnel opened", open, (*verifier).proxyIPLiteral, verifyFail, "opened a tunnel to 192.0.2.1:443"},
		{"another proxy's 403", foreign, (*verifier).proxyDeniedHost, verifyFail, "not from devaipod's proxy"},
		{"dialled and failed", upstream, (*verifier).proxyPrivateHost, verifyFail, "let the request through"},
		{"CONNECT refused, plain HTTP let through", connectOnly, (*verifier).proxyDeniedHost, verifyFail, "plain HTTP"},
		{"no proxy there", "http://" + freeAddr(t), (*verifier).proxyDeniedHost, verifyFail, "no answer from the proxy"},
		{"no proxy given", "", (*verifier).proxyIPLiteral, verifyNA, "no --proxy"},
	} {
		args := []string{"--timeout", "500ms"}
		if tt.proxy != "" {
			args = append(args, "--proxy", tt.proxy)
		}
		v, _ := testVerifier(t, t.TempDir(), testOptions(t, args...))
		res, detail := tt.probe(v, context.Background())
		wantResult(t, tt.name, res, detail, tt.want, tt.has)
	}
}

func TestVerifyPodmanAPI(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"run/podman/": "", "run/user/1000/podman/": ""})
	v, _ := testVerifier(t, root, testOptions(t, "--timeout", "500ms"))
	res, detail := v.podmanAPI(context.Background())
	wantResult(t, "no socket", res, detail, verifyPass, "no API socket")

	stale, err := net.Listen("unix", filepath.Join(root, "run/user/1000/podman/podman.sock"))
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("cannot make the stale podman socket under CI: %v", err)
		}
		t.Skipf("unix socket path too long for this system: %v", err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	res, detail = v.podmanAPI(context.Background())
	wantResult(t, "stale socket", res, detail, verifyPass, "/run/user/1000/podman/podman.sock")

	live, err := net.Listen("unix", filepath.Join(root, "run/podman/podman.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	res, detail = v.podmanAPI(context.Background())
	wantResult(t, "live socket", res, detail, verifyFail, "connected to /run/podman/podman.sock")

	live.Close()
	docker, err := net.Listen("unix", filepath.Join(root, "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer docker.Close()
	v.environ = []string{"DOCKER_HOST=unix:///d.sock"}
	res, detail = v.podmanAPI(context.Background())
	wantResult(t, "DOCKER_HOST", res, detail, verifyFail, "connected to /d.sock")
}

// listTree lists every path under root, to show that probes leave nothing.
func listTree(t *testing.T, root string) []string {
	var out []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		out = append(out, strings.TrimPrefix(p, root))
		return nil
	})
	return out
}

func TestVerifyWrites(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"usr/bin/": "", "etc/passwd": "root:x:0:0::/root:/bin/sh\n", "etc/hosts": "127.0.0.1 localhost\n",
		"opt/devaipod/devaipod-helper": "ELF", "var/tmp/": "", "run/devaipod/proxy/": "", "run/devaipod/agent/": "",
		"home/agent/": "", "tmp/": "",
	})
	before := listTree(t, root)
	v, ffs := testVerifier(t, root, testOptions(t, "--workspace", "/workspaces/project"))

	res, detail := v.rootfsWrite(context.Background())
	wantResult(t, "writable root", res, detail, verifyFail, "created a file in /", "opened /etc/passwd for writing")
	res, detail = v.outsideWrite(context.Background())
	wantResult(t, "writable /var/tmp", res, detail, verifyFail, "created a file in /var/tmp", "/run/devaipod/proxy")
	if strings.Contains(detail, "/home/agent") || strings.Contains(detail, "/run/devaipod/agent") {
		t.Errorf("outside-write tried a place the agent writes by design: %s", detail)
	}

	ffs.readOnly = []string{"/"}
	res, detail = v.rootfsWrite(context.Background())
	wantResult(t, "read-only root", res, detail, verifyPass, "read-only file system: /, /usr, /usr/bin, /etc")
	res, detail = v.outsideWrite(context.Background())
	wantResult(t, "read-only elsewhere", res, detail, verifyPass, "read-only file system")

	if after := listTree(t, root); !slices.Equal(before, after) {
		t.Errorf("the write probes left files behind: %q", slices.DeleteFunc(after, func(p string) bool { return slices.Contains(before, p) }))
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); string(b) != "root:x:0:0::/root:/bin/sh\n" {
		t.Errorf("/etc/passwd changed: %q", b)
	}
}

func TestVerifyPersistencePoints(t *testing.T) {
	const ws = "/workspaces/project"
	protected := []string{ws + "/.git/hooks", ws + "/.git/config", ws + "/.devcontainer", ws + "/.vscode", ws + "/.gitmodules", ws + "/.envrc"}
	setup := func(t *testing.T, mounts []string) (*verifier, *fakeFS, string) {
		root := t.TempDir()
		writeTree(t, root, map[string]string{
			"workspaces/project/.git/hooks/pre-commit.sample":    "#!/bin/sh\n",
			"workspaces/project/.git/config":                     "[core]\n",
			"workspaces/project/.devcontainer/devcontainer.json": "{}",
			"workspaces/project/main.go":                         "package main\n",
		})
		var info strings.Builder
		for _, m := range mounts {
			info.WriteString("1 0 0:1 /x " + m + " rw - ext4 /dev/x rw\n")
		}
		writeTree(t, root, map[string]string{"proc/self/mountinfo": info.String()})
		v, ffs := testVerifier(t, root, testOptions(t, "--workspace", ws))
		return v, ffs, root
	}
	check := func(t *testing.T, v *verifier, rel string, want verifyResult, has ...string) {
		t.Helper()
		res, detail := v.persistencePoint(rel)
		wantResult(t, rel, res, detail, want, has...)
	}

	t.Run("unprotected", func(t *testing.T) {
		v, _, root := setup(t, nil)
		before := listTree(t, root)
		check(t, v, ".git/hooks", verifyFail, "can replace /workspaces/project: not a mount point, and /workspaces is writable")
		if after := listTree(t, root); !slices.Equal(before, after) {
			t.Errorf("the probe left files behind: %q", after)
		}
	})
	t.Run("folders bound onto themselves, protected paths read-only", func(t *testing.T) {
		v, ffs, root := setup(t, append([]string{ws, ws + "/.git"}, protected...))
		ffs.readOnly = protected
		writeTree(t, root, map[string]string{
			"workspaces/project/.vscode/": "", "workspaces/project/.gitmodules": "", "workspaces/project/.envrc": "",
		})
		before := listTree(t, root)
		for _, p := range defaultProtect {
			check(t, v, p, verifyPass, "read-only file system; cannot be replaced: a mount point")
		}
		if after := listTree(t, root); !slices.Equal(before, after) {
			t.Errorf("the probes left files behind: %q", after)
		}
		if b, _ := os.ReadFile(filepath.Join(root, "workspaces/project/.git/config")); string(b) != "[core]\n" {
			t.Errorf(".git/config changed: %q", b)
		}
	})
	t.Run("absent and creatable", func(t *testing.T) {
		v, ffs, _ := setup(t, append([]string{ws, ws + "/.git"}, protected...))
		ffs.readOnly = protected
		check(t, v, ".envrc", verifyFail, "/workspaces/project/.envrc does not exist and can be created")
	})
	t.Run("read-only file in a writable folder", func(t *testing.T) {
		v, ffs, _ := setup(t, []string{ws, ws + "/.git"})
		ffs.readOnly = []string{ws + "/.git/config"}
		check(t, v, ".git/config", verifyFail, "can replace it: not a mount point, and /workspaces/project/.git is writable")
	})
	t.Run(".git can be moved aside", func(t *testing.T) {
		v, ffs, _ := setup(t, []string{ws, ws + "/.git/hooks"})
		ffs.readOnly = []string{ws + "/.git/hooks"}
		check(t, v, ".git/hooks", verifyFail, "can replace /workspaces/project/.git")
	})
	t.Run("writable in place", func(t *testing.T) {
		v, _, _ := setup(t, append([]string{ws, ws + "/.git"}, protected...))
		check(t, v, ".git/hooks", verifyFail, "created a file in it")
		check(t, v, ".git/config", verifyFail, "opened it for writing")
	})
	t.Run("no workspace", func(t *testing.T) {
		v, _ := testVerifier(t, t.TempDir(), testOptions(t))
		check(t, v, ".git/hooks", verifyNA, "no --workspace")
	})
}

func TestVerifyPrivileges(t *testing.T) {
	root := t.TempDir()
	status := func(nnp, capEff string) {
		writeTree(t, root, map[string]string{"proc/self/status": "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t" + capEff +
			"\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t" + nnp + "\nSeccomp:\t2\n"})
	}
	v, _ := testVerifier(t, root, testOptions(t))
	ctx := context.Background()
	status("1", "0000000000000000")
	res, detail := v.capabilities(ctx)
	wantResult(t, "no capabilities", res, detail, verifyPass)
	res, detail = v.noNewPrivs(ctx)
	wantResult(t, "no-new-privileges", res, detail, verifyPass)
	res, detail = v.setuid(ctx)
	wantResult(t, "no setuid program", res, detail, verifyPass, "no setuid")

	writeTree(t, root, map[string]string{"usr/bin/sudo": "ELF", "usr/bin/ls": "ELF"})
	if err := os.Chmod(filepath.Join(root, "usr/bin/sudo"), 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	res, detail = v.setuid(ctx)
	wantResult(t, "setuid under no-new-privileges", res, detail, verifyPass, "1 setuid/setgid programs (/usr/bin/sudo), inert")

	status("0", "00000000a80425fb")
	res, detail = v.capabilities(ctx)
	wantResult(t, "podman's default capabilities", res, detail, verifyFail, "CapEff=00000000a80425fb")
	res, detail = v.noNewPrivs(ctx)
	wantResult(t, "privileges can rise", res, detail, verifyFail, "NoNewPrivs: 0")
	res, detail = v.setuid(ctx)
	wantResult(t, "setuid without no-new-privileges", res, detail, verifyFail, "/usr/bin/sudo")
}

func TestVerifyKernelProbes(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"tmp/": "", "home/agent/": ""})
	v, _ := testVerifier(t, root, testOptions(t))
	ctx := context.Background()

	var mountedOn string
	v.sys.mountTmpfs = func(dir string) error { mountedOn = dir; return syscall.EPERM }
	res, detail := v.mountProbe(ctx)
	wantResult(t, "mount refused", res, detail, verifyPass, "operation not permitted")
	if !strings.HasPrefix(mountedOn, filepath.Join(root, "tmp")+"/") {
		t.Errorf("mounted on %q, want a fresh folder in the fake /tmp", mountedOn)
	}
	if _, err := os.Stat(mountedOn); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the mount point %s was left behind", mountedOn)
	}
	v.sys.mountTmpfs = func(string) error { return nil }
	res, detail = v.mountProbe(ctx)
	wantResult(t, "mount works", res, detail, verifyFail)
	v.sys.mountTmpfs = func(string) error { return errVerifyUnsupported }
	res, detail = v.mountProbe(ctx)
	wantResult(t, "mount unsupported", res, detail, verifyNA)

	v.sys.run = func(_ context.Context, argv []string, newUser bool) error {
		if newUser {
			return &os.PathError{Op: "fork/exec", Path: argv[0], Err: syscall.EPERM}
		}
		return nil
	}
	res, detail = v.unshareProbe(ctx)
	wantResult(t, "user namespace refused", res, detail, verifyPass, "operation not permitted")
	v.sys.run = func(context.Context, []string, bool) error { return nil }
	res, detail = v.unshareProbe(ctx)
	wantResult(t, "user namespace created", res, detail, verifyFail, "created a user namespace")
	v.sys.run = func(context.Context, []string, bool) error { return errors.New("exec format error") }
	res, detail = v.unshareProbe(ctx)
	wantResult(t, "helper does not run", res, detail, verifyNA, "cannot run this program again")

	res, detail = v.rawSocket(ctx)
	wantResult(t, "raw sockets refused", res, detail, verifyPass, "operation not permitted: AF_INET SOCK_RAW")
	v.sys.rawSockets = func() []namedErr {
		return []namedErr{{"AF_INET SOCK_RAW", syscall.EPERM}, {"AF_PACKET SOCK_RAW", nil}}
	}
	res, detail = v.rawSocket(ctx)
	wantResult(t, "packet socket opens", res, detail, verifyFail, "opened AF_PACKET SOCK_RAW")
}

func TestVerifyLimits(t *testing.T) {
	ctx := context.Background()
	const rootless = "         0       1000          1\n         1     100000      65536\n"
	const rootful = "         0          0 4294967295\n"
	for _, tt := range []struct {
		name  string
		files map[string]string
		args  []string
		probe func(*verifier, context.Context) (verifyResult, string)
		want  verifyResult
		has   string
	}{
		{"v2 capped as asked", map[string]string{"sys/fs/cgroup/cgroup.controllers": "memory pids", "sys/fs/cgroup/memory.max": "8589934592\n",
			"proc/self/cgroup": "0::/\n", "proc/self/uid_map": rootless}, []string{"--limit", "memory=8g"}, (*verifier).limitMemory, verifyPass, "capped at 8.0 GiB"},
		{"v2 above the ask", map[string]string{"sys/fs/cgroup/cgroup.controllers": "memory", "sys/fs/cgroup/memory.max": "8589934592\n",
			"proc/self/cgroup": "0::/\n"}, []string{"--limit", "memory=4g"}, (*verifier).limitMemory, verifyFail, "above the 4.0 GiB asked for"},
		{"v2 parent's cap holds", map[string]string{"sys/fs/cgroup/cgroup.controllers": "memory", "sys/fs/cgroup/a/b/memory.max": "max\n",
			"sys/fs/cgroup/a/memory.max": "1073741824\n", "proc/self/cgroup": "0::/a/b\n"}, []string{"--limit", "memory=8g"}, (*verifier).limitMemory, verifyPass, "capped at 1.0 GiB"},
		{"v2 max though enforceable", map[string]string{"sys/fs/cgroup/cgroup.controllers": "pids", "sys/fs/cgroup/pids.max": "max\n",
			"proc/self/cgroup": "0::/\n"}, []string{"--limit", "pids=4096"}, (*verifier).limitPids, verifyFail, "this host can enforce it"},
		{"v2 max, nothing asked", map[string]string{"sys/fs/cgroup/cgroup.controllers": "pids", "sys/fs/cgroup/pids.max": "max\n",
			"proc/self/cgroup": "0::/\n"}, nil, (*verifier).limitPids, verifyNA, "no limit set"},
		{"v2 not delegated", map[string]string{"sys/fs/cgroup/cgroup.controllers": "cpu", "proc/self/cgroup": "0::/\n", "proc/self/uid_map": rootless},
			[]string{"--limit", "pids=4096"}, (*verifier).limitPids, verifyWarn, "4096 processes asked for, not enforced: the pids controller is not delegated"},
		{"v2 not delegated, nothing asked", map[string]string{"sys/fs/cgroup/cgroup.controllers": "cpu", "proc/self/cgroup": "0::/\n", "proc/self/uid_map": rootless},
			nil, (*verifier).limitPids, verifyNA, "not delegated"},
		{"v2 path outside the namespace", map[string]string{"sys/fs/cgroup/cgroup.controllers": "pids", "sys/fs/cgroup/pids.max": "4096\n",
			"proc/self/cgroup": "0::/../../user.slice\n"}, nil, (*verifier).limitPids, verifyPass, "capped at 4096 processes"},
		{"v1 rootless", map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
			"proc/self/cgroup": "5:memory:/user.slice/user-1000.slice\n4:cpu,cpuacct:/\n", "proc/self/uid_map": rootless},
			[]string{"--limit", "memory=8g"}, (*verifier).limitMemory, verifyWarn, "8.0 GiB asked for, not enforced: no cgroup limit visible (rootless podman on cgroup v1 ignores limits)"},
		{"v1 rootful capped", map[string]string{"sys/fs/cgroup/pids/machine/ctr/pids.max": "4096\n",
			"proc/self/cgroup": "3:pids:/machine/ctr\n", "proc/self/uid_map": rootful},
			[]string{"--limit", "pids=4096"}, (*verifier).limitPids, verifyPass, "capped at 4096 processes"},
		{"no cgroup at all", map[string]string{"proc/self/cgroup": ""}, nil, (*verifier).limitMemory, verifyNA, "no memory cgroup visible"},
	} {
		root := t.TempDir()
		writeTree(t, root, tt.files)
		v, _ := testVerifier(t, root, testOptions(t, tt.args...))
		done := make(chan struct{})
		var res verifyResult
		var detail string
		go func() { res, detail = tt.probe(v, ctx); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the probe does not return", tt.name)
		}
		wantResult(t, tt.name, res, detail, tt.want, tt.has)
	}

	root := t.TempDir()
	writeTree(t, root, map[string]string{"tmp/": ""})
	for _, tt := range []struct {
		name string
		info fsInfo
		args []string
		want verifyResult
		has  string
	}{
		{"tmpfs as asked", fsInfo{tmpfs: true, bytes: 512 << 20}, []string{"--limit", "tmp=512m"}, verifyPass, "a tmpfs of 512.0 MiB"},
		{"tmpfs too large", fsInfo{tmpfs: true, bytes: 1 << 30}, []string{"--limit", "tmp=512m"}, verifyFail, "above the 512.0 MiB"},
		{"disk, nothing asked", fsInfo{bytes: 100 << 30}, nil, verifyNA, "not capped"},
		{"disk, asked", fsInfo{bytes: 100 << 30}, []string{"--limit", "tmp=512m"}, verifyFail, "not a tmpfs"},
	} {
		v, _ := testVerifier(t, root, testOptions(t, tt.args...))
		v.sys.statfs = func(p string) (fsInfo, error) {
			if p != filepath.Join(root, "tmp") {
				t.Errorf("statfs(%q)", p)
			}
			return tt.info, nil
		}
		res, detail := v.limitTmp(ctx)
		wantResult(t, tt.name, res, detail, tt.want, tt.has)
	}
	v, ffs := testVerifier(t, root, testOptions(t, "--limit", "tmp=512m"))
	ffs.readOnly = []string{"/tmp"}
	res, detail := v.limitTmp(ctx)
	wantResult(t, "read-only /tmp", res, detail, verifyPass, "not writable")
}

func TestVerifyOtherPods(t *testing.T) {
	const vols = "/home/u/.local/share/containers/storage/volumes/"
	line := func(root, point, fstype string) string {
		return "1 0 0:1 " + root + " " + point + " rw shared:1 - " + fstype + " /dev/x rw\n"
	}
	base := line("/", "/", "overlay") + line("/", "/proc", "proc") + line("/", "/dev/shm", "tmpfs") + line("/", "/sys/fs/cgroup", "cgroup2") +
		line("/", "/tmp", "tmpfs") + line("/c/userdata/hosts", "/etc/hosts", "ext4") + line("/c/userdata/resolv.conf", "/etc/resolv.conf", "ext4") +
		line("/", "/opt/devaipod", "overlay") +
		line(vols+"devaipod-a-workspace/_data", "/workspaces", "ext4") +
		line(vols+"devaipod-a-workspace/_data/project", "/workspaces/project", "ext4") +
		line(vols+"devaipod-a-workspace/_data/project/.git/hooks", "/workspaces/project/.git/hooks", "ext4") +
		line(vols+"devaipod-a-agent-home/_data", "/home/agent", "ext4") +
		line(vols+"devaipod-a-agent-sock/_data", "/run/devaipod/agent", "ext4") +
		line(vols+"devaipod-a-proxy-sock/_data", "/run/devaipod/proxy", "ext4")
	for _, tt := range []struct {
		name  string
		extra string
		args  []string
		dirs  []string
		want  verifyResult
		has   string
	}{
		{"own pod only", "", nil, []string{"agent/", "proxy/"}, verifyPass, "pod a, 6 of its volumes"},
		{"own pod named", "", []string{"--pod", "a"}, nil, verifyPass, "pod a"},
		{"pod a-b's volume", line(vols+"devaipod-a-b-agent-sock/_data", "/mnt/x", "ext4"), nil, nil, verifyFail, "volume devaipod-a-b-agent-sock of another pod at /mnt/x"},
		{"another workspace", line(vols+"devaipod-c-workspace/_data", "/srv", "ext4"), nil, nil, verifyFail, "workspace volumes of several pods"},
		{"host path", line("/home/u/.ssh", "/mnt/ssh", "ext4"), nil, nil, verifyFail, "unexpected mount /mnt/ssh"},
		{"expected host path", line("/home/u/data", "/data", "ext4"), []string{"--expect-mount", "/data"}, nil, verifyPass, ""},
		{"secrets mount", line("/usr/share/rhel/secrets", "/run/secrets", "ext4"), nil, nil, verifyFail, "unexpected mount /run/secrets"},
		{"a stranger in /run/devaipod", "", nil, []string{"agent/", "other/"}, verifyFail, "/run/devaipod/other is not this agent's"},
	} {
		root := t.TempDir()
		files := map[string]string{"proc/self/mountinfo": base + tt.extra}
		for _, d := range tt.dirs {
			files["run/devaipod/"+d] = ""
		}
		writeTree(t, root, files)
		v, _ := testVerifier(t, root, testOptions(t, append([]string{"--workspace", "/workspaces/project"}, tt.args...)...))
		res, detail := v.otherPods(context.Background())
		wantResult(t, tt.name, res, detail, tt.want, tt.has)
	}

	for _, tt := range []struct {
		volume, pod string
		own         bool
	}{
		{"devaipod-a-workspace", "a", true},
		{"devaipod-a-b-workspace", "a", false},
		{"devaipod-a-b-workspace", "a-b", true},
		{"devaipod-ab-workspace", "a", false},
		{"devaipod-a-cache", "a", true},
	} {
		if got := ownVolume(tt.volume, tt.pod); got != tt.own {
			t.Errorf("ownVolume(%q, %q) = %v", tt.volume, tt.pod, got)
		}
	}
	if got := unescapeMountInfo(`/a\040b\134c`); got != `/a b\c` {
		t.Errorf("unescapeMountInfo = %q", got)
	}
}

func TestVerifyPanickingProbeFails(t *testing.T) {
	v, _ := testVerifier(t, t.TempDir(), testOptions(t))
	rep := v.run(context.Background(), []verifyProbe{
		{id: "boom", check: func(*verifier, context.Context) (verifyResult, string) { panic("kaputt") }},
		{id: "fine", check: func(*verifier, context.Context) (verifyResult, string) { return verifyPass, "ok" }},
	})
	if rep.Fail != 1 || rep.Pass != 1 || rep.Rows[0].Result != verifyFail || !strings.Contains(rep.Rows[0].Detail, "kaputt") {
		t.Errorf("report %+v", rep)
	}
}

func TestWrapWords(t *testing.T) {
	got := wrapWords("one two\tthree  four "+strings.Repeat("x", 12)+" five", 9)
	want := []string{"one two", "three", "four", strings.Repeat("x", 12), "five"}
	if !slices.Equal(got, want) {
		t.Errorf("%q", got)
	}
	if got := wrapWords("", 9); !slices.Equal(got, []string{""}) {
		t.Errorf("%q", got)
	}
}

func TestVerifyOutput(t *testing.T) {
	t.Setenv("DEVAIPOD_VERIFY_TEST_SECRET", "x")
	var stdout, stderr bytes.Buffer
	code := runVerify(context.Background(), []string{"--only", "trusted-env", "--only", "canary", "--secret-var", "DEVAIPOD_VERIFY_TEST_SECRET"}, &stdout, &stderr)
	out := stdout.String()
	if code != 1 || !strings.HasPrefix(out, "RESULT  ROW          ATTACK, EXPECTED, GOT\n") || !strings.Contains(out, "\nFAIL    trusted-env  read trusted variables") ||
		!strings.Contains(out, "\nN-A     canary       connect straight to the pod's canary") || !strings.Contains(out, "\n                     expected: ") ||
		!strings.Contains(out, "0 passed, 1 failed, 0 warnings (protections this host does not enforce), 1 not applicable") {
		t.Errorf("text output, exit %d:\n%s%s", code, out, stderr.String())
	}
	for _, line := range strings.Split(out, "\n") {
		if len(line) > 8+len("trusted-env")+2+verifyTextWidth {
			t.Errorf("a line wider than the table: %q", line)
		}
	}

	stdout.Reset()
	code = runVerify(context.Background(), []string{"--only", "canary", "--output", "json"}, &stdout, &stderr)
	var rep verifyReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || code != 0 || rep.NA != 1 || len(rep.Rows) != 1 || rep.Rows[0].ID != "canary" {
		t.Errorf("json output, exit %d, %v: %s", code, err, stdout.String())
	}
	var raw map[string]any
	json.Unmarshal(stdout.Bytes(), &raw)
	for _, k := range []string{"rows", "pass", "fail", "na"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("json lacks %q: %s", k, stdout.String())
		}
	}
}

// TestVerifyOnThisHost runs the whole battery here, outside any sandbox:
// it must finish, fill every row, and FAIL where this host is open (its
// own canary, a trusted variable it sets, a writable workspace), which
// shows the probes can fail for real.
func TestVerifyOnThisHost(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the battery runs in Linux containers")
	}
	// The unshare probe runs this binary again with "version": as the
	// helper, not as the tests.
	t.Setenv(asHelperEnv, "1")
	t.Setenv("DEVAIPOD_VERIFY_TEST_SECRET", "value")
	canary := freeAddr(t)
	stop, err := startCanary(canary)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ws := filepath.Join(t.TempDir(), "project")
	writeTree(t, ws, map[string]string{".devcontainer/": "", ".envrc": ""})

	args := []string{"--output", "json", "--canary", canary, "--cluster-canary", canary, "--workspace", ws,
		"--secret-var", "DEVAIPOD_VERIFY_TEST_SECRET", "--limit", "tmp=1k"}
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := runVerify(context.Background(), args, &stdout, &stderr)
	t.Logf("full battery: %v, exit %d\n%s", time.Since(start), code, stdout.String())
	var rep verifyReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if code != 1 || rep.Fail == 0 {
		t.Errorf("exit %d with %d FAILs; want 1 and some", code, rep.Fail)
	}
	if want := len(verifyProbes(testOptions(t, args...))); len(rep.Rows) != want || rep.Pass+rep.Fail+rep.NA != want {
		t.Errorf("%d rows (%d+%d+%d); want %d", len(rep.Rows), rep.Pass, rep.Fail, rep.NA, want)
	}
	results := map[string]verifyResult{}
	for _, r := range rep.Rows {
		results[r.ID] = r.Result
		if r.Detail == "" || r.Attack == "" || r.Expected == "" || !slices.Contains([]verifyResult{verifyPass, verifyFail, verifyNA}, r.Result) {
			t.Errorf("incomplete row %+v", r)
		}
		if strings.Contains(r.Detail, "the probe itself failed") {
			t.Errorf("probe %s panicked: %s", r.ID, r.Detail)
		}
	}
	for _, id := range []string{"canary", "cluster-egress", "trusted-env", "persist:.devcontainer", "persist:.envrc"} {
		if results[id] != verifyFail {
			t.Errorf("%s = %s on this host; want FAIL", id, results[id])
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(ws, ".devcontainer")); len(entries) != 0 {
		t.Errorf("the battery left files in .devcontainer: %v", entries)
	}

	stdout.Reset()
	start = time.Now()
	runVerify(context.Background(), append(args, "--fast"), &stdout, &stderr)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("--fast took %v; up runs it before every ready (budget: well under a second)", d)
	} else {
		t.Logf("--fast: %v", d)
	}
}
