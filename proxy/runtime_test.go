package proxy

import (
	"runtime"
	"runtime/debug"
	"testing"
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
