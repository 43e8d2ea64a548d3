package pod

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// An up holds an exclusive flock on a per-pod file for as long as it runs,
// so that gc, which may run at the same time, leaves a pod being created
// alone. The lock dies with the process, so a killed up never leaves a
// stale lock.

func lockDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "devaipod")
	}
	return filepath.Join(os.TempDir(), "devaipod-"+strconv.Itoa(os.Getuid()))
}

func lockPath(short string) string { return filepath.Join(lockDir(), short+".lock") }

func lockPod(short string) (unlock func(), err error) {
	if err := os.MkdirAll(lockDir(), 0o700); err != nil {
		return nil, fmt.Errorf("create lock dir: %w", err)
	}
	f, err := os.OpenFile(lockPath(short), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("pod %s is being created by another devaipod up: %w", short, ErrExists)
		}
		return nil, fmt.Errorf("lock pod %s: %w", short, err)
	}
	return func() {
		os.Remove(f.Name())
		f.Close()
	}, nil
}

// podLocked tells whether an up of that pod is running right now.
func podLocked(short string) bool {
	f, err := os.Open(lockPath(short))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
