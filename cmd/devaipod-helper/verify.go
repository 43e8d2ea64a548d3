package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/devaipod/devaipod/internal/size"

	"github.com/devaipod/devaipod/internal/cmdline"
	"github.com/devaipod/devaipod/proxy"
)

// verify runs the threat table's attacks from inside the agent container
// and reports, for each, what was tried, what was expected and what
// happened. `devaipod verify NAME` runs the whole battery through podman
// exec; `devaipod up` runs the --fast subset before it reports the pod
// ready. docs/verify.md describes every row.
//
// A probe never sends a packet that could leave the machine: direct egress
// is only attempted when the network namespace has no route but loopback
// (so the kernel refuses it before anything is sent), and the proxy probes
// name hosts and addresses that the proxy refuses before it dials. A probe
// that writes creates a uniquely named file and removes it again, and opens
// existing files for writing without writing a byte.

// verifyResult is a probe's verdict.
type verifyResult string

const (
	// verifyPass: the attack failed, as expected.
	verifyPass verifyResult = "PASS"
	// verifyFail: the attack worked, or the probe could not show that it
	// did not.
	verifyFail verifyResult = "FAIL"
	// verifyNA: the row does not apply here (nothing to check, or the host
	// cannot enforce it); Detail says why.
	verifyNA verifyResult = "N-A"
)

// verifyRow is one line of the report.
type verifyRow struct {
	ID       string       `json:"id"`
	Attack   string       `json:"attack"`
	Expected string       `json:"expected"`
	Result   verifyResult `json:"result"`
	Detail   string       `json:"detail"`
}

// verifyReport is the JSON output: {"rows":[...],"pass":N,"fail":N,"na":N}.
type verifyReport struct {
	Rows []verifyRow `json:"rows"`
	Pass int         `json:"pass"`
	Fail int         `json:"fail"`
	NA   int         `json:"na"`
}

// Defaults of the proxy probes. Every one is refused by devaipod's proxy
// before it resolves or dials anything: .invalid never resolves (RFC 6761),
// 192.0.2.1 is a documentation address (RFC 5737) that the proxy refuses as
// an IP literal, and localhost is on no allowlist (and would resolve to
// loopback, which the proxy's address guard refuses).
const (
	defaultDeniedHost  = "verify.devaipod.invalid"
	defaultIPLiteral   = "192.0.2.1"
	defaultPrivateHost = "localhost"
)

// Destinations of the direct-egress probes: documentation addresses, never
// routed on the internet, and only tried when no route exists at all.
const (
	directTCPAddr  = "192.0.2.1:443"
	directUDPAddr  = "192.0.2.1:53"
	directIPv6Addr = "[2001:db8::1]:53"
	dnsProbeName   = "verify.devaipod.invalid"
)

// defaultProtect are the persistence points: paths in the repository that
// make the trusted side run code (git hooks, core.hooksPath, devcontainer
// lifecycle commands, editor tasks, submodule URLs, direnv).
var defaultProtect = []string{".git/hooks", ".git/config", ".devcontainer", ".vscode", ".gitmodules", ".envrc"}

// defaultPodmanSockets are where podman's and docker's API sockets live;
// patterns are expanded with filepath.Glob.
var defaultPodmanSockets = []string{
	"/run/podman/podman.sock", "/var/run/podman/podman.sock", "/run/user/*/podman/podman.sock",
	"/var/run/docker.sock", "/run/docker.sock", "/run/user/*/docker.sock",
}

type verifyOptions struct {
	output        string
	fast          bool
	only          []string
	timeout       time.Duration
	canary        string
	proxy         string
	deniedHost    string
	ipLiteral     string
	privateHost   string
	workspace     string
	protect       []string
	secretVars    []string
	secretHashes  []string
	hashesFile    string
	limits        map[string]uint64
	podmanSockets []string
	pod           string
	expectMounts  []string
	// trustedChecked says devaipod inspected the workspace's .git
	// (inspect-git) and passes what it found as trustedProblems.
	trustedChecked  bool
	trustedProblems []string
}

// verifyListFlag is a repeatable flag; check, when set, validates each use.
type verifyListFlag struct {
	list  *[]string
	check func(string) (string, error)
}

func (f verifyListFlag) String() string { return "" }

func (f verifyListFlag) Set(s string) error {
	if f.check != nil {
		var err error
		if s, err = f.check(s); err != nil {
			return err
		}
	}
	*f.list = append(*f.list, s)
	return nil
}

// verifyLimitFlag parses KIND=VALUE for --limit.
type verifyLimitFlag struct{ limits map[string]uint64 }

func (f verifyLimitFlag) String() string { return "" }

func (f verifyLimitFlag) Set(s string) error {
	kind, value, ok := strings.Cut(s, "=")
	if !ok {
		return errors.New("want memory=BYTES, pids=N or tmp=BYTES")
	}
	var n uint64
	var err error
	switch kind {
	case "memory", "tmp":
		var bytes int64
		bytes, err = size.Parse(value)
		n = uint64(bytes)
	case "pids":
		n, err = strconv.ParseUint(value, 10, 64)
	default:
		return fmt.Errorf("unknown limit %q: want memory, pids or tmp", kind)
	}
	if err != nil || n == 0 {
		return fmt.Errorf("%s: %q is not a positive size or count", kind, value)
	}
	f.limits[kind] = n
	return nil
}

func newVerifyFlagSet(o *verifyOptions) *flag.FlagSet {
	if o.limits == nil {
		o.limits = map[string]uint64{}
	}
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.StringVar(&o.output, "output", "text", "output `FORMAT`: text or json")
	fs.BoolVar(&o.fast, "fast", false, "run only the cheap probes (what up runs before it reports ready)")
	fs.Var(verifyListFlag{list: &o.only}, "only", "run only the probe with this `ID` (repeatable; \"persist\" selects every persistence point)")
	fs.DurationVar(&o.timeout, "timeout", time.Second, "timeout of each network probe")
	fs.StringVar(&o.canary, "canary", "", "`HOST:PORT` of the pod's canary, which must NOT be reachable from here")
	fs.StringVar(&o.proxy, "proxy", "", "the allowlist proxy's `URL` (http://HOST:PORT), which must refuse the probes' hosts with 403")
	fs.StringVar(&o.deniedHost, "denied-host", defaultDeniedHost, "a `HOST` on no allowlist")
	fs.StringVar(&o.ipLiteral, "ip-literal", defaultIPLiteral, "an IP `ADDRESS` that no rule names")
	fs.StringVar(&o.privateHost, "private-host", defaultPrivateHost,
		"a `HOST` that resolves to a loopback or private address (to exercise the address guard, pick one a rule allows)")
	fs.StringVar(&o.workspace, "workspace", "", "the repository's `DIR`, where the persistence points are checked")
	fs.Var(verifyListFlag{list: &o.protect, check: checkProtectPath}, "protect",
		"a persistence point `PATH`, relative to --workspace (repeatable; replaces the default list: "+strings.Join(defaultProtect, " ")+")")
	fs.Var(verifyListFlag{list: &o.secretVars, check: checkVarName}, "secret-var",
		"a trusted variable `NAME` that must not be in this container's environments (repeatable)")
	fs.Var(verifyListFlag{list: &o.secretHashes, check: checkSHA256}, "secret-value-sha256",
		"the SHA-256 `HEX` of a trusted value that must not be in environments, command lines or files (repeatable)")
	fs.StringVar(&o.hashesFile, "secret-hashes-file", "",
		"read more SHA-256 hashes, one per line, from `PATH` (\"-\": standard input, which keeps them off this process's command line)")
	fs.Var(verifyLimitFlag{o.limits}, "limit", "an expected limit `KIND=VALUE`: memory=BYTES, pids=N, tmp=BYTES (repeatable)")
	fs.Var(verifyListFlag{list: &o.podmanSockets}, "podman-socket",
		"a podman or docker API socket `PATH` or glob that must be unreachable (repeatable; replaces the default list)")
	fs.StringVar(&o.pod, "pod", "", "this pod's `NAME` (default: read from the workspace volume's name)")
	fs.BoolVar(&o.trustedChecked, "trusted-git-checked", false, "devaipod inspected the workspace's .git; its findings are the --trusted-problem flags")
	fs.Var(verifyListFlag{list: &o.trustedProblems}, "trusted-problem", "a `PROBLEM` inspect-git found in the workspace's .git (repeatable)")
	fs.Var(verifyListFlag{list: &o.expectMounts}, "expect-mount",
		"a mount `PATH` the pod puts here on purpose, such as a [[mounts]] target (repeatable)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper verify [flags]

Run the threat table's attacks from inside this container (devaipod's agent)
and print one row per attack: PASS (the attack failed, as expected), FAIL
(it worked, or could not be shown to fail) or N-A (does not apply here, with
the reason). Exit status 1 when any row FAILs, 0 otherwise, 2 for a usage
error. Nothing leaves the machine: direct egress is tried only where no
route exists, and the proxy refuses the probes' hosts before dialling.

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

func checkProtectPath(p string) (string, error) {
	p = strings.TrimSuffix(p, "/")
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("%q must be a clean path relative to the workspace", p)
	}
	return p, nil
}

func checkVarName(s string) (string, error) {
	if !envVarName.MatchString(s) {
		return "", fmt.Errorf("%q is not a variable name", s)
	}
	return s, nil
}

func checkSHA256(s string) (string, error) {
	s = strings.ToLower(s)
	if b, err := hex.DecodeString(s); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("%q is not a SHA-256 in hex (64 digits)", s)
	}
	return s, nil
}

// readHashes reads one SHA-256 per line; blank lines and # comments are
// skipped. The command line of a process is readable by every process of
// its container, the agent's included, and a hash of a weak secret can be
// guessed offline: devaipod passes the hashes on standard input.
func readHashes(name string) ([]string, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, err
	}
	var hashes []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		h, err := checkSHA256(line)
		if err != nil {
			return nil, err
		}
		hashes = append(hashes, h)
	}
	return hashes, nil
}

