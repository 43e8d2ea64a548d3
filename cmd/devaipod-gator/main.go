// Command devaipod-gator runs the pod's gator (package gator) as the PID 1
// of its container: an MCP server that gives the agent scoped GitHub access
// with a token the agent never sees.
//
// It is a binary of its own, next to devaipod-helper in the helper image,
// because it links the MCP SDK, a GitHub client and go-git: in the helper,
// which is mapped into every container and runs the egress proxy, they
// would cost every pod's proxy their pages. It links no podman bindings and
// no cobra either (deps_test.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/devaipod/devaipod/gator"
	"github.com/devaipod/devaipod/gator/policy"
	"github.com/devaipod/devaipod/internal/auditlog"
	"github.com/devaipod/devaipod/internal/cmdline"
	"github.com/devaipod/devaipod/internal/endpoint"

	// The gator runs in the helper's FROM scratch image, which has no CA
	// certificates: without these, every HTTPS request to GitHub would fail
	// verification. They are used only when the system has no roots of its
	// own; SSL_CERT_FILE (or a mounted /etc/ssl/certs) still wins, which is
	// how a GitHub Enterprise behind a private CA is trusted.
	_ "golang.org/x/crypto/x509roots/fallback"
)

// Version is set at build time with -ldflags '-X main.Version=...'.
var Version = "dev"

const logPrefix = "devaipod-gator: "

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the gator, or prints the version for "version", and returns
// the process exit code; 2 means a usage error, as with the flag package.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "version" {
		return runVersion(args[1:], stdout, stderr)
	}
	return runGator(ctx, args, stdout, stderr)
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: devaipod-gator version\n\nPrint the version of this binary.\n")
	}
	if err := cmdline.ParseFlags(fs, args, stderr, logPrefix+"version: ", nil); err != nil {
		return cmdline.ExitCode(err)
	}
	fmt.Fprintln(stdout, Version)
	return 0
}

type gatorOptions struct {
	listen    endpoint.Endpoint
	scopes    []string
	tokenFile string
	apiURL    string
	gitURL    string
	workspace string
	auditLogs []string
	pod       string
	verbose   bool
	protected []string
	known     []string

	approvalDir string
	askTimeout  time.Duration
}

