package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devaipod/devaipod/internal/size"

	"github.com/devaipod/devaipod/internal/cmdline"
)

// defaultProtect are the persistence points: paths in the repository that
// make the trusted side run code (devcontainer lifecycle commands, editor
// tasks, submodule URLs, direnv); devaipod passes its own list. .git is
// not one: the agent has a git directory of its own (trusted-git checks
// the workspace's).
var defaultProtect = []string{".devcontainer", ".vscode", ".gitmodules", ".envrc"}

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
	// withheldChecked is what devaipod verify checked in an untrusted
	// repository's workspace (inspect-withheld), withheldProblems what it
	// found; "" when the repository is trusted.
	withheldChecked  string
	withheldProblems []string
	// maskedObjects are the masked files' blob ids, which the agent's git
	// directory must not hold.
	maskedObjects []string
	// credentialVars are this container's variables that must hold the
	// proxy's placeholders, never a credential.
	credentialVars []string
	// clusterCanaries are the workspace Pod's canary on its cluster
	// addresses (IP:PORT), which the agent's Pod must not reach.
	clusterCanaries []string
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
	fs.Var(verifyListFlag{list: &o.clusterCanaries, check: checkClusterCanary}, "cluster-canary",
		"`IP:PORT` of the workspace Pod's canary on a cluster (its Pod's address), which this Pod must NOT reach over TCP or UDP (repeatable; private, shared, loopback or link-local addresses only)")
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
	fs.Var(verifyListFlag{list: &o.maskedObjects, check: checkObjectID}, "masked-object", "the `ID` of a masked file's blob, which the agent's git directory must not hold (repeatable)")
	fs.Var(verifyListFlag{list: &o.credentialVars, check: checkVarName}, "credential-var",
		"a `NAME` that must hold the proxy's placeholder for a credential, which the proxy refuses to send to a host the credential is not bound to (repeatable)")
	fs.BoolVar(&o.trustedChecked, "trusted-git-checked", false, "devaipod inspected the workspace's .git; its findings are the --trusted-problem flags")
	fs.Var(verifyListFlag{list: &o.trustedProblems}, "trusted-problem", "a `PROBLEM` inspect-git found in the workspace's .git (repeatable)")
	fs.StringVar(&o.withheldChecked, "withheld-checked", "", "what devaipod checked in an untrusted repository's workspace (inspect-withheld); its findings are the --withheld-problem flags")
	fs.Var(verifyListFlag{list: &o.withheldProblems}, "withheld-problem", "a `PROBLEM` inspect-withheld found in an untrusted repository's workspace (repeatable)")
	fs.Var(verifyListFlag{list: &o.expectMounts}, "expect-mount",
		"a mount `PATH` the pod puts here on purpose, such as a [[mounts]] target (repeatable)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper verify [flags]

Run the threat table's attacks from inside this container (devaipod's agent)
and print one row per attack: PASS (the attack failed, as expected), FAIL
(it worked, or could not be shown to fail) or N-A (does not apply here, with
the reason). Exit status 1 when any row FAILs, 0 otherwise, 2 for a usage
error. Nothing leaves the machine: direct egress is tried only where no
route exists, the proxy refuses the probes' hosts before dialling, and
--cluster-canary (a Pod address: private ones only) is the one target
probed where routes exist: the workspace Pod's canary, on the agent's node.

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

// checkObjectID accepts a git object id: 40 (SHA-1) or 64 (SHA-256) hex
// digits.
func checkObjectID(s string) (string, error) {
	if (len(s) != 40 && len(s) != 64) || strings.Trim(s, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%q is not a git object id", s)
	}
	return s, nil
}
