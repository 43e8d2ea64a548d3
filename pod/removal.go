package pod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/devaipod/devaipod/pod/plan"
)

// A delete on podman stops the pod's agent at once and hands the rest
// (podman stops and removes each container in turn, then the volumes: a
// few hundred milliseconds) to a process of its own. While that runs, a
// removal mark in devaipod's state folder says that the pod is going:
// list shows it as removing, and an up or start of the name waits for the
// removal instead of starting the pod again. The process that removes the
// pod holds an exclusive flock on the mark, handed to it by the delete
// that made it; it deletes the mark when the pod is gone. A mark that
// nobody holds is a removal that failed or was killed: up, start, gc and
// delete finish it. Marks are only for a local podman service (a Killer
// that is Local): the marks are this user's, in this machine's state
// folder, and name pods by their names only, so they cannot tell one
// service's pods from another's. A cluster's deletes, and a remote
// service's, always wait.

// ErrBeingRemoved says that another process is removing the pod.
var ErrBeingRemoved = errors.New("is being removed")

// Killer is an engine that can kill a running container at once and wait
// for it to exit (podman). Only with a local one does a delete hand the
// removal to a process of its own.
type Killer interface {
	Kill(ctx context.Context, container string) error
	// Local tells whether the service runs on this machine for this user:
	// then the removal marks in this user's state folder are its pods'.
	Local() bool
}

// hasMarks tells whether eng's pods have removal marks (see Killer).
func hasMarks(eng Engine) bool {
	k, ok := eng.(Killer)
	return ok && k.Local()
}

// awaitRemovalTimeout bounds how long up and start wait for a removal.
const awaitRemovalTimeout = 2 * time.Minute

func removalDir() string              { return filepath.Join(stateDir(), "removing") }
func removalPath(short string) string { return filepath.Join(removalDir(), short) }

// RemovalLog is where the process that removes the pod writes what it
// says.
func RemovalLog(short string) string { return removalPath(short) + ".log" }

// removalKeepsVolumes is what a mark says when its delete keeps the volumes.
const removalKeepsVolumes = "keep-volumes\n"

// Removal is a held removal mark: the pod is being removed by whoever has
// it, until Done.
type Removal struct {
	short string
	f     *os.File
	// KeepVolumes is what the delete that made the mark asked for.
	KeepVolumes bool
}

// File is the open mark, for a process that takes the removal over: the
// flock lives as long as any process keeps the file open.
func (r *Removal) File() *os.File { return r.f }

// Done deletes the mark (the pod is gone), and the log of the process
// that removed it, and lets go of the mark.
func (r *Removal) Done() error {
	os.Remove(RemovalLog(r.short))
	err := os.Remove(removalPath(r.short))
	r.f.Close()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("mark pod %s removed: %w", r.short, err)
	}
	return nil
}

// Release lets go of the mark and leaves it: another process holds it, or
// the removal failed and a later up, start, gc or delete finishes it.
func (r *Removal) Release() { r.f.Close() }

// setKeepVolumes writes keep in the mark, for whoever finishes it.
func (r *Removal) setKeepVolumes(keep bool) error {
	if r.KeepVolumes == keep {
		return nil
	}
	var b []byte
	if keep {
		b = []byte(removalKeepsVolumes)
	}
	err := r.f.Truncate(0)
	if err == nil {
		_, err = r.f.WriteAt(b, 0)
	}
	if err != nil {
		return fmt.Errorf("removal mark of pod %s: %w", r.short, err)
	}
	r.KeepVolumes = keep
	return nil
}

// HeldRemoval takes over the mark that the delete which started this
// process holds for it, open as f.
func HeldRemoval(short string, f *os.File) (*Removal, error) {
	r, err := adoptMark(short, f)
	if err == nil && r == nil {
		err = fmt.Errorf("removal mark of pod %s: not the one this process was given", short)
	}
	return r, err
}

// adoptMark is the Removal of f, a locked file, if it is still the mark in
// place (the holder deletes the mark before it lets go: one gone or new
// since f was opened is not f); nil if not.
func adoptMark(short string, f *os.File) (*Removal, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("removal mark of pod %s: %w", short, err)
	}
	if now, err := os.Lstat(removalPath(short)); err != nil || !os.SameFile(st, now) {
		return nil, nil
	}
	b := make([]byte, len(removalKeepsVolumes))
	n, _ := f.ReadAt(b, 0)
	return &Removal{short: short, f: f, KeepVolumes: string(b[:n]) == removalKeepsVolumes}, nil
}

