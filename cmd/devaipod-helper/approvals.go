package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/devaipod/devaipod/internal/approval"
	"github.com/devaipod/devaipod/internal/cmdline"
	"github.com/devaipod/devaipod/proxy"
)

// exitNotPending is approvals' exit status for a request that is not (or
// no longer) pending; devaipod on the host reads it.
const exitNotPending = 3

type approvalsOptions struct {
	dir, scope, reason, by string
	rw                     bool
}

func newApprovalsFlagSet(o *approvalsOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("approvals", flag.ContinueOnError)
	fs.StringVar(&o.dir, "dir", "", "the sidecar's approval folder `DIR`, its --approval-dir (required)")
	fs.StringVar(&o.scope, "for", "", "approve `once|pod`: once is this request alone (the default), pod also what its rule covers, for the sidecar's life")
	fs.BoolVar(&o.rw, "rw", false, "approve a path request writable (the agent's copy; read-only otherwise)")
	fs.StringVar(&o.reason, "reason", "", "a `TEXT` that says why; a rejection's is shown to the agent")
	fs.StringVar(&o.by, "by", "", "`WHO` decides (user@host), for the audit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper approvals --dir DIR list
       devaipod-helper approvals --dir DIR [--for once|pod] [--rw] [--reason TEXT] [--by WHO] approve ID
       devaipod-helper approvals --dir DIR [--reason TEXT] [--by WHO] reject ID

List or decide the requests that wait for a person in a sidecar's approval
folder DIR (the proxy's or the gator's --approval-dir, in its state volume,
which the agent never mounts). The sidecar files a request there when an
ask rule covers it, and waits for a decision until its --ask-timeout; on the
host, devaipod approvals, approve and reject run this command in the
sidecar's container. The flags come before the operation.

  list          print each pending request as one JSON line, oldest first:
                {"id":"net-0a1b2c3d","pod":"demo","kind":"network",
                 "what":"CONNECT pkg.example.test:443","rule":"pkg.example.test",...}
  approve ID    let request ID through: --for once (the default) that request
                alone, the next one asks again; --for pod also what its rule
                covers, for the sidecar's life (the proxy adds the rule to its
                policy file, as devaipod allow does)
  reject ID     refuse request ID; --reason tells the agent why

A decision names one request by its ID, drawn at random when the request was
filed, and decides that request alone.

Exit status: 0 done, 1 an error, 2 a usage error, 3 no such pending request
(decided already, timed out, withdrawn or never filed).

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

func runApprovals(args []string, stdout, stderr io.Writer) int {
	var o approvalsOptions
	fs := newApprovalsFlagSet(&o)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "%sapprovals: %s\n", logPrefix, fmt.Sprintf(format, a...))
		return 2
	}
	if o.dir == "" {
		return usageErr("missing --dir")
	}
	store := &approval.Store{Dir: o.dir}
	op := fs.Arg(0)
	switch op {
	case "list":
		if fs.NArg() != 1 {
			return usageErr("list takes no arguments")
		}
		if o.scope != "" || o.reason != "" || o.by != "" || o.rw {
			return usageErr("list takes no --for, --rw, --reason or --by")
		}
		pending, err := store.Pending()
		if err != nil {
			fmt.Fprintf(stderr, "%sapprovals: %v\n", logPrefix, err)
			return 1
		}
		enc := json.NewEncoder(stdout)
		for _, r := range pending {
			if err := enc.Encode(r); err != nil {
				fmt.Fprintf(stderr, "%sapprovals: %v\n", logPrefix, err)
				return 1
			}
		}
		return 0
	case "approve", "reject":
		if fs.NArg() != 2 {
			return usageErr("%s wants exactly one ID (flags come before the operation), got %d arguments", op, fs.NArg()-1)
		}
	case "":
		return usageErr("missing operation: list, approve ID or reject ID")
	default:
		return usageErr("unknown operation %q: want list, approve ID or reject ID", op)
	}
	d := approval.Decision{ID: fs.Arg(1), Approve: op == "approve", RW: o.rw, Reason: o.reason, By: o.by}
	switch {
	case !d.Approve && (o.scope != "" || o.rw):
		return usageErr("--for and --rw are for approve")
	case d.Approve:
		d.For = o.scope
		if d.For == "" {
			d.For = approval.ForOnce
		}
		if d.For != approval.ForOnce && d.For != approval.ForPod {
			return usageErr("--for %q: want %s or %s", d.For, approval.ForOnce, approval.ForPod)
		}
	}
	if err := store.Decide(d); err != nil {
		fmt.Fprintf(stderr, "%sapprovals: %v\n", logPrefix, err)
		if errors.Is(err, approval.ErrNotPending) {
			return exitNotPending
		}
		return 1
	}
	if d.Approve {
		fmt.Fprintf(stdout, "approved %s (for %s)\n", d.ID, d.For)
	} else {
		fmt.Fprintf(stdout, "rejected %s\n", d.ID)
	}
	return 0
}

// storeApprover is the proxy's Approver over an approval folder: it files
// each held request there (see approvalRequest) and waits for the
// decision that devaipod-helper approvals (devaipod approve, reject)
// writes.
type storeApprover struct {
	store *approval.Store
	pod   string
	log   *slog.Logger
}

func (a *storeApprover) Approve(ctx context.Context, r proxy.AskRequest) (proxy.AskDecision, error) {
	req, err := a.store.File(approvalRequest(a.pod, r))
	if err != nil {
		return proxy.AskDecision{}, fmt.Errorf("file the request: %w", err)
	}
	timeout := proxy.DefaultAskTimeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = time.Until(deadline)
	}
	if a.log != nil {
		a.log.Info("waiting for a decision", "id", req.ID, "what", r.What, "timeout", timeout.Round(time.Second))
	}
	d, err := a.store.Wait(ctx, req.ID, timeout)
	switch {
	case errors.Is(err, approval.ErrTimeout):
		return proxy.AskDecision{ID: req.ID}, fmt.Errorf("%s: %w", req.ID, proxy.ErrAskTimeout)
	case err != nil:
		return proxy.AskDecision{ID: req.ID}, err
	}
	return proxy.AskDecision{Approve: d.Approve, ForPod: d.Approve && d.For == approval.ForPod, RW: d.Approve && d.RW,
		Reason: d.Reason, By: d.By, ID: req.ID}, nil
}
