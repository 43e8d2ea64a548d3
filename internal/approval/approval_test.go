package approval

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestFileDecideWait(t *testing.T) {
	s := &Store{Dir: t.TempDir(), Poll: 5 * time.Millisecond}
	r, err := s.File(Request{Pod: "p", Kind: KindNetwork, What: "CONNECT a.test:443", Rule: "a.test"})
	if err != nil {
		t.Fatal(err)
	}
	if !idPattern.MatchString(r.ID) || r.ID[:4] != "net-" {
		t.Fatalf("id %q", r.ID)
	}
	pending, _ := s.Pending()
	if len(pending) != 1 || pending[0].What != "CONNECT a.test:443" {
		t.Fatalf("pending %+v", pending)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		if err := s.Decide(Decision{ID: r.ID, Approve: true, By: "me@host"}); err != nil {
			t.Error(err)
		}
	}()
	d, err := s.Wait(context.Background(), r.ID, 5*time.Second)
	if err != nil || !d.Approve || d.For != ForOnce || d.By != "me@host" {
		t.Fatalf("decision %+v %v", d, err)
	}
	if pending, _ := s.Pending(); len(pending) != 0 {
		t.Errorf("still pending after the decision: %+v", pending)
	}
	// A decided request cannot be decided again.
	if err := s.Decide(Decision{ID: r.ID, Approve: true}); !errors.Is(err, ErrNotPending) {
		t.Errorf("second decision: %v", err)
	}
}

func TestWaitTimesOut(t *testing.T) {
	s := &Store{Dir: t.TempDir(), Poll: 5 * time.Millisecond}
	r, _ := s.File(Request{Pod: "p", Kind: KindGator, What: "push_branch o/r agent/x"})
	if _, err := s.Wait(context.Background(), r.ID, 30*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Wait: %v", err)
	}
	if err := s.Decide(Decision{ID: r.ID, Approve: true}); !errors.Is(err, ErrNotPending) {
		t.Errorf("a decision after the timeout: %v", err)
	}
}

func TestDecideRefusesBadInput(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	for _, d := range []Decision{{ID: "../../etc/passwd", Approve: true}, {ID: "net-0000000g"}, {ID: "net-00000000", Approve: true, For: "ever"}} {
		if err := s.Decide(d); err == nil {
			t.Errorf("Decide(%+v) accepted", d)
		}
	}
	if _, err := s.File(Request{Kind: "other"}); err == nil {
		t.Error("a request of an unknown kind was filed")
	}
}