func parseVerifyFlags(args []string, output io.Writer) (*verifyOptions, error) {
	o := &verifyOptions{}
	if err := cmdline.ParseFlags(newVerifyFlagSet(o), args, output, logPrefix+"verify: ", o.complete); err != nil {
		return nil, err
	}
	o.workspace = path.Clean(o.workspace)
	if o.workspace == "." {
		o.workspace = ""
	}
	return o, nil
}

// complete checks the parsed flags, reads --secret-hashes-file and fills in
// the defaults; it returns what is wrong, or "".
func (o *verifyOptions) complete() string {
	switch {
	case o.output != "text" && o.output != "json":
		return fmt.Sprintf("--output %q: want text or json", o.output)
	case o.timeout <= 0:
		return fmt.Sprintf("--timeout %v: want a positive duration", o.timeout)
	}
	if o.proxy != "" {
		if u, err := url.Parse(o.proxy); err != nil || u.Scheme != "http" || u.Port() == "" {
			return fmt.Sprintf("--proxy %q: want http://HOST:PORT", o.proxy)
		}
	}
	if o.canary != "" {
		if _, _, err := net.SplitHostPort(o.canary); err != nil {
			return fmt.Sprintf("--canary %q: want HOST:PORT", o.canary)
		}
	}
	if o.workspace != "" && !path.IsAbs(o.workspace) {
		return fmt.Sprintf("--workspace %q: want an absolute path", o.workspace)
	}
	if o.hashesFile != "" {
		hashes, err := readHashes(o.hashesFile)
		if err != nil {
			return fmt.Sprintf("--secret-hashes-file: %v", err)
		}
		o.secretHashes = append(o.secretHashes, hashes...)
	}
	if o.protect == nil {
		o.protect = defaultProtect
	}
	if o.podmanSockets == nil {
		o.podmanSockets = defaultPodmanSockets
	}
	known := verifyProbeIDs(o)
	for _, id := range o.only {
		if !slices.ContainsFunc(known, func(k string) bool { return k == id || strings.HasPrefix(k, id+":") }) {
			return fmt.Sprintf("--only %q: no such probe (probes: %s)", id, strings.Join(known, " "))
		}
	}
	return ""
}

func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseVerifyFlags(args, stderr)
	if err != nil {
		return cmdline.ExitCode(err)
	}
	rep := newVerifier(o).run(ctx, selectProbes(o))
	if o.output == "json" {
		out, _ := json.MarshalIndent(rep, "", "  ")
		stdout.Write(append(out, '\n'))
	} else {
		writeVerifyTable(stdout, rep)
	}
	if rep.Fail > 0 {
		return 1
	}
	return 0
}

// writeVerifyTable prints the rows as aligned columns and a summary.
func writeVerifyTable(w io.Writer, rep verifyReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESULT\tATTACK\tEXPECTED\tGOT")
	oneLine := strings.NewReplacer("\n", " ", "\t", " ")
	for _, r := range rep.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Result, oneLine.Replace(r.Attack), oneLine.Replace(r.Expected), oneLine.Replace(r.Detail))
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d passed, %d failed, %d not applicable\n", rep.Pass, rep.Fail, rep.NA)
}

// verifyProbe is one row of the battery.
type verifyProbe struct {
	id, attack, expected string
	// fast probes are cheap (no process, no file walk, no wait when the
	// containment holds): up runs them before it reports ready.
	fast bool
	// check is a method expression such as (*verifier).hostSecrets.
	check func(v *verifier, ctx context.Context) (verifyResult, string)
}

// verifyProbes is the battery, in report order, for the given options.
func verifyProbes(o *verifyOptions) []verifyProbe {
	canaryAttack := "connect straight to the pod's canary (a listener in the pod's network namespace)"
	if o.canary != "" {
		canaryAttack = "connect straight to the pod's canary at " + o.canary
	}
	ps := []verifyProbe{
		{id: "host-secrets", check: (*verifier).hostSecrets,
			attack:   "read host secrets: ~/.ssh, ~/.aws, ~/.gnupg, cloud and forge credentials, devaipod's config, container storage, trusted secret files",
			expected: "not there"},
		{id: "trusted-env", fast: true, check: (*verifier).trustedEnv,
			attack:   "read trusted variables from this environment, every /proc/*/environ and command line",
			expected: "not there"},
		{id: "trusted-env-files", check: (*verifier).trustedEnvFiles,
			attack:   "find a trusted value in files under HOME, the workspace, /tmp, /run, /etc, /opt",
			expected: "not there"},
		{id: "net-interfaces", fast: true, check: (*verifier).netInterfaces,
			attack: "send through a network interface other than loopback", expected: "only lo is up"},
		{id: "net-routes", fast: true, check: (*verifier).netRoutes,
			attack: "route packets anywhere but loopback (IPv4 and IPv6 route tables)", expected: "no route"},
		{id: "canary", fast: true, check: (*verifier).canaryProbe,
			attack: canaryAttack, expected: "unreachable"},
		{id: "tcp-direct", fast: true, check: (*verifier).tcpDirect,
			attack: "TCP straight to " + directTCPAddr + ", ignoring the proxy", expected: "no route"},
		{id: "udp-direct", fast: true, check: (*verifier).udpDirect,
			attack: "UDP datagram straight to " + directUDPAddr, expected: "no route"},
		{id: "ipv6-direct", fast: true, check: (*verifier).ipv6Direct,
			attack: "UDP datagram over IPv6 to " + directIPv6Addr, expected: "no route"},
		{id: "dns-direct", fast: true, check: (*verifier).dnsDirect,
			attack: "DNS query to the nameservers of /etc/resolv.conf", expected: "no route, no answer"},
		{id: "proxy-denied-host", fast: true, check: (*verifier).proxyDeniedHost,
			attack:   "CONNECT and plain HTTP through the proxy to " + o.deniedHost + ", on no allowlist",
			expected: "403 from devaipod's proxy"},
		{id: "proxy-ip-literal", fast: true, check: (*verifier).proxyIPLiteral,
			attack:   "CONNECT through the proxy to the IP literal " + net.JoinHostPort(o.ipLiteral, "443"),
			expected: "403 from devaipod's proxy"},
		{id: "proxy-private-address", fast: true, check: (*verifier).proxyPrivateHost,
			attack:   "CONNECT through the proxy to " + o.privateHost + ", a name for a loopback or private address",
			expected: "403 from devaipod's proxy"},
		{id: "podman-api", fast: true, check: (*verifier).podmanAPI,
			attack: "connect to podman's or docker's API socket", expected: "no socket, or connection refused"},
		{id: "processes", check: (*verifier).processes,
			attack: "see, signal or inspect processes of other containers or of the host", expected: "only this container's processes"},
		{id: "ptrace", check: (*verifier).ptrace,
			attack: "read the memory of another process (process_vm_readv: ptrace's access check)", expected: "denied"},
		{id: "trusted-git", fast: true, check: (*verifier).trustedGit,
			attack:   "plant what makes the trusted side's git run a program: .git/commondir, hooks, fsmonitor, filters, a nested repository as a gitlink",
			expected: "the workspace's .git has none (the agent has a git directory of its own)"},
		{id: "proc-mem", fast: true, check: (*verifier).procMem,
			attack: "open /proc/PID/mem of devaipod's processes in this container (its init, bridges, probes)", expected: "denied"},
		{id: "rootfs-write", fast: true, check: (*verifier).rootfsWrite,
			attack:   "create files in /, /usr, /usr/bin, /etc, /opt/devaipod; open /etc/passwd, /etc/hosts for writing",
			expected: "denied (read-only root)"},
		{id: "outside-write", check: (*verifier).outsideWrite,
			attack:   "create files outside the workspace, HOME and /tmp: /var, /run, /srv, /mnt, /opt, /home, /root, /usr/local, the proxy's socket folder",
			expected: "denied"},
		{id: "no-new-privs", fast: true, check: (*verifier).noNewPrivs,
			attack: "gain privileges through a setuid program or file capabilities", expected: "no-new-privileges set"},
		{id: "capabilities", fast: true, check: (*verifier).capabilities,
			attack: "use a capability (effective, permitted, bounding, ambient, inheritable)", expected: "none"},
		{id: "setuid", check: (*verifier).setuid,
			attack: "run a setuid or setgid program of the image", expected: "none, or inert under no-new-privileges"},
		{id: "mount", check: (*verifier).mountProbe,
			attack: "mount a tmpfs", expected: "denied"},
		{id: "unshare", check: (*verifier).unshareProbe,
			attack: "create a user namespace (unshare -U) to become root in it", expected: "denied"},
		{id: "raw-socket", check: (*verifier).rawSocket,
			attack: "open raw sockets (AF_INET, AF_INET6, AF_PACKET)", expected: "denied"},
	}
	for _, p := range o.protect {
		ps = append(ps, verifyProbe{id: "persist:" + p, fast: true,
			attack:   "plant code the trusted side runs later: write, create or replace " + p + " in the workspace",
			expected: "denied (read-only, cannot be moved aside)",
			check: func(v *verifier, _ context.Context) (verifyResult, string) {
				return v.persistencePoint(p)
			}})
	}
	ps = append(ps,
		verifyProbe{id: "limit-memory", check: (*verifier).limitMemory,
			attack: "memory hog", expected: limitExpectation(o, "memory", formatBytes)},
		verifyProbe{id: "limit-pids", check: (*verifier).limitPids,
			attack: "fork bomb", expected: limitExpectation(o, "pids", func(n uint64) string { return strconv.FormatUint(n, 10) + " processes" })},
		verifyProbe{id: "limit-tmp", check: (*verifier).limitTmp,
			attack: "fill /tmp", expected: limitExpectation(o, "tmp", formatBytes)},
		verifyProbe{id: "other-pods", check: (*verifier).otherPods,
			attack:   "reach another pod's volumes or sockets (mounts, /run/devaipod)",
			expected: "only this pod's volumes and sockets"},
	)
	return ps
}

