package pod

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/devaipod/devaipod/pod/plan"
)

// An up holds an exclusive flock on a per-pod file for as long as it runs,
// so that gc, which may run at the same time, leaves a pod being created
// alone. The lock dies with the process, so a killed up never leaves a
// stale lock. Lock files are never removed: unlinking a locked file would
// let a second process lock a new file of the same name.

// lockDir is the same for every devaipod of this user, whatever its
// environment: cron and ssh without a session set no XDG_RUNTIME_DIR, and
// TMPDIR varies, yet a gc from cron must see the locks of an interactive
// up. So the user's runtime directory, where podman finds it too, comes
// before a fixed folder in /tmp.
func lockDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "devaipod")
	}
	uid := strconv.Itoa(os.Getuid())
	if st, err := os.Stat(filepath.Join("/run/user", uid)); err == nil && st.IsDir() {
		return filepath.Join("/run/user", uid, "devaipod")
	}
	return filepath.Join("/tmp", "devaipod-"+uid)
}

// checkLockDir refuses a lock directory another user could tamper with
// (the /tmp fallback).
func checkLockDir(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || !ok || int(sys.Uid) != os.Getuid() || st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("lock directory %s is not a private directory of this user", dir)
	}
	return nil
}

func lockPath(short string) string { return filepath.Join(lockDir(), short+".lock") }

func lockPod(short string) (unlock func(), err error) {
	if err := os.MkdirAll(lockDir(), 0o700); err != nil {
		return nil, fmt.Errorf("create lock dir: %w", err)
	}
	if err := checkLockDir(lockDir()); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(lockPath(short), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("pod %s is being created or started by another devaipod: %w", short, ErrExists)
		}
		return nil, fmt.Errorf("lock pod %s: %w", short, err)
	}
	return func() { f.Close() }, nil
}

// podLocked tells whether an up or start of that pod is running right now.
func podLocked(short string) bool {
	_, held := flockHeld(lockPath(short))
	return held
}

// flockHeld tells whether the file at path exists, and whether another
// process holds a flock on it: it takes a shared lock for a moment. Only
// a lock taken says it is free; any error counts as held, so that nothing
// takes a lock it could not probe for free.
func flockHeld(path string) (exists, held bool) {
	f, err := os.Open(path)
	if err != nil {
		return false, false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true, true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true, false
}

// An up also marks its pod unfinished, in devaipod's state folder, from
// before its first create until the pod is ready; success and the
// rollback clear the mark. An up killed once the pod has started (SIGKILL,
// the OOM killer) leaves a pod that runs with all its containers, yet
// never passed its checks: the mark, which outlives the up's lock and a
// reboot, tells gc, the pool and the next up that it is a leftover.
//
// A mark is the up's own, named by the pod's name and the up's token,
// which the pod carries as its LabelUp: the folder is this user's, for
// every podman service and cluster they use, so a mark named by the pod's
// name alone made an up killed against one service make gc against
// another remove a whole pod of that name there, and an up there of that
// name overwrite or clear the mark here. A pod without a token (the kube
// engine's, or one from a devaipod before tokens) has no mark; nor does a
// label that is not a token, which would be a path.

func unfinishedPath(short, token string) string {
	return filepath.Join(stateDir(), "unfinished", short+"@"+token)
}

func markUnfinished(short, token string) error {
	path := unfinishedPath(short, token)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("mark pod %s unfinished: %w", short, err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return fmt.Errorf("mark pod %s unfinished: %w", short, err)
	}
	return nil
}

func clearUnfinished(short, token string) error {
	if err := os.Remove(unfinishedPath(short, token)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("mark pod %s finished: %w", short, err)
	}
	return nil
}

// upToken is the token of the up that made p, a pod: its LabelUp if that
// is one that crypto/rand.Text draws, else "".
func upToken(p Object) string {
	token := p.Labels[plan.LabelUp]
	if len(token) != 26 || strings.Trim(token, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") != "" {
		return ""
	}
	return token
}

// unfinished tells whether p, a pod, was made by an up that neither
// finished nor rolled back.
func unfinished(p Object) bool {
	token := upToken(p)
	if token == "" {
		return false
	}
	_, err := os.Lstat(unfinishedPath(p.Pod, token))
	return err == nil
}

// clearUnfinishedOf clears the unfinished marks of objs' pods.
func clearUnfinishedOf(objs []Object) error {
	var errs []error
	for _, o := range objs {
		if token := upToken(o); o.Kind == KindPod && token != "" {
			errs = append(errs, clearUnfinished(o.Pod, token))
		}
	}
	return errors.Join(errs...)
}
