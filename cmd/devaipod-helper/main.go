// Command devaipod-helper is the small static binary that devaipod mounts
// read-only at /opt/devaipod into its containers. It is the init of the agent
// and workspace containers (socket bridges, signal forwarding, zombie
// reaping), the entrypoint of the proxy container, the probe battery of
// `devaipod verify`, and carries small tools that a bare image may lack.
//
// It must stay small: it is mapped into every container of every pod, the
// agent's included, and its pages are most of the egress proxy's memory.
// So it links the standard library and goproxy for the proxy, never the
// podman bindings or cobra (the CLI's), nor the gator's MCP SDK, GitHub
// client and go-git: the gator is a binary of its own, devaipod-gator
// (cmd/devaipod-gator), in the same image. deps_test.go holds both lines.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/devaipod/devaipod/internal/cmdline"
)

// Version is set at build time with -ldflags '-X main.Version=...'.
var Version = "dev"

const logPrefix = "devaipod-helper: "

func main() {
	if err := setNotDumpable(); err != nil {
		fmt.Fprintf(os.Stderr, "%scannot protect this process (prctl PR_SET_DUMPABLE): %v\n", logPrefix, err)
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == "proxy" {
		restartForProxy(os.Stderr)
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// command is a subcommand: its line in the usage, its flags (for help)
// and what runs it.
type command struct {
	name, args, summary string
	flags               func() *flag.FlagSet
	run                 func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands is the one list of the helper's subcommands: dispatch, usage
// and help all come from it.
var commands = []command{
	{"init", "[flags] [-- CMD ARGS...]", "run as a container's PID 1: socket bridges, signals, reaping",
		func() *flag.FlagSet { return newInitFlagSet(&initOptions{}) },
		func(ctx context.Context, args []string, _, stderr io.Writer) int {
			return runInit(ctx, log.New(stderr, logPrefix, 0), args, stderr)
		}},
	{"wait-http", "[flags] URL", "wait until an HTTP server answers",
		func() *flag.FlagSet { return newWaitHTTPFlagSet(&waitOptions{}) }, runWaitHTTP},
	{"egress-check", "[flags]", "check that this container cannot get out (run by up)",
		func() *flag.FlagSet { return newEgressFlagSet(&egressOptions{}) }, withoutContext(runEgressCheck)},
	{"secret-env", "[flags] -- CMD", "run CMD with variables read from secret files",
		func() *flag.FlagSet { return newSecretEnvFlagSet(&secretEnvOptions{}) }, withoutContext(runSecretEnv)},
	{"proxy", "[flags]", "run the pod's egress proxy (allowlist, audit)",
		func() *flag.FlagSet { return newProxyFlagSet(&proxyOptions{}) }, runProxy},
	{"policy", "--file PATH OP [RULE]", "change or show a proxy's policy file",
		func() *flag.FlagSet { var file string; return newPolicyFlagSet(&file) }, withoutContext(runPolicy)},
	{"approvals", "--dir DIR OP [ID]", "list or decide the requests that wait for a person (devaipod approvals)",
		func() *flag.FlagSet { return newApprovalsFlagSet(&approvalsOptions{}) }, withoutContext(runApprovals)},
	{"request-path", "[flags] PATH", "ask a person on the host for a host path, seen at /host/PATH once approved",
		func() *flag.FlagSet { return newRequestPathFlagSet(&requestPathOptions{}) }, runRequestPath},
	{"task", "[flags] URL TEXT", "start an opencode session with TEXT as its first message",
		func() *flag.FlagSet { return newTaskFlagSet(&taskOptions{}) }, runTask},
	{"verify", "[flags]", "attack this container from inside: one row per attack (devaipod verify)",
		func() *flag.FlagSet { return newVerifyFlagSet(&verifyOptions{}) }, runVerify},
	{"inspect-git", "REPOSITORY", "report what in REPOSITORY/.git could make git run a program (devaipod verify)",
		newInspectGitFlagSet, withoutContext(runInspectGit)},
	{"inspect-withheld", "[flags]", "look for the person's trusted values, secrets and host paths in an untrusted repository's workspace (devaipod verify)",
		func() *flag.FlagSet {
			var allowed []string
			return newInspectWithheldFlagSet(&verifyOptions{}, &allowed)
		}, runInspectWithheld},
	{"hidden-files", "[flags] [PATHSPEC...]", "list the agent's files that a diff does not show (devaipod diff)",
		func() *flag.FlagSet { return newHiddenFilesFlagSet(&hiddenOptions{}) },
		func(_ context.Context, args []string, stdout, stderr io.Writer) int {
			return runHiddenFiles(args, os.Stdin, stdout, stderr)
		}},
	{"hangup", "--env NAME=VALUE", "hang up the processes of a session whose terminal closed (devaipod attach, exec)",
		func() *flag.FlagSet { var e string; return newHangupFlagSet(&e) }, withoutContext(runHangup)},
	{"audit-log", "PATH", "print a sidecar's audit log, the file moved aside first (devaipod audit)",
		newAuditLogFlagSet, withoutContext(runAuditLog)},
	{"kube-init", "[flags]", "a Kubernetes pod's init container: install the helper, own the volumes, wait for the repository (devaipod kube render)",
		func() *flag.FlagSet { return newKubeInitFlagSet(&kubeInitOptions{}) }, runKubeInit},
	{"untar", "--dir DIR [--done FILE]", "extract a tar stream from standard input into DIR (the repository, into a Kubernetes pod)",
		func() *flag.FlagSet { return newUntarFlagSet(&untarOptions{}) },
		func(_ context.Context, args []string, _, stderr io.Writer) int {
			return runUntar(args, os.Stdin, stderr)
		}},
	{"umask", "MASK -- CMD", "run CMD with the umask MASK (a Kubernetes pod's workspace and agent)", newUmaskFlagSet, withoutContext(runUmask)},
	{"version", "", "print the version", newVersionFlagSet, withoutContext(runVersion)},
}

func withoutContext(run func([]string, io.Writer, io.Writer) int) func(context.Context, []string, io.Writer, io.Writer) int {
	return func(_ context.Context, args []string, stdout, stderr io.Writer) int { return run(args, stdout, stderr) }
}

// run dispatches to a subcommand and returns the process exit code. Exit
// code 2 means a usage error, as with the flag package.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		return runHelp(args[1:], stdout, stderr)
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "%sunknown command %q\n\n", logPrefix, args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, "Usage: devaipod-helper COMMAND [flags] [args]\n\nCommands:\n")
	for _, c := range append(commands, command{name: "help", args: "[COMMAND]", summary: "print help for a command"}) {
		fmt.Fprintf(w, "  %-32s%s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	fmt.Fprint(w, "\nRun 'devaipod-helper COMMAND -h' for a command's flags.\n")
}

// runHelp prints the general usage, or one command's usage and flags.
func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stdout)
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		fs := c.flags()
		fs.SetOutput(stdout)
		fs.Usage()
		return 0
	}
	fmt.Fprintf(stderr, "%sunknown command %q\n\n", logPrefix, args[0])
	usage(stderr)
	return 2
}

func newVersionFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: devaipod-helper version\n\nPrint the version of this binary.\n")
	}
	return fs
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newVersionFlagSet()
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%sversion takes no arguments\n", logPrefix)
		return 2
	}
	fmt.Fprintln(stdout, Version)
	return 0
}
