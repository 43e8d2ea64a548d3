package proxy

import (
	"context"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
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

// RuntimeBusyMaxProcs is GOMAXPROCS while a proxy has two intercepted
// requests or more in progress at once (see AdaptMaxProcs).
const RuntimeBusyMaxProcs = 2

// AdaptMaxProcs sets GOMAXPROCS every period until ctx ends:
// RuntimeBusyMaxProcs (at most the CPUs) if two intercepted requests or
// more were in s at once during the period before, RuntimeMaxProcs if not;
// and RuntimeMaxProcs again when it returns. For a process that runs s and
// little else, whose GOMAXPROCS the environment does not set.
//
// Why: an intercepted request is work in Go on both of its connections.
// On one P, at concurrency 16, the client and the server wait for the proxy
// to get round to their connection, and sleep and are woken more often for
// it: their CPU per request was about a fifth more than through a tunnel,
// and interception reached about 0.75 of a tunnel's requests/s. Two Ps
// cost the proxy no more CPU and took that back, but one request at a time
// (a large answer, relayed by one goroutine) then woke the idle P's thread
// for nothing, and 1 MiB answers fell from about 0.83 of a tunnel to 0.75.
// Adapting to the load measured 0.83 on both (docs/benchmarks-proxy.md).
// Changing GOMAXPROCS stops the world for a moment; it changes at most once
// a period, when the load does.
func AdaptMaxProcs(ctx context.Context, s *Server, period time.Duration) {
	busy := min(RuntimeBusyMaxProcs, runtime.NumCPU())
	current := runtime.GOMAXPROCS(0)
	set := func(n int) {
		if n != current {
			runtime.GOMAXPROCS(n)
			current = n
		}
	}
	defer set(RuntimeMaxProcs)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if s.busyPeak.Swap(s.busy.Load()) >= 2 {
			set(busy)
		} else {
			set(RuntimeMaxProcs)
		}
	}
}

// startBusy counts an intercepted request in progress (busy.Add(-1) ends
// it), and the peak.
func (s *Server) startBusy() {
	n := s.busy.Add(1)
	for p := s.busyPeak.Load(); n > p && !s.busyPeak.CompareAndSwap(p, n); p = s.busyPeak.Load() {
	}
}

// RuntimeGODEBUG is the GODEBUG setting for a process that runs the proxy
// (see RuntimeEnviron). Go's runtime reads GODEBUG only when the process
// starts, so it cannot be set the way TuneRuntime sets the rest.
//
// Why: whenever the proxy's one P has gone idle and the runtime's monitor
// thread (sysmon) has noticed and gone into its deep sleep, the next system
// call that the scheduler is told of (accept, connect, close: the net
// package's) wakes sysmon and resets its tick to 20 µs, from which it backs
// off to 10 ms only after 50 quiet ticks (golang.org/issue/18236). A proxy
// under load goes idle between bursts all the time, so sysmon woke about
// 2,000 times a second and took about a tenth of the proxy's CPU per
// tunnel (perf; about 1 of the proxy's 3 context switches per tunnel). With
// a schedtrace period set, sysmon never takes the deep sleep: it ticks at
// most every 10 ms, under load or idle. The period is the largest the
// runtime takes (about 24.8 days), so the trace line itself is in practice
// never printed. Measured (hack/bench-proxy.sh): about 10% less proxy CPU
// per tunnel at concurrency 16 and 128; the cost is 100 wake-ups a second
// of an idle proxy (about 0.2% of a CPU).
const RuntimeGODEBUG = "schedtrace=2147483647"

// RuntimeEnviron returns environ (os.Environ) with RuntimeGODEBUG added to
// GODEBUG, and true; or environ unchanged and false if GODEBUG already
// names schedtrace (someone chose a value, or the process was started with
// RuntimeEnviron's result already). A proxy's main re-executes itself with
// the result when it is true.
func RuntimeEnviron(environ []string) ([]string, bool) {
	const key = "GODEBUG="
	out := make([]string, 0, len(environ)+1)
	godebug, seen := "", false
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, key); ok {
			if !seen {
				godebug, seen = v, true // the first one counts, as in the runtime
			}
			continue
		}
		out = append(out, kv)
	}
	for _, setting := range strings.Split(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(setting), "schedtrace=") {
			return environ, false
		}
	}
	if godebug != "" {
		godebug += ","
	}
	return append(out, key+godebug+RuntimeGODEBUG), true
}
