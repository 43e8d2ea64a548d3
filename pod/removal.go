package pod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/devaipod/devaipod/pod/plan"
)

// A delete stops the pod's agent at once and hands the rest (podman stops
// and removes each container in turn, then the volumes: a few hundred
// milliseconds) to a process of its own. While that runs, a removal mark
// in devaipod's state folder says that the pod is going: list shows it as
// removing, and an up or start of the name waits for the removal instead
// of starting the pod again. The process that removes the pod holds an
// exclusive flock on the mark, handed to it by the delete that made it;
// it deletes the mark when the pod is gone. A mark that nobody holds is
// a removal that failed or was killed: up, start, gc and delete finish it.

// ErrBeingRemoved says that another process is removing the pod.
var ErrBeingRemoved = errors.New("is being removed")

// Killer is an engine that can kill a running container at once, without
// waiting for what follows (podman). Only with one does a delete hand the
// removal to a process of its own.
type Killer interface {
	Kill(ctx context.Context, container string) error
}

func removalPath(short string) string { return filepath.Join(stateDir(), "removing", short) }

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

// setKeepVolumes writes keep in the mark, for the process it is handed to.
func (r *Removal) setKeepVolumes(keep bool) error {
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

// Release lets go of the mark and leaves it: another process holds it, or
// the removal failed and a later up, start, gc or delete finishes it.
func (r *Removal) Release() { r.f.Close() }

// HeldRemoval takes over the mark that the delete which started this
// process holds for it, open as f.
func HeldRemoval(short string, f *os.File) (*Removal, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("removal mark of pod %s: %w", short, err)
	}
	now, err := os.Lstat(removalPath(short))
	if err != nil || !os.SameFile(st, now) {
		return nil, fmt.Errorf("removal mark of pod %s: not the one this process was given", short)
	}
	b := make([]byte, len(removalKeepsVolumes))
	n, _ := f.ReadAt(b, 0)
	return &Removal{short: short, f: f, KeepVolumes: string(b[:n]) == removalKeepsVolumes}, nil
}

// lockRemoval takes the pod's removal mark, making it when there is none
// (keepVolumes is then written in it). A mark that another process holds
// is ErrBeingRemoved, unless wait: then it waits (until ctx ends) for the
// other to finish or die, and takes the mark if it is still there. made
// says that this call made the mark.
func lockRemoval(ctx context.Context, short string, keepVolumes, wait bool) (r *Removal, made bool, err error) {
	dir := filepath.Dir(removalPath(short))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("create %s: %w", dir, err)
	}
	for {
		f, err := os.OpenFile(removalPath(short), os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			// A new mark is made locked and then linked in place, so
			// that nobody ever sees one that is not held.
			if f, err = newRemovalMark(dir, short, keepVolumes); err == nil {
				return &Removal{short: short, f: f, KeepVolumes: keepVolumes}, true, nil
			}
			if errors.Is(err, os.ErrExist) {
				continue // another delete made one just now
			}
			return nil, false, err
		}
		if err != nil {
			return nil, false, fmt.Errorf("open removal mark of pod %s: %w", short, err)
		}
		if err := flockWait(ctx, f, wait); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, false, fmt.Errorf("pod %s %w", short, ErrBeingRemoved)
			}
			return nil, false, err
		}
		// The holder deletes the mark before it lets go: one that is gone
		// or new since it was opened is not this one.
		st, serr := f.Stat()
		now, nerr := os.Lstat(removalPath(short))
		if serr == nil && nerr == nil && os.SameFile(st, now) {
			r, err := HeldRemoval(short, f)
			if err != nil {
				f.Close()
			}
			return r, false, err
		}
		f.Close()
		if errors.Is(nerr, os.ErrNotExist) && wait {
			return nil, false, nil // the removal this call waited for is done
		}
	}
}

