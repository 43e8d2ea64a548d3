package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// idleWatch ends a connection (a tunnel, an interception) that moved no
// byte either way for a while: one timer, re-armed for the time left when
// it fires early, rather than a reset on every byte.
type idleWatch struct {
	idle time.Duration
	last atomic.Int64 // UnixNano of the last byte seen (or the start)

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// start sets the clock and, when idle > 0, runs onIdle (once) after idle
// without a byte.
func (w *idleWatch) start(idle time.Duration, onIdle func()) {
	w.idle = idle
	w.touch()
	if idle <= 0 {
		return
	}
	w.mu.Lock()
	w.timer = time.AfterFunc(idle, func() { w.check(onIdle) })
	w.mu.Unlock()
}

// touch moves the clock: a byte moved.
func (w *idleWatch) touch() { w.last.Store(time.Now().UnixNano()) }

func (w *idleWatch) check(onIdle func()) {
	quiet := time.Since(time.Unix(0, w.last.Load()))
	if quiet >= w.idle {
		onIdle()
		return
	}
	w.mu.Lock()
	if !w.stopped {
		w.timer.Reset(w.idle - quiet)
	}
	w.mu.Unlock()
}

// stop ends the watch.
func (w *idleWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
}
