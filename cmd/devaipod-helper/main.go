// Command devaipod-helper is the small static binary that devaipod mounts
// read-only at /opt/devaipod into its containers. It is the init of the agent
// and workspace containers (socket bridges, signal forwarding, zombie
// reaping), the entrypoint of the proxy and gator containers, the probe
// battery of `devaipod verify`, and carries small tools that a bare image
// may lack.
//
// It must stay free of podman and cobra so that it stays small and static:
// the standard library, goproxy for the proxy, and the gator's MCP SDK,
// GitHub client and go-git.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
)

// Version is set at build time with -ldflags '-X main.Version=...'.
var Version = "dev"

const logPrefix = "devaipod-helper: "

func main() {
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
	case "gator":
		return runGator(ctx, rest, stdout, stderr)
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
  gator [flags]                   run the pod's gator: scoped GitHub access over MCP
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
		var dir, umask string
		var hashes bool
		fs = newSecretEnvFlagSet(&dir, &umask, &hashes)
	case "proxy":
		fs = newProxyFlagSet(&proxyOptions{})
	case "policy":
		var file string
		fs = newPolicyFlagSet(&file)
	case "version":
		fs = newVersionFlagSet()
	case "verify":
		fs = newVerifyFlagSet(&verifyOptions{})
	case "task", "gator":
		// Commands whose flag sets live inside their run function print
		// their help for -h.
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

// parseFlags parses a command's flags with fs, refuses extra arguments and
// asks check what else is wrong ("" when nothing). A problem is printed as
// "devaipod-helper: NAME: PROBLEM" and returned.
func parseFlags(name string, fs *flag.FlagSet, args []string, output io.Writer, check func() string) error {
	fs.SetOutput(output)
	if err := fs.Parse(args); err != nil {
		return err
	}
	problem := ""
	if fs.NArg() > 0 {
		problem = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	} else {
		problem = check()
	}
	if problem != "" {
		fmt.Fprintf(output, "%s%s: %s\n", logPrefix, name, problem)
		return errors.New(problem)
	}
	return nil
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
		return parseExitCode(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%sversion takes no arguments\n", logPrefix)
		return 2
	}
	fmt.Fprintln(stdout, Version)
	return 0
}

// parseExitCode maps a FlagSet.Parse error to an exit code: -h is a
// successful request for help, anything else a usage error (the flag package
// has already printed the message and the usage).
func parseExitCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
