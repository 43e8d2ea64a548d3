package auditlog

import (
	"reflect"
	"testing"
	"time"
)

func TestFlood(t *testing.T) {
	var written []Dropped[string]
	f := NewFlood(func(d []Dropped[string]) { written = append(written, d...) })
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	allowed := func(kind string, n int, at time.Time) int {
		got := 0
		for range n {
			if f.allow(kind, at) {
				got++
			}
		}
		return got
	}
	if got := allowed("a", 150, t0); got != LimitBurst {
		t.Errorf("a burst of 150 let %d through, want %d", got, LimitBurst)
	}
	if !f.armed {
		t.Error("a drop armed no timer")
	}
	if got := allowed("b", 5, t0); got != 5 {
		t.Errorf("another kind let %d of 5 through", got)
	}
	// LimitPerMinute a minute come back: one every 6 s.
	if got := allowed("a", 10, t0.Add(13*time.Second)); got != 2 {
		t.Errorf("13 s later, %d of 10 went through, want 2", got)
	}
	f.flush() // what the timer runs
	if want := []Dropped[string]{{Kind: "a", Count: 58, Since: t0}}; !reflect.DeepEqual(written, want) {
		t.Errorf("the timer wrote %+v, want %+v", written, want)
	}
	f.flush()
	if len(written) != 1 {
		t.Errorf("the timer wrote again: %+v", written[1:])
	}
	// An hour later the burst is back whole, and no more.
	if got := allowed("a", 150, t0.Add(time.Hour)); got != LimitBurst {
		t.Errorf("an hour later %d of 150 went through, want %d", got, LimitBurst)
	}
	f.Close()
	if len(written) != 2 || written[1].Count != 50 {
		t.Errorf("Close wrote %+v, want 50 of a", written[1:])
	}
	if !f.Allow("a") {
		t.Error("after Close a record was dropped")
	}
	f.flush() // a timer that fired as Close ran
	f.Close()
	if len(written) != 2 {
		t.Errorf("after Close: %+v", written[2:])
	}

	// Kinds past limitKinds count as the zero kind.
	many := NewFlood(func([]Dropped[int]) {})
	for i := range limitKinds + 10 {
		many.allow(i+1, t0)
	}
	if n := len(many.kinds); n != limitKinds+1 {
		t.Errorf("%d kinds kept, want %d", n, limitKinds+1)
	}
	many.Close()
}
