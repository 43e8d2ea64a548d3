package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/devaipod/devaipod/internal/auditlog"
	"github.com/devaipod/devaipod/internal/cmdline"
)

// exitNoAuditLog is audit-log's exit code when the log does not exist (a
// sidecar started before it wrote one): devaipod audit then reads the
// container's log instead.
const exitNoAuditLog = 3

func newAuditLogFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("audit-log", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: devaipod-helper audit-log PATH

Print the audit log a sidecar writes with --audit-log PATH, oldest record
first: PATH.kept, PATH.kept.recent.1 and PATH.kept.recent (the records that
matter, kept from files dropped), PATH.1 (the file moved aside when PATH
reached its bound), then PATH. Exit %d when there is neither PATH.1 nor PATH.
`, exitNoAuditLog)
	}
	return fs
}

func runAuditLog(args []string, stdout, stderr io.Writer) int {
	fs := newAuditLogFlagSet()
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "%saudit-log takes the log's path\n", logPrefix)
		return 2
	}
	if err := auditlog.Copy(stdout, fs.Arg(0)); err != nil {
		fmt.Fprintf(stderr, "%s%v\n", logPrefix, err)
		if errors.Is(err, auditlog.ErrNoLog) {
			return exitNoAuditLog
		}
		return 1
	}
	return 0
}
