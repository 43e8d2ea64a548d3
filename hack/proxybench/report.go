package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
)

// machineInfo is what hack/bench-proxy.sh tells about the machine and the
// run (report --info KEY=VALUE).
type machineInfo struct {
	Date, Uname, CPUs, CPUModel, Memory, GoVersion, SquidVersion    string
	Revision, Command, LoadBefore, LoadAfter, Elapsed, DevaipodArgs string
	SquidConf, InterceptArgs                                        string
}

func (m *machineInfo) fields() map[string]*string {
	return map[string]*string{
		"date": &m.Date, "uname": &m.Uname, "nproc": &m.CPUs, "cpu": &m.CPUModel, "memory": &m.Memory,
		"go": &m.GoVersion, "squid": &m.SquidVersion, "revision": &m.Revision, "command": &m.Command,
		"load_before": &m.LoadBefore, "load_after": &m.LoadAfter, "elapsed": &m.Elapsed,
		"devaipod_args": &m.DevaipodArgs, "intercept_args": &m.InterceptArgs,
	}
}

func infoKeys() []string {
	var m machineInfo
	var keys []string
	for k := range m.fields() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func machineFrom(kv map[string]string) *machineInfo {
	m := &machineInfo{}
	for k, p := range m.fields() {
		*p = kv[k]
		if *p == "" {
			*p = "?"
		}
	}
	return m
}

// Target thresholds of the issue.
const (
	bulkTarget = 0.90 // of direct
	rssTarget  = 0.50 // of squid
)

type verdict struct {
	what, result, detail string
}

func metText(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}

func cmdReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	runFile := fs.String("run", "", "proxybench run's JSON")
	soakFile := fs.String("soak", "", "proxybench soak's JSON (optional)")
	var info listFlag
	fs.Var(&info, "info", "`KEY=VALUE` about the machine and the run (repeatable): "+strings.Join(infoKeys(), ", "))
	squidConf := fs.String("squid-conf", "", "squid's configuration `FILE`, quoted in the report")
	interceptFile := fs.String("intercept", "", "proxybench intercept's JSON (optional)")
	out := fs.String("out", "", "write Markdown to `FILE`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *runFile == "" || *out == "" {
		return errors.New("need --run and --out")
	}
	var run runOutput
	if err := readJSON(*runFile, &run); err != nil {
		return err
	}
	fields := map[string]string{}
	for _, kv := range info {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--info %q: want KEY=VALUE", kv)
		}
		fields[k] = strings.TrimSpace(v)
	}
	m := machineFrom(fields)
	if *squidConf != "" {
		b, err := os.ReadFile(*squidConf)
		if err != nil {
			return err
		}
		m.SquidConf = string(b)
	}
	var soak *soakOutput
	if *soakFile != "" {
		soak = &soakOutput{}
		if err := readJSON(*soakFile, soak); err != nil {
			return err
		}
	}
	var ic *interceptOutput
	if *interceptFile != "" {
		ic = &interceptOutput{}
		if err := readJSON(*interceptFile, ic); err != nil {
			return err
		}
	}
	md := renderReport(&run, soak, ic, m)
	tmp := *out + ".tmp"
	if err := os.WriteFile(tmp, []byte(md), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, *out)
}

func findSummary(run *runOutput, target string, conc int) *loadSummary {
	for i := range run.Summary {
		if s := &run.Summary[i]; s.Target == target && s.Concurrency == conc {
			return s
		}
	}
	return nil
}

func findBulk(run *runOutput, target string) *bulkSummary {
	for i := range run.BulkSum {
		if b := &run.BulkSum[i]; b.Target == target {
			return b
		}
	}
	return nil
}

// pairedRatio is the median, min and max over rounds of a's tunnels/s
// over b's in the same round: measured next to each other, so they share
// the machine's state (other load, a slow host), which the plain medians
// do not.
func pairedRatio(run *runOutput, a, b string, conc int) (med, lo, hi float64, n int) {
	byRound := map[int][2]float64{}
	for _, r := range run.Load {
		if r.Concurrency != conc {
			continue
		}
		v := byRound[r.Round]
		switch r.Target {
		case a:
			v[0] = r.PerSec
		case b:
			v[1] = r.PerSec
		}
		byRound[r.Round] = v
	}
	var rs []float64
	for _, v := range byRound {
		if v[0] > 0 && v[1] > 0 {
			rs = append(rs, v[0]/v[1])
		}
	}
	return medianRange(rs)
}