func limitExpectation(o *verifyOptions, kind string, format func(uint64) string) string {
	if n, ok := o.limits[kind]; ok {
		return "capped at " + format(n) + " or less"
	}
	return "capped where the host enforces limits"
}

func verifyProbeIDs(o *verifyOptions) []string {
	var ids []string
	for _, p := range verifyProbes(o) {
		ids = append(ids, p.id)
	}
	return ids
}

// selectProbes applies --fast and --only.
func selectProbes(o *verifyOptions) []verifyProbe {
	var out []verifyProbe
	for _, p := range verifyProbes(o) {
		if o.fast && !p.fast {
			continue
		}
		if len(o.only) > 0 && !slices.ContainsFunc(o.only, func(id string) bool { return p.id == id || strings.HasPrefix(p.id, id+":") }) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// verifier is what the probes see of the container. Every absolute path a
// probe reads or writes goes through path(), so tests point root at a fake
// tree; the syscalls and network sends that cannot be faked with files
// are function fields.
type verifier struct {
	opts *verifyOptions
	// root prefixes every absolute path; "" in a container.
	root    string
	environ []string
	pid     int
	home    string

	// openFile opens files for the write probes. Tests replace it to
	// simulate read-only paths, since they may run as root.
	openFile func(name string, flag int, perm os.FileMode) (*os.File, error)
	// send is the direct-egress primitive (see sendWithoutRoute).
	send func(ctx context.Context, network, address string, payload []byte, timeout time.Duration) (sendResult, error)
	// interfaces lists this network namespace's interfaces.
	interfaces func() ([]net.Interface, error)
	sys        verifySyscalls
	// selfCommand runs this binary harmlessly (the unshare probe's child).
	selfCommand []string

	netOnce  sync.Once
	routes   []string
	routeErr error
}

// verifySyscalls are the probes that only a kernel can answer. The
// production set is in verify_linux.go; elsewhere each returns
// errVerifyUnsupported.
type verifySyscalls struct {
	// mountTmpfs mounts a tmpfs on dir, and unmounts it at once if that
	// worked.
	mountTmpfs func(dir string) error
	// rawSockets opens (and closes) one raw socket per family.
	rawSockets func() []namedErr
	// readMemory tries to read another process's memory; nil means the
	// kernel granted access.
	readMemory func(pid int) error
	// openMemory opens /proc/PID/mem for reading (and closes it); nil
	// means the kernel granted access.
	openMemory func(pid int) error
	// run runs argv, in a new user namespace if newUserNS.
	run func(ctx context.Context, argv []string, newUserNS bool) error
	// statfs tells a filesystem's type and size.
	statfs func(path string) (fsInfo, error)
	// signal sends signal 0 to pid: nil means it could be signalled.
	signal func(pid int) error
}

type namedErr struct {
	what string
	err  error
}

type fsInfo struct {
	tmpfs bool
	bytes uint64
}

var errVerifyUnsupported = errors.New("not supported on this system")

func newVerifier(o *verifyOptions) *verifier {
	v := &verifier{
		opts:       o,
		environ:    os.Environ(),
		pid:        os.Getpid(),
		home:       os.Getenv("HOME"),
		openFile:   os.OpenFile,
		send:       sendWithoutRoute,
		interfaces: net.Interfaces,
		sys:        hostSyscalls(),
	}
	if exe, err := os.Executable(); err == nil {
		v.selfCommand = []string{exe, "version"}
	}
	return v
}

// run runs the probes concurrently (each is independent, and the slowest
// sets the time) and counts the results. A probe that panics is a FAIL:
// verify never passes what it could not check.
func (v *verifier) run(ctx context.Context, probes []verifyProbe) verifyReport {
	rows := make([]verifyRow, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows[i] = verifyRow{ID: p.id, Attack: p.attack, Expected: p.expected}
			defer func() {
				if r := recover(); r != nil {
					rows[i].Result, rows[i].Detail = verifyFail, fmt.Sprintf("the probe itself failed: %v", r)
				}
			}()
			rows[i].Result, rows[i].Detail = p.check(v, ctx)
		}()
	}
	wg.Wait()
	rep := verifyReport{Rows: rows}
	for _, r := range rows {
		switch r.Result {
		case verifyPass:
			rep.Pass++
		case verifyFail:
			rep.Fail++
		default:
			rep.NA++
		}
	}
	return rep
}

// path is where the probes find the container's absolute path p.
func (v *verifier) path(p string) string { return filepath.Join(v.root, filepath.FromSlash(p)) }

func (v *verifier) readFile(p string) ([]byte, error) { return os.ReadFile(v.path(p)) }

// errText is an error without the path it names: the row already says
// which path, and under a test's root the path would be the fake one.
func errText(err error) string {
	var pe *fs.PathError
	var le *os.LinkError
	var se *os.SyscallError
	var oe *net.OpError
	switch {
	case errors.As(err, &pe):
		return errText(pe.Err)
	case errors.As(err, &le):
		return errText(le.Err)
	case errors.As(err, &oe):
		return errText(oe.Err)
	case errors.As(err, &se):
		return se.Err.Error()
	}
	return err.Error()
}

// groupErrors summarises "path: error" pairs as "error: path, path; ...".
func groupErrors(items []namedErr) string {
	var order []string
	byErr := map[string][]string{}
	for _, it := range items {
		e := errText(it.err)
		if _, ok := byErr[e]; !ok {
			order = append(order, e)
		}
		byErr[e] = append(byErr[e], it.what)
	}
	var parts []string
	for _, e := range order {
		parts = append(parts, e+": "+strings.Join(byErr[e], ", "))
	}
	return strings.Join(parts, "; ")
}

// listSome joins at most n items and says how many more there are.
func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:n], "; ") + fmt.Sprintf("; and %d more", len(items)-n)
}

