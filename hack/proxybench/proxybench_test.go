package main

import (
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	sorted := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		q    float64
		want int64
	}{{0.5, 5}, {0.9, 9}, {0.99, 10}, {1, 10}, {0, 1}} {
		if got := percentile(sorted, c.q); got != c.want {
			t.Errorf("percentile(%v) = %d, want %d", c.q, got, c.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %d", got)
	}
	if got := median([]float64{1, 2, 3, 4}); got != 2.5 {
		t.Errorf("median = %v", got)
	}
}

func TestProxyFlag(t *testing.T) {
	var f proxyFlag
	if err := f.Set("devaipod=127.0.0.1:3128@42"); err != nil {
		t.Fatal(err)
	}
	if f[0] != (target{Name: "devaipod", Proxy: "127.0.0.1:3128", PID: 42}) {
		t.Errorf("got %+v", f[0])
	}
	for _, bad := range []string{"x", "direct=127.0.0.1:1@1", "a=127.0.0.1:1", "a=127.0.0.1:1@x"} {
		if err := f.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}

func TestProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	pid := os.Getpid()
	if n := fdCount(pid); n < 3 {
		t.Errorf("fdCount = %d", n)
	}
	if m := readMem(pid); m.HWMKB <= 0 || m.RSSKB <= 0 || m.Processes != 1 {
		t.Errorf("readMem = %+v", m)
	}
	if statusInt(pid, "Threads") < 1 {
		t.Error("no threads")
	}
	// Spin until both clocks move (they tick every 10 ms of CPU, which
	// a loaded machine may take a while to give this process).
	busy := cpuBusy()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && (cpuSeconds(pid) <= 0 || cpuBusy() <= busy) {
		for spin := time.Now().Add(10 * time.Millisecond); time.Now().Before(spin); {
		}
	}
	if cpuSeconds(pid) <= 0 || cpuBusy() <= busy {
		t.Error("CPU time does not advance")
	}
}

// testSetup starts the test server and an in-process proxy allowing its
// ports, as the benchmark does.
func testSetup(t *testing.T) (serverInfo, *x509.CertPool, *inprocProxy, []string) {
	t.Helper()
	dir := t.TempDir()
	ts, err := startTestServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ts.Close)
	if err := writeJSON(filepath.Join(dir, "server.json"), ts.info); err != nil {
		t.Fatal(err)
	}
	info, roots, err := loadServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, port := range []int{info.TLSPort, info.HTTPPort} {
		p := strconv.Itoa(port)
		rules = append(rules, "localhost:"+p, "127.0.0.1:"+p)
	}
	px, err := startInprocProxy(rules)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return info, roots, px, rules
}

func TestRequestsAndChecks(t *testing.T) {
	info, roots, px, _ := testSetup(t)
	c := newClient("localhost", roots, 5*time.Second)
	ctx := context.Background()
	checks := runChecks(ctx, c, info, []target{{Name: "direct"}, {Name: "inproc", Proxy: px.addr}})
	if len(checks) != 6 {
		t.Fatalf("%d checks", len(checks))
	}
	for _, ch := range checks {
		if !ch.OK {
			t.Errorf("check %+v failed", ch)
		}
	}
	// A proxy's refusal is a *statusError with the proxy's reason.
	_, _, err := c.tunnel(ctx, px.addr, 1)
	var se *statusError
	if !errors.As(err, &se) || se.code != 403 || !strings.Contains(se.body, "not on the allowlist") {
		t.Errorf("CONNECT to port 1: %v", err)
	}
}

func TestLoadAndBulk(t *testing.T) {
	info, roots, px, _ := testSetup(t)
	c := newClient("localhost", roots, 5*time.Second)
	ctx := context.Background()
	for _, tg := range []target{{Name: "direct"}, {Name: "inproc", Proxy: px.addr, PID: os.Getpid()}} {
		r := runLoad(ctx, c, loadSpec{target: tg, port: info.TLSPort, concurrency: 4,
			warmup: 50 * time.Millisecond, duration: 300 * time.Millisecond})
		if r.Requests == 0 || r.Errors != 0 || r.PerSec <= 0 || r.P50MS <= 0 || r.P99MS < r.P50MS {
			t.Errorf("%s: %+v", tg.Name, r)
		}
		if (tg.Proxy != "") != (r.ConnectP50MS > 0) {
			t.Errorf("%s: CONNECT time %v", tg.Name, r.ConnectP50MS)
		}
		b := runBulk(ctx, c, tg, info.TLSPort, 8<<20, 0)
		if b.Error != "" || b.Bytes != 8<<20 || b.MBps <= 0 {
			t.Errorf("%s bulk: %+v", tg.Name, b)
		}
	}
}

