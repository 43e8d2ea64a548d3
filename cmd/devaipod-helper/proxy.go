package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path"
	"strconv"
	"syscall"
	"time"

	"github.com/devaipod/devaipod/proxy/rule"

	"github.com/devaipod/devaipod/internal/approval"
	"github.com/devaipod/devaipod/internal/auditlog"
	"github.com/devaipod/devaipod/internal/cmdline"
	"github.com/devaipod/devaipod/internal/endpoint"
	"github.com/devaipod/devaipod/proxy"
)

type proxyOptions struct {
	listen      endpoint.Endpoint
	pod         string
	allow       []string
	policyFile  string
	maxTunnels  int
	idleTimeout time.Duration
	auditLogs   []string
	credentials []string
	credDir     string
	upstreamCA  string
	ask         []string
	askTimeout  time.Duration
	approvalDir string
	forbidden   []string
	verbose     bool
}

func newProxyFlagSet(o *proxyOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.Var(endpoint.ListenFlag(&o.listen), "listen", "listen on `unix:PATH` or tcp:HOST:PORT (required)")
	fs.StringVar(&o.pod, "pod", "", "the pod's `NAME`, for the audit and the 403 text (required)")
	fs.Var(cmdline.ListFlag(&o.allow, cmdline.Valid(rule.Parse)), "allow",
		"allow `RULE` (repeatable): host, *.suffix, host:port, host:*, an IP address; port 443 unless given")
	fs.StringVar(&o.policyFile, "policy-file", "",
		"the live policy file `PATH` (JSON, changed with 'devaipod-helper policy'; need not exist) (required)")
	fs.IntVar(&o.maxTunnels, "max-tunnels", proxy.DefaultMaxTunnels, "most CONNECT tunnels open at once")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", proxy.DefaultIdleTimeout,
		"close a tunnel after this long without traffic in either direction")
	fs.Var(cmdline.ListFlag(&o.auditLogs, nil), "audit-log",
		"write the JSON audit lines to `PATH` (repeatable; - is stdout; default stdout); a file is moved aside to PATH.1 at 8 MiB")
	fs.Var(cmdline.ListFlag(&o.credentials, cmdline.Valid(parseCredentialArg)), "credential",
		"put a credential in: `NAME=PLACEHOLDER@HOST[,HOST...]` (repeatable): on those hosts the proxy terminates TLS and replaces PLACEHOLDER in request headers with the value in --credential-dir's file NAME")
	fs.StringVar(&o.credDir, "credential-dir", "", "the `DIR` with one file per --credential, named after it")
	fs.StringVar(&o.upstreamCA, "upstream-ca", "", "a PEM `FILE` of roots trusted, besides the system's, when talking to a host with a credential")
	fs.Var(cmdline.ListFlag(&o.ask, cmdline.Valid(rule.Parse)), "ask",
		"hold requests that `RULE` covers (repeatable; the forms of --allow) and no allow or deny rule does, until a person decides (devaipod approve, reject)")
	fs.DurationVar(&o.askTimeout, "ask-timeout", proxy.DefaultAskTimeout, "refuse a held request that no one decided within this long")
	fs.StringVar(&o.approvalDir, "approval-dir", "",
		"the `DIR` where held requests wait for a decision (needed with --ask; 'devaipod-helper approvals' lists and decides them)")
	fs.Var(cmdline.ListFlag(&o.forbidden, absolutePath), "forbidden-path",
		"never share the host `PATH`, or anything under it, when the agent asks for a host path (repeatable; / refuses every such request)")
	fs.BoolVar(&o.verbose, "v", false, "log debug messages")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper proxy --listen unix:PATH|tcp:HOST:PORT --pod NAME
         --policy-file PATH [--allow RULE]... [flags]

Run the pod's egress proxy (HTTP CONNECT and plain HTTP) as a container's
PID 1, until SIGTERM or SIGINT. Deny by default: a request goes through only
if an --allow rule or the policy file's allow list covers its host and port,
and the policy file's deny list does not. Rules:

  api.example.test         that name, port 443
  api.example.test:80      that name, port 80 (plain HTTP needs this)
  api.example.test:*       that name, any port
  *.example.test[:PORT]    any name below example.test, not example.test itself
  10.0.2.2[:PORT], [::1][:PORT]
                           that address; IP literals, and names that resolve
                           to loopback, private, link-local or metadata
                           addresses, are refused unless such a rule names
                           the address

The policy file is JSON, {"allow": [RULE...], "deny": [RULE...]}, reread
when it changes. A unix socket's directory is created, a stale socket
replaced, and the socket made mode 0666. One JSON audit line per decision
goes to each --audit-log (stdout by default); messages go to stderr.

An --ask rule holds, rather than refuses, a request that it covers and no
allow or deny rule does: the client waits, nothing is sent, and the request
is filed in --approval-dir until a person decides on the host (devaipod
approvals, approve, reject; inside the container 'devaipod-helper approvals'),
at most --ask-timeout. Approved once, that request goes on as an allowed one
(the next one asks again); approved for the pod, the rule for its host and
port is added to the policy file first, as devaipod allow does; rejected or
not decided in time, it gets 403 with the reason. A deny rule is never asked
about; at most 32 requests wait at once (more get 503). Each ask is audited
twice: decision "ask" when it starts to wait, and the final decision.

