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
	p("  does), puts the value in place of the placeholder the client sends, and forwards the request\n")
	p("  with `httputil.ReverseProxy` over its own TLS connections to the upstream.\n\n")
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
const interceptNotes = `**Where the interception's time goes, and what would win some of it back.** From CPU profiles
of the proxy alone (` + "`proxybench proxy --server DIR --cpuprofile FILE ...`" + ` under
` + "`proxybench intercept --only intercept`" + `), an allocation profile (its ` + "`--pprof`" + `) and A/B runs of
patched builds of the helper against one test server (2 runs of 2 rounds each, interleaved; the
machine was shared with other work, so the ranges are wide). **The three patches are in proxy/
since commit 7c2a586, and the measurements above were made with them** (the first run, before
them, had 0.59×, 0.11× and 0.69×). Proxy CPU per intercepted request at keep-alive concurrency
1 / 16 (through a tunnel: about 40 / 19 µs), and intercepted / tunnel requests/s at 16:

| build | proxy µs per request, c=1 / c=16 | requests/s vs tunnel, c=16 |
|---|---:|---:|
| before the patches | 139–148 / 311–326 | 0.10–0.12× |
| + 64 idle upstream connections per host | 149–159 / 95–120 | 0.31–0.37× |
| + pooled copy buffers, one Replacer per credential | 133–137 / 70–72 | 0.38–0.42× |
| + no FlushInterval | 116–120 / 59–68 | 0.37–0.56× |

- **Upstream connections, 8 idle per host.** Interceptions share the proxy's http.Transport
  (` + "`gp.Tr`" + ` in proxy/server.go: ` + "`MaxIdleConnsPerHost: 8`" + `, ` + "`MaxIdleConns: 64`" + `). With more than 8 requests
  in flight to one host, each response beyond the 8th idle connection closes its upstream
  connection and a later request opens a new one: a full TLS handshake (X25519MLKEM768 key share,
  ECDSA verification) per request, half of the proxy's CPU at concurrency 16. Fix: 64 per host and
  256 in all (MaxTunnels bounds the connections in use anyway), or a Transport of the
  interceptions' own with those limits.
- **A fresh 32 KiB buffer per response.** ReverseProxy has no BufferPool, so it makes a 32 KiB copy
  buffer for every response: 75% of the bytes allocated; with GOGC=50 the garbage collector took
  about a fifth of the proxy's CPU. substitute's strings.NewReplacer per request was the next 6%.
  Fix: ` + "`BufferPool`" + ` lending the tunnels' pooled 32 KiB buffers (copyBuffers in proxy/tunnel.go), and a
  Replacer made once per credential in compileCredentials (a new one only when a request carries
  two credentials). GOGC=400 instead gave about the same gain but doubled the peak RSS, to 29 MiB.
- **FlushInterval -1.** For a negative FlushInterval, ReverseProxy starts for every response a
  timer goroutine (time.AfterFunc(-1, ...)) that at once flushes the headers in a TLS record and a
  write(2) of their own, then flushes after every body write: 15% of the proxy's CPU at
  concurrency 1. ReverseProxy flushes every write at once anyway for server-sent events and for
  responses without a Content-Length (streamed completions), so leaving FlushInterval at 0 keeps
  streaming as it is (the SSE test in proxy/intercept_test.go passes).
- **What is left** is the work of any HTTP-terminating proxy: system calls (about 40%: one read
  and one write each way per request, as for a tunnel, but through TLS records), net/http's
  server and Transport (parsing, Request.Clone, header maps; three goroutines per request, the
  connection's and the Transport's writeLoop and readLoop, handing the request over through the
  proxy's one P), the audit record (5%) and the rest of the garbage (7%). GOMAXPROCS=2 did not
  help (more CPU per request, the same throughput). A further step, not tried: pin one upstream
  connection to each intercepted client connection and relay each request and response in the
  connection's own goroutine (http.ReadRequest, substitute, Request.Write, http.ReadResponse,
  Response.Write), as goproxy's MITM does, which removes the Transport's goroutines and pool.
- **Why the target is out of reach on this benchmark.** A tunnel moves the encrypted bytes with a
  read and a write each way; the interception decrypts, parses, re-encrypts and forwards them,
  both ways. On loopback, with client, server and proxy sharing 2 CPUs and nothing waiting on a
  network, requests/s is set by CPU per request: even 60 µs per request at concurrency 16, next
  to the client's and server's 40–50 µs, cannot reach 80% of a tunnel that costs 19. Large
  responses are bound by AES-GCM twice more per byte. New connections cost the same (the proxy's
  own connection to the upstream is already open, so one TLS handshake either way). Against a real
  LLM API, whose first byte takes hundreds of milliseconds, the tenth of a millisecond the proxy
  adds per request is noise; the concurrency-16 collapse from the connection pool is the one
  finding that would show there, as extra handshakes to the provider.`
