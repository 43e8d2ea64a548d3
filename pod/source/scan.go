package source

import (
	"context"
	"path"
	"slices"
	"strings"
)

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
	// MaskedObjects are the blob ids of the masked files at HEAD, which
	// the agent's git directory must not hold (verify checks).
	MaskedObjects []string `json:"masked_objects,omitempty"`
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
		fields := strings.Fields(meta) // MODE TYPE OBJECT
		if len(fields) != 3 {
			continue
		}
		mode := fields[0]
		modes[name] = mode
		if mode == "160000" {
			info.Submodules = append(info.Submodules, name)
		}
		if (mode == "100644" || mode == "100755") && MatchesMask(mask, path.Base(name)) {
			if len(info.Masked) == MaxMasked {
				info.Truncated = true
				continue
			}
			info.Masked = append(info.Masked, name)
			if !slices.Contains(info.MaskedObjects, fields[2]) {
				info.MaskedObjects = append(info.MaskedObjects, fields[2])
			}
		}
	}
	for _, p := range protect {
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
	return info, nil
}

// MatchesMask says whether a file of this name (its last element) is one
// [agent] mask's patterns name: what the pod hides from the agent.
func MatchesMask(patterns []string, name string) bool {
	for _, m := range patterns {
		if ok, _ := path.Match(m, name); ok {
			return true
		}
	}
	return false
}