// pairedBulk is pairedRatio for the bulk transfers' MB/s.
func pairedBulk(run *runOutput, a, b string) (med, lo, hi float64, n int) {
	byRep := map[int][2]float64{}
	for _, r := range run.Bulk {
		v := byRep[r.Rep]
		switch r.Target {
		case a:
			v[0] = r.MBps
		case b:
			v[1] = r.MBps
		}
		byRep[r.Rep] = v
	}
	var rs []float64
	for _, v := range byRep {
		if v[0] > 0 && v[1] > 0 {
			rs = append(rs, v[0]/v[1])
		}
	}
	return medianRange(rs)
}

func medianRange(rs []float64) (med, lo, hi float64, n int) {
	if len(rs) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(rs)
	return median(rs), rs[0], rs[len(rs)-1], len(rs)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func mib(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }

func renderReport(run *runOutput, soak *soakOutput, ic *interceptOutput, m *machineInfo) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	const dp, sq, direct = "devaipod", "squid", "direct"

	// ----- verdicts
	var verdicts []verdict
	for _, n := range run.Config.Concurrency {
		d, s := findSummary(run, dp, n), findSummary(run, sq, n)
		if d == nil || s == nil {
			continue
		}
		med, lo, hi, rounds := pairedRatio(run, dp, sq, n)
		if rounds == 0 {
			med, lo, hi = ratio(d.PerSec, s.PerSec), ratio(d.PerSec, s.PerSec), ratio(d.PerSec, s.PerSec)
		}
		ok := med >= 1 && d.Errors == 0
		verdicts = append(verdicts, verdict{
			fmt.Sprintf("tunnels/s at concurrency %d ≥ squid's", n), metText(ok),
			fmt.Sprintf("%.2f× (rounds %.2f–%.2f); medians %.0f vs %.0f/s; proxy CPU per tunnel %.0f vs %.0f µs",
				med, lo, hi, d.PerSec, s.PerSec, d.ProxyUSPerReq, s.ProxyUSPerReq),
		})
	}
	if bd, bdir := findBulk(run, dp), findBulk(run, direct); bd != nil && bdir != nil {
		r, lo, hi, reps := pairedBulk(run, dp, direct)
		if reps == 0 {
			r, lo, hi = ratio(bd.MBps, bdir.MBps), ratio(bd.MBps, bdir.MBps), ratio(bd.MBps, bdir.MBps)
		}
		verdicts = append(verdicts, verdict{fmt.Sprintf("bulk %s ≥ 90%% of direct", humanBytes(run.Config.BulkBytes)),
			metText(r >= bulkTarget && bd.Errors == 0),
			fmt.Sprintf("%.0f%% (transfers %.0f–%.0f%%); medians %.0f vs %.0f MB/s", 100*r, 100*lo, 100*hi, bd.MBps, bdir.MBps)})
	}
	md, ms := run.MemAfter[dp], run.MemAfter[sq]
	if md.HWMKB > 0 && ms.HWMKB > 0 {
		r := ratio(float64(md.HWMKB), float64(ms.HWMKB))
		verdicts = append(verdicts, verdict{"peak RSS ≤ half of squid's", metText(r <= rssTarget),
			fmt.Sprintf("%s vs %s (%.0f%%)", mib(md.HWMKB), mib(ms.HWMKB), 100*r)})
	}
	if soak != nil {
		for _, g := range soak.Growth {
			if strings.Contains(g.What, "threads") || strings.HasPrefix(g.What, "in-process: open fds") {
				continue // shown below, not a target
			}
			verdicts = append(verdicts, verdict{fmt.Sprintf("soak (%s): %s not growing", soak.Duration, g.What), metText(!g.Grows),
				fmt.Sprintf("idle %d before, %d after; under load: peak %d, first-quarter peak %d, last-quarter peak %d",
					g.Before, g.After, g.Max, g.EarlyMax, g.LateMax)})
		}
	} else {
		verdicts = append(verdicts, verdict{"soak: fds and goroutines not growing", "not run", "SOAK=0"})
	}
	if ic != nil {
		verdicts = append(verdicts, interceptVerdicts(ic)...)
	} else {
		verdicts = append(verdicts, verdict{"credential interception: throughput ≥ 80% of a tunnel's", "not run", "INTERCEPT=0"})
	}

	p("# Egress proxy benchmark: devaipod's proxy, squid, no proxy\n\n")
	p("Written by `hack/bench-proxy.sh` (`make bench`); do not edit by hand, run it again.\n")
	p("Last run: %s, revision `%s`, command `%s`, %s in all.\n\n", m.Date, m.Revision, m.Command, m.Elapsed)
	p("devaipod's proxy (`devaipod-helper proxy`, package `proxy/`, built on goproxy; see\n")
	p("[network.md](network.md)), squid (the Debian package, the Rust devaipod's choice) and no\n")
	p("proxy at all, side by side in one run on loopback, with the same allowlist; then what\n")
	p("[credential interception](credentials.md) costs against an opaque tunnel to the same upstream\n")
	p("([below](#credential-interception-an-intercepted-host-against-a-tunnel)).\n\n")

	p("## Targets\n\n| target | result | devaipod vs the reference |\n|---|---|---|\n")
	for _, v := range verdicts {
		p("| %s | %s | %s |\n", v.what, v.result, v.detail)
	}
	p("\n")
	var other float64
	for _, s := range run.Summary {
		other = max(other, s.OtherCores)
	}
	if other > 0.25 {
		p("**Caution:** the machine was not quiet: up to %.2f CPUs were busy with other work during a\n", other)
		p("measurement (see *CPUs busy* below), which lowers and scatters every number; compare the\n")
		p("proxies by *proxy CPU per tunnel*, which background load disturbs least, or run again.\n\n")
	} else {
		p("The machine was quiet: at most %.2f CPUs busy with other work during a measurement.\n\n", other)
	}

	// ----- setup
	p("## What is measured\n\n")
	p("- **The paths.** A test server (`hack/proxybench serve`) on 127.0.0.1 serves HTTPS (TLS 1.3,\n")
	p("  an ECDSA P-256 certificate from its own CA, HTTP/1.1) and plain HTTP; the client reaches it as\n")
	p("  `%s`, either directly (**direct**), or through **devaipod**'s proxy, or through **squid**, each\n", run.Config.Host)
	p("  proxy a separate process listening on 127.0.0.1 (TCP for both, so that they compare; in a pod\n")
	p("  the agent reaches devaipod's proxy through a unix socket).\n")
	p("- **The same allowlist.** Both proxies allow exactly the server's two ports on `%s` (and on\n", run.Config.Host)
	p("  127.0.0.1, which devaipod's proxy needs as address rules to dial a loopback address at all):\n")
	p("  `%s` for devaipod; for squid:\n\n", m.DevaipodArgs)
	p("  ```\n")
	for _, l := range strings.Split(strings.TrimSpace(m.SquidConf), "\n") {
		p("  %s\n", l)
	}
	p("  ```\n\n")
	p("  Before measuring, the run checks that each allows HTTPS by CONNECT and plain HTTP to those\n")
	p("  ports and refuses a port off the list with 403, both ways:\n\n")
	p("  | path | request | wanted | got |\n  |---|---|---|---|\n")
	for _, c := range run.Checks {
		p("  | %s | %s | %s | %s |\n", c.Target, c.What, c.Want, c.Got)
	}
	p("\n")
	p("- **Tunnels per second.** %s workers at a time (each concurrency level in turn), each in a loop:\n", joinInts(run.Config.Concurrency))
	p("  new TCP connection → `CONNECT %s:%d` (direct: a plain connect) → full TLS handshake (Go's\n", run.Config.Host, run.Config.TLSPort)
	p("  crypto/tls defaults, no session resumption) → `GET /small` (%d bytes, `Connection: close`) →\n", smallSize)
	p("  close. So every request is a new tunnel. %d rounds of %s (after %s of warm-up each), the three\n", run.Config.Rounds, run.Config.Duration, run.Config.Warmup)
	p("  paths interleaved and their order rotated every round; the table gives the median round and\n")
	p("  the range, latency percentiles over all rounds' requests (from connect to the last byte).\n")
	p("  The verdict compares devaipod with squid round by round (the median of the per-round\n")
	p("  ratios): two measurements next to each other share the machine's state, which drifts on a\n")
	p("  shared VM by more than the difference between the proxies.\n")
	p("  *Added latency* is the proxy's percentile minus direct's.\n")
	p("- **Bulk.** One tunnel, `GET /bytes?n=%d` (%s of generated bytes, streamed, not a file),\n", run.Config.BulkBytes, humanBytes(run.Config.BulkBytes))
	p("  %d times per path, interleaved; median MB/s (10^6 bytes/s), handshake included; the verdict\n", run.Config.BulkReps)
	p("  is the median of the per-repetition ratios to direct.\n")
	p("- **Peak RSS.** VmHWM of each proxy's process tree from /proc after all of the above (squid runs\n")
	p("  with `-N`: one process).\n")
	p("- **CPU.** utime+stime from /proc for the proxy, the test server and the client over each\n")
	p("  measurement, per request; *other* is the rest of the machine's busy time meanwhile (other\n")
	p("  processes, and the kernel's softirq work, which is where part of loopback TCP runs).\n\n")
	p("**Read the numbers with this in mind:** client, server and proxy share %s CPUs, and the client's\n", m.CPUs)
	p("and server's TLS handshakes cost far more than a proxy's work. At concurrency 16 and above the\n")
	p("machine is saturated, so tunnels/s is set by the CPU all three spend per tunnel: a proxy that\n")
	p("spends more CPU per tunnel leaves less for the client and server. *Proxy CPU per tunnel* is the\n")
	p("number that compares the proxies themselves. Loopback has no network latency: added latency here\n")
	p("is the proxies' own processing and scheduling.\n\n")

	// ----- machine
	p("## Machine\n\n| | |\n|---|---|\n")
	p("| kernel | `%s` |\n| CPUs | %s × %s |\n| memory | %s |\n| Go | %s |\n| squid | %s |\n",
		m.Uname, m.CPUs, m.CPUModel, m.Memory, m.GoVersion, m.SquidVersion)
	p("| load average before / after | %s / %s |\n\n", m.LoadBefore, m.LoadAfter)

	// ----- load
	p("## Tunnels per second and latency\n\n")
	for _, n := range run.Config.Concurrency {
		dir, d, s := findSummary(run, direct, n), findSummary(run, dp, n), findSummary(run, sq, n)
		if dir == nil || d == nil || s == nil {
			continue
		}
		p("### Concurrency %d\n\n", n)
		p("| | direct | devaipod | squid | devaipod / squid |\n|---|---:|---:|---:|---:|\n")
		p("| tunnels/s (median) | %.0f | %.0f | %.0f | %.2f× |\n", dir.PerSec, d.PerSec, s.PerSec, ratio(d.PerSec, s.PerSec))
		pm, plo, phi, _ := pairedRatio(run, dp, sq, n)
		p("| tunnels/s (rounds' range) | %.0f–%.0f | %.0f–%.0f | %.0f–%.0f | per round: %.2f× (%.2f–%.2f) |\n",
			dir.PerSecMin, dir.PerSecMax, d.PerSecMin, d.PerSecMax, s.PerSecMin, s.PerSecMax, pm, plo, phi)
		p("| latency p50 / p99 (ms) | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | |\n",
			dir.P50MS, dir.P99MS, d.P50MS, d.P99MS, s.P50MS, s.P99MS)
		p("| added latency p50 / p99 (ms) | — | %+.2f / %+.2f | %+.2f / %+.2f | |\n",
			d.P50MS-dir.P50MS, d.P99MS-dir.P99MS, s.P50MS-dir.P50MS, s.P99MS-dir.P99MS)
		p("| CONNECT answered p50 / p99 (ms) | — | %.2f / %.2f | %.2f / %.2f | |\n", d.ConnectP50, d.ConnectP99, s.ConnectP50, s.ConnectP99)
		p("| proxy CPU per tunnel (µs) | — | %.0f | %.0f | %.2f× |\n", d.ProxyUSPerReq, s.ProxyUSPerReq, ratio(d.ProxyUSPerReq, s.ProxyUSPerReq))
		p("| client + server CPU per tunnel (µs) | %.0f | %.0f | %.0f | |\n",
			dir.ClientUSPerReq+dir.ServerUSPerReq, d.ClientUSPerReq+d.ServerUSPerReq, s.ClientUSPerReq+s.ServerUSPerReq)
		p("| CPUs busy: ours / other | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | |\n",
			dir.CoresBusy, dir.OtherCores, d.CoresBusy, d.OtherCores, s.CoresBusy, s.OtherCores)
		p("| requests measured / errors | %d / %d | %d / %d | %d / %d | |\n\n",
			dir.Requests, dir.Errors, d.Requests, d.Errors, s.Requests, s.Errors)
		for _, x := range []*loadSummary{dir, d, s} {
			if x.FirstError != "" {
				p("First error (%s): `%s`\n\n", x.Target, x.FirstError)
			}
		}
	}

	// ----- bulk
	bdir, bd, bs := findBulk(run, direct), findBulk(run, dp), findBulk(run, sq)
	if bdir != nil && bd != nil && bs != nil {
		p("## Bulk: %s through one tunnel\n\n", humanBytes(run.Config.BulkBytes))
		p("| | direct | devaipod | squid |\n|---|---:|---:|---:|\n")
		p("| MB/s (median) | %.0f | %.0f | %.0f |\n", bdir.MBps, bd.MBps, bs.MBps)
		p("| MB/s (range) | %.0f–%.0f | %.0f–%.0f | %.0f–%.0f |\n", bdir.MBpsMin, bdir.MBpsMax, bd.MBpsMin, bd.MBpsMax, bs.MBpsMin, bs.MBpsMax)
		dm, _, _, _ := pairedBulk(run, dp, direct)
		sm, _, _, _ := pairedBulk(run, sq, direct)
		p("| of direct (median of the medians' ratio / of per-transfer ratios) | 100%% | %.0f%% / %.0f%% | %.0f%% / %.0f%% |\n",
			100*ratio(bd.MBps, bdir.MBps), 100*dm, 100*ratio(bs.MBps, bdir.MBps), 100*sm)
		p("| proxy CPU per GB (s) | — | %.2f | %.2f |\n", bd.ProxyCPUPerGB, bs.ProxyCPUPerGB)
		p("| failed transfers | %d | %d | %d |\n\n", bdir.Errors, bd.Errors, bs.Errors)
	}

	// ----- memory
	p("## Memory\n\n| | devaipod | squid | devaipod / squid |\n|---|---:|---:|---:|\n")
	id, is := run.MemIdle[dp], run.MemIdle[sq]
	p("| RSS idle, before the load | %s | %s | %.0f%% |\n", mib(id.RSSKB), mib(is.RSSKB), 100*ratio(float64(id.RSSKB), float64(is.RSSKB)))
	p("| peak RSS (VmHWM) after all the load | %s | %s | %.0f%% |\n", mib(md.HWMKB), mib(ms.HWMKB), 100*ratio(float64(md.HWMKB), float64(ms.HWMKB)))
	p("| RSS after all the load | %s | %s | |\n", mib(md.RSSKB), mib(ms.RSSKB))
	p("| processes | %d | %d | |\n\n", md.Processes, ms.Processes)

	// ----- interception
	if ic != nil {
		renderIntercept(&b, ic, m)
	}

	// ----- soak
	if soak != nil {
		renderSoak(&b, soak)
	}

	renderAnalysis(&b, run, soak)
	return b.String()
}