// takeRemoval takes the pod's removal mark if there is one: nil when there
// is none, or when the removal it waited for is done. One that another
// process holds is ErrBeingRemoved, unless wait: then it waits (until ctx
// ends) for that process to finish or die, and takes the mark if it is
// still there.
func takeRemoval(ctx context.Context, short string, wait bool) (*Removal, error) {
	for {
		f, err := os.OpenFile(removalPath(short), os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("open removal mark of pod %s: %w", short, err)
		}
		if err := flockWait(ctx, f, wait); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("pod %s %w", short, ErrBeingRemoved)
			}
			return nil, err
		}
		r, err := adoptMark(short, f)
		if err != nil {
			f.Close()
			return nil, err
		}
		if r != nil {
			return r, nil
		}
		f.Close()
		if wait {
			if _, err := os.Lstat(removalPath(short)); errors.Is(err, os.ErrNotExist) {
				return nil, nil
			}
		}
	}
}

// markRemoval takes the pod's removal mark (as takeRemoval), or makes one,
// and writes keepVolumes in it.
func markRemoval(ctx context.Context, short string, keepVolumes, wait bool) (*Removal, error) {
	for {
		r, err := takeRemoval(ctx, short, wait)
		if err != nil {
			return nil, err
		}
		if r != nil {
			if err := r.setKeepVolumes(keepVolumes); err != nil {
				r.Release()
				return nil, err
			}
			return r, nil
		}
		f, err := newRemovalMark(short, keepVolumes)
		if errors.Is(err, os.ErrExist) {
			continue // another delete made one just now
		}
		if err != nil {
			return nil, err
		}
		return &Removal{short: short, f: f, KeepVolumes: keepVolumes}, nil
	}
}

// newRemovalMark makes the mark under a name of its own, locks it and
// links it in place, so that nobody ever sees a mark that is not held;
// os.ErrExist if another mark got there first.
func newRemovalMark(short string, keepVolumes bool) (*os.File, error) {
	if err := os.MkdirAll(removalDir(), 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", removalDir(), err)
	}
	f, err := os.CreateTemp(removalDir(), "."+short+".")
	if err != nil {
		return nil, fmt.Errorf("mark pod %s removing: %w", short, err)
	}
	defer os.Remove(f.Name())
	if keepVolumes {
		_, err = f.WriteString(removalKeepsVolumes)
	}
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err == nil {
		err = os.Link(f.Name(), removalPath(short))
	}
	if err != nil {
		f.Close()
		if errors.Is(err, os.ErrExist) {
			return nil, err
		}
		return nil, fmt.Errorf("mark pod %s removing: %w", short, err)
	}
	return f, nil
}

