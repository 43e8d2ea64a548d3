package pod

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
)

// What the agent must not change or read in the shared workspace, and the
// host paths it may get. Both are enforced with bind mounts in the agent:
// a read-only bind makes a path unwritable, and a mountpoint cannot be
// renamed or removed, so the agent cannot swap a protected directory for
// one of its own either.

// blockedMounts are host path parts that never go into a container: keys,
// credentials and podman itself. A path is refused when any of its
// components is one of these, or when it lies inside podman's storage or
// sockets.
var blockedMounts = []string{".ssh", ".gnupg", ".aws", ".azure", ".gcloud", ".kube", ".docker",
	"credentials", ".env", ".netrc", ".npmrc", "id_rsa", "id_ed25519", "private_key", ".secret"}

// MountError says why a host path was refused.
type MountError struct {
	Source, Resolved, Rule string
}

func (e *MountError) Error() string {
	via := ""
	if e.Resolved != e.Source {
		via = " (resolved to " + e.Resolved + ")"
	}
	return fmt.Sprintf("mount source %s%s is refused: %s", e.Source, via, e.Rule)
}

// ResolveMounts resolves each entry's source through symlinks and refuses
// the blocked ones. forbidden lists further paths that must not be
// mounted nor contain the source, such as devaipod's config file and
// podman's storage and socket.
func ResolveMounts(entries []config.MountConfig, forbidden []string) ([]plan.HostMount, error) {
	var out []plan.HostMount
	for _, m := range entries {
		resolved, err := filepath.EvalSymlinks(m.Source)
		if err != nil {
			return nil, fmt.Errorf("mount source %s: %w", m.Source, err)
		}
		if rule := blockedRule(resolved, forbidden); rule != "" {
			return nil, &MountError{Source: m.Source, Resolved: resolved, Rule: rule}
		}
		roles := m.Containers
		if len(roles) == 0 {
			roles = []string{plan.RoleWorkspace}
		}
		out = append(out, plan.HostMount{Source: resolved, Target: m.Target, RW: m.RW, Containers: roles})
	}
	return out, nil
}

// blockedRule names the rule a resolved host path breaks, or "".
func blockedRule(p string, forbidden []string) string {
	for _, part := range strings.Split(p, string(filepath.Separator)) {
		if slices.Contains(blockedMounts, part) {
			return fmt.Sprintf("a path containing %q may hold credentials", part)
		}
	}
	if p == "/" {
		return "the host's root directory"
	}
	for _, f := range forbidden {
		if f == "" {
			continue
		}
		if rf, err := filepath.EvalSymlinks(f); err == nil {
			f = rf
		}
		if p == f || strings.HasPrefix(f, p+string(filepath.Separator)) || strings.HasPrefix(p, f+string(filepath.Separator)) {
			return fmt.Sprintf("it is or contains %s, which devaipod keeps from containers", f)
		}
	}
	return ""
}

// ForbiddenMounts are the host paths that a mount source must neither be
// nor contain (so no home directory as a whole either): the credential
// stores under home, devaipod's config, podman's storage and sockets.
func ForbiddenMounts(home, configFile, runtimeDir string) []string {
	// The grants of approvals (devaipod's state) decide what future pods may do.
	out := []string{configFile, filepath.Dir(DefaultGrants().Path), "/var/lib/containers", "/run/podman", "/run/containers", "/var/run/docker.sock"}
	if runtimeDir != "" {
		out = append(out, filepath.Join(runtimeDir, "podman"), filepath.Join(runtimeDir, "containers"))
	}
	if home == "" {
		return out
	}
	for _, p := range []string{".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".gcloud",
		".kube", ".docker", ".netrc", ".npmrc", ".config/containers", ".local/share/containers",
		".git-credentials", ".config/gh", ".config/devaipod.toml", ".config/devaipod", ".local/state/devaipod"} {
		out = append(out, filepath.Join(home, p))
	}
	return out
}