// createIn tries to create a new, uniquely named file in dir and removes it
// again: how the write probes test a folder without touching its content.
func (v *verifier) createIn(dir string) error {
	var b [6]byte
	rand.Read(b[:])
	name := path.Join(dir, fmt.Sprintf(".devaipod-verify-%d-%x", v.pid, b))
	f, err := v.openFile(v.path(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	os.Remove(v.path(name))
	return nil
}

// openForWrite opens an existing regular file for appending and closes it
// without writing a byte.
func (v *verifier) openForWrite(p string) error {
	f, err := v.openFile(v.path(p), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

// isRegular reports whether p is (or links to) a regular file: only those
// are opened for writing (a FIFO would block, a device could do anything).
func (v *verifier) isRegular(p string) bool {
	fi, err := os.Stat(v.path(p))
	return err == nil && fi.Mode().IsRegular()
}

// ---- host secrets ----

// homeSecrets are credential stores under a home directory (the list the
// host side refuses to mount, pod.HomeSecrets, plus devaipod's config
// folder).
var homeSecrets = []string{".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".gcloud", ".kube", ".docker",
	".netrc", ".npmrc", ".config/containers", ".local/share/containers", ".config/devaipod.toml",
	".config/devaipod", ".git-credentials", ".config/git/credentials", ".config/gh"}

// systemSecrets are secrets outside home directories: container storage
// and registry credentials, and where trusted secrets are mounted in the
// workspace container (podman's /run/secrets, devaipod's secret files).
var systemSecrets = []string{"/var/lib/containers", "/run/containers", "/run/user/*/containers",
	"/run/devaipod/secrets", "/run/secrets"}

func (v *verifier) hostSecrets(_ context.Context) (verifyResult, string) {
	homes := []string{"/root"}
	if v.home != "" {
		homes = append([]string{v.home}, homes...)
	}
	homes = append(homes, v.glob("/home/*")...)
	var candidates []string
	for _, h := range homes {
		for _, s := range homeSecrets {
			candidates = append(candidates, path.Join(h, s))
		}
	}
	if xdg := envValue(v.environ, "XDG_CONFIG_HOME"); xdg != "" && path.IsAbs(xdg) {
		candidates = append(candidates, path.Join(xdg, "devaipod.toml"), path.Join(xdg, "devaipod"))
	}
	for _, s := range systemSecrets {
		candidates = append(candidates, v.glob(s)...)
	}
	slices.Sort(candidates)
	candidates = slices.Compact(candidates)
	var exposed, unreadable []string
	for _, c := range candidates {
		switch readable, what := v.exposed(c); {
		case readable:
			exposed = append(exposed, what)
		case what != "":
			unreadable = append(unreadable, what)
		}
	}
	if len(exposed) > 0 {
		return verifyFail, "readable: " + listSome(exposed, 6)
	}
	detail := fmt.Sprintf("none of %d places is there with anything readable", len(candidates))
	if len(unreadable) > 0 {
		detail += "; present but unreadable or empty: " + listSome(unreadable, 4)
	}
	return verifyPass, detail
}

// glob expands a pattern in the container's view; a plain path comes back
// as is.
func (v *verifier) glob(pattern string) []string {
	if !strings.ContainsAny(pattern, "*?[") {
		return []string{pattern}
	}
	matches, _ := filepath.Glob(v.path(pattern))
	var out []string
	for _, m := range matches {
		out = append(out, "/"+filepath.ToSlash(strings.TrimPrefix(strings.TrimPrefix(m, v.root), "/")))
	}
	return out
}

// exposed tells whether p holds something readable: a non-empty file that
// opens, or a folder that lists with at least one entry. what names p for
// the report, "" when p does not exist.
func (v *verifier) exposed(p string) (readable bool, what string) {
	fi, err := os.Stat(v.path(p))
	if errors.Is(err, fs.ErrNotExist) {
		return false, ""
	}
	if err != nil {
		return false, p
	}
	if fi.IsDir() {
		entries, err := os.ReadDir(v.path(p))
		if err == nil && len(entries) > 0 {
			return true, fmt.Sprintf("%s (%d entries)", p, len(entries))
		}
		return false, p
	}
	f, err := os.Open(v.path(p))
	if err != nil {
		return false, p
	}
	f.Close()
	if fi.Size() > 0 {
		return true, fmt.Sprintf("%s (%d bytes)", p, fi.Size())
	}
	return false, p
}

// ---- trusted environment ----

func envValue(environ []string, name string) string {
	for _, kv := range environ {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			return val
		}
	}
	return ""
}

// secretMatcher finds trusted names and values without ever holding a
// value: values are compared by their SHA-256.
type secretMatcher struct {
	names  map[string]bool
	hashes map[string]bool
}

func newSecretMatcher(o *verifyOptions) secretMatcher {
	m := secretMatcher{names: map[string]bool{}, hashes: map[string]bool{}}
	for _, n := range o.secretVars {
		m.names[n] = true
	}
	for _, h := range o.secretHashes {
		m.hashes[h] = true
	}
	return m
}

func (m secretMatcher) empty() bool { return len(m.names) == 0 && len(m.hashes) == 0 }

func (m secretMatcher) hashMatches(s string) bool {
	if len(m.hashes) == 0 || s == "" {
		return false
	}
	sum := sha256.Sum256([]byte(s))
	return m.hashes[hex.EncodeToString(sum[:])]
}

// inEnviron looks at "NAME=VALUE" entries and says what it found, naming
// variables but never printing a value.
func (m secretMatcher) inEnviron(entries []string) []string {
	var found []string
	for _, kv := range entries {
		k, val, _ := strings.Cut(kv, "=")
		switch {
		case m.names[k]:
			found = append(found, k+" is set")
		case m.hashMatches(val):
			found = append(found, k+" holds a trusted value")
		}
	}
	return found
}

// inArgs looks at a command line: each argument, and what follows "=" in
// it (--token=VALUE).
func (m secretMatcher) inArgs(args []string) bool {
	for _, a := range args {
		_, after, _ := strings.Cut(a, "=")
		if m.hashMatches(a) || m.hashMatches(after) {
			return true
		}
	}
	return false
}

func (v *verifier) trustedEnv(_ context.Context) (verifyResult, string) {
	m := newSecretMatcher(v.opts)
	if m.empty() {
		return verifyNA, "nothing to look for: no --secret-var or --secret-value-sha256 given"
	}
	var found []string
	for _, f := range m.inEnviron(v.environ) {
		found = append(found, "own environment: "+f)
	}
	pids, err := v.listPIDs()
	if err != nil {
		return verifyFail, "cannot list /proc: " + errText(err)
	}
	readable, unreadable := 0, 0
	for _, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid)
		data, err := v.readFile(dir + "/environ")
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				unreadable++
			}
			continue
		}
		readable++
		who := fmt.Sprintf("PID %d (%s)", pid, v.comm(pid))
		for _, f := range m.inEnviron(strings.Split(string(data), "\x00")) {
			found = append(found, who+" environment: "+f)
		}
		if cmdline, err := v.readFile(dir + "/cmdline"); err == nil && m.inArgs(strings.Split(string(cmdline), "\x00")) {
			found = append(found, who+" command line holds a trusted value")
		}
	}
	if len(found) > 0 {
		return verifyFail, listSome(found, 5)
	}
	return verifyPass, fmt.Sprintf("%d names and %d hashes absent from this environment and %d readable /proc/*/environ (%d unreadable)",
		len(m.names), len(m.hashes), readable, unreadable)
}

// Bounds of the file scan: it must finish on a large repository.
const (
	scanMaxFiles    = 50000
	scanMaxFileSize = 1 << 20
	scanMaxBytes    = 256 << 20
	scanMaxTime     = 20 * time.Second
	// scanMinValue: shorter words are not hashed (a trusted value that
	// short is no secret).
	scanMinValue = 8
)

func (v *verifier) trustedEnvFiles(ctx context.Context) (verifyResult, string) {
	m := newSecretMatcher(v.opts)
	if len(m.hashes) == 0 {
		return verifyNA, "no hash of a trusted value given (--secret-value-sha256, --secret-hashes-file): files can only be searched for a value's hash"
	}
	roots := []string{"/tmp", "/run", "/etc", "/opt"}
	if v.home != "" {
		roots = append([]string{v.home}, roots...)
	}
	if v.opts.workspace != "" {
		roots = append([]string{v.opts.workspace}, roots...)
	}
	ctx, cancel := context.WithTimeout(ctx, scanMaxTime)
	defer cancel()
	var found []string
	files, skipped, total := 0, 0, int64(0)
	stopped := ""
	seen := map[string]bool{}
	for _, r := range roots {
		filepath.WalkDir(v.path(r), func(p string, d fs.DirEntry, err error) error {
			switch {
			case stopped != "":
				return filepath.SkipAll
			case ctx.Err() != nil:
				stopped = "time limit"
				return filepath.SkipAll
			case err != nil:
				return nil
			case d.IsDir():
				skip := d.Name() == "node_modules" || d.Name() == ".cache" || (d.Name() == "objects" && filepath.Base(filepath.Dir(p)) == ".git")
				if seen[p] || (skip && p != v.path(r)) {
					return filepath.SkipDir
				}
				seen[p] = true
				return nil
			case !d.Type().IsRegular():
				return nil
			}
			if files >= scanMaxFiles || total >= scanMaxBytes {
				stopped = "size limit"
				return filepath.SkipAll
			}
			fi, err := d.Info()
			if err != nil || fi.Size() > scanMaxFileSize {
				skipped++
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			files++
			total += int64(len(data))
			if m.inText(data) {
				found = append(found, "/"+filepath.ToSlash(strings.TrimPrefix(strings.TrimPrefix(p, v.root), "/")))
			}
			return nil
		})
	}
	if len(found) > 0 {
		return verifyFail, "a trusted value is in " + listSome(found, 5)
	}
	detail := fmt.Sprintf("not in %d files under %s (%d larger than %d MiB skipped)",
		files, strings.Join(roots, " "), skipped, scanMaxFileSize>>20)
	if stopped != "" {
		detail += "; stopped early at the " + stopped
	}
	return verifyPass, detail
}

// inText looks for a hashed value in a file: as a whole line, as a word
// (split at white space and quotes), or after the first "=" or ":" of
// either (NAME=VALUE, "key": "VALUE").
func (m secretMatcher) inText(data []byte) bool {
	check := func(s string) bool {
		s = strings.TrimRight(s, ",;")
		if len(s) < scanMinValue {
			return false
		}
		if m.hashMatches(s) {
			return true
		}
		for _, sep := range []string{"=", ":"} {
			if _, after, ok := strings.Cut(s, sep); ok && len(after) >= scanMinValue && m.hashMatches(strings.Trim(after, `"' `)) {
				return true
			}
		}
		return false
	}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 64<<10), scanMaxFileSize)
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export "))
		if check(line) {
			return true
		}
		for _, w := range strings.FieldsFunc(line, func(r rune) bool { return r == '"' || r == '\'' || r == '`' || r == ' ' || r == '\t' }) {
			if check(w) {
				return true
			}
		}
	}
	return false
}

// ---- processes ----

