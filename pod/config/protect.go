package config

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/devaipod/devaipod/proxy/rule"
)

// checkRelPath accepts a clean path relative to the repository.
func checkRelPath(p string) error {
	switch {
	case p == "" || path.IsAbs(p):
		return fmt.Errorf("%q must be a path relative to the repository", p)
	case path.Clean(p) != strings.TrimSuffix(p, "/") || p == "." || strings.HasPrefix(p, "../") || p == "..":
		return fmt.Errorf("%q must be a clean relative path without ..", p)
	case p == ".git" || strings.HasPrefix(p, ".git/"):
		return fmt.Errorf("%q: the agent has a git directory of its own, which the trusted side never reads; nothing in it needs protecting", p)
	}
	return nil
}

// ProtectedPaths is the agent's read-only list for a config: the fixed
// entries, then [agent] protect (or its default), without repeats.
func ProtectedPaths(cfg *Config) []string {
	extra := cfg.Agent.Protect
	if extra == nil {
		extra = DefaultProtect
	}
	var out []string
	for _, p := range append(slices.Clone(AlwaysProtect), extra...) {
		p = strings.TrimSuffix(p, "/")
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// MaskPatterns is [agent] mask, or its default when unset.
func MaskPatterns(cfg *Config) []string {
	if cfg.Agent.Mask == nil {
		return DefaultMask
	}
	return cfg.Agent.Mask
}

// check validates a [[mounts]] entry without touching the host.
func (m MountConfig) check() error {
	if !filepath.IsAbs(m.Source) {
		return fmt.Errorf("source %q must be an absolute host path", m.Source)
	}
	if !path.IsAbs(m.Target) || slices.Contains(strings.Split(m.Target, "/"), "..") {
		return fmt.Errorf("target %q must be an absolute container path without ..", m.Target)
	}
	for _, c := range m.Containers {
		if c != "workspace" && c != "agent" { // plan.RoleWorkspace, plan.RoleAgent
			return fmt.Errorf("containers: %q is not workspace or agent", c)
		}
	}
	return nil
}

// ValidateRule checks an allowlist rule the way the pod's proxy will read
// it, so that a bad rule fails before anything is created.
func ValidateRule(text string) error {
	_, err := rule.Parse(text)
	return err
}