// newRemovalMark makes the mark under a name of its own, locks it and
// links it in place; os.ErrExist if another mark got there first.
func newRemovalMark(dir, short string, keepVolumes bool) (*os.File, error) {
	f, err := os.CreateTemp(dir, "."+short+".")
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

// flockWait takes an exclusive flock on f; EWOULDBLOCK if another holds it,
// unless wait: then it tries again every 50 ms until ctx ends.
func flockWait(ctx context.Context, f *os.File, wait bool) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil || !errors.Is(err, syscall.EWOULDBLOCK) || !wait {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// RemovalState is "removing" while a process removes the pod, "removal
// failed" for a mark that nobody holds (that process failed or was
// killed), "" when the pod is not being removed.
func RemovalState(short string) string {
	f, err := os.Open(removalPath(short))
	if err != nil {
		return ""
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return StateRemoving
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return StateRemovalFailed
}

// The states RemovalState gives a pod, shown by list and status.
const (
	StateRemoving      = "removing"
	StateRemovalFailed = "removal failed"
)

// StartRemoval begins a delete that another process finishes: it marks the
// pod removing and kills its agent, so that nothing the agent runs goes on
// once it returns. The caller hands r.File() to the process that calls
// FinishRemoval, then Release. It returns the objects that process is to
// remove, and ErrBeingRemoved when another process removes the pod.
func StartRemoval(ctx context.Context, eng Killer, objs []Object, short string, keepVolumes bool) (*Removal, error) {
	if len(objs) == 0 {
		return nil, fmt.Errorf("pod %s: %w", short, ErrNotFound)
	}
	r, made, err := lockRemoval(ctx, short, keepVolumes, false)
	if err != nil {
		return nil, err
	}
	if !made && r.KeepVolumes != keepVolumes {
		// A failed removal's mark: this delete's choice is what counts.
		if err := r.setKeepVolumes(keepVolumes); err != nil {
			r.Release()
			return nil, err
		}
	}
	agent := plan.ContainerName(short, plan.RoleAgent)
	for _, o := range objs {
		if o.Kind != KindContainer || o.Name != agent || o.State != "running" {
			continue
		}
		if err := eng.Kill(ctx, agent); err != nil && !errors.Is(err, ErrNotFound) {
			// Whether it still runs is not known: the caller removes the
			// pod itself, as a delete that waits does.
			r.Release()
			return nil, fmt.Errorf("kill %s: %w", agent, err)
		}
	}
	return r, nil
}

// FinishRemoval removes everything labelled for the pod (its volumes too,
// unless the mark says to keep them), then deletes the mark.
func FinishRemoval(ctx context.Context, eng Engine, r *Removal) ([]Object, error) {
	objs, err := eng.Objects(ctx, r.short)
	if err != nil {
		r.Release()
		return nil, err
	}
	var doomed []Object
	for _, o := range objs {
		if r.KeepVolumes && o.Kind == KindVolume {
			continue
		}
		doomed = append(doomed, o)
	}
	if err := removeAll(ctx, eng, doomed); err != nil {
		r.Release()
		return doomed, err
	}
	if err := clearUnfinished(r.short); err != nil {
		r.Release()
		return doomed, err
	}
	return doomed, r.Done()
}

// awaitRemoval waits, when the pod is being removed, until it is gone;
// and finishes a removal that failed or was killed. progress hears that
// it waits.
func awaitRemoval(ctx context.Context, eng Engine, short string, progress func(string)) error {
	if RemovalState(short) == "" {
		return nil
	}
	if progress != nil {
		progress("waiting for the removal of pod " + short)
	}
	r, _, err := lockRemoval(ctx, short, false, true)
	if err != nil || r == nil {
		return err
	}
	if _, err := FinishRemoval(ctx, eng, r); err != nil {
		return fmt.Errorf("finish the removal of pod %s: %w", short, err)
	}
	return nil
}

// RemovalLog is where the process that removes the pod writes what it
// says.
func RemovalLog(short string) string { return removalPath(short) + ".log" }