// listPIDs lists the processes in /proc.
func (v *verifier) listPIDs() ([]int, error) {
	entries, err := os.ReadDir(v.path("/proc"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// procStat is what /proc/PID/stat tells about a process.
type procStat struct {
	comm    string
	ppid    int
	kthread bool
}

// pfKthread is PF_KTHREAD, the flag of kernel threads in /proc/PID/stat.
const pfKthread = 0x00200000

func (v *verifier) procStat(pid int) (procStat, error) {
	data, err := v.readFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// "PID (COMM) STATE PPID PGRP SESSION TTY TPGID FLAGS ...": COMM may
	// hold spaces and parentheses, so split after its last ")".
	s := string(data)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStat{}, fmt.Errorf("unreadable stat %q", s)
	}
	st := procStat{comm: s[open+1 : closing]}
	fields := strings.Fields(s[closing+1:])
	if len(fields) < 7 {
		return procStat{}, fmt.Errorf("short stat %q", s)
	}
	st.ppid, _ = strconv.Atoi(fields[1])
	flags, _ := strconv.ParseUint(fields[6], 10, 64)
	st.kthread = flags&pfKthread != 0
	return st, nil
}

func (v *verifier) comm(pid int) string {
	st, err := v.procStat(pid)
	if err != nil {
		return "?"
	}
	return st.comm
}

// statusField returns a field of /proc/PID/status ("Uid", "NoNewPrivs").
func (v *verifier) statusField(pid, field string) (string, error) {
	data, err := v.readFile("/proc/" + pid + "/status")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, val, ok := strings.Cut(line, ":"); ok && k == field {
			return strings.TrimSpace(val), nil
		}
	}
	return "", fmt.Errorf("no %s in /proc/%s/status", field, pid)
}

// foreignProcess says why a visible process is not this container's, or
// "" if it is. This container's processes share its mount namespace; one
// whose namespace cannot be read (another uid, or not dumpable) counts as
// this container's only when it is in the same cgroup.
func (v *verifier) foreignProcess(pid int, ownMnt, ownCgroup string) (why string, gone bool) {
	st, err := v.procStat(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return "", true
	}
	if err != nil {
		return "unreadable stat: " + errText(err), false
	}
	if st.kthread {
		return "a kernel thread: this is the host's process table", false
	}
	dir := "/proc/" + strconv.Itoa(pid)
	mnt, err := os.Readlink(v.path(dir + "/ns/mnt"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", true
	case err == nil && mnt != ownMnt:
		return "another mount namespace", false
	case err == nil:
		return "", false
	}
	cg, cgErr := v.readFile(dir + "/cgroup")
	if cgErr == nil && string(cg) == ownCgroup {
		return "", false
	}
	return "cannot be inspected (" + errText(err) + ") and is in another cgroup", false
}

func (v *verifier) processes(_ context.Context) (verifyResult, string) {
	ownMnt, err := os.Readlink(v.path("/proc/self/ns/mnt"))
	if err != nil {
		return verifyNA, "cannot read this process's mount namespace: " + errText(err)
	}
	ownCgroup, _ := v.readFile("/proc/self/cgroup")
	pids, err := v.listPIDs()
	if err != nil {
		return verifyFail, "cannot list /proc: " + errText(err)
	}
	var foreign []string
	visible, signalled := 0, 0
	for _, pid := range pids {
		why, gone := v.foreignProcess(pid, ownMnt, string(ownCgroup))
		if gone {
			continue
		}
		visible++
		if why == "" {
			continue
		}
		uid, _ := v.statusField(strconv.Itoa(pid), "Uid")
		uid, _, _ = strings.Cut(uid, "\t")
		desc := fmt.Sprintf("PID %d %s (uid %s): %s", pid, v.comm(pid), uid, why)
		if v.sys.signal(pid) == nil {
			signalled++
			desc += ", can be signalled"
		}
		foreign = append(foreign, desc)
	}
	if len(foreign) > 0 {
		return verifyFail, fmt.Sprintf("%d of %d visible processes are not this container's (%d can be signalled): %s",
			len(foreign), visible, signalled, listSome(foreign, 4))
	}
	return verifyPass, fmt.Sprintf("%d processes visible, all in this container's mount namespace", visible)
}

func (v *verifier) ptrace(_ context.Context) (verifyResult, string) {
	pids, err := v.listPIDs()
	if err != nil {
		return verifyFail, "cannot list /proc: " + errText(err)
	}
	// Not this process nor its children (a debugger may always trace
	// those; the unshare probe's child may be running); PID 1 first.
	var targets []int
	for _, pid := range pids {
		if pid == v.pid {
			continue
		}
		if st, err := v.procStat(pid); err != nil || st.ppid == v.pid || st.kthread {
			continue
		}
		targets = append(targets, pid)
	}
	if len(targets) > 10 {
		targets = targets[:10]
	}
	if len(targets) == 0 {
		return verifyNA, "no other process visible to attach to"
	}
	scope := ""
	if s, err := v.readFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil {
		scope = "; kernel.yama.ptrace_scope=" + strings.TrimSpace(string(s))
	}
	if s, err := v.statusField("self", "Seccomp"); err == nil {
		scope += "; seccomp mode " + s
	}
	var granted []string
	var denied []namedErr
	for _, pid := range targets {
		err := v.sys.readMemory(pid)
		switch {
		case errors.Is(err, errVerifyUnsupported):
			return verifyNA, "process_vm_readv: " + err.Error()
		case errors.Is(err, syscall.ESRCH):
		case err == nil:
			granted = append(granted, fmt.Sprintf("PID %d (%s)", pid, v.comm(pid)))
		default:
			denied = append(denied, namedErr{fmt.Sprintf("PID %d", pid), err})
		}
	}
	if len(granted) > 0 {
		return verifyFail, "memory access granted to " + listSome(granted, 4) + scope
	}
	if len(denied) == 0 {
		return verifyNA, "every process to attach to exited first"
	}
	return verifyPass, groupErrors(denied) + scope
}

// trustedGit reports what devaipod verify found in the workspace's .git,
// which the agent cannot see: it passes the findings in.
func (v *verifier) trustedGit(_ context.Context) (verifyResult, string) {
	switch {
	case !v.opts.trustedChecked:
		return verifyNA, "the workspace's .git is inspected by devaipod verify, from the workspace"
	case len(v.opts.trustedProblems) > 0:
		return verifyFail, listSome(v.opts.trustedProblems, 5)
	}
	return verifyPass, "no commondir, gitfile, alternates, hook or program-running configuration"
}

// procMem opens /proc/PID/mem of devaipod's own processes here (the
// helper: the container's init and what devaipod runs in it), which the
// seccomp profile does not cover: only their being non-dumpable keeps a
// process of the same uid out.
func (v *verifier) procMem(_ context.Context) (verifyResult, string) {
	pids, err := v.listPIDs()
	if err != nil {
		return verifyFail, "cannot list /proc: " + errText(err)
	}
	var granted, tried []string
	var denied []namedErr
	for _, pid := range pids {
		if pid == v.pid || !strings.HasPrefix(v.comm(pid), "devaipod-") {
			continue
		}
		name := fmt.Sprintf("PID %d (%s)", pid, v.comm(pid))
		tried = append(tried, name)
		switch err := v.sys.openMemory(pid); {
		case errors.Is(err, errVerifyUnsupported):
			return verifyNA, "/proc/PID/mem: " + err.Error()
		case errors.Is(err, fs.ErrNotExist):
		case err == nil:
			granted = append(granted, name)
		default:
			denied = append(denied, namedErr{name, err})
		}
	}
	switch {
	case len(granted) > 0:
		return verifyFail, "opened /proc/PID/mem of " + listSome(granted, 4)
	case len(tried) == 0:
		return verifyNA, "no other process of devaipod here"
	case len(denied) == 0:
		return verifyNA, "every process to open exited first"
	}
	return verifyPass, groupErrors(denied)
}

// ---- network ----

// routeTable reads the IPv4 and IPv6 routes of this network namespace
// (under root) and returns those not on loopback.
func routeTable(root string) ([]string, error) {
	var routes []string
	v4, err := os.ReadFile(filepath.Join(root, "/proc/net/route"))
	if err != nil {
		return nil, err
	}
	for i, line := range strings.Split(string(v4), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 3 || f[0] == "lo" {
			continue
		}
		routes = append(routes, fmt.Sprintf("%s via %s dev %s", hexIPv4(f[1]), hexIPv4(f[2]), f[0]))
	}
	v6, err := os.ReadFile(filepath.Join(root, "/proc/net/ipv6_route"))
	if errors.Is(err, fs.ErrNotExist) {
		return routes, nil // IPv6 is off
	} else if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(v6), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[9] == "lo" {
			continue
		}
		routes = append(routes, fmt.Sprintf("%s/%s dev %s", hexIPv6(f[0]), hexPrefix(f[1]), f[9]))
	}
	return routes, nil
}

// hexIPv4 reads /proc/net/route's little-endian hex address.
func hexIPv4(s string) string {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 {
		return s
	}
	return netip.AddrFrom4([4]byte{b[3], b[2], b[1], b[0]}).String()
}

func hexIPv6(s string) string {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		return s
	}
	return netip.AddrFrom16([16]byte(b)).String()
}

func hexPrefix(s string) string {
	n, err := strconv.ParseUint(s, 16, 8)
	if err != nil {
		return s
	}
	return strconv.FormatUint(n, 10)
}

// netRoutes is the route check that gates every direct-egress probe.
func (v *verifier) netRoutes(_ context.Context) (verifyResult, string) {
	routes, err := v.routeTable()
	switch {
	case err != nil:
		return verifyFail, "cannot read the route table: " + errText(err)
	case len(routes) > 0:
		return verifyFail, "routes: " + listSome(routes, 4)
	}
	return verifyPass, "no route in /proc/net/route and /proc/net/ipv6_route but loopback"
}

func (v *verifier) routeTable() ([]string, error) {
	v.netOnce.Do(func() { v.routes, v.routeErr = routeTable(v.root) })
	return v.routes, v.routeErr
}

// noRoute tells whether the direct probes may send: only where the kernel
// has no route, so that it refuses before a packet exists. Otherwise it
// says why the probe FAILs without trying.
func (v *verifier) noRoute() (ok bool, why string) {
	routes, err := v.routeTable()
	switch {
	case err != nil:
		return false, "not tried: the route table cannot be read (" + errText(err) + ")"
	case len(routes) > 0:
		return false, "not tried: this network namespace has a route (" + routes[0] + "), so a packet would leave"
	}
	return true, ""
}

func (v *verifier) netInterfaces(_ context.Context) (verifyResult, string) {
	ifaces, err := v.interfaces()
	if err != nil {
		return verifyFail, "cannot list interfaces: " + errText(err)
	}
	return judgeInterfaces(ifaces)
}

// judgeInterfaces FAILs on any interface but loopback that is up. Down
// ones (the fallback tunnel devices a module adds to every namespace) are
// reported: bringing one up needs CAP_NET_ADMIN.
func judgeInterfaces(ifaces []net.Interface) (verifyResult, string) {
	var up, down []string
	for _, i := range ifaces {
		switch {
		case i.Flags&net.FlagLoopback != 0:
		case i.Flags&net.FlagUp != 0:
			up = append(up, i.Name)
		default:
			down = append(down, i.Name)
		}
	}
	if len(up) > 0 {
		return verifyFail, "up besides loopback: " + strings.Join(up, ", ")
	}
	if len(down) > 0 {
		return verifyPass, "only loopback is up; down: " + strings.Join(down, ", ") + " (bringing one up needs CAP_NET_ADMIN)"
	}
	return verifyPass, "only loopback"
}

// sendResult is how far a direct send got.
type sendResult struct {
	connected bool // connect(2) worked: the kernel had a route
	sent      bool // the payload was accepted for sending
	answered  bool // something answered
}

// errRouteExists: sendWithoutRoute refused to send.
var errRouteExists = errors.New("not sent: this network namespace has a route")

