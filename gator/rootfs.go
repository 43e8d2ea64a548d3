package gator

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/go-git/go-billy/v5"
)

// errReadOnly is what every write to a rootFS gets.
var errReadOnly = errors.New("the workspace is read-only to the gator")

// maxMetaFile bounds the workspace's git files other than its objects.
const maxMetaFile = 64 << 20

// rootFS is a read-only billy.Filesystem confined to a directory by
// os.Root: no path, symlink or ".." resolves outside it, and since os.Root
// resolves every component relative to directory file descriptors, the
// agent cannot race it by swapping a path component for a symlink. go-billy's own BoundOS follows a symlink in the
// last component of a path out of its base directory, which is why it is
// not used: the workspace is the agent's, and the gator holds the token.
type rootFS struct {
	root  *os.Root
	name  string
	roots *rootSet // every os.Root opened through Chroot, to close at the end
}

type rootSet struct {
	mu    sync.Mutex
	roots []*os.Root
}

func (s *rootSet) add(r *os.Root) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roots = append(s.roots, r)
}

func (s *rootSet) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.roots {
		r.Close()
	}
	s.roots = nil
}

// openRootFS opens dir; close the returned function's roots when done.
func openRootFS(dir string) (*rootFS, func(), error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, err
	}
	set := &rootSet{}
	set.add(r)
	return &rootFS{root: r, name: dir, roots: set}, set.close, nil
}

// rel turns a billy path (which may start with "/", meaning the root) into
// a path relative to the root.
func rel(name string) string {
	p := strings.TrimPrefix(filepath.Clean("/"+name), "/")
	if p == "" {
		return "."
	}
	return p
}

func (f *rootFS) Create(name string) (billy.File, error) {
	return nil, &os.PathError{Op: "create", Path: name, Err: errReadOnly}
}

func (f *rootFS) Open(name string) (billy.File, error) { return f.OpenFile(name, os.O_RDONLY, 0) }

func (f *rootFS) OpenFile(name string, flag int, _ os.FileMode) (billy.File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) != 0 {
		return nil, &os.PathError{Op: "open", Path: name, Err: errReadOnly}
	}
	file, err := f.open(name)
	if err != nil {
		return nil, err
	}
	return &rootFile{File: file, name: name}, nil
}

// open opens name for reading if it is a regular file or a directory.
// Without O_NONBLOCK, opening a FIFO the agent made (mkfifo .git/HEAD)
// would wait for a writer for ever, holding the call and an OS thread.
func (f *rootFS) open(name string) (*os.File, error) {
	file, err := f.root.OpenFile(rel(name), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := file.Stat()
	switch {
	case err != nil:
	case !fi.Mode().IsRegular() && !fi.IsDir():
		err = &os.PathError{Op: "open", Path: name, Err: errors.New("not a regular file or a directory")}
	case fi.Size() > maxMetaFile && !strings.Contains("/"+rel(name)+"/", "/objects/"):
		// go-git reads HEAD, refs, packed-refs and config whole: a
		// sparse HEAD of a gigabyte, which takes no disk, took gigabytes
		// of memory.
		err = &os.PathError{Op: "open", Path: name, Err: fmt.Errorf("%d bytes, more than a file of git's metadata may have (%d)", fi.Size(), maxMetaFile)}
	}
	if err != nil {
		file.Close()
		return nil, err
	}
	return file, nil
}

func (f *rootFS) Stat(name string) (os.FileInfo, error)  { return f.root.Stat(rel(name)) }
func (f *rootFS) Lstat(name string) (os.FileInfo, error) { return f.root.Lstat(rel(name)) }
func (f *rootFS) Readlink(name string) (string, error)   { return f.root.Readlink(rel(name)) }

func (f *rootFS) ReadDir(name string) ([]os.FileInfo, error) {
	d, err := f.open(name)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	infos := make([]os.FileInfo, 0, len(entries))
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue // gone since the listing
		}
		infos = append(infos, info)
	}
	return infos, nil
}

func (f *rootFS) Join(elem ...string) string { return filepath.Join(elem...) }

func (f *rootFS) Chroot(name string) (billy.Filesystem, error) {
	r, err := f.root.OpenRoot(rel(name))
	if err != nil {
		return nil, err
	}
	f.roots.add(r)
	return &rootFS{root: r, name: filepath.Join(f.name, rel(name)), roots: f.roots}, nil
}

func (f *rootFS) Root() string { return f.name }

func (f *rootFS) Rename(from, _ string) error {
	return &os.PathError{Op: "rename", Path: from, Err: errReadOnly}
}

func (f *rootFS) Remove(name string) error {
	return &os.PathError{Op: "remove", Path: name, Err: errReadOnly}
}

func (f *rootFS) MkdirAll(name string, _ os.FileMode) error {
	return &os.PathError{Op: "mkdir", Path: name, Err: errReadOnly}
}

func (f *rootFS) TempFile(dir, _ string) (billy.File, error) {
	return nil, &os.PathError{Op: "create", Path: dir, Err: errReadOnly}
}

func (f *rootFS) Symlink(_, link string) error {
	return &os.PathError{Op: "symlink", Path: link, Err: errReadOnly}
}

// rootFile is an *os.File as a billy.File, read-only.
type rootFile struct {
	*os.File
	name string
}

func (f *rootFile) Name() string  { return f.name }
func (f *rootFile) Lock() error   { return nil }
func (f *rootFile) Unlock() error { return nil }

func (f *rootFile) Write([]byte) (int, error) {
	return 0, &os.PathError{Op: "write", Path: f.name, Err: errReadOnly}
}

func (f *rootFile) Truncate(int64) error {
	return &os.PathError{Op: "truncate", Path: f.name, Err: errReadOnly}
}
