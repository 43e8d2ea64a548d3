package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// runConfig is what cmdRun measured, as written to its JSON.
type runConfig struct {
	Host        string `json:"host"`
	TLSPort     int    `json:"tls_port"`
	HTTPPort    int    `json:"http_port"`
	Concurrency []int  `json:"concurrency"`
	Rounds      int    `json:"rounds"`
	Warmup      string `json:"warmup"`
	Duration    string `json:"duration"`
	BulkBytes   int64  `json:"bulk_bytes"`
	BulkReps    int    `json:"bulk_reps"`
	Timeout     string `json:"timeout"`
}

// check is one functional check made before measuring: the same allowlist
// in every proxy.
type check struct {
	Target string `json:"target"`
	What   string `json:"what"`
	Want   string `json:"want"`
	Got    string `json:"got"`
	OK     bool   `json:"ok"`
}

// loadSummary pools a target's rounds at one concurrency.
type loadSummary struct {
	Target      string  `json:"target"`
	Concurrency int     `json:"concurrency"`
	Rounds      int     `json:"rounds"`
	PerSec      float64 `json:"per_sec_median"`
	PerSecMin   float64 `json:"per_sec_min"`
	PerSecMax   float64 `json:"per_sec_max"`
	Requests    int     `json:"requests"`
	Errors      int     `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	P50MS       float64 `json:"p50_ms"`
	P90MS       float64 `json:"p90_ms"`
	P99MS       float64 `json:"p99_ms"`
	ConnectP50  float64 `json:"connect_p50_ms"`
	ConnectP99  float64 `json:"connect_p99_ms"`
	// CPU microseconds per request, and cores busy on average.
	ProxyUSPerReq  float64 `json:"proxy_cpu_us_per_req"`
	ServerUSPerReq float64 `json:"server_cpu_us_per_req"`
	ClientUSPerReq float64 `json:"client_cpu_us_per_req"`
	CoresBusy      float64 `json:"cores_busy"`
	// OtherCores is the CPU the rest of the machine used meanwhile.
	OtherCores float64 `json:"other_cores"`
}

type bulkSummary struct {
	Target        string  `json:"target"`
	MBps          float64 `json:"mb_per_s_median"`
	MBpsMin       float64 `json:"mb_per_s_min"`
	MBpsMax       float64 `json:"mb_per_s_max"`
	ProxyCPUPerGB float64 `json:"proxy_cpu_s_per_gb"`
	Errors        int     `json:"errors"`
}

type runOutput struct {
	Started  time.Time          `json:"started"`
	Config   runConfig          `json:"config"`
	Targets  []target           `json:"targets"`
	Checks   []check            `json:"checks"`
	MemIdle  map[string]memInfo `json:"mem_idle"`
	Load     []loadResult       `json:"load"`
	Summary  []loadSummary      `json:"summary"`
	Bulk     []bulkResult       `json:"bulk"`
	BulkSum  []bulkSummary      `json:"bulk_summary"`
	MemAfter map[string]memInfo `json:"mem_after"`
	Elapsed  string             `json:"elapsed"`
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func cmdRun(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	serverDir := fs.String("server", "", "the test server's `DIR` (proxybench serve --dir)")
	var proxies proxyFlag
	fs.Var(&proxies, "proxy", "a proxy to measure, `NAME=HOST:PORT@PID` (repeatable)")
	host := fs.String("host", "localhost", "the name the test server is reached by")
	concText := fs.String("conc", "1,16,128", "concurrency levels")
	rounds := fs.Int("rounds", 3, "rounds per concurrency (targets interleaved, order rotated)")
	warmup := fs.Duration("warmup", time.Second, "warm-up before each measurement")
	duration := fs.Duration("duration", 3*time.Second, "length of each measurement")
	bulkSize := fs.Int64("bulk-size", 1<<30, "bytes in the bulk transfer")
	bulkReps := fs.Int("bulk-reps", 3, "bulk transfers per target")
	timeout := fs.Duration("timeout", 10*time.Second, "timeout of one request")
	out := fs.String("out", "", "write the results as JSON to `FILE`")
	mustCheck := fs.Bool("checks", true, "stop if a functional check fails")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *serverDir == "" || *out == "" {
		return errors.New("need --server and --out")
	}
	conc, err := parseInts(*concText)
	if err != nil {
		return err
	}
	info, roots, err := loadServer(*serverDir)
	if err != nil {
		return err
	}
	c := newClient(*host, roots, *timeout)
	ctx := context.Background()
	targets := append([]target{{Name: "direct"}}, proxies...)
	res := runOutput{
		Started: time.Now().UTC(),
		Config: runConfig{
			Host: *host, TLSPort: info.TLSPort, HTTPPort: info.HTTPPort,
			Concurrency: conc, Rounds: *rounds, Warmup: warmup.String(), Duration: duration.String(),
			BulkBytes: *bulkSize, BulkReps: *bulkReps, Timeout: timeout.String(),
		},
		Targets:  targets,
		MemIdle:  map[string]memInfo{},
		MemAfter: map[string]memInfo{},
	}
	for _, t := range proxies {
		res.MemIdle[t.Name] = readMem(t.PID)
	}

	// Same allowlist everywhere: the test server's HTTPS port by CONNECT,
	// its HTTP port as plain HTTP, nothing else.
	res.Checks = runChecks(ctx, c, info, targets)
	failed := 0
	for _, ch := range res.Checks {
		mark := "ok"
		if !ch.OK {
			mark = "FAILED"
			failed++
		}
		logf("check %-8s %-44s want %-5s got %-5s %s", ch.Target, ch.What, ch.Want, ch.Got, mark)
	}
	if failed > 0 && *mustCheck {
		writeJSON(*out, res)
		return fmt.Errorf("%d checks failed: the proxies do not enforce the same allowlist", failed)
	}

	started := time.Now()
	for _, n := range conc {
		for round := range *rounds {
			order := rotate(targets, round)
			for _, t := range order {
				r := runLoad(ctx, c, loadSpec{
					target: t, port: info.TLSPort, concurrency: n,
					warmup: *warmup, duration: *duration, serverPID: info.PID,
				})
				r.Round = round
				logf("load c=%-3d round %d %-9s %7.0f tunnels/s  p50 %6.2f ms  p99 %6.2f ms  errors %d  cpu proxy %.2fs server %.2fs client %.2fs other %.2fs",
					n, round, t.Name, r.PerSec, r.P50MS, r.P99MS, r.Errors, r.CPU.Proxy, r.CPU.Server, r.CPU.Client, r.CPU.Other)
				if r.FirstError != "" {
					logf("  first error: %s", r.FirstError)
				}
				res.Load = append(res.Load, r)
				time.Sleep(200 * time.Millisecond)
			}
		}
		for _, t := range targets {
			res.Summary = append(res.Summary, summarise(res.Load, t.Name, n))
		}
	}

	for rep := range *bulkReps {
		for _, t := range rotate(targets, rep) {
			r := runBulk(ctx, c, t, info.TLSPort, *bulkSize, info.PID)
			r.Rep = rep
			logf("bulk rep %d %-9s %8.1f MB/s  %.2fs  cpu proxy %.2fs server %.2fs client %.2fs %s",
				rep, t.Name, r.MBps, r.Seconds, r.CPU.Proxy, r.CPU.Server, r.CPU.Client, r.Error)
			res.Bulk = append(res.Bulk, r)
		}
	}
	for _, t := range targets {
		res.BulkSum = append(res.BulkSum, summariseBulk(res.Bulk, t.Name))
	}
	for _, t := range proxies {
		res.MemAfter[t.Name] = readMem(t.PID)
	}
	res.Elapsed = time.Since(started).Round(time.Second).String()
	return writeJSON(*out, res)
}

func rotate[T any](ts []T, k int) []T {
	k %= len(ts)
	return append(slices.Clone(ts[k:]), ts[:k]...)
}

func summarise(all []loadResult, name string, conc int) loadSummary {
	s := loadSummary{Target: name, Concurrency: conc}
	var rates []float64
	var pooled loadResult
	var cpu cpuUse
	var secs float64
	for _, r := range all {
		if r.Target != name || r.Concurrency != conc {
			continue
		}
		s.Rounds++
		rates = append(rates, r.PerSec)
		s.Requests += r.Requests
		s.Errors += r.Errors
		if s.FirstError == "" {
			s.FirstError = r.FirstError
		}
		pooled.lat = append(pooled.lat, r.lat...)
		pooled.conn = append(pooled.conn, r.conn...)
		cpu.Proxy += r.CPU.Proxy
		cpu.Server += r.CPU.Server
		cpu.Client += r.CPU.Client
		cpu.Other += r.CPU.Other
		secs += r.Seconds
	}
	if s.Rounds == 0 {
		return s
	}
	slices.Sort(rates)
	s.PerSec = median(rates)
	s.PerSecMin, s.PerSecMax = rates[0], rates[len(rates)-1]
	pooled.fillPercentiles()
	s.P50MS, s.P90MS, s.P99MS = pooled.P50MS, pooled.P90MS, pooled.P99MS
	s.ConnectP50, s.ConnectP99 = pooled.ConnectP50MS, pooled.ConnectP99MS
	if s.Requests > 0 {
		per := 1e6 / float64(s.Requests)
		s.ProxyUSPerReq = cpu.Proxy * per
		s.ServerUSPerReq = cpu.Server * per
		s.ClientUSPerReq = cpu.Client * per
	}
	if secs > 0 {
		s.CoresBusy = (cpu.Proxy + cpu.Server + cpu.Client) / secs
		s.OtherCores = cpu.Other / secs
	}
	return s
}

func summariseBulk(all []bulkResult, name string) bulkSummary {
	s := bulkSummary{Target: name}
	var rates []float64
	var cpu float64
	var bytes int64
	for _, r := range all {
		if r.Target != name {
			continue
		}
		if r.Error != "" {
			s.Errors++
			continue
		}
		rates = append(rates, r.MBps)
		cpu += r.CPU.Proxy
		bytes += r.Bytes
	}
	if len(rates) == 0 {
		return s
	}
	slices.Sort(rates)
	s.MBps = median(rates)
	s.MBpsMin, s.MBpsMax = rates[0], rates[len(rates)-1]
	if bytes > 0 {
		s.ProxyCPUPerGB = cpu / (float64(bytes) / 1e9)
	}
	return s
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// runChecks checks, for every target, that the allowed requests work and,
// for every proxy, that a port off the allowlist is refused with 403.
func runChecks(ctx context.Context, c *client, info serverInfo, targets []target) []check {
	var out []check
	buf := make([]byte, 16<<10)
	result := func(err error) string {
		var se *statusError
		switch {
		case err == nil:
			return "200"
		case errors.As(err, &se):
			return strconv.Itoa(se.code)
		default:
			return "error: " + err.Error()
		}
	}
	add := func(t target, what, want string, err error) {
		got := result(err)
		out = append(out, check{Target: t.Name, What: what, Want: want, Got: got, OK: got == want})
	}
	for _, t := range targets {
		_, err := c.shortHTTPS(ctx, t.Proxy, info.TLSPort, buf)
		add(t, fmt.Sprintf("HTTPS %s:%d (CONNECT)", c.host, info.TLSPort), "200", err)
		_, err = c.plainHTTP(ctx, t.Proxy, info.HTTPPort, "/small", buf)
		add(t, fmt.Sprintf("plain HTTP %s:%d", c.host, info.HTTPPort), "200", err)
		if t.Proxy == "" {
			continue
		}
		// Nothing listens on port 1; a proxy that let it through would
		// answer 502 or 503, not 403.
		conn, _, err := c.tunnel(ctx, t.Proxy, 1)
		if conn != nil {
			conn.Close()
		}
		add(t, fmt.Sprintf("CONNECT %s:1 (not allowed)", c.host), "403", err)
		_, err = c.plainHTTP(ctx, t.Proxy, 1, "/", buf)
		add(t, fmt.Sprintf("plain HTTP %s:1 (not allowed)", c.host), "403", err)
		// The HTTPS port as plain HTTP and the HTTP port by CONNECT are
		// allowed by both (neither ties a method to a port): not checked.
	}
	return out
}
