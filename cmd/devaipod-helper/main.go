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

	"github.com/devaipod/devaipod/internal/cmdline"
)

// Version is set at build time with -ldflags '-X main.Version=...'.
var Version = "dev"

const logPrefix = "devaipod-helper: "

func main() {
	if len(os.Args) > 1 && os.Args[1] == "proxy" {
		restartForProxy(os.Stderr)
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the process exit code. Exit
// code 2 means a usage error, as with the flag package.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	logger := log.New(stderr, logPrefix, 0)
	switch cmd, rest := args[0], args[1:]; cmd {
	case "init":
		return runInit(ctx, logger, rest, stderr)
	case "wait-http":
		return runWaitHTTP(ctx, rest, stdout, stderr)
	case "egress-check":
		return runEgressCheck(rest, stdout, stderr)
	case "secret-env":
		return runSecretEnv(rest, stdout, stderr)
	case "proxy":
		return runProxy(ctx, rest, stdout, stderr)
	case "policy":
		return runPolicy(rest, stdout, stderr)
	case "task":
		return runTask(ctx, rest, stdout, stderr)
	case "verify":
		return runVerify(ctx, rest, stdout, stderr)
	case "version":
		return runVersion(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return runHelp(rest, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "%sunknown command %q\n\n", logPrefix, cmd)
		usage(stderr)
		return 2
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Usage: devaipod-helper COMMAND [flags] [args]

Commands:
  init [flags] [-- CMD ARGS...]   run as a container's PID 1: socket bridges, signals, reaping
  wait-http [flags] URL           wait until an HTTP server answers
  egress-check [flags]            check that this container cannot get out (run by up)
  secret-env [flags] -- CMD       run CMD with variables read from secret files
  proxy [flags]                   run the pod's egress proxy (allowlist, audit)
  policy --file PATH OP [RULE]    change or show a proxy's policy file
  task [flags] URL TEXT           start an opencode session with TEXT as its first message
  verify [flags]                  attack this container from inside: one row per attack (devaipod verify)
  version                         print the version
  help [COMMAND]                  print help for a command

Run 'devaipod-helper COMMAND -h' for a command's flags.
`)
}

// runHelp prints the general usage, or one command's usage and flags.
func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stdout)
		return 0
	}
	var fs *flag.FlagSet
	switch args[0] {
	case "init":
		fs = newInitFlagSet(&initOptions{})
	case "wait-http":
		fs = newWaitHTTPFlagSet(&waitOptions{})
	case "egress-check":
		fs = newEgressFlagSet(&egressOptions{})
	case "secret-env":
		fs = newSecretEnvFlagSet(&secretEnvOptions{})
	case "proxy":
		fs = newProxyFlagSet(&proxyOptions{})
	case "policy":
		var file string
		fs = newPolicyFlagSet(&file)
	case "version":
		fs = newVersionFlagSet()
	case "verify":
		fs = newVerifyFlagSet(&verifyOptions{})
	case "task":
		// A command whose flag set lives inside its run function prints
		// its help for -h.
		return run(context.Background(), []string{args[0], "-h"}, stdout, stdout)
	default:
		fmt.Fprintf(stderr, "%sunknown command %q\n\n", logPrefix, args[0])
		usage(stderr)
		return 2
	}
	fs.SetOutput(stdout)
	fs.Usage()
	return 0
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