func renderSoak(b *strings.Builder, soak *soakOutput) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Soak: %s\n\n", soak.Duration)
	p("%d clients against devaipod's proxy binary and %d against the same proxy in the benchmark's\n", soak.Workers, soak.Workers)
	p("own process (package `proxy`, same rules; its goroutines are counted with runtime.NumGoroutine),\n")
	p("for %s, then up to %s for both to come back to their idle counts (idle upstream connections\n", soak.Duration, soak.Settle)
	p("of the proxy's plain-HTTP transport may stay up to 90 s); they did after %s. Each client picks\n", soak.SettledAfter)
	p("at random, by weight: ")
	var parts []string
	for _, o := range soakOps {
		parts = append(parts, fmt.Sprintf("%s %d", o.name, o.weight))
	}
	p("%s (short: new tunnel + GET; keepalive: 5 GETs in one tunnel; denied: CONNECT to a port off\n", strings.Join(parts, ", "))
	p("the list, 403 wanted; plain: plain-HTTP GET; medium: 4 MiB; abort: client drops a 64 MiB download\n")
	p("after 256 KiB; connect-only: closes right after the 200; idle: 200 ms idle inside the tunnel; garbage:\n")
	p("not HTTP; silent-close: connects and closes).\n\n")
	p("%d requests, %d unexpected outcomes.", soak.Requests, soak.Failures)
	if len(soak.FirstFailures) > 0 {
		p(" First of each kind:")
		for op, e := range soak.FirstFailures {
			p(" %s (%d): `%s`;", op, soak.OpFailures[op], e)
		}
	}
	p("\n\n")
	p("| what | idle before | under load: peak | first quarter peak | last quarter peak | idle after | growing |\n|---|---:|---:|---:|---:|---:|---|\n")
	for _, g := range soak.Growth {
		grows := "no"
		if g.Grows {
			grows = "**yes**"
		}
		p("| %s | %d | %d | %d | %d | %d | %s |\n", g.What, g.Before, g.Max, g.EarlyMax, g.LateMax, g.After, grows)
	}
	p("\n*Growing* means idle after > idle before + %d, or the last quarter's peak > 1.25 × the first\n", soakSlack(soak))
	p("quarter's + %d.\n\n", soakSlack(soak))
	p("Samples (thinned):\n\n| t (s) | phase | binary fds | binary RSS | binary threads | in-process goroutines | in-process fds | requests |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
	step := max(1, len(soak.Samples)/16)
	for i, s := range soak.Samples {
		if i%step != 0 && i != len(soak.Samples)-1 && s.Phase != "before" {
			continue
		}
		p("| %.0f | %s | %d | %s | %d | %d | %d | %d |\n", s.T, s.Phase, s.ProxyFDs, mib(s.ProxyRSSKB), s.ProxyThreads, s.Goroutines, s.InprocFDs, s.Requests)
	}
	p("\n")
}

