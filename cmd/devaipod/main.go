// Command devaipod runs AI coding agents on untrusted repositories in
// rootless podman pods: a trusted workspace container and a network-less,
// capability-stripped agent container that share one cloned workspace.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// SIGHUP too: a closed terminal must roll an up back like Ctrl-C.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := run(ctx, os.Args[1:], streams{in: os.Stdin, out: os.Stdout, err: os.Stderr})
	stop()
	os.Exit(code)
}
