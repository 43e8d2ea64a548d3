package pod

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// What the agent must not change or read in the shared workspace, and the
// host paths it may get. Both are enforced with bind mounts in the agent:
// a read-only bind makes a path unwritable, and a mountpoint cannot be
// renamed or removed, so the agent cannot swap a protected directory for
// one of its own either.

// checkRelPath accepts a clean path relative to the repository.
func checkRelPath(p string) error {
	switch {
	case p == "" || path.IsAbs(p):
		return fmt.Errorf("%q must be a path relative to the repository", p)
	case path.Clean(p) != strings.TrimSuffix(p, "/") || p == "." || strings.HasPrefix(p, "../") || p == "..":
		return fmt.Errorf("%q must be a clean relative path without ..", p)
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

// MaxMasked bounds the masked files: each one is a mount.
const MaxMasked = 256

// TreeInfo is what the plan needs to know about the checked-out tree.
type TreeInfo struct {
	// Present lists the protected paths that exist, with whether each is a
	// directory; absent ones are created empty by the copy (PlaceHolders).
	Present map[string]bool `json:"present,omitempty"`
	// Masked are the files matching the mask patterns (slash paths).
	Masked []string `json:"masked,omitempty"`
	// Truncated is set when more files matched than MaxMasked.
	Truncated bool `json:"truncated,omitempty"`
	// Unprotectable are protected paths that are symlinks or submodules
	// in the repository, or lie under one: they cannot be bound safely.
	Unprotectable []string `json:"unprotectable,omitempty"`
	// Submodules are the paths of HEAD's submodules, which the copy leaves
	// empty.
	Submodules []string `json:"submodules,omitempty"`
}

// ScanTree looks at a checked-out repository (see Source.Checkout: its
// files are in HEAD, not on disk; .git is on disk) for the protected paths
// and the files to mask.
func ScanTree(ctx context.Context, dir string, protect, mask []string) (TreeInfo, error) {
	info := TreeInfo{Present: map[string]bool{}}
	out, err := git(ctx, dir, "ls-tree", "-r", "-t", "-z", "HEAD")
	if err != nil {
		return info, err
	}
	modes := map[string]string{}
	for _, entry := range strings.Split(out, "\x00") {
		meta, name, ok := strings.Cut(entry, "\t")
		if !ok {
			continue
		}
		mode, _, _ := strings.Cut(meta, " ") // "MODE TYPE OBJECT"
		modes[name] = mode
		if mode == "160000" {
			info.Submodules = append(info.Submodules, name)
		}
		if (mode == "100644" || mode == "100755") && matchesAny(mask, path.Base(name)) {
			if len(info.Masked) == MaxMasked {
				info.Truncated = true
				continue
			}
			info.Masked = append(info.Masked, name)
		}
	}
	for _, p := range protect {
		if strings.HasPrefix(p, ".git/") {
			continue
		}
		// A bind mount follows symlinks on the host, so a protected path
		// that is, or lies under, a symlink (or a submodule) in the
		// repository is never bound: the repository would choose what
		// the host mounts.
		bindable := true
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if m, ok := modes[d]; ok && m != "040000" {
				bindable = false
			}
		}
		switch m, ok := modes[p]; {
		case !bindable || (ok && m != "040000" && m != "100644" && m != "100755"):
			info.Unprotectable = append(info.Unprotectable, p)
		case ok:
			info.Present[p] = m == "040000"
		}
	}
	for _, p := range protect {
		if !strings.HasPrefix(p, ".git/") {
			continue
		}
		st, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(p)))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return info, err
		}
		info.Present[p] = st.IsDir()
	}
	return info, nil
}

func matchesAny(patterns []string, name string) bool {
	for _, m := range patterns {
		if ok, _ := path.Match(m, name); ok {
			return true
		}
	}
	return false
}

// PlaceHolders are the protected paths absent from the tree: the copy
// creates them empty (directories, or empty files for names that are
// files by convention) so that they can be mounted read-only.
func PlaceHolders(protect []string, tree TreeInfo) (dirs, files []string) {
	for _, p := range protect {
		if _, ok := tree.Present[p]; ok || slices.Contains(tree.Unprotectable, p) {
			continue
		}
		if conventionalFile(p) {
			files = append(files, p)
		} else {
			dirs = append(dirs, p)
		}
	}
	return dirs, files
}

// conventionalFile tells the protected names that are files when they
// exist: .git/config, .gitmodules, .envrc and names with an extension.
func conventionalFile(p string) bool {
	switch p {
	case ".git/config", ".gitmodules", ".envrc":
		return true
	}
	base := path.Base(p)
	return strings.Contains(strings.TrimPrefix(base, "."), ".")
}

// blockedMounts are host path parts that never go into a container: keys,
// credentials and podman itself. A path is refused when any of its
// components is one of these, or when it lies inside podman's storage or
// sockets.
var blockedMounts = []string{".ssh", ".gnupg", ".aws", ".azure", ".gcloud", ".kube", ".docker",
	"credentials", ".env", ".netrc", ".npmrc", "id_rsa", "id_ed25519", "private_key", ".secret"}

// check validates a [[mounts]] entry without touching the host.
func (m MountConfig) check() error {
	if !filepath.IsAbs(m.Source) {
		return fmt.Errorf("source %q must be an absolute host path", m.Source)
	}
	if !path.IsAbs(m.Target) || slices.Contains(strings.Split(m.Target, "/"), "..") {
		return fmt.Errorf("target %q must be an absolute container path without ..", m.Target)
	}
	for _, c := range m.Containers {
		if c != RoleWorkspace && c != RoleAgent {
			return fmt.Errorf("containers: %q is not workspace or agent", c)
		}
	}
	return nil
}

// HostMount is a [[mounts]] entry checked against the host: Source is the
// resolved path.
type HostMount struct {
	Source     string   `json:"source"`
	Target     string   `json:"target"`
	RW         bool     `json:"rw"`
	Containers []string `json:"containers"`
}

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
func ResolveMounts(entries []MountConfig, forbidden []string) ([]HostMount, error) {
	var out []HostMount
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
			roles = []string{RoleWorkspace}
		}
		out = append(out, HostMount{Source: resolved, Target: m.Target, RW: m.RW, Containers: roles})
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
	out := []string{configFile, "/var/lib/containers", "/run/podman", "/run/containers", "/var/run/docker.sock"}
	if runtimeDir != "" {
		out = append(out, filepath.Join(runtimeDir, "podman"), filepath.Join(runtimeDir, "containers"))
	}
	if home == "" {
		return out
	}
	for _, p := range []string{".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".gcloud",
		".kube", ".docker", ".netrc", ".npmrc", ".config/containers", ".local/share/containers",
		".git-credentials", ".config/gh", ".config/devaipod.toml"} {
		out = append(out, filepath.Join(home, p))
	}
	return out
}
