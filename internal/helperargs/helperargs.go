// Package helperargs is the contract between devaipod on the host and the
// binaries of its helper image: the command lines the host writes for
// devaipod-helper and devaipod-gator, as typed structs. The host builds
// every such command line with Args; the binaries parse the same flag
// names, and their tests parse what Args writes (a round trip), so the two
// sides cannot drift apart. Standard library only: the helper links it.
package helperargs

import (
	"strconv"
	"time"
)

// argv collects a command line, leaving out flags at their zero value.
type argv []string

func (a *argv) str(flag, v string) {
	if v != "" {
		*a = append(*a, "--"+flag, v)
	}
}

func (a *argv) list(flag string, vs []string) {
	for _, v := range vs {
		*a = append(*a, "--"+flag, v)
	}
}

func (a *argv) boolean(flag string, b bool) {
	if b {
		*a = append(*a, "--"+flag)
	}
}

func (a *argv) duration(flag string, d time.Duration) {
	if d != 0 {
		*a = append(*a, "--"+flag, d.String())
	}
}

// Forward is init's bridge from a TCP address in the container to a unix
// socket: connections to addr go to path.
func Forward(addr, path string) string { return "tcp:" + addr + "=unix:" + path }

// Expose is init's bridge from a unix socket to a TCP address: connections
// to the socket at path go to addr.
func Expose(path, addr string) string { return "unix:" + path + "=tcp:" + addr }

// Init runs as a container's PID 1: bridges, signals, reaping; then
// Command, if any.
type Init struct {
	Canary   string   // tcp:HOST:PORT to answer with a token
	Forwards []string // see Forward
	Exposes  []string // see Expose
	// ProxyCA is the URL of the proxy's CA, fetched into CADir before
	// Command starts.
	ProxyCA, CADir string
	// WaitFor is a file that must exist before Command starts.
	WaitFor string
	Command []string // after "--"
}

// Args is init's command line, with "--" before the command if any.
func (x Init) Args() []string {
	a := argv{"init"}
	a.str("canary", x.Canary)
	a.list("forward", x.Forwards)
	a.list("expose", x.Exposes)
	a.str("proxy-ca", x.ProxyCA)
	a.str("ca-dir", x.CADir)
	a.str("wait-for", x.WaitFor)
	if len(x.Command) == 0 {
		return a
	}
	return append(append(a, "--"), x.Command...)
}

// WaitHTTP waits until a server answers at URL.
type WaitHTTP struct {
	Timeout      time.Duration
	Path         string // appended to URL
	Status       string // "2xx": only such an answer counts
	User         string // basic auth, with the password read from PasswordFile
	PasswordFile string
	URL          string
}

func (x WaitHTTP) Args() []string {
	a := argv{"wait-http"}
	a.duration("timeout", x.Timeout)
	a.str("path", x.Path)
	a.str("status", x.Status)
	a.str("user", x.User)
	a.str("password-file", x.PasswordFile)
	return append(a, x.URL)
}

// EgressCheck checks that this container can or cannot get out.
type EgressCheck struct {
	Canary       string // HOST:PORT that must not be reachable
	ExpectCanary string // HOST:PORT that must be reachable
	Proxy        string // the allowlist proxy's URL, which must refuse
}

func (x EgressCheck) Args() []string {
	a := argv{"egress-check"}
	a.str("canary", x.Canary)
	a.str("expect-canary", x.ExpectCanary)
	a.str("proxy", x.Proxy)
	return a
}

// SecretEnv runs Command with the variables of the secret files in Dir
// (none when Dir is empty), as User with GroupAdd, under Umask.
type SecretEnv struct {
	Dir         string
	Umask       string
	User        string
	GroupAdd    []string
	PrintHashes bool // print NAME SHA256 lines instead of running
	Command     []string
}

// Args is secret-env's command line. Dir is always written: an empty one
// means no secrets, where the helper's default means the pod's.
func (x SecretEnv) Args() []string {
	a := argv{"secret-env", "--dir", x.Dir}
	a.str("umask", x.Umask)
	a.str("user", x.User)
	a.list("group-add", x.GroupAdd)
	a.boolean("print-hashes", x.PrintHashes)
	if len(x.Command) == 0 {
		return a
	}
	return append(append(a, "--"), x.Command...)
}

// Proxy runs the pod's egress proxy.
type Proxy struct {
	Listen     string // unix:PATH or tcp:HOST:PORT
	Pod        string
	PolicyFile string
	Allow      []string
	// AuditLogs are where the audit records go: "-" is stdout, anything
	// else a file bounded in size (see AuditLog).
	AuditLogs []string
	// Credentials are NAME=PLACEHOLDER@HOST,HOST; each value is the file
	// CredentialDir/NAME. UpstreamCA is a PEM file of extra roots.
	Credentials   []string
	CredentialDir string
	UpstreamCA    string
	// Ask are rules whose requests wait for a person's decision, filed in
	// ApprovalDir (see internal/approval) for at most AskTimeout.
	Ask         []string
	AskTimeout  time.Duration
	ApprovalDir string
	// ForbiddenPaths are host paths never shared when the agent asks for
	// a host path (with ApprovalDir): the proxy refuses them, and what is
	// under them, unasked.
	ForbiddenPaths []string
}

