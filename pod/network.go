package pod

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/devaipod/devaipod/internal/auditlog"
	"github.com/devaipod/devaipod/internal/helperargs"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
)

// Policy operations of `devaipod allow` and `devaipod deny`.
const (
	PolicyAllow = "allow"
	PolicyDeny  = "deny"
)

// EditPolicy changes a running pod's allowlist: the proxy re-reads its
// policy file, so nothing restarts. The change persists with the pod.
func EditPolicy(ctx context.Context, eng Engine, short, op, rule string) error {
	if err := config.ValidateRule(rule); err != nil {
		return err
	}
	if _, err := RunningPod(ctx, eng, short, plan.RoleProxy); err != nil {
		return err
	}
	ctr := plan.ContainerName(short, plan.RoleProxy)
	code, out, err := eng.Exec(ctx, ctr, ExecSpec{Cmd: append([]string{plan.ProxyBin}, helperargs.Policy{File: plan.ProxyPolicy, Op: op, Rule: rule}.Args()...)})
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("pod %s has no proxy (its network mode is none or open, or the pod does not exist): %w", short, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, rule, err)
	}
	if code != 0 {
		return fmt.Errorf("%s %s: %s", op, rule, strings.TrimSpace(out))
	}
	return nil
}

// AuditLog writes the audit records of pod short: the proxy's (one JSON
// line per decision) and the gator's (one per call, with "kind":"gator"),
// merged in time order; lines that do not start with "{" are the sidecars'
// own diagnostics. A sidecar's records come from its audit log file,
// which keeps the latest and, past its bound, the ones that matter (see
// internal/auditlog): read by the helper in a running sidecar, copied out
// of a stopped one where the engine can (fileCopier). Those of a sidecar
// from before the files, or that the engine cannot copy out of, come from
// its container log, which podman cuts at plan.LogSizeMax. With follow,
// the container logs are written, then new lines as they come.
func AuditLog(ctx context.Context, eng Engine, short string, follow bool, w io.Writer) error {
	objs, err := eng.Objects(ctx, short)
	if err != nil {
		return err
	}
	sidecars := map[string]string{plan.RoleProxy: plan.ProxyAuditLog, plan.RoleGator: plan.GatorAuditLog}
	var roles []string
	running := map[string]bool{}
	for _, role := range []string{plan.RoleProxy, plan.RoleGator} {
		i := slices.IndexFunc(objs, func(o Object) bool { return o.Kind == KindContainer && o.Name == plan.ContainerName(short, role) })
		if i >= 0 {
			roles = append(roles, role)
			running[role] = objs[i].State == "running"
		}
	}
	if len(roles) == 0 {
		return fmt.Errorf("pod %s has no proxy and no gator (its network mode is none or open, or the pod does not exist): %w", short, ErrNotFound)
	}
	logs := make([]bytes.Buffer, len(roles))
	errs := make([]error, len(roles))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, role := range roles {
		ctr := plan.ContainerName(short, role)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if follow {
				errs[i] = eng.Logs(ctx, ctr, -1, true, &lockedWriter{mu: &mu, w: w})
				return
			}
			if running[role] {
				found, err := readAuditFile(ctx, eng, ctr, sidecars[role], &logs[i])
				if found || err != nil {
					errs[i] = err
					return
				}
			} else if c, ok := eng.(fileCopier); ok {
				found, err := copyAuditFile(ctx, c, ctr, sidecars[role], &logs[i])
				if found || err != nil {
					errs[i] = err
					return
				}
			}
			errs[i] = eng.Logs(ctx, ctr, -1, false, &logs[i])
		}()
	}
	wg.Wait()
	if follow {
		return errors.Join(errs...)
	}
	var lines []string
	for i := range logs {
		lines = append(lines, strings.SplitAfter(logs[i].String(), "\n")...)
	}
	// Records start with their RFC 3339 UTC time, which sorts as text.
	slices.SortStableFunc(lines, func(a, b string) int { return strings.Compare(recordTime(a), recordTime(b)) })
	for _, l := range lines {
		if _, err := io.WriteString(w, l); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// exitNoAuditLog is the helper's audit-log exit code when there is no file.
const exitNoAuditLog = 3

// readAuditFile writes a running sidecar's audit log file to w; false
// when it has none (a sidecar from before the files).
func readAuditFile(ctx context.Context, eng Engine, ctr, file string, w io.Writer) (bool, error) {
	var stderr bytes.Buffer
	code, out, err := eng.Exec(ctx, ctr, ExecSpec{Cmd: append([]string{plan.ProxyBin}, helperargs.AuditLog{Path: file}.Args()...), Stderr: &stderr})
	switch {
	case err != nil:
		return false, fmt.Errorf("read the audit log of %s: %w", ctr, err)
	case code == exitNoAuditLog:
		return false, nil
	case code != 0:
		return false, fmt.Errorf("read the audit log of %s: %s", ctr, strings.TrimSpace(stderr.String()))
	}
	_, err = io.WriteString(w, out)
	return true, err
}

// fileCopier is an Engine that reads a file of a stopped container (the
// podman engine does: see podman.Podman.CopyOut).
type fileCopier interface {
	CopyOut(ctx context.Context, container, path string, max int64, w io.Writer) error
}

// maxAuditFile bounds what is copied of one audit file: its bound, with
// room for the record that may take it past (one larger than the bound
// gets a file of its own; the proxy's and the gator's are a few KiB).
const maxAuditFile = auditlog.DefaultMaxBytes + 1<<20

// copyAuditFile writes a stopped sidecar's audit log file to w, as
// readAuditFile does a running one's; false, with nothing written, when
// it has none. The file, unlike the container's log, holds the records
// kept past its bound (see internal/auditlog).
func copyAuditFile(ctx context.Context, c fileCopier, ctr, file string, w io.Writer) (bool, error) {
	var buf bytes.Buffer
	copyAll := func(files []string) (found bool, err error) {
		for _, f := range files {
			err := c.CopyOut(ctx, ctr, f, maxAuditFile, &buf)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return false, fmt.Errorf("read the audit log of %s: %w", ctr, err)
			}
			found = true
		}
		return found, nil
	}
	kept, log := auditlog.Files(file)
	if _, err := copyAll(kept); err != nil {
		return false, err
	}
	if found, err := copyAll(log); !found || err != nil {
		return false, err
	}
	_, err := w.Write(buf.Bytes())
	return true, err
}

// recordTime is the "time" of a JSON audit line, "" for other lines.
func recordTime(line string) string {
	var r struct {
		Time string `json:"time"`
	}
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &r) != nil {
		return ""
	}
	return r.Time
}

// lockedWriter serialises writes of whole lines from several streams.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
