//go:build !linux

package main

import (
	"context"
	"errors"
	"net"
)

// The helper only runs in Linux containers; these stubs keep the package
// building (and vetting) on a developer's other system.

func setChildSubreaper() error {
	return errors.New("not supported on this system")
}

func setNotDumpable() error { return nil }

func isTerminal(fd int) bool { return false }

func dialUnixNoFollow(ctx context.Context, d *net.Dialer, path string) (net.Conn, error) {
	return d.DialContext(ctx, "unix", path)
}

func changedAfterMade(string) (changed, known bool) { return false, false }