func (x Proxy) Args() []string {
	a := argv{"proxy"}
	a.str("listen", x.Listen)
	a.str("pod", x.Pod)
	a.str("policy-file", x.PolicyFile)
	a.list("allow", x.Allow)
	a.list("audit-log", x.AuditLogs)
	a.list("credential", x.Credentials)
	a.str("credential-dir", x.CredentialDir)
	a.str("upstream-ca", x.UpstreamCA)
	a.list("ask", x.Ask)
	a.duration("ask-timeout", x.AskTimeout)
	a.str("approval-dir", x.ApprovalDir)
	a.list("forbidden-path", x.ForbiddenPaths)
	return a
}

// RequestPath asks, from the agent, for the host path Path (absolute),
// which a person approves on the host; granted, it is at /host/Path. The
// agent runs it; the host writes it to show the agent how.
type RequestPath struct {
	RW      bool
	Reason  string
	Proxy   string // the proxy's URL; the helper's default is the agent's bridge
	Timeout time.Duration
	JSON    bool
	Path    string
}

func (x RequestPath) Args() []string {
	a := argv{"request-path"}
	a.boolean("rw", x.RW)
	a.str("reason", x.Reason)
	a.str("proxy", x.Proxy)
	a.duration("timeout", x.Timeout)
	a.boolean("json", x.JSON)
	return append(a, "--", x.Path)
}

// Approvals lists (Op "list") the pending requests of a sidecar's
// approval folder Dir as JSON lines, or decides (Op "approve" or
// "reject") the one of id ID.
type Approvals struct {
	Dir    string
	Op     string
	ID     string
	For    string // approve: once or pod
	RW     bool   // approve a path request writable
	Reason string
	By     string
}

func (x Approvals) Args() []string {
	a := argv{"approvals"}
	a.str("dir", x.Dir)
	a.str("for", x.For)
	a.boolean("rw", x.RW)
	a.str("reason", x.Reason)
	a.str("by", x.By)
	a = append(a, x.Op)
	if x.ID != "" {
		a = append(a, x.ID)
	}
	return a
}

// AuditLog prints the audit log file a sidecar writes at Path.
type AuditLog struct{ Path string }

func (x AuditLog) Args() []string { return []string{"audit-log", x.Path} }

// Policy changes (Op: allow, deny, remove) or shows (Op: show) the proxy's
// policy file.
type Policy struct {
	File string
	Op   string
	Rule string
}

func (x Policy) Args() []string {
	a := argv{"policy"}
	a.str("file", x.File)
	a = append(a, x.Op)
	if x.Rule != "" {
		a = append(a, x.Rule)
	}
	return a
}

// Task hands Text to the agent's server at URL as the first message of a
// session.
type Task struct {
	User         string
	PasswordFile string
	URL, Text    string
}

func (x Task) Args() []string {
	a := argv{"task"}
	a.str("user", x.User)
	a.str("password-file", x.PasswordFile)
	return append(a, x.URL, x.Text)
}

// Verify is the verify battery, as a pod promises it (the plan records
// these in a label) and as devaipod verify adds to it.
type Verify struct {
	Pod          string
	Workspace    string
	Canary       string
	Proxy        string
	Protect      []string
	ExpectMounts []string
	// Limits are KIND=N: memory and tmp in bytes, pids.
	Limits []string
	// MaskedObjects are blob ids the agent's git directory must not hold.
	MaskedObjects []string
	// CredentialVars must hold the proxy's placeholders.
	CredentialVars []string
	Fast           bool
	// ClusterCanaries are IP:PORT addresses of the workspace Pod's canary
	// on a cluster (its Pod's addresses), which the agent must not reach:
	// the engine adds them, from the Pod's status (pod/kubeclient).
	ClusterCanaries []string
	// Only runs these rows alone.
	Only []string

	Output            string
	SecretVars        []string
	SecretHashesFile  string
	TrustedGitChecked bool
	TrustedProblems   []string
	// WithheldChecked is what inspect-withheld checked in an untrusted
	// repository's workspace ("" when it did not run), WithheldProblems
	// what it found.
	WithheldChecked  string
	WithheldProblems []string
}

// Limit is a Verify limit: "memory=4294967296".
func Limit(kind string, n int64) string { return kind + "=" + strconv.FormatInt(n, 10) }