func soakSlack(soak *soakOutput) int64 {
	if len(soak.Growth) > 0 {
		return soak.Growth[0].Slack
	}
	return 0
}

// renderAnalysis explains where the proxy's time and memory go, from the
// numbers of this run, and how to look deeper.
func renderAnalysis(b *strings.Builder, run *runOutput, soak *soakOutput) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Where the time and memory go\n\n")
	p("Proxy CPU per tunnel, devaipod − squid:")
	for _, n := range run.Config.Concurrency {
		d, s := findSummary(run, "devaipod", n), findSummary(run, "squid", n)
		if d == nil || s == nil {
			continue
		}
		p(" %+.0f µs at concurrency %d (%.0f vs %.0f);", d.ProxyUSPerReq-s.ProxyUSPerReq, n, d.ProxyUSPerReq, s.ProxyUSPerReq)
	}
	p(" client and server together spend about %.0f µs per tunnel, so 100 µs of proxy CPU is worth\n", clientServerUS(run))
	p("a few percent of tunnels/s on this saturated machine.\n\n")
	p("To look inside devaipod's proxy, run the same load against it in a process of its own with\n")
	p("profiling on (the server dir comes from `proxybench serve --dir DIR`):\n\n")
	p("```\n")
	p("go build -o /tmp/proxybench ./hack/proxybench\n")
	p("/tmp/proxybench serve --dir /tmp/pb &        # prints the ports; see /tmp/pb/server.json\n")
	p("/tmp/proxybench proxy --listen 127.0.0.1:PORT --allow localhost:TLSPORT --allow 127.0.0.1:TLSPORT \\\n")
	p("    --allow localhost:HTTPPORT --allow 127.0.0.1:HTTPPORT --cpuprofile /tmp/proxy.prof --pprof 127.0.0.1:6060 >/dev/null &\n")
	p("/tmp/proxybench run --server /tmp/pb --proxy p=127.0.0.1:PORT@PID --conc 128 --rounds 1 --bulk-reps 0 --out /tmp/r.json\n")
	p("kill %%2; go tool pprof -top /tmp/proxybench /tmp/proxy.prof    # CPU\n")
	p("curl -s 127.0.0.1:6060/debug/pprof/heap > heap.prof                  # memory, during the load\n")
	p("/tmp/proxybench bare --listen 127.0.0.1:PORT2 --allow localhost:TLSPORT [--splice=false] &\n")
	p("    # a bare Go CONNECT tunnel (no goproxy, audit or guard), for reference\n")
	p("```\n\n")
	p("%s\n", analysisNotes)
}