func TestSoakOps(t *testing.T) {
	info, roots, px, _ := testSetup(t)
	s := &soakRunner{c: newClient("localhost", roots, 5*time.Second), info: info,
		ops: map[string]int64{}, opFail: map[string]int64{}, firstErr: map[string]string{}}
	buf := make([]byte, 64<<10)
	for _, o := range soakOps {
		if o.name == "idle" && testing.Short() {
			continue
		}
		if err := s.do(context.Background(), o.name, px.addr, buf); err != nil {
			t.Errorf("%s: %v", o.name, err)
		}
	}
}

func TestMeasureGrowth(t *testing.T) {
	mk := func(before, after int, load ...int) []soakSample {
		s := []soakSample{{Phase: "before", Goroutines: before}}
		for _, v := range load {
			s = append(s, soakSample{Phase: "load", Goroutines: v})
		}
		return append(s, soakSample{Phase: "after", Goroutines: after})
	}
	f := func(s soakSample) int64 { return int64(s.Goroutines) }
	if g := measureGrowth("g", mk(10, 10, 50, 52, 49, 51, 50, 48, 53, 50), f, 2); g.Grows {
		t.Errorf("steady load judged growing: %+v", g)
	}
	if g := measureGrowth("g", mk(10, 30, 50, 50, 50, 50), f, 2); !g.Grows {
		t.Errorf("leak after load not seen: %+v", g)
	}
	if g := measureGrowth("g", mk(10, 10, 50, 60, 80, 100, 120, 140, 160, 180), f, 2); !g.Grows {
		t.Errorf("growth under load not seen: %+v", g)
	}
}