// sendWithoutRoute connects to address, sends payload and waits for an
// answer, but only after reading the real route table (whatever root the
// probes read) and finding no route but loopback: then the kernel refuses
// any destination off the machine before a packet exists. It is the one
// place that sends, so no test setup can make a probe send outside.
func sendWithoutRoute(ctx context.Context, network, address string, payload []byte, timeout time.Duration) (sendResult, error) {
	var res sendResult
	if routes, err := routeTable(""); err != nil || len(routes) > 0 {
		return res, errRouteExists
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return res, err
	}
	defer c.Close()
	res.connected = true
	if len(payload) == 0 {
		return res, nil
	}
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(payload); err != nil {
		return res, err
	}
	res.sent = true
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	res.answered = n > 0
	return res, err
}

func (v *verifier) canaryProbe(_ context.Context) (verifyResult, string) {
	if v.opts.canary == "" {
		return verifyNA, "no --canary given"
	}
	ok, err := readCanary(v.opts.canary, v.opts.timeout)
	if ok {
		return verifyFail, "the canary answered: this container shares the pod's network"
	}
	if err == nil {
		return verifyPass, "something else answered, not the canary"
	}
	return verifyPass, errText(err)
}

// directProbe sends to a documentation address where no route exists.
func (v *verifier) directProbe(ctx context.Context, network, address string, payload []byte) (verifyResult, string) {
	if ok, why := v.noRoute(); !ok {
		return verifyFail, why
	}
	res, err := v.send(ctx, network, address, payload, v.opts.timeout)
	switch {
	case errors.Is(err, errRouteExists):
		return verifyFail, "not tried: " + err.Error()
	case res.answered:
		return verifyFail, "an answer came back from " + address
	case res.sent:
		return verifyFail, "the kernel sent it: it had a route after all"
	case res.connected && len(payload) == 0:
		return verifyFail, "connected to " + address
	case err == nil:
		return verifyFail, "no error from the kernel"
	}
	return verifyPass, errText(err)
}

func orNoError(err error) error {
	if err == nil {
		return errors.New("no error")
	}
	return err
}

func (v *verifier) tcpDirect(ctx context.Context) (verifyResult, string) {
	return v.directProbe(ctx, "tcp", directTCPAddr, nil)
}

func (v *verifier) udpDirect(ctx context.Context) (verifyResult, string) {
	return v.directProbe(ctx, "udp4", directUDPAddr, []byte("devaipod-verify\n"))
}

func (v *verifier) ipv6Direct(ctx context.Context) (verifyResult, string) {
	return v.directProbe(ctx, "udp6", directIPv6Addr, []byte("devaipod-verify\n"))
}

