package proxy

import (
	"context"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
	"time"
)

// TestTuneRuntime is not parallel: it changes the process's settings.
func TestTuneRuntime(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	gc := debug.SetGCPercent(100)
	debug.SetGCPercent(gc)
	check := func(what string, wantProcs, wantGC int) {
		t.Helper()
		if p := runtime.GOMAXPROCS(0); p != wantProcs {
			t.Errorf("%s: GOMAXPROCS %d; want %d", what, p, wantProcs)
		}
		g := debug.SetGCPercent(-1)
		debug.SetGCPercent(g)
		if g != wantGC {
			t.Errorf("%s: GC percent %d; want %d", what, g, wantGC)
		}
	}

	restore := TuneRuntime(func(string) string { return "" })
	check("tuned", RuntimeMaxProcs, RuntimeGCPercent)
	restore()
	check("restored", procs, gc)

	env := map[string]string{"GOMAXPROCS": "3", "GOGC": "200"}
	restore = TuneRuntime(func(k string) string { return env[k] })
	check("set by the environment", procs, gc)
	restore()
	check("restored again", procs, gc)

	env = map[string]string{"GOGC": "off"}
	restore = TuneRuntime(func(k string) string { return env[k] })
	check("GOGC set", RuntimeMaxProcs, gc)
	restore()
	check("restored at last", procs, gc)
}

func TestRuntimeEnviron(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		want    []string
		changed bool
	}{
		{"no GODEBUG", []string{"PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=" + RuntimeGODEBUG}, true},
		{"other settings kept", []string{"GODEBUG=http2client=0", "A=b"},
			[]string{"A=b", "GODEBUG=http2client=0," + RuntimeGODEBUG}, true},
		{"empty GODEBUG", []string{"GODEBUG="}, []string{"GODEBUG=" + RuntimeGODEBUG}, true},
		{"already set", []string{"GODEBUG=" + RuntimeGODEBUG}, []string{"GODEBUG=" + RuntimeGODEBUG}, false},
		{"chosen by the user", []string{"GODEBUG=gctrace=1,schedtrace=0"}, []string{"GODEBUG=gctrace=1,schedtrace=0"}, false},
		{"the first GODEBUG counts", []string{"GODEBUG=gctrace=1", "GODEBUG=schedtrace=5"},
			[]string{"GODEBUG=gctrace=1," + RuntimeGODEBUG}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed := RuntimeEnviron(tt.environ)
			if changed != tt.changed || !slices.Equal(got, tt.want) {
				t.Errorf("RuntimeEnviron(%q) = %q, %v; want %q, %v", tt.environ, got, changed, tt.want, tt.changed)
			}
		})
	}
}

// TestAdaptMaxProcs is not parallel: it changes the process's GOMAXPROCS.
func TestAdaptMaxProcs(t *testing.T) {
	procs := runtime.GOMAXPROCS(RuntimeMaxProcs)
	defer runtime.GOMAXPROCS(procs)
	s := &Server{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		AdaptMaxProcs(ctx, s, 20*time.Millisecond)
	}()
	waitProcs := func(what string, want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for runtime.GOMAXPROCS(0) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GOMAXPROCS %d; want %d", what, runtime.GOMAXPROCS(0), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	busy := min(RuntimeBusyMaxProcs, runtime.NumCPU())

	s.startBusy()
	time.Sleep(100 * time.Millisecond)
	if p := runtime.GOMAXPROCS(0); p != RuntimeMaxProcs {
		t.Errorf("one request in progress: GOMAXPROCS %d; want %d", p, RuntimeMaxProcs)
	}
	s.startBusy()
	waitProcs("two at once", busy)
	// Two that overlapped for a moment only, between two looks, count.
	s.busy.Add(-1)
	waitProcs("one left", RuntimeMaxProcs)
	s.startBusy()
	s.busy.Add(-1)
	waitProcs("two for a moment", busy)
	waitProcs("one since", RuntimeMaxProcs)
	s.startBusy()
	waitProcs("two again", busy)
	cancel()
	<-done
	if p := runtime.GOMAXPROCS(0); p != RuntimeMaxProcs {
		t.Errorf("after AdaptMaxProcs: GOMAXPROCS %d; want %d", p, RuntimeMaxProcs)
	}
}