func TestReport(t *testing.T) {
	run := &runOutput{
		Config: runConfig{Host: "localhost", TLSPort: 1, HTTPPort: 2, Concurrency: []int{1}, Rounds: 1,
			Warmup: "1s", Duration: "1s", BulkBytes: 1 << 30, BulkReps: 1},
		Summary: []loadSummary{
			{Target: "direct", Concurrency: 1, PerSec: 100},
			{Target: "devaipod", Concurrency: 1, PerSec: 90, ProxyUSPerReq: 400},
			{Target: "squid", Concurrency: 1, PerSec: 80, ProxyUSPerReq: 300},
		},
		BulkSum:  []bulkSummary{{Target: "direct", MBps: 1000}, {Target: "devaipod", MBps: 950}, {Target: "squid", MBps: 800}},
		MemIdle:  map[string]memInfo{"devaipod": {RSSKB: 8000}, "squid": {RSSKB: 27000}},
		MemAfter: map[string]memInfo{"devaipod": {HWMKB: 20000, Processes: 1}, "squid": {HWMKB: 32000, Processes: 1}},
	}
	run.Load = []loadResult{
		{Target: "devaipod", Concurrency: 1, Round: 0, PerSec: 90}, {Target: "squid", Concurrency: 1, Round: 0, PerSec: 100},
		{Target: "devaipod", Concurrency: 1, Round: 1, PerSec: 80}, {Target: "squid", Concurrency: 1, Round: 1, PerSec: 70},
		{Target: "devaipod", Concurrency: 1, Round: 2, PerSec: 110}, {Target: "squid", Concurrency: 1, Round: 2, PerSec: 100},
	}
	if m, lo, hi, n := pairedRatio(run, "devaipod", "squid", 1); n != 3 || m != 1.1 || lo != 0.9 || hi < 1.14 {
		t.Errorf("pairedRatio = %v %v %v %d", m, lo, hi, n)
	}
	run.Load = nil
	soak := &soakOutput{Duration: "10m", Growth: []growth{{What: "binary proxy: open fds", Before: 10, After: 10}}}
	md := renderReport(run, soak, nil, machineFrom(map[string]string{"nproc": "2"}))
	for _, want := range []string{
		"| tunnels/s at concurrency 1 ≥ squid's | **met** | 1.12× (rounds 1.12–1.12); medians 90 vs 80/s",
		"| bulk 1 GiB ≥ 90% of direct | **met** | 95% (transfers 95–95%); medians 950 vs 1000 MB/s |",
		"| peak RSS ≤ half of squid's | **not met** |",
		"binary proxy: open fds not growing | **met**",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestIntercept runs the interception benchmark, briefly, against the
// proxy in this process with the test server's credential.
func TestIntercept(t *testing.T) {
	dir := t.TempDir()
	ts, err := startTestServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ts.Close)
	if err := writeJSON(filepath.Join(dir, "server.json"), ts.info); err != nil {
		t.Fatal(err)
	}
	info, roots, err := loadServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(info.CredDir, info.CredName))
	if err != nil {
		t.Fatal(err)
	}
	value := strings.TrimSpace(string(b))
	if value != ts.credValue || !strings.HasPrefix(info.CredPlaceholder, "devaipod-"+credName+"-") {
		t.Fatalf("credential file %q, placeholder %q", value, info.CredPlaceholder)
	}
	px, err := startInprocCredProxy(info, roots, value, "localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	cfg := interceptConfig{
		Proxy: target{Name: "inproc", Proxy: px.addr, PID: os.Getpid()}, InterceptHost: "localhost", TunnelHost: "127.0.0.1",
		Port: info.TLSPort, Concurrency: []int{2}, Rounds: 2, Warmup: "10ms", Duration: "100ms", NewConnFor: "60ms",
		SmallBytes: 1024, BulkBytes: 256 << 10, BulkConc: 1,
		warmup: 10 * time.Millisecond, duration: 100 * time.Millisecond, newConnFor: 60 * time.Millisecond, timeout: 5 * time.Second,
	}
	ctx := context.Background()
	res, err := runInterception(ctx, cfg, roots, value, info.CredPlaceholder)
	if err != nil {
		t.Fatalf("%v; checks %+v", err, res.Checks)
	}
	if len(res.Checks) != 6 {
		t.Errorf("%d checks: %+v", len(res.Checks), res.Checks)
	}
	if want := 2 * 3 * 2; len(res.Measures) != want {
		t.Errorf("%d measurements, want %d", len(res.Measures), want)
	}
	for _, m := range res.Measures {
		if m.Requests == 0 || m.Errors != 0 || m.TTFBP50MS <= 0 || m.TTFBP99MS < m.TTFBP50MS {
			t.Errorf("%s %s c=%d: %+v", m.Kind, m.Variant, m.Concurrency, m)
		}
		if m.Kind == kindBulk && m.Bytes != int64(m.Requests)*cfg.BulkBytes {
			t.Errorf("bulk %s: %d bytes in %d responses", m.Variant, m.Bytes, m.Requests)
		}
	}
	for _, metric := range []string{"per_sec", "ttfb_p50", "ttfb_p99"} {
		if r := findInterceptRatio(&res, kindKeepAlive, 2, metric); r == nil || r.Median <= 0 {
			t.Errorf("ratio %s: %+v", metric, r)
		}
	}

	// A client whose placeholder the proxy does not know gets the
	// upstream's 401 through the interception, and the measurement fails.
	proxyRoots := x509.NewCertPool()
	caPEM, err := fetchProxyCA(ctx, px.addr, time.Second)
	if err != nil || !proxyRoots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("the proxy's CA: %v", err)
	}
	cfg.variants = interceptVariants
	wrong := newInterceptClients(&cfg, roots, proxyRoots, value, "devaipod-"+credName+"-notthisone")
	if _, err := runInterceptMeasure(ctx, &cfg, wrong, kindKeepAlive, variantIntercept, 1, 50*time.Millisecond); !errors.Is(err, errNoCredential) {
		t.Errorf("wrong placeholder: %v", err)
	}

	// The report, from the JSON as hack/bench-proxy.sh hands it over.
	path := filepath.Join(dir, "intercept.json")
	if err := writeJSON(path, res); err != nil {
		t.Fatal(err)
	}
	var back interceptOutput
	if err := readJSON(path, &back); err != nil {
		t.Fatal(err)
	}
	var b2 strings.Builder
	renderIntercept(&b2, &back, machineFrom(nil))
	md := b2.String()
	for _, want := range []string{"## Credential interception", "| requests/s, keep-alive, 1 KiB responses, concurrency 2 |",
		"| a new connection: dial, CONNECT, TLS handshake, request |", "--conc 2 --rounds 2"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if v := interceptVerdicts(&back); len(v) != 2 || !strings.Contains(v[0].what, "concurrency 2") || !strings.Contains(v[1].what, "256 KiB") {
		t.Errorf("verdicts %+v", v)
	}
}
