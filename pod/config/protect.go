package config

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/devaipod/devaipod/proxy/rule"
	"golang.org/x/net/publicsuffix"
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
	if host, _, _ := strings.Cut(text, ":"); host == "*" {
		return fmt.Errorf("rule %q would allow every host, and no rule does: name the hosts (\"*.example.test\" allows a domain's); "+
			"for no egress filtering at all, set [network] mode = \"open\" (the agent then has no proxy, no audit and no credentials)", text)
	}
	_, err := rule.Parse(text)
	return err
}

// RuleWarning tells whether an allow rule opens more than its author may
// think: a wildcard over a public suffix, under which anybody can have a
// name and receive what the agent sends. wholeSuffix is true for a suffix
// open to the public at large (a top-level domain, or one of the Public
// Suffix List's ICANN section: "*.com", "*.co.uk"): the command line
// refuses such a rule unless forced. A suffix of the list's private
// section (a company's domain whose names its customers get, such as
// github.io) is only warned about. msg is "" for a rule that opens
// neither, and for a malformed one (ValidateRule reports it).
func RuleWarning(text string) (msg string, wholeSuffix bool) {
	r, err := rule.Parse(text)
	if err != nil || !r.Wildcard {
		return "", false
	}
	suffix, icann := publicsuffix.PublicSuffix(r.Name)
	switch {
	case suffix != r.Name:
		return "", false // below a public suffix: somebody's own domain
	case icann || !strings.Contains(r.Name, "."):
		return fmt.Sprintf("rule %q opens every host under %q, a public suffix: anybody can register a name there and receive what the agent sends", text, r.Name), true
	}
	return fmt.Sprintf("rule %q opens every host under %q, a public suffix whose names its company gives to its customers: any of them can receive what the agent sends", text, r.Name), false
}
