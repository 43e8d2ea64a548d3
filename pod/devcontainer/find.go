package devcontainer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// FileName is the name the spec gives devcontainer files.
const FileName = "devcontainer.json"

// Find returns the devcontainer.json to use under the checkout root.
//
// explicit (from --devcontainer PATH) wins: relative to root, or absolute
// inside root; a directory means the devcontainer.json in it. Otherwise the
// spec's places are searched: .devcontainer/devcontainer.json, then
// .devcontainer.json, then .devcontainer/*/devcontainer.json (one level).
// The first two are "the" file. When neither exists and several subfolders
// hold one, Find returns an error listing them all so that the user picks
// one with --devcontainer. No file at all gives "", nil.
//
// The result is root joined with the file's path inside it. Files (or
// symbolic links) that lead outside root are refused: the checkout must
// not make devaipod read other host files.
func Find(root, explicit string) (string, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("find devcontainer.json: %w", err)
	}
	if explicit != "" {
		return findExplicit(root, realRoot, explicit)
	}
	for _, rel := range []string{filepath.Join(".devcontainer", FileName), ".devcontainer.json"} {
		p := filepath.Join(root, rel)
		ok, err := regularInside(realRoot, p)
		if err != nil {
			return "", err
		}
		if ok {
			return p, nil
		}
	}
	subdirs, err := os.ReadDir(filepath.Join(root, ".devcontainer"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return "", fmt.Errorf("find devcontainer.json: %w", err)
	}
	var found []string
	for _, e := range subdirs {
		p := filepath.Join(root, ".devcontainer", e.Name(), FileName)
		ok, err := regularInside(realRoot, p)
		if err != nil {
			return "", err
		}
		if ok {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
		return found[0], nil
	}
	sort.Strings(found)
	rels := make([]string, len(found))
	for i, p := range found {
		rels[i], _ = filepath.Rel(root, p)
	}
	return "", fmt.Errorf("several devcontainer configurations in %s: %s; choose one with --devcontainer PATH",
		filepath.Join(root, ".devcontainer"), strings.Join(rels, ", "))
}

func findExplicit(root, realRoot, explicit string) (string, error) {
	p := explicit
	if !filepath.IsAbs(p) {
		p = filepath.Join(root, p)
	}
	p = filepath.Clean(p)
	if abs := mustAbs(p); !inside(mustAbs(root), abs) && !inside(realRoot, abs) {
		return "", fmt.Errorf("--devcontainer %s: not inside the checkout %s", explicit, root)
	}
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		p = filepath.Join(p, FileName)
	}
	ok, err := regularInside(realRoot, p)
	if err != nil {
		return "", fmt.Errorf("--devcontainer %s: %w", explicit, err)
	}
	if !ok {
		return "", fmt.Errorf("--devcontainer %s: %s is not a file: %w", explicit, p, fs.ErrNotExist)
	}
	return p, nil
}

// regularInside reports whether p exists as a regular file (following
// symbolic links) whose real path is inside realRoot; a link that leads
// out is an error.
func regularInside(realRoot, p string) (bool, error) {
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("find devcontainer.json: %w", err)
	}
	if !st.Mode().IsRegular() {
		return false, nil
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return false, fmt.Errorf("find devcontainer.json: %w", err)
	}
	if !inside(realRoot, real) {
		return false, fmt.Errorf("%s leads outside the checkout (to %s); devaipod reads only files inside it", p, real)
	}
	return true, nil
}

func inside(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

func mustAbs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// CheckBuildPaths refuses a Dockerfile or build context outside the
// checkout root (after Substitute, following symbolic links where the
// paths exist): the context is sent to the image build, and a context of
// "../.." would hand it the user's home directory. Nil Build passes.
func (c *Config) CheckBuildPaths(root string) error {
	if c.Build == nil {
		return nil
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fmt.Errorf("check build paths: %w", err)
	}
	for _, p := range []struct{ key, path string }{{"build.dockerfile", c.Build.Dockerfile}, {"build.context", c.Build.Context}} {
		abs := mustAbs(p.path)
		if !inside(mustAbs(root), abs) && !inside(realRoot, abs) {
			return &Error{File: c.File, Line: c.lineOf(p.key), Key: p.key, Msg: fmt.Sprintf("%s is outside the checkout %s", p.path, root)}
		}
		if real, err := filepath.EvalSymlinks(p.path); err == nil && !inside(realRoot, real) {
			return &Error{File: c.File, Line: c.lineOf(p.key), Key: p.key, Msg: fmt.Sprintf("%s leads outside the checkout (to %s)", p.path, real)}
		}
	}
	return nil
}
