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
	// SIGHUP too: a closed terminal must roll an up back like Ctrl-C;
	// unless it is ignored (nohup), which asking for it would undo.
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	code := run(ctx, os.Args[1:], streams{in: os.Stdin, out: os.Stdout, err: os.Stderr})
	stop()
	os.Exit(code)
}
