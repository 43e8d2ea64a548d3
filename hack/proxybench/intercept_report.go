package main

import (
	"fmt"
	"strings"
)

// The report's section on credential interception (proxybench intercept's
// JSON), and its rows in the targets table.

// interceptKindText names a measurement in the tables.
func interceptKindText(ic *interceptOutput, kind string, conc int) string {
	switch kind {
	case kindKeepAlive:
		return fmt.Sprintf("requests/s, keep-alive, %s responses, concurrency %d", humanBytes(int64(ic.Config.SmallBytes)), conc)
	case kindBulk:
		return fmt.Sprintf("MB/s, keep-alive, %s responses, concurrency %d", humanBytes(ic.Config.BulkBytes), conc)
	case kindNewConn:
		return "new connections/s (CONNECT, TLS, one request), one after another"
	}
	return kind
}

// interceptVerdicts are the targets rows: intercepted throughput ≥ 80% of
// the tunnel's, for each keep-alive concurrency and the large responses.
func interceptVerdicts(ic *interceptOutput) []verdict {
	var out []verdict
	for _, st := range ic.Config.stepsFromJSON() {
		metric := "per_sec"
		switch st.kind {
		case kindBulk:
			metric = "mb_per_s"
		case kindNewConn:
			continue // latency, not throughput: in the section's table
		}
		r := findInterceptRatio(ic, st.kind, st.conc, metric)
		t := findInterceptSummary(ic, st.kind, variantTunnel, st.conc)
		i := findInterceptSummary(ic, st.kind, variantIntercept, st.conc)
		if r == nil || t == nil || i == nil || r.N == 0 {
			continue
		}
		what := fmt.Sprintf("credential interception: requests/s ≥ 80%% of a tunnel's (keep-alive, concurrency %d)", st.conc)
		detail := fmt.Sprintf("%.2f× (rounds %.2f–%.2f); medians %.0f vs %.0f/s; proxy CPU per request %.0f vs %.0f µs",
			r.Median, r.Lo, r.Hi, i.PerSec, t.PerSec, i.ProxyUSPerReq, t.ProxyUSPerReq)
		if st.kind == kindBulk {
			what = fmt.Sprintf("credential interception: MB/s ≥ 80%% of a tunnel's (%s responses)", humanBytes(ic.Config.BulkBytes))
			detail = fmt.Sprintf("%.2f× (rounds %.2f–%.2f); medians %.0f vs %.0f MB/s", r.Median, r.Lo, r.Hi, i.MBps, t.MBps)
		}
		out = append(out, verdict{what, metText(r.Median >= interceptTarget && i.Errors == 0 && t.Errors == 0), detail})
	}
	return out
}

// stepsFromJSON is steps() for a config read back from JSON (whose
// durations are text).
func (cfg interceptConfig) stepsFromJSON() []interceptStep {
	var steps []interceptStep
	for _, n := range cfg.Concurrency {
		steps = append(steps, interceptStep{kind: kindKeepAlive, conc: n})
	}
	if cfg.BulkBytes > 0 && cfg.BulkConc > 0 {
		steps = append(steps, interceptStep{kind: kindBulk, conc: cfg.BulkConc})
	}
	if cfg.NewConnFor != "" && cfg.NewConnFor != "0s" {
		steps = append(steps, interceptStep{kind: kindNewConn, conc: 1})
	}
	return steps
}