func newGatorFlagSet(o *gatorOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("gator", flag.ContinueOnError)
	fs.Var(endpoint.ListenFlag(&o.listen), "listen", "serve MCP on `unix:PATH` (or tcp:HOST:PORT) (required)")
	fs.Var(cmdline.ListFlag(&o.scopes, cmdline.Valid(policy.ParseScope)), "scope",
		"grant `SCOPE` (repeatable, at least one): github:OWNER/REPO[:PERMS], github:OWNER/*[:PERMS], github:readonly-all")
	fs.StringVar(&o.tokenFile, "token-file", "",
		"read the GitHub token from `PATH` (a podman secret); without it, $GH_TOKEN or $GITHUB_TOKEN")
	fs.StringVar(&o.apiURL, "api-url", gator.DefaultAPIURL,
		"the GitHub REST API's base `URL` (GitHub Enterprise: https://HOST/api/v3/)")
	fs.StringVar(&o.gitURL, "git-url", "",
		"the base `URL` pushes go to, as BASE/OWNER/REPO.git (default: derived from --api-url)")
	fs.StringVar(&o.workspace, "workspace", "",
		"the git work tree `DIR` whose HEAD push_branch pushes (mounted read-only); push_branch is off without it")
	fs.Var(cmdline.ListFlag(&o.auditLogs, nil), "audit-log",
		"append the JSON audit lines to `PATH` (repeatable; - is stdout; default stdout); a file is moved aside to PATH.1 at 8 MiB")
	fs.StringVar(&o.pod, "pod", "", "the pod's `NAME`, for the audit records")
	fs.Var(cmdline.ListFlag(&o.protected, policy.CheckProtectedPattern), "protected-path",
		"a `PATTERN` of files no pushed commit may touch (repeatable; replaces the default CI definitions; dir/** for everything under dir)")
	fs.Var(cmdline.ListFlag(&o.known, func(s string) error {
		_, _, err := gator.ParseKnownCommit(s)
		return err
	}), "known-commit",
		"`OWNER/REPO@SHA`: a commit that should be in that repository's history although no branch may point at it (repeatable; devaipod up gives the commit the workspace started from); once GitHub confirms it is in the default branch's history, a push's check of the new commits stops there")
	fs.StringVar(&o.approvalDir, "approval-dir", "",
		"file calls that need a person's approval (ask:PERM) in the approvals folder `DIR`; without it, such calls are refused")
	fs.DurationVar(&o.askTimeout, "ask-timeout", gator.DefaultAskTimeout,
		"how long a call that needs a person's approval waits for the decision before it is refused")
	fs.BoolVar(&o.verbose, "v", false, "log debug messages")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-gator --listen unix:PATH --scope SCOPE... [flags]
       devaipod-gator version

Run the pod's gator as a container's PID 1, until SIGTERM or SIGINT: an MCP
server (streamable HTTP at /mcp, health check at /healthz) whose tools read
and write GitHub with a token the agent never sees, within the scopes given.
Scopes:

  github:OWNER/REPO          read that repository
  github:OWNER/REPO:PERMS    PERMS on it, comma-separated: read, comment,
                             create-draft (draft pull requests only),
                             push-branch (agent/... branches only, never
                             forced), pending-review
  github:OWNER/*[:PERMS]     read (or PERMS) on every repository of OWNER
  github:readonly-all        read on every repository

A permission written ask:PERM (any but read), as in
github:octo/app:read,ask:push-branch, is granted call by call: each such
call is filed in --approval-dir and waits (--ask-timeout) for a person to
approve it from the host; an approval for the pod's life lets the tool on
that repository through from then on.

Every call is checked before any request is made and audited as one JSON
line. The token comes from --token-file, else $GH_TOKEN, else
$GITHUB_TOKEN; it is never logged, and is scrubbed from what the agent
gets back. Messages go to stderr.

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

func parseGatorFlags(args []string, output io.Writer) (*gatorOptions, error) {
	o := &gatorOptions{}
	err := cmdline.ParseFlags(newGatorFlagSet(o), args, output, logPrefix, func() string {
		switch {
		case o.listen.Network == "":
			return "missing --listen"
		case len(o.scopes) == 0:
			return "missing --scope: without one the gator would deny every call"
		case o.workspace != "" && !filepath.IsAbs(o.workspace):
			return fmt.Sprintf("--workspace %q is not absolute", o.workspace)
		case o.approvalDir != "" && !filepath.IsAbs(o.approvalDir):
			return fmt.Sprintf("--approval-dir %q is not absolute", o.approvalDir)
		case o.askTimeout <= 0:
			return fmt.Sprintf("--ask-timeout %v: want a positive duration, such as 60s", o.askTimeout)
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	return o, nil
}

// readToken reads the token from file, or from the environment when file
// is empty. The error never quotes the file's content.
func readToken(file string, getenv func(string) string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read the token: %w", err)
		}
		token := strings.TrimSpace(string(b))
		if token == "" {
			return "", fmt.Errorf("read the token: %s is empty", file)
		}
		return token, nil
	}
	for _, name := range []string{"GH_TOKEN", "GITHUB_TOKEN"} {
		if token := strings.TrimSpace(getenv(name)); token != "" {
			return token, nil
		}
	}
	return "", errors.New("no GitHub token: give --token-file, or set GH_TOKEN or GITHUB_TOKEN")
}

func runGator(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseGatorFlags(args, stderr)
	if err != nil {
		return cmdline.ExitCode(err)
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(cmdline.NewLineHandler(stderr, logPrefix, level))
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s%v\n", logPrefix, err)
		return 1
	}

	token, err := readToken(o.tokenFile, os.Getenv)
	if err != nil {
		return fail(err)
	}
	scopes, err := policy.ParseScopes(o.scopes)
	if err != nil {
		return fail(err) // checked as flags already; kept for safety
	}
	audit, closeAudit, err := auditlog.OpenAll(o.auditLogs, stdout, auditlog.DefaultMaxBytes, gator.KeepRecord)
	if err != nil {
		return fail(err)
	}
	defer closeAudit()

	srv, err := gator.New(gator.Options{
		Scopes:    scopes,
		Token:     token,
		APIURL:    o.apiURL,
		GitURL:    o.gitURL,
		Workspace: o.workspace,
		Audit:     audit,
		Pod:       o.pod,
		Logger:    logger,
		Version:   Version,

		ProtectedPaths: o.protected,
		KnownCommits:   o.known,
		ApprovalDir:    o.approvalDir,
		AskTimeout:     o.askTimeout,
	})
	if err != nil {
		return fail(err)
	}
	ln, err := o.listen.Listen(ctx, net.ListenConfig{})
	if err != nil {
		return fail(fmt.Errorf("listen on %s: %w", o.listen, err))
	}
	addr := o.listen.Network + ":" + ln.Addr().String()

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger.Info("listening on "+addr+gator.MCPPath, "pod", o.pod, "scopes", strings.Join(o.scopes, " "),
		"api", o.apiURL, "workspace", o.workspace, "approvals", o.approvalDir)
	if o.approvalDir == "" && slices.ContainsFunc(scopes, func(s policy.Scope) bool { return len(s.Ask) > 0 }) {
		logger.Warn("scopes with ask: permissions but no --approval-dir: those calls will be refused")
	}
	if err := srv.Serve(ctx, ln); err != nil {
		return fail(err)
	}
	logger.Info("stopped")
	return 0
}
