package plan

import (
	"path"
	"slices"
	"strings"

	"github.com/devaipod/devaipod/pod/source"
)

// PlaceHolders are the protected paths absent from the tree: the copy
// creates them empty (directories, or empty files for names that are
// files by convention) so that they can be mounted read-only.
func PlaceHolders(protect []string, tree source.TreeInfo) (dirs, files []string) {
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

// HostMount is a [[mounts]] entry checked against the host: Source is the
// resolved path.
type HostMount struct {
	Source     string   `json:"source"`
	Target     string   `json:"target"`
	RW         bool     `json:"rw"`
	Containers []string `json:"containers"`
}