// flockWait takes an exclusive flock on f. If another holds it, it tries
// again every 10 ms: until ctx ends when wait, else for 200 ms (RemovalState
// holds a mark's lock for a moment to look at it), then EWOULDBLOCK.
func flockWait(ctx context.Context, f *os.File, wait bool) error {
	deadline := time.Now().Add(200 * time.Millisecond)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil || !errors.Is(err, syscall.EWOULDBLOCK) || (!wait && time.Now().After(deadline)) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// RemovalState is "removing" while a process removes the pod, "removal
// failed" for a mark that nobody holds (that process failed or was
// killed), "" when the pod is not being removed.
func RemovalState(short string) string {
	switch exists, held := flockHeld(removalPath(short)); {
	case held:
		return StateRemoving
	case exists:
		return StateRemovalFailed
	}
	return ""
}

// The states RemovalState gives a pod, shown by list and status.
const (
	StateRemoving      = "removing"
	StateRemovalFailed = "removal failed"
)

// StartRemoval begins a delete that another process finishes: it marks the
// pod removing and kills its agent, so that nothing the agent runs goes on
// once it returns. The caller hands r.File() to the process that calls
// FinishRemoval, then calls Release. It returns too what that process is
// to remove (the pod's objects as they were when it killed, but the
// volumes with keepVolumes). It returns ErrBeingRemoved when another
// process removes the pod, and the lock's error while an up or start of it
// runs; on any error the caller removes the pod itself (Delete).
func StartRemoval(ctx context.Context, eng Engine, short string, keepVolumes bool) (*Removal, []Object, error) {
	killer, ok := eng.(Killer)
	if !ok || !killer.Local() {
		return nil, nil, errors.New("a delete goes to the background only on a local podman service")
	}
	// An up or start of the pod checks for a mark under this lock: none
	// can start the agent again once the mark is there, and the states
	// read under it are the ones the kill goes by.
	unlock, err := lockPod(short)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	objs, err := eng.Objects(ctx, short)
	if err != nil {
		return nil, nil, err
	}
	if len(objs) == 0 {
		return nil, nil, fmt.Errorf("pod %s: %w", short, ErrNotFound)
	}
	f, err := newRemovalMark(short, keepVolumes)
	if errors.Is(err, os.ErrExist) {
		return nil, nil, fmt.Errorf("pod %s %w", short, ErrBeingRemoved) // or a failed removal: Delete finishes it
	}
	if err != nil {
		return nil, nil, err
	}
	r := &Removal{short: short, f: f, KeepVolumes: keepVolumes}
	agent := plan.ContainerName(short, plan.RoleAgent)
	for _, o := range objs {
		if o.Kind != KindContainer || o.Name != agent {
			continue
		}
		switch o.State {
		case "running", "stopping":
		case "paused":
			// A frozen process dies of SIGKILL only once thawed.
			r.Done()
			return nil, nil, fmt.Errorf("%s is paused", agent)
		default:
			continue // not running
		}
		if err := killer.Kill(ctx, agent); err != nil && !errors.Is(err, ErrNotFound) {
			// Whether it still runs is not known.
			r.Done()
			return nil, nil, fmt.Errorf("kill %s: %w", agent, err)
		}
	}
	return r, doomed(objs, keepVolumes), nil
}

// FinishRemoval removes everything labelled for the pod (its volumes too,
// unless the mark says to keep them), then deletes the mark.
func FinishRemoval(ctx context.Context, eng Engine, r *Removal) ([]Object, error) {
	objs, err := eng.Objects(ctx, r.short)
	if err != nil {
		r.Release()
		return nil, err
	}
	gone, err := removePod(ctx, eng, objs, r.KeepVolumes)
	if err != nil {
		r.Release()
		return gone, err
	}
	os.Remove(lookedMark(r.short))
	return gone, r.Done()
}

// lockPodNotRemoving takes the pod's lock (see lockPod) once no delete is
// removing it: it waits for a removal and finishes one that failed. So an
// up or start never starts a pod again that a delete has begun to remove.
func lockPodNotRemoving(ctx context.Context, eng Engine, short string, progress func(string)) (unlock func(), err error) {
	if !hasMarks(eng) {
		return lockPod(short)
	}
	ctx, cancel := context.WithTimeout(ctx, awaitRemovalTimeout)
	defer cancel()
	said := false
	for {
		if RemovalState(short) != "" {
			if !said && progress != nil {
				progress("waiting for the removal of pod " + short)
				said = true
			}
			r, err := takeRemoval(ctx, short, true)
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("pod %s is still being removed after %s (%s says what the removal does)", short, awaitRemovalTimeout, RemovalLog(short))
			}
			if err != nil {
				return nil, err
			}
			if r != nil {
				if _, err := FinishRemoval(ctx, eng, r); err != nil {
					return nil, fmt.Errorf("finish the removal of pod %s: %w", short, err)
				}
			}
		}
		unlock, err := lockPod(short)
		if err != nil {
			return nil, err
		}
		if RemovalState(short) == "" {
			return unlock, nil
		}
		unlock() // a delete began meanwhile
	}
}

// sweepRemovalMarks deletes the marks that nobody holds and whose pods
// have nothing left (removed by hand after a failed removal), with their
// logs, and the temporary files of marks whose making was cut short.
func sweepRemovalMarks(objs []Object) {
	entries, err := os.ReadDir(removalDir())
	if err != nil {
		return
	}
	has := map[string]bool{}
	for _, o := range objs {
		has[o.Pod] = true
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "."):
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Minute {
				os.Remove(filepath.Join(removalDir(), name))
			}
		case strings.HasSuffix(name, ".log"):
		case !has[name] && RemovalState(name) == StateRemovalFailed:
			os.Remove(RemovalLog(name))
			os.Remove(removalPath(name))
		}
	}
}
