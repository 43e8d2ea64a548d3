package pod

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// A command makes folders of its own in the temporary directory: up
// clones the repository into one (CloneDirPrefix), and a command that
// finds no podman service starts one with its socket in another
// (ServiceDirPrefix). Both are removed when the command ends; a command
// that is killed (SIGKILL, the OOM killer) cannot, and a clone may be
// large. So each folder holds a flock on a file in it while its command
// runs, and gc removes the folders whose lock is free.
//
// The lock file is made and locked under another name, then renamed into
// place: a lock file of that name is always held while its command runs.

const (
	// CloneDirPrefix names the folders up clones repositories into.
	CloneDirPrefix = "devaipod-src-"
	// ServiceDirPrefix names the folders of podman services that
	// devaipod starts.
	ServiceDirPrefix = "devaipod-podman-"
)

// KindFolder is what gc reports a leftover folder as.
const KindFolder = "folder"

// tempLockName is the lock file in each folder.
const tempLockName = ".devaipod.lock"

// unlockedTempAge is how old a folder without a lock file (a devaipod's
// from before the locks, or one being made this instant) must be to be a
// leftover.
const unlockedTempAge = time.Hour

// MakeTempDir makes a folder in the temporary directory, named prefix and
// a random suffix, and holds its lock until remove, which removes the
// folder and then lets the lock go.
func MakeTempDir(prefix string) (dir string, remove func() error, err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	// Without a lock file (a file system without flock) the folder is a
	// leftover to gc only once it is old.
	f, lockErr := lockedFileIn(dir)
	return dir, func() error {
		err := os.RemoveAll(dir)
		if lockErr == nil {
			f.Close()
		}
		return err
	}, nil
}

func lockedFileIn(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, ".lock-")
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, tempLockName)); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

// StaleTempDirs are the folders that killed commands of this user left in
// the temporary directory.
func StaleTempDirs() []string {
	var stale []string
	for _, prefix := range []string{CloneDirPrefix, ServiceDirPrefix} {
		dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
		for _, dir := range dirs {
			if staleTempDir(dir) {
				stale = append(stale, dir)
			}
		}
	}
	return stale
}

// staleTempDir tells whether dir, a folder named as above, is this user's
// and its command is gone.
func staleTempDir(dir string) bool {
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() {
		return false
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Getuid() {
		return false
	}
	lock := filepath.Join(dir, tempLockName)
	lst, err := os.Lstat(lock)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return time.Since(st.ModTime()) > unlockedTempAge
	case err != nil || !lst.Mode().IsRegular():
		return false
	}
	exists, held := flockHeld(lock)
	return exists && !held
}

// RemoveTempDirs removes the folders (StaleTempDirs) and returns those it
// removed.
func RemoveTempDirs(dirs []string) ([]string, error) {
	var errs []error
	var gone []string
	for _, dir := range dirs {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
			continue
		}
		gone = append(gone, dir)
	}
	return gone, errors.Join(errs...)
}

// TempDirObjects are dirs as objects to report.
func TempDirObjects(dirs []string) []Object {
	var objs []Object
	for _, dir := range dirs {
		objs = append(objs, Object{Kind: KindFolder, Name: dir})
	}
	return objs
}
