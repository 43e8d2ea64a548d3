package auditlog

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Limiter keeps a flood of records the agent makes for free (refused
// calls and requests, say) from pushing the earlier records out of a
// bounded log: at a few hundred bytes a record, some 50,000 of them move
// every earlier record aside and out (File keeps two files). Per kind (a
// sidecar's choice, from a fixed set: the gator's event, tool and
// decision, the proxy's decision and reason), the first LimitBurst records
// are written, then LimitPerMinute a minute; the rest are only counted,
// and the sidecar writes one record for them (Dropped) within a minute. A
// flood then takes hours, not seconds, to move the log along, and what
// the agent did before it stays.
type Limiter struct {
	mu    sync.Mutex
	kinds map[string]*bucket
}

// Bounds of the records of one kind.
const (
	LimitBurst     = 100
	LimitPerMinute = 10
	// limitKinds bounds the kinds counted; past it, every further kind
	// counts as one.
	limitKinds = 256
)

// bucket is a kind's token bucket and what it dropped.
type bucket struct {
	tokens  float64
	last    time.Time
	dropped int64
	since   time.Time // the first dropped since the last Dropped
}

// Dropped is how many records of one kind were not written, since when.
type Dropped struct {
	Kind  string
	Count int64
	Since time.Time
}

// Allow reports whether a record of kind may be written at now; false
// counts it as dropped, and the caller should arrange to call Dropped
// within a minute.
func (l *Limiter) Allow(kind string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kinds == nil {
		l.kinds = map[string]*bucket{}
	}
	b, ok := l.kinds[kind]
	if !ok {
		if len(l.kinds) >= limitKinds {
			kind = "other"
			b = l.kinds[kind]
		}
		if b == nil {
			b = &bucket{tokens: LimitBurst, last: now}
			l.kinds[kind] = b
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
	return false
}

// Dropped returns the counts of the kinds that dropped records since the
// last call, by kind, and starts counting afresh.
func (l *Limiter) Dropped() []Dropped {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Dropped
	for kind, b := range l.kinds {
		if b.dropped > 0 {
			out = append(out, Dropped{Kind: kind, Count: b.dropped, Since: b.since})
			b.dropped = 0
		}
	}
	slices.SortFunc(out, func(a, b Dropped) int { return strings.Compare(a.Kind, b.Kind) })
	return out
}

// Flood is a Limiter with its dropped records written: within a minute of
// the first record it drops (DroppedDelay), and when it is closed; after
// Close every record is let through, so that nothing a sidecar audits on
// its way out is lost. Write is called with what was dropped, never twice
// at once, and never after Close has returned.
type Flood struct {
	limit Limiter
	write func([]Dropped)

	mu     sync.Mutex
	timer  *time.Timer
	armed  bool
	closed bool
}

// DroppedDelay is how long after a dropped record its count is written.
const DroppedDelay = time.Minute

// NewFlood returns a Flood that writes dropped records with write.
func NewFlood(write func([]Dropped)) *Flood { return &Flood{write: write} }

// Allow reports whether a record of kind may be written now (see Limiter).
func (f *Flood) Allow(kind string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.limit.Allow(kind, time.Now()) {
		return true
	}
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

// flush writes what was dropped.
func (f *Flood) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = false
	if !f.closed {
		if d := f.limit.Dropped(); d != nil {
			f.write(d)
		}
	}
}

// Close writes what was dropped and not yet written, and lets every later
// record through.
func (f *Flood) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.closed = true
	if f.timer != nil {
		f.timer.Stop()
	}
	if d := f.limit.Dropped(); d != nil {
		f.write(d)
	}
}
