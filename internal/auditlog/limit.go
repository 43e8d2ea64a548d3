package auditlog

import (
	"sync"
	"time"
)

// Flood keeps a flood of records the agent makes for free (refused calls
// and requests, say) from pushing the earlier records out of a bounded
// log: at a few hundred bytes a record, some 50,000 of them move every
// earlier record aside and out (File keeps two files). Per kind (a
// sidecar's choice, from a fixed set: the gator's event, tool and
// decision, the proxy's decision and reason), the first LimitBurst records
// are let through, then LimitPerMinute a minute; the rest are only
// counted, and Flood has the sidecar write one record for them (Dropped)
// within a minute of the first (DroppedDelay), and when it is closed. A
// flood then takes hours, not seconds, to move the log along, and what the
// agent did before it stays. After Close every record is let through, so
// that nothing a sidecar audits on its way out is lost. The write function
// is never called twice at once, nor after Close has returned.
type Flood[K comparable] struct {
	write func([]Dropped[K])

	mu     sync.Mutex
	kinds  map[K]*bucket
	timer  *time.Timer
	armed  bool
	closed bool
}

// Bounds of the records of one kind.
const (
	LimitBurst     = 100
	LimitPerMinute = 10
	// limitKinds bounds the kinds counted; past it, every further kind
	// counts as the zero kind.
	limitKinds = 256
)

// DroppedDelay is how long after a dropped record its count is written.
const DroppedDelay = time.Minute

// bucket is a kind's token bucket and what it dropped.
type bucket struct {
	tokens  float64
	last    time.Time
	dropped int64
	since   time.Time // the first dropped since the last write
}

// Dropped is how many records of one kind were not written, since when.
type Dropped[K comparable] struct {
	Kind  K
	Count int64
	Since time.Time
}

// NewFlood returns a Flood that writes dropped records with write.
func NewFlood[K comparable](write func([]Dropped[K])) *Flood[K] {
	return &Flood[K]{write: write}
}

// Allow reports whether a record of kind may be written now; false counts
// it as dropped.
func (f *Flood[K]) Allow(kind K) bool { return f.allow(kind, time.Now()) }

func (f *Flood[K]) allow(kind K, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return true
	}
	if f.kinds == nil {
		f.kinds = map[K]*bucket{}
	}
	b, ok := f.kinds[kind]
	if !ok {
		if len(f.kinds) >= limitKinds {
			var zero K
			kind, b = zero, f.kinds[zero]
		}
		if b == nil {
			b = &bucket{tokens: LimitBurst, last: now}
			f.kinds[kind] = b
		}
	}
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(LimitBurst, b.tokens+elapsed.Minutes()*LimitPerMinute)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	if b.dropped == 0 {
		b.since = now
	}
	b.dropped++
	if !f.armed {
		f.armed = true
		if f.timer == nil {
			f.timer = time.AfterFunc(DroppedDelay, f.flush)
		} else {
			f.timer.Reset(DroppedDelay)
		}
	}
	return false
}

// writeDropped writes what the kinds dropped since the last time, and
// starts counting afresh; f.mu is held.
func (f *Flood[K]) writeDropped() {
	var out []Dropped[K]
	for kind, b := range f.kinds {
		if b.dropped > 0 {
			out = append(out, Dropped[K]{Kind: kind, Count: b.dropped, Since: b.since})
			b.dropped = 0
		}
	}
	if out != nil {
		f.write(out)
	}
}

// flush is the timer's: it writes what was dropped.
func (f *Flood[K]) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = false
	if !f.closed {
		f.writeDropped()
	}
}

// Close writes what was dropped and not yet written, and lets every later
// record through.
func (f *Flood[K]) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.closed = true
	if f.timer != nil {
		f.timer.Stop()
	}
	f.writeDropped()
}
