package auditlog

import (
	"reflect"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	var l Limiter
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	allowed := func(kind string, n int, at time.Time) int {
		got := 0
		for range n {
			if l.Allow(kind, at) {
				got++
			}
		}
		return got
	}
	if got := allowed("a", 150, t0); got != LimitBurst {
		t.Errorf("a burst of 150 let %d through, want %d", got, LimitBurst)
	}
	if got := allowed("b", 5, t0); got != 5 {
		t.Errorf("another kind let %d of 5 through", got)
	}
	// LimitPerMinute a minute come back: one every 6 s.
	if got := allowed("a", 10, t0.Add(13*time.Second)); got != 2 {
		t.Errorf("13 s later, %d of 10 went through, want 2", got)
	}
	want := []Dropped{{Kind: "a", Count: 58, Since: t0}}
	if got := l.Dropped(); !reflect.DeepEqual(got, want) {
		t.Errorf("Dropped = %+v, want %+v", got, want)
	}
	if got := l.Dropped(); got != nil {
		t.Errorf("Dropped again = %+v, want none", got)
	}
	// An hour later the burst is back whole, and no more.
	if got := allowed("a", 150, t0.Add(time.Hour)); got != LimitBurst {
		t.Errorf("an hour later %d of 150 went through, want %d", got, LimitBurst)
	}
	// Kinds past limitKinds count as one.
	var many Limiter
	for i := range limitKinds + 10 {
		many.Allow(string(rune('A'+i)), t0)
	}
	if n := len(many.kinds); n != limitKinds+1 {
		t.Errorf("%d kinds kept, want %d", n, limitKinds+1)
	}
}

func TestFlood(t *testing.T) {
	var written []Dropped
	f := NewFlood(func(d []Dropped) { written = append(written, d...) })
	for range LimitBurst + 3 {
		f.Allow("a")
	}
	if !f.armed {
		t.Error("a drop armed no timer")
	}
	f.flush() // what the timer runs
	if len(written) != 1 || written[0].Kind != "a" || written[0].Count != 3 {
		t.Errorf("the timer wrote %+v, want 3 of a", written)
	}
	f.Allow("a")
	f.Close()
	if len(written) != 2 || written[1].Count != 1 {
		t.Errorf("Close wrote %+v, want 1 of a", written[1:])
	}
	if !f.Allow("a") {
		t.Error("after Close a record was dropped")
	}
	f.flush() // a timer that fired as Close ran
	f.Close()
	if len(written) != 2 {
		t.Errorf("after Close: %+v", written[2:])
	}
}
