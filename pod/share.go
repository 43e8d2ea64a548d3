package pod

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

// Bounds of what Share copies: a share is for the files a task needs, not
// a disk.
const (
	maxShareBytes = 1 << 30
	maxShareFiles = 100_000
)

// ErrShareTooLarge says a path holds more than Share copies.
var ErrShareTooLarge = errors.New("too large to share")

// ShareOptions say how Share copies a host path.
type ShareOptions struct {
	// RW lets the agent change its copy.
	RW bool
	// Forbidden are host paths no share may be, be under or hold (see
	// ForbiddenMounts).
	Forbidden []string
	// Mask are [agent] mask's patterns: a file whose name matches one is
	// left out, as the pod's own tree hides it from the agent.
	Mask []string
	// Git shares the git directories (.git) the path holds, left out
	// otherwise: a history holds what the working tree no longer shows
	// (a masked file at any commit), a config the remotes' tokens.
	Git bool
}

// Shared is a host path shared with a pod's agent.
type Shared struct {
	Path string `json:"path"` // as asked
	// Resolved is Path with its symlinks resolved: what was checked and
	// copied.
	Resolved string `json:"resolved"`
	At       string `json:"at"` // where the agent sees it
	RW       bool   `json:"rw"`
	Files    int    `json:"files"`
	Bytes    int64  `json:"bytes"`
	// Masked and GitDirs count what was left out: files [agent] mask
	// names, and git directories (ShareOptions.Git).
	Masked  int `json:"masked"`
	GitDirs int `json:"git_dirs"`

	mask []string
	git  bool
}

// Share copies the host path p (a file or a folder, symlinks resolved
// first) into pod short, where its agent sees it at plan.HostShareDir + p.
// It is a copy, made now: the agent sees what p held then, and nothing it
// does reaches the host. Read-only unless rw: the copy is root's, without
// write permission (rw: the agent's). A path that is, is under or holds
// one of forbidden, or that a [[mounts]] rule blocks (credential stores),
// is refused with a *MountError. Symlinks inside p are copied as symlinks:
// in the agent they point into its own container, never to the host.
func Share(ctx context.Context, eng Engine, short, p string, o ShareOptions) (Shared, error) {
	if _, err := RunningPod(ctx, eng, short, plan.RoleAgent); err != nil {
		return Shared{}, err
	}
	// A first walk finds what would fail the copy (too much, a file that
	// cannot be read) before anything reaches the pod: a copy cut off
	// half-way would stay in the agent's /host.
	probe, err := DescribeShare(p, o)
	if err != nil {
		return Shared{}, err
	}
	sh := probe
	sh.Files, sh.Bytes, sh.Masked, sh.GitDirs = 0, 0, 0, 0
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarShare(pw, &sh)) }()
	err = eng.CopyInto(ctx, plan.ContainerName(short, plan.RoleAgent), plan.HostShareDir, pr)
	pr.CloseWithError(err)
	if err != nil {
		return Shared{}, fmt.Errorf("share %s: %w", p, err)
	}
	return sh, nil
}

// DescribeShare is what Share would copy of the host path p, counted (the
// files and bytes, what it leaves out), without copying anything: what
// approvals shows of a path request. It fails where Share would.
func DescribeShare(p string, o ShareOptions) (Shared, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return Shared{}, err
	}
	mounts, err := ResolveMounts([]config.MountConfig{{Source: abs, Target: "/"}}, o.Forbidden)
	if err != nil {
		return Shared{}, err
	}
	sh := Shared{Path: abs, Resolved: mounts[0].Source, At: plan.HostShareDir + abs, RW: o.RW, mask: o.Mask, git: o.Git}
	if source.MatchesMask(o.Mask, filepath.Base(sh.Resolved)) {
		return Shared{}, fmt.Errorf("share %s: %s is a file the pod masks ([agent] mask): it is not shared", p, sh.Resolved)
	}
	if err := walkShare(&sh, func(*tar.Header, *os.File) error { return nil }); err != nil {
		return Shared{}, fmt.Errorf("share %s: %w", p, err)
	}
	return sh, nil
}

// tarShare writes sh.Resolved as a tar stream rooted at the share folder:
// its parent folders (root's, read-only), then the path itself, owned and
// moded as sh.RW says; and, when sh.Path differs from sh.Resolved, a
// symlink at sh.Path to the copy. It counts files and bytes into sh.
func tarShare(w io.Writer, sh *Shared) error {
	tw := tar.NewWriter(w)
	parents := func(p string) error {
		var dirs []string
		for d := path.Dir(rel(p)); d != "." && d != "/"; d = path.Dir(d) {
			dirs = append([]string{d}, dirs...)
		}
		for _, d := range dirs {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := parents(sh.Resolved); err != nil {
		return err
	}
	err := walkShare(sh, func(hdr *tar.Header, f *os.File) error {
		if err := tw.WriteHeader(hdr); err != nil || f == nil {
			return err
		}
		_, err := io.CopyN(tw, f, hdr.Size)
		return err
	})
	if err != nil {
		return err
	}
	if sh.Path != sh.Resolved {
		if err := parents(sh.Path); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: rel(sh.Path), Linkname: plan.HostShareDir + sh.Resolved, Mode: 0o777}); err != nil {
			return err
		}
	}
	return tw.Close()
}

// walkShare walks sh.Resolved and calls each with the tar header of every
// file, folder and symlink in it, owned and moded as sh.RW says, and a
// regular file opened (nil for the rest), counting files and bytes into sh
// and failing past the limits or at a file it cannot open.
func walkShare(sh *Shared, each func(hdr *tar.Header, f *os.File) error) error {
	uid, writable := 0, int64(0)
	if sh.RW {
		uid, writable = plan.AgentUID, 0o200
	}
	return filepath.WalkDir(sh.Resolved, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case p == sh.Resolved:
		case d.Name() == ".git" && !sh.git:
			sh.GitDirs++
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case !d.IsDir() && source.MatchesMask(sh.mask, d.Name()):
			sh.Masked++
			return nil
		}
		hdr := &tar.Header{Name: rel(p), Uid: uid, Gid: uid, ModTime: info.ModTime()}
		mode := int64(info.Mode().Perm())&^0o222 | writable
		switch {
		case d.IsDir():
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", mode|0o500
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, target, 0o777
		case info.Mode().IsRegular():
			hdr.Typeflag, hdr.Size, hdr.Mode = tar.TypeReg, info.Size(), mode|0o400
		default:
			return nil // devices, sockets, pipes: not files to share
		}
		sh.Files++
		sh.Bytes += hdr.Size
		if sh.Files > maxShareFiles || sh.Bytes > maxShareBytes {
			return fmt.Errorf("%s holds more than %d files or %d MiB: %w", sh.Resolved, maxShareFiles, maxShareBytes>>20, ErrShareTooLarge)
		}
		if hdr.Typeflag != tar.TypeReg {
			return each(hdr, nil)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return each(hdr, f)
	})
}

// rel is a host path's name in the share's tar stream.
func rel(p string) string { return strings.TrimPrefix(filepath.ToSlash(p), "/") }
