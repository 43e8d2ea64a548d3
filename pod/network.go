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
// merged in time order, and their own diagnostics, which do not start with
// "{". With follow, it goes on writing lines as they come.
func AuditLog(ctx context.Context, eng Engine, short string, follow bool, w io.Writer) error {
	roles := []string{plan.RoleProxy, plan.RoleGator}
	logs := make([]bytes.Buffer, len(roles))
	errs := make([]error, len(roles))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, role := range roles {
		var dst io.Writer = &logs[i]
		if follow {
			dst = &lockedWriter{mu: &mu, w: w}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = eng.Logs(ctx, plan.ContainerName(short, role), -1, follow, dst)
		}()
	}
	wg.Wait()
	if errors.Is(errs[0], ErrNotFound) && errors.Is(errs[1], ErrNotFound) {
		return fmt.Errorf("pod %s has no proxy and no gator (its network mode is none or open, or the pod does not exist): %w", short, ErrNotFound)
	}
	if follow {
		return errors.Join(ignoreNotFound(errs[0]), ignoreNotFound(errs[1]))
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
	return errors.Join(ignoreNotFound(errs[0]), ignoreNotFound(errs[1]))
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

func ignoreNotFound(err error) error {
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
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