func renderIntercept(b *strings.Builder, ic *interceptOutput, m *machineInfo) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	cfg := ic.Config
	steps := cfg.stepsFromJSON()
	p("## Credential interception: an intercepted host against a tunnel\n\n")
	p("What putting a credential in costs ([credentials.md](credentials.md)): the issue's target is\n")
	p("that interception costs at most 20%% of a tunnel's throughput (intercepted ≥ %.0f%% of tunnel).\n", 100*interceptTarget)
	p("One devaipod proxy (a second `devaipod-helper proxy`, as above plus one credential) and one\n")
	p("upstream, the test server's HTTPS port, reached two ways:\n\n")
	p("- **tunnel**: `CONNECT %s:%d`, which no credential is bound to: an opaque tunnel; the client\n", cfg.TunnelHost, cfg.Port)
	p("  does TLS with the upstream (trusting the upstream's CA only) and sends `Authorization: Bearer`\n")
	p("  with the real value, as a client holding the key would.\n")
	p("- **intercepted**: `CONNECT %s:%d`, which the credential `%s` is bound to\n", cfg.InterceptHost, cfg.Port, credName)
	p("  (`--credential %s=PLACEHOLDER@%s:%d`): the proxy terminates TLS with a certificate of its pod\n", credName, cfg.InterceptHost, cfg.Port)
	p("  CA (the client trusts that CA only, fetched from `GET /devaipod/ca.pem` as the agent's init\n")
	p("  does), puts the value in place of the placeholder the client sends, and relays the request\n")
	p("  over its own pooled TLS connections to the upstream (proxy/intercept.go).\n\n")
	p("The upstream serves `/auth/...` only to `Authorization: Bearer VALUE` (401 otherwise, which stops\n")
	p("the run), so every intercepted request measured carried the value, and none the placeholder. The\n")
	p("tunnel's address needs no name resolution at the proxy, which favours the tunnel slightly. Checks\n")
	p("before measuring:\n\n")
	p("| path | check | wanted | got |\n|---|---|---|---|\n")
	for _, c := range ic.Checks {
		p("| %s | %s | %s | %s |\n", c.Target, c.What, c.Want, c.Got)
	}
	p("\n")
	p("Each round measures each path in turn (the order alternating round by round): requests over\n")
	p("keep-alive connections, each of concurrency %s clients on one connection in a loop, for %s\n", joinInts(cfg.Concurrency), cfg.Duration)
	p("after %s of warm-up; the same with %s responses (concurrency %d); and new connections one after\n", cfg.Warmup, humanBytes(cfg.BulkBytes), cfg.BulkConc)
	p("another for %s (dial, CONNECT, TLS handshake, one GET, close); rounds: %d. Ratios are\n", cfg.NewConnFor, cfg.Rounds)
	p("intercepted / tunnel, for rates the median (and range) of the per-round ratios, for times to first\n")
	p("byte the ratio of the percentiles over all rounds. Time to first byte is from writing the request\n")
	p("on an open connection, or from the dial for a new one, to the first byte of the answer. Measured\n")
	p("with (ports and paths vary):\n\n")
	p("```\ndevaipod-helper proxy --listen tcp:127.0.0.1:PORT --pod bench-cred --policy-file FILE \\\n    %s\n", m.InterceptArgs)
	p("proxybench intercept --server $TMP/server --proxy devaipod-cred=127.0.0.1:PORT@PID \\\n")
	p("    --intercept-host %s --tunnel-host %s --conc %s --rounds %d --warmup %s --duration %s \\\n",
		cfg.InterceptHost, cfg.TunnelHost, strings.ReplaceAll(joinInts(cfg.Concurrency), ", ", ","), cfg.Rounds, cfg.Warmup, cfg.Duration)
	p("    --newconn-duration %s --small %d --bulk-size %d --bulk-conc %d --out $TMP/intercept.json\n```\n\n",
		cfg.NewConnFor, cfg.SmallBytes, cfg.BulkBytes, cfg.BulkConc)
	if ic.Elapsed != "" {
		p("The measurements took %s.\n\n", ic.Elapsed)
	}

	// Throughput.
	p("### Throughput\n\n")
	p("| | tunnel (median) | intercepted (median) | intercepted / tunnel | ≥ %.0f%%? |\n|---|---:|---:|---:|---|\n", 100*interceptTarget)
	for _, st := range steps {
		t := findInterceptSummary(ic, st.kind, variantTunnel, st.conc)
		i := findInterceptSummary(ic, st.kind, variantIntercept, st.conc)
		metric := "per_sec"
		if st.kind == kindBulk {
			metric = "mb_per_s"
		}
		r := findInterceptRatio(ic, st.kind, st.conc, metric)
		if t == nil || i == nil || r == nil {
			continue
		}
		tv, iv := t.PerSec, i.PerSec
		if st.kind == kindBulk {
			tv, iv = t.MBps, i.MBps
		}
		target := metText(r.Median >= interceptTarget)
		if st.kind == kindNewConn {
			target = "(latency; below)"
		}
		p("| %s | %.0f | %.0f | %.2f× (rounds %.2f–%.2f) | %s |\n", interceptKindText(ic, st.kind, st.conc), tv, iv, r.Median, r.Lo, r.Hi, target)
	}
	p("\n")

	// Time to first byte.
	p("### Time to first byte\n\n")
	p("| | tunnel p50 / p99 (ms) | intercepted p50 / p99 (ms) | intercepted / tunnel p50 / p99 |\n|---|---:|---:|---:|\n")
	for _, st := range steps {
		t := findInterceptSummary(ic, st.kind, variantTunnel, st.conc)
		i := findInterceptSummary(ic, st.kind, variantIntercept, st.conc)
		r50 := findInterceptRatio(ic, st.kind, st.conc, "ttfb_p50")
		r99 := findInterceptRatio(ic, st.kind, st.conc, "ttfb_p99")
		if t == nil || i == nil || r50 == nil || r99 == nil {
			continue
		}
		var what string
		switch st.kind {
		case kindKeepAlive:
			what = fmt.Sprintf("a request on an open connection, concurrency %d", st.conc)
			if st.conc == 1 {
				what += " (no load)"
			}
		case kindBulk:
			what = fmt.Sprintf("a %s response on an open connection", humanBytes(cfg.BulkBytes))
		case kindNewConn:
			what = "a new connection: dial, CONNECT, TLS handshake, request"
		}
		p("| %s | %.3f / %.3f | %.3f / %.3f | %.2f× / %.2f× |\n", what, t.TTFBP50MS, t.TTFBP99MS, i.TTFBP50MS, i.TTFBP99MS, r50.Median, r99.Median)
	}
	p("\n")

	// CPU.
	p("### CPU per request\n\n")
	p("| | proxy (µs): tunnel / intercepted | client + server (µs): tunnel / intercepted | CPUs busy (ours + other): tunnel / intercepted | requests / errors: tunnel / intercepted |\n|---|---:|---:|---:|---:|\n")
	for _, st := range steps {
		t := findInterceptSummary(ic, st.kind, variantTunnel, st.conc)
		i := findInterceptSummary(ic, st.kind, variantIntercept, st.conc)
		if t == nil || i == nil {
			continue
		}
		p("| %s | %.0f / %.0f | %.0f / %.0f | %.2f + %.2f / %.2f + %.2f | %d / %d, %d / %d |\n", interceptKindText(ic, st.kind, st.conc),
			t.ProxyUSPerReq, i.ProxyUSPerReq, t.ClientUSPerReq+t.ServerUSPerReq, i.ClientUSPerReq+i.ServerUSPerReq,
			t.CoresBusy, t.OtherCores, i.CoresBusy, i.OtherCores, t.Requests, t.Errors, i.Requests, i.Errors)
	}
	p("\n")
	for _, st := range steps {
		for _, v := range interceptVariants {
			if s := findInterceptSummary(ic, st.kind, v, st.conc); s != nil && s.FirstError != "" {
				p("First error (%s, %s): `%s`\n\n", v, interceptKindText(ic, st.kind, st.conc), s.FirstError)
			}
		}
	}
	if ic.MemAfter.HWMKB > 0 {
		p("The intercepting proxy's peak RSS (VmHWM) after all of this: %s.\n\n", mib(ic.MemAfter.HWMKB))
	}
	p("%s\n\n", interceptNotes)
}

