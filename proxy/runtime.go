package proxy

import (
	"runtime"
	"runtime/debug"
)

// Runtime settings for a process that runs the proxy and little else (see
// TuneRuntime).
const (
	// RuntimeMaxProcs is GOMAXPROCS. The proxy's work is system calls with
	// short bursts of Go in between: with more than one P, nearly every
	// wake-up of a goroutine also wakes an idle thread that finds nothing
	// to do (futex and scheduler work that cost about a fifth of the CPU
	// per tunnel), and one P does not make the work slower, since read(2)
	// and write(2) on a socket do not wait (squid runs one worker too).
	RuntimeMaxProcs = 1
	// RuntimeGCPercent is GOGC: the proxy's live heap is small (a few KiB
	// per tunnel), so the default's 4 MiB minimum heap goal is most of its
	// memory under load; 50 halves that for about 1% of CPU.
	RuntimeGCPercent = 50
)

// TuneRuntime sets GOMAXPROCS to RuntimeMaxProcs and the GC percentage to
// RuntimeGCPercent, each unless getenv (os.Getenv) says that the
// environment sets it (GOMAXPROCS, GOGC). It returns a function that puts
// the previous settings back.
func TuneRuntime(getenv func(string) string) (restore func()) {
	procs, gc := -1, -1
	if getenv("GOMAXPROCS") == "" {
		procs = runtime.GOMAXPROCS(RuntimeMaxProcs)
	}
	if getenv("GOGC") == "" {
		gc = debug.SetGCPercent(RuntimeGCPercent)
	}
	return func() {
		if procs > 0 {
			runtime.GOMAXPROCS(procs)
		}
		if gc != -1 {
			debug.SetGCPercent(gc)
		}
	}
}
