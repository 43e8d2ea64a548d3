package pod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/devaipod/devaipod/proxy"
)

// ValidateRule checks an allowlist rule the way the pod's proxy will read
// it, so that a bad rule fails before anything is created.
func ValidateRule(rule string) error {
	_, err := proxy.ParseRule(rule)
	return err
}

// Policy operations of `devaipod allow` and `devaipod deny`.
const (
	PolicyAllow = "allow"
	PolicyDeny  = "deny"
)

// EditPolicy changes a running pod's allowlist: the proxy re-reads its
// policy file, so nothing restarts. The change persists with the pod.
func EditPolicy(ctx context.Context, eng Engine, short, op, rule string) error {
	if err := ValidateRule(rule); err != nil {
		return err
	}
	ctr := ContainerName(short, RoleProxy)
	code, out, err := eng.Exec(ctx, ctr, ExecSpec{Cmd: []string{"/devaipod-helper", "policy", "--file", ProxyPolicy, op, rule}})
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

// AuditLog writes the proxy's log of pod short: one JSON line per decision
// (and its own diagnostics, which do not start with "{").
func AuditLog(ctx context.Context, eng Engine, short string, follow bool, w io.Writer) error {
	err := eng.Logs(ctx, ContainerName(short, RoleProxy), -1, follow, w)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("pod %s has no proxy (its network mode is none or open, or the pod does not exist): %w", short, ErrNotFound)
	}
	return err
}