func clientServerUS(run *runOutput) float64 {
	var sum float64
	var n int
	for _, s := range run.Summary {
		if s.Target == "direct" {
			sum += s.ClientUSPerReq + s.ServerUSPerReq
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

func joinInts(v []int) string {
	var s []string
	for _, n := range v {
		s = append(s, fmt.Sprint(n))
	}
	return strings.Join(s, ", ")
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// analysisNotes are the findings of the profiling that went with this
// benchmark; the numbers above are regenerated each run, these notes are
// not. Update them when proxy/ changes what they describe.
const analysisNotes = `Findings from profiling (pprof of the proxy alone, perf, strace -c) and from A/B runs
against squid (` + "`proxybench run`" + ` with two builds of the helper and squid, interleaved), as of the
CONNECT fast path (proxy CPU per tunnel at concurrency 1 / 16 / 128):

- **Where it started.** The benchmark's first version measured 516/277/230 µs against squid's
  298/166/150 and a peak RSS of 28.7 MiB against 32. Half of the proxy's CPU was in Go: net/http's
  connection handling, goproxy's three goroutines per tunnel copying through fresh 32 KiB
  buffers (90% of the live heap, most of the GC), the scheduler waking a second thread for
  nearly every event (futex), reflection-based JSON for the audit, TCP keep-alive set-up.
- **What an allowed CONNECT costs now.** ` + "`serveConn`" + ` peeks (recv MSG_PEEK) whether a new
  connection starts with ` + "`CONNECT `" + `; if not, the http.Server gets it untouched. If so, it reads
  the request itself with net/http's limits and checks (the answers to bad requests are
  net/http's, byte for byte) and hands it to goproxy through a hijackable ResponseWriter:
  net/http's server cost more per tunnel than the rest of the user-space work (a goroutine
  that reads in the background until the hijack, 8 KiB of buffers that a hijacked connection
  never returns to its pool, half of all garbage, contexts, tracking). goproxy's handlers
  decide; an allowed CONNECT is answered with ConnectHijack, and ` + "`serveTunnel`" + ` dials through
  the guard (no TCP keep-alive: the idle timeout covers it), answers 200 and copies in two
  goroutines, the request's and one more. Each direction waits for data without a buffer and
  takes a pooled 32 KiB one only to move what has arrived (a 512 KiB one once a read fills a
  small one, at most 8 of those out at a time), with read(2) and write(2) as raw system calls
  on the non-blocking sockets. The audit line is encoded by hand (0.25 µs instead of 2.2 µs),
  written in batches (a write(2) at most every 10 ms). The helper runs the proxy with GOMAXPROCS=1 (with credentials, 2 while two intercepted requests are in progress: below) and GOGC=50
  (` + "`proxy.TuneRuntime`" + `) and restarts itself once at start with
  ` + "`GODEBUG=schedtrace=2147483647`" + ` (` + "`proxy.RuntimeGODEBUG`" + `, below). strace -c counts about 40
  system calls per tunnel (squid: about 65, a third of them epoll_ctl).
- **What each step bought** (A/B runs, CPU per tunnel; squid's in brackets, which moves with the
  machine): own tunnel path, pooled buffers, no keep-alive: 502/262/221 µs (351/221/182);
  GOMAXPROCS=1 on top: 395/220/207; raw reads and writes and the CONNECT fast path:
  367/197/189 (353/192/174); answering 200 before starting the copy, the copy in the request's
  goroutine, raw shutdown and answer: 311/177/161 (313/184/153); sysmon kept awake
  (GODEBUG): 274/154/148 (301/171/155), against 311/169/158 without it in the same run.
  GOGC=50 costs no measurable CPU now that little garbage is left; it and one P take peak RSS
  from about 15.5 to 13.5 MiB.
- **The runtime's monitor thread.** perf showed Go's sysmon thread at about 8% of the proxy's
  CPU and a third of its context switches (about 2,000 wake-ups a second under load): whenever
  the proxy's one P has gone idle and sysmon has gone into its deep sleep, the next system call
  the scheduler is told of (accept, connect and close go through the net package) wakes it
  and resets its tick to 20 µs, from which it backs off only after 50 quiet ticks
  (golang/go#18236). Raw system calls cannot cover close or accept, so the proxy sets a
  schedtrace period instead, which keeps sysmon out of the deep sleep (its tick then backs off
  to 10 ms and stays there; the period, about 24.8 days, means the trace line is in practice
  never printed). It cut the proxy's CPU per tunnel by about 10% at every concurrency and the
  client's and server's at concurrency 16 by about 10 µs (fewer preemptions); the price is
  100 wake-ups a second of an idle proxy, about 0.2% of a CPU.
- **Memory is mostly the binary.** Most of the proxy's RSS is the helper binary's own pages
  (RssFile: the kernel maps the binary in 64 KiB runs around each page touched, and every
  linked package's init runs at start). The gator (MCP SDK, go-github, go-git) had grown the
  helper from 8.4 to 13.4 MB and the proxy's idle RSS to 13 MiB; it is now a binary of its
  own (` + "`devaipod-gator`" + `), and the 8.6 MB helper's proxy idles at about 8 MiB. The load adds
  about 4.5–6 MiB at most (goroutine stacks, 2 per tunnel; the heap, whose goal is 2 MiB at
  GOGC=50; two bulk buffers during the bulk transfer), while squid grows from about 27 to 32
  MiB.
- **Where the rest goes.** About 60% of the proxy's CPU is system calls on loopback TCP (connect,
  read, write, shutdown, close, epoll: the work squid does too), then the scheduler (~9%),
  allocation and GC (~9% at concurrency 128: 256 goroutine stacks to scan per cycle) and name
  resolution (~2-8% with its goroutine and stack growth: net.Resolver starts a goroutine per
  lookup, even for /etc/hosts; squid caches). Caching the resolution (tried, not kept: it
  would change how fresh the addresses are) cut the proxy's CPU per tunnel by 8% but
  tunnels/s by only 1%.
- **The close, and Nagle, looked at and left.** Through either proxy the wire carries the same
  segments per tunnel (nstat: 33.8 vs 32.6 at concurrency 128, RSTs 1.0 each), except one:
  devaipod's proxy passes half-closes on (as goproxy did), so the client's TLS close_notify
  still reaches the server, where squid closes both sides at the server's FIN. Closing on the
  server's FIN (A/B) changed tunnels/s by less than the noise, and risks an RST that cuts off
  data the client has not read, so the half-close stays. squid leaves Nagle on for the client's
  connection; turning it on in devaipod's proxy made concurrency 16 about 3% slower and 128 no
  faster.
- **Splice, tried and dropped.** io.Copy between the sockets (splice(2), with TCP_INFO for the idle
  clock) cut the proxy's CPU per GB of bulk to about 0.3 s, but on loopback it raised the
  client's and the server's by about 0.4 s per GB (the pages travel by reference and the
  sender's buffers lose cache locality): bulk fell from about 1100 to 750 MB/s.
- **Bulk, and why 90% of direct is out of reach here.** Three processes share two cores:
  direct keeps both busy with only the client and the server (1.7–1.9 CPUs at 1.6–2.4 GB/s,
  and which of the two speeds a run gets depends on where the scheduler puts them), and a
  proxy must take its share from them. With bulk buffers devaipod's proxy spends about 0.3 s
  of CPU per GB (squid 0.5); in one run side by side (` + "`proxybench bare`" + `, above),
  devaipod's proxy moved 1474 MB/s, a bare Go tunnel copying through 32 KiB buffers (no policy,
  no audit) 1319, the same with splice(2) 1170, against 1654 direct (median of 5): devaipod's
  proxy is faster than the bare tunnels, at 80–90% of direct when direct runs at 1.6 GB/s and
  60–75% when it runs at 2.3. squid reaches 64–74%.`