// nameservers reads /etc/resolv.conf.
func (v *verifier) nameservers() ([]netip.Addr, error) {
	data, err := v.readFile("/etc/resolv.conf")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// dnsQuery is a DNS query for name's A record.
func dnsQuery(name string) []byte {
	q := []byte{0xd0, 0x0d, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, label := range strings.Split(name, ".") {
		q = append(q, byte(len(label)))
		q = append(q, label...)
	}
	return append(q, 0, 0, 1, 0, 1)
}

func (v *verifier) dnsDirect(ctx context.Context) (verifyResult, string) {
	servers, err := v.nameservers()
	if err != nil {
		return verifyFail, "cannot read /etc/resolv.conf: " + errText(err)
	}
	if ok, why := v.noRoute(); !ok {
		return verifyFail, why
	}
	if len(servers) == 0 {
		return verifyPass, "no nameserver in /etc/resolv.conf"
	}
	var denied []namedErr
	for _, s := range servers {
		addr := netip.AddrPortFrom(s, 53).String()
		res, err := v.send(ctx, "udp", addr, dnsQuery(dnsProbeName), v.opts.timeout)
		switch {
		case errors.Is(err, errRouteExists):
			return verifyFail, "not tried: " + err.Error()
		case res.answered:
			return verifyFail, "nameserver " + addr + " answered"
		case res.sent && !s.IsLoopback():
			return verifyFail, "the query to " + addr + " was sent"
		}
		denied = append(denied, namedErr{addr, orNoError(err)})
	}
	return verifyPass, groupErrors(denied)
}

// ---- proxy ----

// proxyConnect sends a CONNECT for target through the proxy and returns
// its status, devaipod's refusal reason (X-Devaipod-Proxy) and the start
// of the body.
func proxyConnect(ctx context.Context, proxyURL, target string, timeout time.Duration) (status int, reason, body string, err error) {
	u, err := url.Parse(proxyURL)
	if err != nil {
		return 0, "", "", err
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return 0, "", "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		return 0, "", "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		body = string(b)
	}
	return resp.StatusCode, resp.Header.Get("X-Devaipod-Proxy"), body, nil
}

// judgeProxyAnswer: devaipod's 403 is a PASS; anything else FAILs, since
// it either let the request through (2xx, or an upstream error after
// dialling) or does not show that devaipod's proxy refused and audited it. want are the refusal reasons this
// probe aims at; another reason still PASSes, with a note.
func judgeProxyAnswer(target string, status int, reason, body string, err error, want ...string) (verifyResult, string) {
	switch {
	case err != nil:
		return verifyFail, "no answer from the proxy, so its refusal cannot be shown: " + errText(err)
	case status/100 == 2:
		return verifyFail, fmt.Sprintf("the proxy opened a tunnel to %s (%d)", target, status)
	case status != http.StatusForbidden:
		what := fmt.Sprintf("the proxy answered %d", status)
		if reason == proxy.ReasonUpstreamError {
			what += ": it let the request through and the connection failed"
		}
		return verifyFail, what
	case reason == "":
		return verifyFail, "403, but not from devaipod's proxy (no X-Devaipod-Proxy header), so its audit cannot be relied on"
	case slices.Contains(want, reason):
		return verifyPass, "403 " + reason
	}
	return verifyPass, fmt.Sprintf("403 %s (refused before the check this row aims at: %s)", reason, firstLine(body))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func (v *verifier) proxyDeniedHost(ctx context.Context) (verifyResult, string) {
	if v.opts.proxy == "" {
		return verifyNA, "no --proxy given (network mode none or open)"
	}
	target := net.JoinHostPort(v.opts.deniedHost, "443")
	status, reason, body, err := proxyConnect(ctx, v.opts.proxy, target, v.opts.timeout)
	res, detail := judgeProxyAnswer(target, status, reason, body, err, proxy.ReasonNotAllowed, proxy.ReasonDenied)
	if res != verifyPass {
		return res, "CONNECT: " + detail
	}
	// Plain HTTP too, with egress-check's probe.
	if err := proxyDenies(v.opts.proxy, v.opts.timeout); err != nil {
		return verifyFail, "CONNECT refused, but plain HTTP: " + errText(err)
	}
	return verifyPass, "CONNECT: " + detail + "; plain HTTP: 403"
}

func (v *verifier) proxyIPLiteral(ctx context.Context) (verifyResult, string) {
	if v.opts.proxy == "" {
		return verifyNA, "no --proxy given (network mode none or open)"
	}
	target := net.JoinHostPort(v.opts.ipLiteral, "443")
	status, reason, body, err := proxyConnect(ctx, v.opts.proxy, target, v.opts.timeout)
	return judgeProxyAnswer(target, status, reason, body, err, proxy.ReasonIPLiteral)
}

func (v *verifier) proxyPrivateHost(ctx context.Context) (verifyResult, string) {
	if v.opts.proxy == "" {
		return verifyNA, "no --proxy given (network mode none or open)"
	}
	target := net.JoinHostPort(v.opts.privateHost, "443")
	status, reason, body, err := proxyConnect(ctx, v.opts.proxy, target, v.opts.timeout)
	res, detail := judgeProxyAnswer(target, status, reason, body, err, proxy.ReasonPrivateAddress)
	if res == verifyPass && reason == proxy.ReasonNotAllowed {
		detail = "403 " + reason + ": no rule allows " + v.opts.privateHost +
			", so the address guard was not reached (give --private-host a name a rule allows to test it)"
	}
	return res, detail
}

// ---- podman API ----

func (v *verifier) podmanAPI(ctx context.Context) (verifyResult, string) {
	patterns := slices.Clone(v.opts.podmanSockets)
	if x := envValue(v.environ, "XDG_RUNTIME_DIR"); path.IsAbs(x) {
		patterns = append(patterns, path.Join(x, "podman/podman.sock"), path.Join(x, "docker.sock"))
	}
	for _, name := range []string{"CONTAINER_HOST", "DOCKER_HOST"} {
		if p, ok := strings.CutPrefix(envValue(v.environ, name), "unix://"); ok && path.IsAbs(p) {
			patterns = append(patterns, p)
		}
	}
	var present []namedErr
	var reached []string
	for _, pat := range patterns {
		for _, p := range v.glob(pat) {
			if _, err := os.Lstat(v.path(p)); err != nil {
				continue
			}
			d := net.Dialer{Timeout: v.opts.timeout}
			c, err := d.DialContext(ctx, "unix", v.path(p))
			if err == nil {
				c.Close()
				reached = append(reached, p)
				continue
			}
			present = append(present, namedErr{p, err})
		}
	}
	if len(reached) > 0 {
		return verifyFail, "connected to " + strings.Join(reached, ", ")
	}
	if len(present) > 0 {
		return verifyPass, "present but not reachable: " + groupErrors(present)
	}
	return verifyPass, "no API socket at " + strings.Join(patterns, " ")
}

// ---- writes ----

func (v *verifier) rootfsWrite(_ context.Context) (verifyResult, string) {
	return v.writeProbe([]string{"/", "/usr", "/usr/bin", "/etc", "/opt/devaipod"},
		[]string{"/etc/passwd", "/etc/hosts", "/etc/resolv.conf", "/opt/devaipod/devaipod-helper"})
}

func (v *verifier) outsideWrite(_ context.Context) (verifyResult, string) {
	var dirs []string
	for _, d := range []string{"/var", "/var/tmp", "/var/lib", "/run", "/run/devaipod", "/run/devaipod/proxy", "/srv",
		"/mnt", "/media", "/opt", "/home", "/root", "/usr/local", "/usr/local/bin"} {
		if !v.mayWrite(d) {
			dirs = append(dirs, d)
		}
	}
	return v.writeProbe(dirs, nil)
}

// mayWrite tells the places the agent writes by design: the workspace,
// HOME, /tmp and what lies below them.
func (v *verifier) mayWrite(p string) bool {
	for _, ok := range []string{v.opts.workspace, v.home, "/tmp"} {
		if ok != "" && ok != "/" && (p == ok || strings.HasPrefix(p, ok+"/")) {
			return true
		}
	}
	return false
}

// writeProbe creates a file in each folder and opens each existing
// regular file for writing.
func (v *verifier) writeProbe(dirs, files []string) (verifyResult, string) {
	var wrote []string
	var denied []namedErr
	for _, d := range dirs {
		if err := v.createIn(d); err == nil {
			wrote = append(wrote, "created a file in "+d)
		} else {
			denied = append(denied, namedErr{d, err})
		}
	}
	for _, f := range files {
		if !v.isRegular(f) {
			continue
		}
		if err := v.openForWrite(f); err == nil {
			wrote = append(wrote, "opened "+f+" for writing")
		} else {
			denied = append(denied, namedErr{f, err})
		}
	}
	if len(wrote) > 0 {
		return verifyFail, strings.Join(wrote, "; ")
	}
	return verifyPass, groupErrors(denied)
}

// ---- persistence points ----

// mountPoints reads /proc/self/mountinfo.
func (v *verifier) mountInfo() ([]mountEntry, error) {
	data, err := v.readFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountInfo(string(data)), nil
}

type mountEntry struct {
	root, point, fstype, source string
}

// parseMountInfo reads mountinfo lines: "ID PARENT MAJ:MIN ROOT POINT
// OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS".
func parseMountInfo(s string) []mountEntry {
	var out []mountEntry
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		m := mountEntry{root: unescapeMountInfo(f[3]), point: unescapeMountInfo(f[4])}
		if i := slices.Index(f, "-"); i > 0 && len(f) > i+2 {
			m.fstype, m.source = f[i+1], unescapeMountInfo(f[i+2])
		}
		out = append(out, m)
	}
	return out
}

// unescapeMountInfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountInfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// persistencePoint checks one protected path: it must be neither writable
// nor replaceable. A path can be replaced (renamed away, then created
// anew) when it, or a folder on the way to it from the workspace, is not a
// mount point and lies in a writable folder: a read-only file in a
// writable .git is as good as writable.
func (v *verifier) persistencePoint(rel string) (verifyResult, string) {
	ws := v.opts.workspace
	if ws == "" {
		return verifyNA, "no --workspace given"
	}
	target := path.Join(ws, rel)
	mountPoints := map[string]bool{}
	mounts, mountErr := v.mountInfo()
	for _, m := range mounts {
		mountPoints[m.point] = true
	}
	note := ""
	if mountErr != nil {
		note = "; mount points unknown (" + errText(mountErr) + "), none assumed"
	}
	chain := []string{ws}
	for p := target; p != ws; p = path.Dir(p) {
		chain = slices.Insert(chain, 1, p)
	}
	for _, p := range chain {
		_, err := os.Lstat(v.path(p))
		if errors.Is(err, fs.ErrNotExist) {
			err := v.createIn(path.Dir(p))
			if err == nil {
				return verifyFail, fmt.Sprintf("%s does not exist and can be created (%s is writable)", p, path.Dir(p)) + note
			}
			return verifyPass, fmt.Sprintf("%s does not exist and cannot be created (%s)", p, errText(err)) + note
		}
		if err != nil {
			return verifyPass, "cannot reach " + p + ": " + errText(err) + note
		}
		if !mountPoints[p] {
			if err := v.createIn(path.Dir(p)); err == nil {
				what := "it"
				if p != target {
					what = p
				}
				return verifyFail, fmt.Sprintf("can replace %s: not a mount point, and %s is writable", what, path.Dir(p)) + note
			}
		}
	}
	fi, _ := os.Stat(v.path(target))
	var err error
	var action string
	switch {
	case fi != nil && fi.IsDir():
		action, err = "created a file in it", v.createIn(target)
	case v.isRegular(target):
		action, err = "opened it for writing", v.openForWrite(target)
	default:
		return verifyPass, "not a regular file or folder; cannot be replaced" + note
	}
	if err == nil {
		return verifyFail, action + note
	}
	how := "a mount point"
	if !mountPoints[target] {
		how = "its folder is read-only"
	}
	return verifyPass, errText(err) + "; cannot be replaced: " + how + note
}

// ---- privileges ----

func (v *verifier) noNewPrivs(_ context.Context) (verifyResult, string) {
	nnp, err := v.statusField("self", "NoNewPrivs")
	if err != nil {
		return verifyFail, "cannot read NoNewPrivs: " + errText(err)
	}
	if nnp != "1" {
		return verifyFail, "NoNewPrivs: " + nnp + ": a setuid program or file capabilities raise privileges"
	}
	return verifyPass, "NoNewPrivs: 1"
}

func (v *verifier) capabilities(_ context.Context) (verifyResult, string) {
	var held []string
	for _, f := range []string{"CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"} {
		val, err := v.statusField("self", f)
		if err != nil {
			if f == "CapAmb" {
				continue // older kernels have no ambient set
			}
			return verifyFail, "cannot read " + f + ": " + errText(err)
		}
		if n, err := strconv.ParseUint(val, 16, 64); err != nil || n != 0 {
			held = append(held, f+"="+val)
		}
	}
	if len(held) > 0 {
		return verifyFail, strings.Join(held, " ")
	}
	return verifyPass, "every capability set is 0"
}

func (v *verifier) setuid(ctx context.Context) (verifyResult, string) {
	var found []string
	entries := 0
	for _, dir := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/local/sbin", "/usr/libexec", "/usr/lib"} {
		root := v.path(dir)
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			entries++
			switch {
			case err != nil:
				return nil
			case entries > 100000 || ctx.Err() != nil:
				return filepath.SkipAll
			case d.IsDir():
				if strings.Count(strings.TrimPrefix(p, root), string(filepath.Separator)) >= 3 {
					return filepath.SkipDir
				}
				return nil
			case !d.Type().IsRegular():
				return nil
			}
			if fi, err := d.Info(); err == nil && fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				found = append(found, dir+strings.TrimPrefix(filepath.ToSlash(p), filepath.ToSlash(root)))
			}
			return nil
		})
	}
	nnp, _ := v.statusField("self", "NoNewPrivs")
	switch {
	case len(found) == 0:
		return verifyPass, "no setuid or setgid program in the image's bin folders"
	case nnp == "1":
		return verifyPass, fmt.Sprintf("%d setuid/setgid programs (%s), inert: no-new-privileges is set", len(found), listSome(found, 3))
	}
	return verifyFail, fmt.Sprintf("no-new-privileges is not set, and %d setuid/setgid programs are there: %s", len(found), listSome(found, 5))
}

func (v *verifier) mountProbe(_ context.Context) (verifyResult, string) {
	var dir string
	for _, parent := range []string{"/tmp", v.home} {
		if parent == "" {
			continue
		}
		if d, err := os.MkdirTemp(v.path(parent), ".devaipod-verify-mount-"); err == nil {
			dir = d
			break
		}
	}
	if dir == "" {
		return verifyNA, "no writable folder (/tmp, HOME) to mount on"
	}
	defer os.Remove(dir)
	err := v.sys.mountTmpfs(dir)
	switch {
	case errors.Is(err, errVerifyUnsupported):
		return verifyNA, "mount: " + err.Error()
	case err == nil:
		return verifyFail, "mounted a tmpfs (and unmounted it)"
	}
	return verifyPass, errText(err)
}

