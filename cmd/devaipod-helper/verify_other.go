//go:build !linux

package main

import (
	"context"
	"syscall"
)

// The verify battery runs in Linux containers; elsewhere the kernel probes
// report N-A.
func hostSyscalls() verifySyscalls {
	return verifySyscalls{
		mountTmpfs: func(string) error { return errVerifyUnsupported },
		rawSockets: func() []namedErr { return []namedErr{{"raw sockets", errVerifyUnsupported}} },
		readMemory: func(int) error { return errVerifyUnsupported },
		openMemory: func(int) error { return errVerifyUnsupported },
		run:        func(context.Context, []string, bool) error { return errVerifyUnsupported },
		statfs:     func(string) (fsInfo, error) { return fsInfo{}, errVerifyUnsupported },
		signal:     func(pid int) error { return syscall.Kill(pid, 0) },
	}
}