With --approval-dir, the agent may also ask for a host path it was not given
(devaipod-helper request-path, a POST to /devaipod/request-path of this
proxy): the request is filed there too, kind "path", and held the same way.
Approved (devaipod approve, which first copies the path into the pod), the
agent is told where it sees it, /host/PATH. A PATH that is or is under a
--forbidden-path is refused at once, unasked; the host checks again after
resolving symbolic links. Without --approval-dir such requests get 404.

The proxy runs with GOMAXPROCS=1 (2 while two requests to the --credential
hosts are in progress at once) and GOGC=50, and restarts itself once, as
it starts, with GODEBUG=schedtrace=2147483647, which keeps Go's monitor thread
from waking thousands of times a second under load (docs/network.md). Any of
GOMAXPROCS, GOGC, or a GODEBUG naming schedtrace, in the environment wins.

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

func parseProxyFlags(args []string, output io.Writer) (*proxyOptions, error) {
	o := &proxyOptions{}
	err := cmdline.ParseFlags(newProxyFlagSet(o), args, output, logPrefix+"proxy: ", func() string {
		switch {
		case o.listen.Network == "":
			return "missing --listen"
		case o.pod == "":
			return "missing --pod"
		case o.policyFile == "":
			return "missing --policy-file"
		case o.maxTunnels < 1:
			return fmt.Sprintf("--max-tunnels %d: want at least 1", o.maxTunnels)
		case o.idleTimeout <= 0:
			return fmt.Sprintf("--idle-timeout %v: want a positive duration", o.idleTimeout)
		case len(o.credentials) > 0 && o.credDir == "":
			return "--credential needs --credential-dir"
		case len(o.ask) > 0 && o.approvalDir == "":
			return "--ask needs --approval-dir"
		case o.askTimeout <= 0:
			return fmt.Sprintf("--ask-timeout %v: want a positive duration", o.askTimeout)
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	return o, nil
}

// adaptPeriod is how often the proxy looks at its load to choose its Ps
// (proxy.AdaptMaxProcs).
const adaptPeriod = 50 * time.Millisecond

func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseProxyFlags(args, stderr)
	if err != nil {
		return cmdline.ExitCode(err)
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(cmdline.NewLineHandler(stderr, logPrefix+"proxy: ", level))
	// One P and GOGC 50 unless the environment says otherwise: see
	// proxy.TuneRuntime.
	defer proxy.TuneRuntime(os.Getenv)()

	audit, closeAudit, err := auditlog.OpenAll(o.auditLogs, stdout, auditlog.DefaultMaxBytes, proxy.KeepRecord)
	if err != nil {
		fmt.Fprintf(stderr, "%sproxy: %v\n", logPrefix, err)
		return 1
	}
	defer closeAudit()
	creds, err := readCredentials(o.credentials, o.credDir)
	if err != nil {
		fmt.Fprintf(stderr, "%sproxy: %v\n", logPrefix, err)
		return 1
	}
	roots, err := upstreamRoots(o.upstreamCA)
	if err != nil {
		fmt.Fprintf(stderr, "%sproxy: %v\n", logPrefix, err)
		return 1
	}
	var approver proxy.Approver
	if o.approvalDir != "" {
		// What an earlier run left waiting waits for nothing now.
		store := &approval.Store{Dir: o.approvalDir}
		if err := store.Reset(); err != nil {
			fmt.Fprintf(stderr, "%sproxy: %v\n", logPrefix, err)
			return 1
		}
		// Network requests an --ask rule holds, and host paths the agent
		// asks for (which need no ask rule).
		approver = &storeApprover{store: store, pod: o.pod, log: logger}
	}
	srv, err := proxy.New(proxy.Options{
		Ask:         o.ask,
		AskTimeout:  o.askTimeout,
		Approver:    approver,
		Credentials: creds,
		RootCAs:     roots,
		Pod:         o.pod,
		Allow:       o.allow,
		PolicyFile:  o.policyFile,
		Audit:       audit,
		Logger:      logger,
		MaxTunnels:  o.maxTunnels,
		IdleTimeout: o.idleTimeout,
		// The proxy's check is lexical; the host's, after resolving
		// symbolic links, is the one that counts.
		ForbiddenPaths: o.forbidden,
	})
	if err != nil {
		fmt.Fprintf(stderr, "%sproxy: %v\n", logPrefix, err)
		return 1
	}
	if len(creds) > 0 && os.Getenv("GOMAXPROCS") == "" {
		// A second P while two intercepted requests are in progress at
		// once: see proxy.AdaptMaxProcs.
		adaptCtx, stopAdapting := context.WithCancel(ctx)
		adapted := make(chan struct{})
		go func() {
			defer close(adapted)
			proxy.AdaptMaxProcs(adaptCtx, srv, adaptPeriod)
		}()
		defer func() {
			stopAdapting()
			<-adapted
		}()
	}
	// No TCP keep-alive towards the clients (four setsockopt calls per
	// connection): the proxy's idle timeouts close quiet tunnels and
	// connections.
	ln, err := o.listen.Listen(ctx, net.ListenConfig{KeepAlive: -1})
	if err != nil {
		fmt.Fprintf(stderr, "%sproxy: listen on %s: %v\n", logPrefix, o.listen, err)
		return 1
	}
	addr := o.listen.Network + ":" + ln.Addr().String()

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger.Info("listening on "+addr, "pod", o.pod, "rules", len(o.allow), "ask-rules", len(o.ask), "policy-file", o.policyFile)
	if err := srv.Serve(ctx, ln); err != nil {
		fmt.Fprintf(stderr, "%sproxy: %v\n", logPrefix, err)
		return 1
	}
	logger.Info("stopped")
	return 0
}

// restartForProxy makes this process start again, as itself and with the
// same arguments, with proxy.RuntimeGODEBUG, which the Go runtime reads
// only at start; main calls it for the proxy command (tests call run, and
// must not be replaced). It returns only if GODEBUG already names the
// setting (the second start) or the restart failed; then the proxy runs as
// it is, a little slower.
func restartForProxy(stderr io.Writer) {
	env, changed := proxy.RuntimeEnviron(os.Environ())
	if !changed {
		return
	}
	// The path, not /proc/self/exe, so that the process keeps its name.
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, env)
	}
	fmt.Fprintf(stderr, "%sproxy: warning: cannot restart with GODEBUG=%s, running without it: %v\n",
		logPrefix, proxy.RuntimeGODEBUG, err)
}

func newPolicyFlagSet(file *string) *flag.FlagSet {
	fs := flag.NewFlagSet("policy", flag.ContinueOnError)
	fs.StringVar(file, "file", "", "the policy file `PATH` (required)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper policy --file PATH allow|deny|remove RULE
       devaipod-helper policy --file PATH show

Change or print a proxy's policy file, which the running proxy rereads.
allow adds RULE to the allow list (and drops it from the deny list), deny
adds it to the deny list (and drops it from the allow list; a deny rule
wins over every allow rule, the proxy's --allow ones included), remove drops
it from both. RULE is checked and stored in its canonical form; see
'devaipod-helper proxy -h' for the forms. The file is replaced atomically
and its directory created if missing. A change is in force for every new
request when the command returns (it waits out the proxy's check
interval); open tunnels are not re-checked. Every form prints the
resulting policy as JSON: {"allow": [...], "deny": [...]}.

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

func runPolicy(args []string, stdout, stderr io.Writer) int {
	var file string
	fs := newPolicyFlagSet(&file)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "%spolicy: %s\n", logPrefix, fmt.Sprintf(format, a...))
		return 2
	}
	if file == "" {
		return usageErr("missing --file")
	}
	var p proxy.Policy
	var err error
	switch op := fs.Arg(0); op {
	case "show":
		if fs.NArg() != 1 {
			return usageErr("show takes no arguments")
		}
		p, err = proxy.ReadPolicyFile(file)
	case proxy.OpAllow, proxy.OpDeny, proxy.OpRemove:
		if fs.NArg() != 2 {
			return usageErr("%s wants exactly one RULE, got %d arguments", op, fs.NArg()-1)
		}
		if _, err := rule.Parse(fs.Arg(1)); err != nil {
			return usageErr("%v", err)
		}
		p, err = proxy.EditPolicyFile(file, op, fs.Arg(1))
		if err == nil {
			// The proxy looks at the file at most once per check interval:
			// after this wait, every new request sees the change, so
			// "devaipod allow" is in force when it returns.
			time.Sleep(proxy.DefaultPolicyCheckInterval + 50*time.Millisecond)
		}
	case "":
		return usageErr("missing operation: allow, deny, remove or show")
	default:
		return usageErr("unknown operation %q: want allow, deny, remove or show", op)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%spolicy: %v\n", logPrefix, err)
		return 1
	}
	stdout.Write(p.JSON())
	return 0
}

// absolutePath accepts an absolute path (a --forbidden-path).
func absolutePath(p string) error {
	if !path.IsAbs(p) {
		return fmt.Errorf("%q is not an absolute path", p)
	}
	return nil
}

// approvalRequest is what storeApprover files for r: a network request an
// ask rule holds, or a host path the agent asks for.
func approvalRequest(pod string, r proxy.AskRequest) approval.Request {
	if r.Kind == proxy.AskPath {
		return approval.Request{Pod: pod, Kind: approval.KindPath, What: r.What, Rule: r.Path,
			Details: map[string]string{"path": r.Path, "reason": r.Reason, "rw": strconv.FormatBool(r.RW)}}
	}
	return approval.Request{Pod: pod, Kind: approval.KindNetwork, What: r.What, Rule: r.Rule,
		Details: map[string]string{"host": r.Host, "port": strconv.Itoa(r.Port), "method": r.Method, "ask_rule": r.Ask}}
}