func (x Verify) Args() []string {
	a := argv{"verify"}
	a.str("pod", x.Pod)
	a.str("workspace", x.Workspace)
	a.str("canary", x.Canary)
	a.list("cluster-canary", x.ClusterCanaries)
	a.str("proxy", x.Proxy)
	a.list("protect", x.Protect)
	a.list("expect-mount", x.ExpectMounts)
	a.list("limit", x.Limits)
	a.list("masked-object", x.MaskedObjects)
	a.list("credential-var", x.CredentialVars)
	a.boolean("fast", x.Fast)
	a.list("only", x.Only)
	a.str("output", x.Output)
	a.list("secret-var", x.SecretVars)
	a.str("secret-hashes-file", x.SecretHashesFile)
	a.boolean("trusted-git-checked", x.TrustedGitChecked)
	a.list("trusted-problem", x.TrustedProblems)
	a.str("withheld-checked", x.WithheldChecked)
	a.list("withheld-problem", x.WithheldProblems)
	return a
}

// InspectWithheld looks, in an untrusted repository's workspace, for the
// trusted values whose hashes are in HashesFile, for secrets but
// AllowSecrets, and for host paths bound in.
type InspectWithheld struct {
	Workspace    string
	HashesFile   string
	AllowSecrets []string
}

func (x InspectWithheld) Args() []string {
	a := argv{"inspect-withheld"}
	a.str("workspace", x.Workspace)
	a.str("secret-hashes-file", x.HashesFile)
	a.list("allow-secret", x.AllowSecrets)
	return a
}

// InspectGit reports what in Repo/.git could make git run a program.
type InspectGit struct{ Repo string }

func (x InspectGit) Args() []string { return []string{"inspect-git", x.Repo} }

// HiddenFiles lists the files under Workspace that the user UID can have
// written and that are not among the paths on its standard input (a
// diff's): devaipod diff's last section. Stat lists names and sizes only.
// Pathspecs go after the flags, behind a "--".
type HiddenFiles struct {
	Workspace string
	Protect   []string
	UID       int
	Stat      bool
}

func (x HiddenFiles) Args() []string {
	a := argv{"hidden-files"}
	a.str("workspace", x.Workspace)
	a.list("protect", x.Protect)
	a = append(a, "--uid", strconv.Itoa(x.UID))
	a.boolean("stat", x.Stat)
	return a
}

// Hangup sends SIGHUP to the processes whose environment holds Env
// (NAME=VALUE), as a closed terminal does, and kills those that neither
// ignore it nor end.
type Hangup struct{ Env string }

func (x Hangup) Args() []string { return []string{"hangup", "--env", x.Env} }

// Gator is devaipod-gator's command line (the binary takes no subcommand).
type Gator struct {
	Listen    string
	Pod       string
	Workspace string
	APIURL    string
	GitURL    string
	Scopes    []string
	TokenFile string
	// ProtectedPaths replace the gator's default protected paths.
	ProtectedPaths []string
	// KnownCommits are OWNER/REPO@SHA, commits in those repositories'
	// histories (gator.Options.KnownCommits).
	KnownCommits []string
	AuditLogs    []string // as Proxy's
	// ApprovalDir and AskTimeout are as Proxy's, for the ask: permissions.
	ApprovalDir string
	AskTimeout  time.Duration
}

func (x Gator) Args() []string {
	a := argv{}
	a.str("listen", x.Listen)
	a.str("pod", x.Pod)
	a.str("workspace", x.Workspace)
	a.str("api-url", x.APIURL)
	a.str("git-url", x.GitURL)
	a.list("scope", x.Scopes)
	a.str("token-file", x.TokenFile)
	a.list("protected-path", x.ProtectedPaths)
	a.list("known-commit", x.KnownCommits)
	a.list("audit-log", x.AuditLogs)
	a.str("approval-dir", x.ApprovalDir)
	a.duration("ask-timeout", x.AskTimeout)
	return a
}

// The hosts up's containment checks (egress-check, verify) ask the pod's
// proxy for, each of which it refuses before it resolves or dials
// anything: .invalid never resolves (RFC 6761), 192.0.2.1 is a
// documentation address (RFC 5737), an IP literal no rule names. devaipod
// audit labels their refusals as the checks', not the agent's: an agent
// that asks for them gets the same refusal and can reach nothing there.
const (
	EgressProbeHost = "egress-check.devaipod.invalid"
	VerifyProbeHost = "verify.devaipod.invalid"
	ProbeIPLiteral  = "192.0.2.1"
)

// IsProbeHost: host is one that up's and verify's checks ask the proxy
// for, to see it refused.
func IsProbeHost(host string) bool {
	return host == EgressProbeHost || host == VerifyProbeHost || host == ProbeIPLiteral
}