// interceptNotes are the findings of profiling the interception (by hand,
// as analysisNotes); update them when proxy/intercept.go changes.
const interceptNotes = `**Where the interception's time goes, and what was done about it.** From CPU profiles of
the proxy alone (` + "`proxybench proxy --server DIR --cpuprofile FILE ...`" + ` under
` + "`proxybench intercept --only intercept`" + `), ` + "`strace -c`" + ` of the helper, and A/B runs of builds of the helper
against one test server (` + "`proxybench intercept`" + `, 3 rounds each, builds interleaved). The machine
was shared with other engineers' builds and e2e runs (load average 6 to 14) while they ran, so
requests/s and its ratios scattered widely; *proxy CPU per request* scattered least. Per build,
the range over its runs (µs per request at keep-alive concurrency 1 / 16, per 1 MiB answer; a
tunnel in the same runs: 61–129 / 30–52 / 560–1010):

| build | proxy µs, c=1 / c=16 / 1 MiB | intercepted / tunnel: c=1, c=16, 1 MiB |
|---|---:|---:|
| http.Server + httputil.ReverseProxy + http.Transport (with the three fixes of 7c2a586: 64 idle upstream connections per host, pooled copy buffers and one Replacer per credential, no FlushInterval) | 137–201 / 104–159 / 1675–2137 | 0.44–1.04, 0.38–0.53, 0.56–0.65 (8 runs) |
| the relay (ba01789) | 120–233 / 70–93 / 1778–2067 | 0.63–1.10, 0.60–0.65, 0.58–0.76 (2 runs) |
| + corked large answers, no liveness look at a just-used upstream connection (4c3038c, 76f8912) | 95–171 / 64–107 / 1473–2299 | 0.68–1.17, 0.38–0.91, 0.53–0.78 (7 runs) |
| + upstream reads through pooled buffers (fcbb493) | 131–140 / 81–86 / 1235–1433 | 1.06–1.24, 0.62–0.63, 0.72–0.84 (2 runs) |

- **Four goroutines per request.** The http.Server read each request in the connection's
  goroutine, started a background read (to notice a client that hangs up) for the handler's
  time, and ReverseProxy's round trip went through the Transport's writeLoop and readLoop
  goroutines, with the request and the answer handed over through channels, each hand-off a
  wake-up on the proxy's one P. Now the connection's goroutine does it all
  (` + "`interception.serveOne`" + `): http.ReadRequest (the server's limits and checks: head size, Host,
  header validity, HTTP/1.x, Expect), the credentials, Request.Write (hop-by-hop headers removed
  as ReverseProxy does) on a TLS connection from a pool of the interceptions' own
  (` + "`proxy/upstream.go`" + `: 64 idle per host, 256 in all, TLS sessions resumed), http.ReadResponse, the
  answer written back. Its system calls are now those of a tunnel (` + "`strace -c`" + `: per request a read
  and a write each way, about one read that finds nothing yet; the audit lines go in batches), and
  its CPU per request at concurrency 16 fell by about a third. What the goroutines did is kept:
  a client that hangs up while its request waits on the upstream is watched for after 50 ms (a
  goroutine only for slow answers) and cancels the upstream request; an upgrade (101) joins the
  two connections; 1xx answers are passed on; 100-continue is answered when the body is read.
- **A liveness look per request.** The pool looks at a connection before reusing it (a
  recvfrom with MSG_PEEK: a server that closed an idle connection left its FIN there), where the
  Transport's readLoop would have seen it; that was one system call per request, 4% of the CPU
  at concurrency 16. A connection idle for less than 250 ms is taken as it is (a GET is sent
  again on a new one if it was closed after all, as the Transport does).
- **A write per TLS record.** A 1 MiB answer arrives as 16 KiB TLS records; written on at once,
  each was a write(2) to the client. While more waits in the upstream's socket, the records now
  pile up under the client's TLS and go in one write (never while a read would wait, so
  server-sent events still go out as they come); and the upstream socket is read through the
  tunnels' pooled buffers (512 KiB once a read fills 32 KiB), a read(2) per up to 512 KiB rather
  than per record or two, which also tells, without a system call, that more is waiting.
- **Heads read and written in place** (the plain subset, proxy/plainhead.go). net/http's
  ReadRequest and Request.Write, ReadResponse and the relay's writeHead built header maps and
  strings for every request and answer, a third of the proxy's CPU at concurrency 16. A head
  that has arrived whole and is in a narrow, unambiguous subset of HTTP/1.1 (what clients and
  APIs send: CRLF line ends, token names, printable values, one canonical Content-Length, no
  Transfer-Encoding on a request, no Expect, Upgrade or Connection option but close and
  keep-alive) is now checked and written on line by line, with the hop-by-hop headers left out
  and the credentials put in; the rest, and every refusal, still goes through net/http.
  FuzzPlainRequest and FuzzPlainResponse check that net/http reads whatever the subset takes
  alike, and that the upstream reads what the relay writes as what the parsed path would have
  written. A/B on a quiet 2-CPU machine, 3 runs of 4 rounds: proxy CPU per request at
  concurrency 16 44–47 → 33–34 µs, the ratio 0.57–0.72 → 0.74–0.77.
- **A second P while two requests are in the proxy at once** (` + "`proxy.AdaptMaxProcs`" + `,
  2026-12-01, builds of the helper with the plain subset interleaved, 2–5 runs of 4–9 rounds
  each). With the heads read in place, GOMAXPROCS=2 costs an intercepted request no more proxy
  CPU (32–35 µs at concurrency 16 with one P or two), and the client's and server's CPU per
  request falls back to what it is through a tunnel (about 50–55 µs against 63–70 with one P:
  on one P they wait for the proxy to get round to their connection, and sleep and are woken
  more often for it). But with one request at a time (a 1 MiB answer, relayed by one
  goroutine) the idle second P's thread is woken for nothing (about ten times the futex calls
  per answer, strace -c), and tunnels cost about 10% more proxy CPU. Intercepted / tunnel,
  medians of rounds per run:

  | Ps | keep-alive, concurrency 16 | 1 MiB answers |
  |---|---|---|
  | one | 0.70–0.80 | 0.78–0.85 |
  | two | 0.77–0.88 | 0.70–0.82 |
  | two while two intercepted requests or more were in progress at once in the last 50 ms, else one | 0.77–0.86 | 0.80–0.91 |

  The proxy with credentials adapts (the helper runs ` + "`proxy.AdaptMaxProcs`" + ` unless
  GOMAXPROCS is set); one without keeps one P. GOMAXPROCS changes at most every 50 ms, when
  the load does (each change stops the world for a moment). The tunnel measured here, on the
  proxy with a credential, stays on one P: no intercepted request is in progress meanwhile.
- **A plain head's lines read once** (2026-12-06). Profiles (perf) at concurrency 16 put
  about 15 µs of Go per intercepted request over a tunnel's, with the system calls alike
  (per request, through either: about 1.9 writes, 3.7 reads, 0.6 epoll waits), and spread
  thin: a request head was cut into lines three times (parsed, searched for placeholders,
  written) and an answer's twice, and a request cost about 820 bytes of allocation (an
  http.Request, the placeholders converted to bytes per header, values and substituted values
  as strings). The lines are now read once into a slice the connection reuses, and a carried
  credential is written into its value in place: about 170 bytes per request (the exchange and
  its audit record). A/B of the helper, 5 interleaved runs of 3 rounds each on a quiet 2-CPU
  machine: proxy CPU per request at concurrency 16 45–51 → 42–51 µs (tunnels in the same runs
  25–31), intercepted / tunnel 0.78–0.85 (median 0.81) → 0.82–0.90 (median 0.87).
- **What is left** is what terminating TLS and HTTP costs over moving bytes: TLS records
  decrypted and encrypted again both ways (AES-GCM was about a fifth of the proxy's CPU on
  1 MiB answers), the checks of the heads, the audit record of every request (a JSON line).
  System calls are about 60% of the proxy's CPU, as for a tunnel. On loopback, with client,
  server and proxy sharing 2 CPUs, requests/s at concurrency 16 is set by the CPU all three
  spend per request; at concurrency 1 by the time the proxy adds to each round trip. Against a
  real LLM API, whose first byte takes hundreds of milliseconds, the tens of microseconds the
  proxy adds per request are noise.
- **Answers masked** (2026-12-03: the values of the bound credentials are masked in their
  hosts' answers, and every intercepted request asks for ` + "`Accept-Encoding: identity`" + `;
  see [credentials.md](credentials.md)). The benchmark's answers are binary
  (application/octet-stream), so only their heads are searched. A/B against the build before,
  on a quiet 2-CPU machine (` + "`proxybench intercept`" + `, 5 or 7 rounds a run, 11 runs of each
  build, the order alternated; the medians of the runs' ratios, and their range):
  intercepted / tunnel at concurrency 1 0.89 (0.77–0.95) before, 0.85 (0.80–0.93) after; at 16
  (8 runs) 0.83 (0.81–0.88) and 0.82 (0.77–0.88); 1 MiB answers 0.82 (0.76–0.92) and 0.79
  (0.70–0.91), a build without the Accept-Encoding rewrite 0.77–0.92 (3 runs). The proxy CPU
  per 1 MiB answer was the same (1180–1810 µs before, 1190–1900 after): what differs is within
  the noise.
  A text answer's body is searched too: ` + "`BenchmarkAnswerMask`" + ` masks 1 MiB of JSON in about
  140 µs (7.5 GB/s), a tenth of what relaying it costs the proxy.
- **Audit lines in batches.** Each request's audit line was a write(2) of its own, the one
  system call a tunnel does not pay per request (two in a pod, where the lines also go to the
  container's stdout and each write wakes conmon). The proxy now writes them in batches: at most
  10 ms after the first line waiting, at once past 32 KiB, and everything waiting when it stops;
  a proxy killed with SIGKILL loses at most its last 10 ms of lines. A/B, 3 runs each at
  concurrency 16: about 1.5–2 µs less proxy CPU per intercepted request, +0.02–0.03 on the ratio.
- **Fewer timers per request** (2babc28). A head that has arrived whole is read with no
  deadline of its own (one timer update per request rather than three); the Host a connection's
  requests name is checked once. A/B, 9 rounds each on a quiet 2-CPU machine: proxy CPU per
  request 77.9 → 73.2 µs at concurrency 1 (ratio 0.76 → 0.81), 34.0 → 33.5 µs at 16 (0.63 →
  0.64). (The same commit also ended a body of known length at its last byte; a review found
  that net/http's body reader already returns EOF with it, so that part did nothing and is gone.)
- **Where 0.8× at concurrency 16 lay** before the two changes above (2026-11-28, the same
  machine; builds made for the experiment, not shipped; ` + "`proxybench intercept`" + `, 3 rounds of 1 s per run, 2 runs each):

  | build | proxy µs per request, c=1 / c=16 | intercepted / tunnel, c=1 / c=16 |
  |---|---:|---:|
  | the relay as shipped (before and after 2babc28) | 73–78 / 33–34 | 0.76–0.81 / 0.63–0.67 |
  | the same, GOMAXPROCS=2 | 74 / 36 | 0.80–0.83 / 0.71–0.73 |
  | the same (before 2babc28), GOGC=100 | 72 / 32 | 0.81–0.84 / 0.66 |
  | TLS ended and begun again, the bytes relayed both ways in two goroutines, the placeholder replaced in the byte stream (no HTTP at all: the floor of any interception) | about 47 / 19–20 | 0.99–1.01 / 0.84–1.00 |
  | answers relayed as bytes as they are read (http.ReadResponse over a tee, for the framing only), in the relay's one goroutine; the shipped relay in the same runs: 89 / 36 µs, 0.75–0.77 / 0.67–0.69 | 73 / 36 | 0.83–0.96 / 0.63–0.77 |
  | requests read, checked and written again as shipped (deadlines, checkHead, credentials, audit line); answers relayed as bytes, unparsed, in a goroutine of their own, on one upstream connection per client connection | 65 / 27 | 0.81–0.83 / 0.75–0.82 |
  | the same, GOMAXPROCS=2 | 71 / 30 | 0.81–0.85 / 0.80–0.83 |

  Relaying answers unparsed saves nothing at concurrency 16 by itself (the row with the tee);
  the gain of the row after it comes with the goroutine of their own and the upstream
  connection kept for the client connection. TLS itself is cheap (about 2 µs per request both
  ways); HTTP is what costs, and not only its own CPU: with client, server and proxy on 2 CPUs, the busiest process sets the pace and the
  others sleep and are woken for each request. ` + "`perf stat`" + ` at concurrency 16: per request, the
  server was switched out 0.59 times through a tunnel and 1.43 times through the interception,
  the client 0.56 and 1.05 times, so their CPU per request grows with the proxy's. The
  conclusion then was that 0.8× needed answers relayed unparsed in a goroutine of their own;
  the A/B runs of 2026-12-01 (above) found that a head's parse, not the answer's goroutine,
  was what cost (a split relay, answers relayed unparsed in a goroutine of their own, measured
  0.69–0.81 at 32 µs per request with one P and no better with two; the plain subset 33 µs
  with the answers' framing, audit and pool kept).`