func (v *verifier) unshareProbe(ctx context.Context) (verifyResult, string) {
	if len(v.selfCommand) == 0 {
		return verifyNA, "cannot find this program to run it again"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The control run tells a refused namespace from a program that does
	// not start at all.
	if err := v.sys.run(ctx, v.selfCommand, false); err != nil {
		if errors.Is(err, errVerifyUnsupported) {
			return verifyNA, "unshare: " + err.Error()
		}
		return verifyNA, "cannot run this program again, even without a new namespace: " + errText(err)
	}
	err := v.sys.run(ctx, v.selfCommand, true)
	if err == nil {
		return verifyFail, "created a user namespace (in it the process is root with every capability, the start of most kernel exploits)"
	}
	return verifyPass, errText(err)
}

func (v *verifier) rawSocket(_ context.Context) (verifyResult, string) {
	var opened []string
	var denied []namedErr
	for _, a := range v.sys.rawSockets() {
		switch {
		case errors.Is(a.err, errVerifyUnsupported):
			return verifyNA, "raw sockets: " + a.err.Error()
		case a.err == nil:
			opened = append(opened, a.what)
		default:
			denied = append(denied, a)
		}
	}
	if len(opened) > 0 {
		return verifyFail, "opened " + strings.Join(opened, ", ")
	}
	return verifyPass, groupErrors(denied)
}

// ---- limits ----

// cgroupLimit is what the cgroup files say about one limit.
type cgroupLimit struct {
	value   uint64
	limited bool
	// enforceable: the controller's file is there, so the host could cap
	// this and no limit is a choice, not a host limitation.
	enforceable bool
	// why no limit is visible, when !limited.
	why string
}

// unlimitedV1 is where cgroup v1's "no limit" values start (the largest
// page-aligned int64).
const unlimitedV1 = 1 << 62

func (v *verifier) cgroupLimit(controller, v2file, v1file string) cgroupLimit {
	data, err := v.readFile("/proc/self/cgroup")
	if err != nil {
		return cgroupLimit{why: "/proc/self/cgroup is unreadable: " + errText(err)}
	}
	parse := func(s string) (uint64, bool) {
		s = strings.TrimSpace(s)
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseUint(s, 10, 64)
		return n, err == nil && n < unlimitedV1
	}
	// readUp reads file in dir and every visible ancestor up to base and
	// keeps the lowest limit: a parent's limit holds for its children.
	readUp := func(base, rel, file string) cgroupLimit {
		dir := path.Join(base, rel)
		if _, err := os.Stat(v.path(dir)); err != nil || !strings.HasPrefix(dir+"/", base+"/") {
			dir = base // the cgroup namespace hides the path: its root is this cgroup
		}
		var l cgroupLimit
		for {
			if b, err := v.readFile(path.Join(dir, file)); err == nil {
				l.enforceable = true
				if n, ok := parse(string(b)); ok && (!l.limited || n < l.value) {
					l.value, l.limited = n, true
				}
			}
			if dir == base {
				return l
			}
			dir = path.Dir(dir)
		}
	}
	rootless := v.inUserNamespace()
	if _, err := os.Stat(v.path("/sys/fs/cgroup/cgroup.controllers")); err == nil {
		var rel string
		for _, line := range strings.Split(string(data), "\n") {
			if r, ok := strings.CutPrefix(line, "0::"); ok {
				rel = r
			}
		}
		l := readUp("/sys/fs/cgroup", rel, v2file)
		switch {
		case l.limited:
		case !l.enforceable && rootless:
			l.why = "not enforced: the " + controller + " controller is not delegated to this container's cgroup (rootless podman needs systemd to delegate it)"
		case !l.enforceable:
			l.why = "not enforced: the " + controller + " controller is not enabled for this container's cgroup"
		default:
			l.why = "no limit set (cgroup v2, " + v2file + " is max)"
		}
		return l
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), controller) {
			l := readUp(path.Join("/sys/fs/cgroup", controller), f[2], v1file)
			switch {
			case l.limited:
			case rootless:
				l.enforceable = false
				l.why = "not enforced: no cgroup limit visible (rootless podman on cgroup v1 ignores limits)"
			case !l.enforceable:
				l.why = "not enforced: no " + v1file + " visible (cgroup v1)"
			default:
				l.why = "no limit set (cgroup v1)"
			}
			return l
		}
	}
	return cgroupLimit{why: "not enforced: no " + controller + " cgroup visible under /sys/fs/cgroup"}
}

// inUserNamespace tells whether this process runs in a user namespace
// (rootless podman) rather than the host's.
func (v *verifier) inUserNamespace() bool {
	data, err := v.readFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return strings.Join(strings.Fields(string(data)), " ") != "0 0 4294967295"
}

// judgeLimit: PASS when capped at or below the expectation (or capped at
// all, without one), FAIL when the cap is above it or missing where the
// host could set it, N-A when the host cannot enforce it.
func judgeLimit(l cgroupLimit, want uint64, hasWant bool, format func(uint64) string) (verifyResult, string) {
	switch {
	case l.limited && hasWant && l.value > want:
		return verifyFail, fmt.Sprintf("capped at %s, above the %s asked for", format(l.value), format(want))
	case l.limited && hasWant:
		return verifyPass, fmt.Sprintf("capped at %s (asked for %s)", format(l.value), format(want))
	case l.limited:
		return verifyPass, "capped at " + format(l.value)
	case l.enforceable && hasWant:
		return verifyFail, fmt.Sprintf("%s, though %s was asked for and this host can enforce it", l.why, format(want))
	}
	return verifyNA, l.why
}

func (v *verifier) limitMemory(_ context.Context) (verifyResult, string) {
	want, ok := v.opts.limits["memory"]
	return judgeLimit(v.cgroupLimit("memory", "memory.max", "memory.limit_in_bytes"), want, ok, formatBytes)
}

func (v *verifier) limitPids(_ context.Context) (verifyResult, string) {
	want, ok := v.opts.limits["pids"]
	return judgeLimit(v.cgroupLimit("pids", "pids.max", "pids.max"), want, ok,
		func(n uint64) string { return strconv.FormatUint(n, 10) + " processes" })
}

func (v *verifier) limitTmp(_ context.Context) (verifyResult, string) {
	want, hasWant := v.opts.limits["tmp"]
	if err := v.createIn("/tmp"); err != nil {
		return verifyPass, "/tmp is not writable: " + errText(err)
	}
	info, err := v.sys.statfs(v.path("/tmp"))
	switch {
	case errors.Is(err, errVerifyUnsupported):
		return verifyNA, "statfs: " + err.Error()
	case err != nil:
		return verifyFail, "cannot statfs /tmp: " + errText(err)
	}
	kind := "a tmpfs"
	if !info.tmpfs {
		kind = "not a tmpfs, on a filesystem"
	}
	// tmpfs rounds its size up to whole pages.
	if hasWant && info.bytes > (want+4095)&^4095 {
		return verifyFail, fmt.Sprintf("/tmp is %s of %s, above the %s asked for", kind, formatBytes(info.bytes), formatBytes(want))
	}
	if !hasWant && !info.tmpfs {
		return verifyNA, fmt.Sprintf("not capped: /tmp is %s of %s", kind, formatBytes(info.bytes))
	}
	return verifyPass, fmt.Sprintf("/tmp is %s of %s", kind, formatBytes(info.bytes))
}

func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// ---- other pods ----

// podVolumeSuffixes are the parts after devaipod-NAME- of a pod's volumes;
// they tell pod "a" from pod "a-b" (whose volumes start devaipod-a- too).
var podVolumeSuffixes = []string{"workspace", "agent-home", "agent-sock", "proxy-sock", "proxy-state", "gator-sock", "gator-state"}

var volumeInRoot = regexp.MustCompile(`/volumes/([^/]+)/_data(/|$)`)

// ownVolume tells whether volume belongs to pod.
func ownVolume(volume, pod string) bool {
	rest, ok := strings.CutPrefix(volume, "devaipod-"+pod+"-")
	if !ok {
		return false
	}
	for _, s := range podVolumeSuffixes {
		if strings.HasSuffix(rest, "-"+s) {
			return false // devaipod-POD-X-SUFFIX: pod POD-X's
		}
	}
	return true
}

// expectedMount tells the mount points a devaipod agent has on purpose.
func (v *verifier) expectedMount(point string) bool {
	switch point {
	case "/", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/etc/passwd", "/etc/group",
		"/etc/localtime", "/etc/timezone", "/run/.containerenv", "/run/podman-init":
		return true
	}
	under := []string{"/proc", "/sys", "/dev", "/tmp", "/opt/devaipod", "/run/devaipod", "/workspaces"}
	if v.home != "" && v.home != "/" {
		under = append(under, v.home)
	}
	under = append(under, v.opts.expectMounts...)
	if ws := v.opts.workspace; ws != "" {
		under = append(under, ws)
		// The folders above the workspace, such as the volume at /workspaces.
		if point != "/" && strings.HasPrefix(ws, point+"/") {
			return true
		}
	}
	for _, u := range under {
		if u != "" && (point == u || strings.HasPrefix(point, strings.TrimSuffix(u, "/")+"/")) {
			return true
		}
	}
	return false
}

func (v *verifier) otherPods(_ context.Context) (verifyResult, string) {
	mounts, err := v.mountInfo()
	if err != nil {
		return verifyNA, "cannot read /proc/self/mountinfo: " + errText(err)
	}
	pod := v.opts.pod
	if pod == "" {
		pods := map[string]bool{}
		for _, m := range mounts {
			if vm := volumeInRoot.FindStringSubmatch(m.root); vm != nil {
				if name, ok := strings.CutSuffix(strings.TrimPrefix(vm[1], "devaipod-"), "-workspace"); ok && strings.HasPrefix(vm[1], "devaipod-") {
					pods[name] = true
				}
			}
		}
		switch names := slices.Sorted(maps.Keys(pods)); len(names) {
		case 0:
		case 1:
			pod = names[0]
		default:
			return verifyFail, "workspace volumes of several pods are mounted: " + strings.Join(names, ", ")
		}
	}
	var problems []string
	ownVolumes := 0
	for _, m := range mounts {
		if vm := volumeInRoot.FindStringSubmatch(m.root); vm != nil && strings.HasPrefix(vm[1], "devaipod-") {
			switch {
			case pod != "" && ownVolume(vm[1], pod):
				ownVolumes++
				continue
			case pod != "":
				problems = append(problems, fmt.Sprintf("volume %s of another pod at %s", vm[1], m.point))
				continue
			}
		}
		if !v.expectedMount(m.point) {
			problems = append(problems, fmt.Sprintf("unexpected mount %s (%s %s)", m.point, m.fstype, m.root))
		}
	}
	if entries, err := os.ReadDir(v.path("/run/devaipod")); err == nil {
		for _, e := range entries {
			// The sockets' folders, and "git": the agent's own git
			// directory a second time (up copies it in there).
			if !slices.Contains([]string{"agent", "proxy", "gator", "git"}, e.Name()) {
				problems = append(problems, "/run/devaipod/"+e.Name()+" is not this agent's")
			}
		}
	}
	if len(problems) > 0 {
		return verifyFail, listSome(problems, 5)
	}
	who := "pod " + pod
	if pod == "" {
		who = "no devaipod volume, so no pod name"
	}
	return verifyPass, fmt.Sprintf("%d mounts, all expected; %s, %d of its volumes", len(mounts), who, ownVolumes)
}
