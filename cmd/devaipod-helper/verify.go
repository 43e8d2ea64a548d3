package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/devaipod/devaipod/internal/cmdline"
	"github.com/devaipod/devaipod/internal/helperargs"
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
// name hosts and addresses that the proxy refuses before it dials. On a
// cluster, where the agent's Pod has routes, the one target sent to is the
// workspace Pod's canary (--cluster-canary, on the same node). A probe
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
	// verifyNA: the row does not apply here (nothing to check); Detail
	// says why.
	verifyNA verifyResult = "N-A"
	// verifyWarn: the pod asks for a protection this host cannot enforce
	// (a limit under rootless podman on cgroup v1): not devaipod's
	// failure, nor a protection the person has; Detail says which.
	verifyWarn verifyResult = "WARN"
)

// verifyRow is one line of the report.
type verifyRow struct {
	ID       string       `json:"id"`
	Attack   string       `json:"attack"`
	Expected string       `json:"expected"`
	Result   verifyResult `json:"result"`
	Detail   string       `json:"detail"`
}

// verifyReport is the JSON output:
// {"rows":[...],"pass":N,"fail":N,"warn":N,"na":N}.
type verifyReport struct {
	Rows []verifyRow `json:"rows"`
	Pass int         `json:"pass"`
	Fail int         `json:"fail"`
	Warn int         `json:"warn"`
	NA   int         `json:"na"`
}

// Defaults of the proxy probes. Every one is refused by devaipod's proxy
// before it resolves or dials anything: .invalid never resolves (RFC 6761),
// 192.0.2.1 is a documentation address (RFC 5737) that the proxy refuses as
// an IP literal, and localhost is on no allowlist (and would resolve to
// loopback, which the proxy's address guard refuses).
const (
	defaultDeniedHost  = helperargs.VerifyProbeHost
	defaultIPLiteral   = helperargs.ProbeIPLiteral
	defaultPrivateHost = "localhost"
)

// Destinations of the direct-egress probes: documentation addresses, never
// routed on the internet, and only tried when no route exists at all.
const (
	directTCPAddr  = "192.0.2.1:443"
	directUDPAddr  = "192.0.2.1:53"
	directIPv6Addr = "[2001:db8::1]:53"
	dnsProbeName   = helperargs.VerifyProbeHost
)

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

// verifyTextWidth is where writeVerifyTable wraps a row's text, so that the
// table fits about 100 columns.
const verifyTextWidth = 72

// writeVerifyTable prints each row as its result, its id and its attack,
// then what was expected and what happened, wrapped under the attack, and
// a summary.
func writeVerifyTable(w io.Writer, rep verifyReport) {
	idWidth := len("ROW")
	for _, r := range rep.Rows {
		idWidth = max(idWidth, len(r.ID))
	}
	indent := strings.Repeat(" ", 8+idWidth+2)
	fmt.Fprintf(w, "%-8s%-*s  %s\n", "RESULT", idWidth, "ROW", "ATTACK, EXPECTED, GOT")
	for _, r := range rep.Rows {
		lines := wrapWords(r.Attack, verifyTextWidth)
		lines = append(lines, wrapWords("expected: "+r.Expected, verifyTextWidth)...)
		lines = append(lines, wrapWords("got: "+r.Detail, verifyTextWidth)...)
		fmt.Fprintf(w, "%-8s%-*s  %s\n", r.Result, idWidth, r.ID, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintln(w, indent+l)
		}
	}
	fmt.Fprintf(w, "\n%d passed, %d failed, %d warnings (protections this host does not enforce), %d not applicable\n", rep.Pass, rep.Fail, rep.Warn, rep.NA)
}

// wrapWords breaks text into lines of at most width columns at spaces; a
// longer word is a line of its own. Newlines and tabs are spaces.
func wrapWords(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) > width:
			lines = append(lines, line)
			line = word
		default:
			line += " " + word
		}
	}
	return append(lines, line)
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
	clusterAttack := "TCP and UDP from the agent's Pod to the workspace Pod's canary on its cluster address"
	if len(o.clusterCanaries) > 0 {
		clusterAttack = "TCP and UDP from the agent's Pod to the workspace Pod's canary at " + strings.Join(o.clusterCanaries, ", ") + ", through the cluster's network"
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
		{id: "cluster-egress", fast: true, check: (*verifier).clusterEgress,
			attack: clusterAttack, expected: "not reached: the network drops it (the NetworkPolicy is enforced)"},
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
		{id: "credential-placeholders", fast: true, check: (*verifier).credentialPlaceholders,
			attack:   "read the credentials' real values from their variables; send their placeholders where the proxy must not put the values in",
			expected: "placeholders only; refused with 403 credential-host"},
		{id: "podman-api", fast: true, check: (*verifier).podmanAPI,
			attack: "connect to podman's or docker's API socket", expected: "no socket, or connection refused"},
		{id: "processes", check: (*verifier).processes,
			attack: "see, signal or inspect processes of other containers or of the host", expected: "only this container's processes"},
		{id: "ptrace", check: (*verifier).ptrace,
			attack: "read the memory of another process (process_vm_readv: ptrace's access check)", expected: "denied"},
		{id: "trusted-git", fast: true, check: (*verifier).trustedGit,
			attack:   "plant what makes the trusted side's git run a program: .git/commondir, hooks, fsmonitor, filters, a nested repository as a gitlink",
			expected: "the workspace's .git has none (the agent has a git directory of its own)"},
		{id: "untrusted-workspace", check: (*verifier).untrustedWorkspace,
			attack:   "find the person's trusted values where an untrusted repository's code runs (the workspace): every process's environment and command line, files, secret and host mounts",
			expected: "none there"},
		{id: "masked-git", fast: true, check: (*verifier).maskedGit,
			attack: "read a masked file's content from the git object store (git show HEAD:.env)", expected: "not there"},
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
	// dialCluster connects to a --cluster-canary address (see
	// clusterEgress), the one destination sent to where routes exist.
	dialCluster func(ctx context.Context, network, address string, timeout time.Duration) (net.Conn, error)
	sys         verifySyscalls
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
		opts:        o,
		environ:     os.Environ(),
		pid:         os.Getpid(),
		home:        os.Getenv("HOME"),
		openFile:    os.OpenFile,
		send:        sendWithoutRoute,
		interfaces:  net.Interfaces,
		dialCluster: dialCluster,
		sys:         hostSyscalls(),
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
		case verifyWarn:
			rep.Warn++
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
