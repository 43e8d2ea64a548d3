package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/devaipod/devaipod/proxy"
)

// The interception benchmark (proxybench intercept): what putting a
// credential in costs against an opaque tunnel, through one devaipod proxy
// to one HTTPS upstream (the test server), in one run.
//
// The proxy has one credential, bound to the upstream's name and port
// (localhost:TLSPORT): a CONNECT there is intercepted (the proxy
// terminates TLS with its pod CA and relays each request, the placeholder
// replaced, over its own pooled TLS connections). The same upstream by
// its address (127.0.0.1:TLSPORT) has no credential: a CONNECT there is an
// opaque tunnel, and the client does TLS with the upstream itself. So the
// two variants differ in the interception only:
//
//	tunnel     CONNECT 127.0.0.1:PORT, TLS with the upstream (its own CA),
//	           Authorization: Bearer VALUE (the client holds the key)
//	intercept  CONNECT localhost:PORT, TLS with the proxy (its CA, from
//	           GET /devaipod/ca.pem), Authorization: Bearer PLACEHOLDER
//
// Both request /auth/..., which the upstream serves only with the value
// (authHandler): a 401 during the measurement stops the benchmark.
// The tunnel's address needs no name resolution at the proxy, which favours
// the tunnel a little on new connections.
//
// Each round measures, every variant in turn (the order rotated each
// round): requests/s over keep-alive connections at each concurrency, MB/s
// of 1 MiB responses over keep-alive, and new connections one after
// another (CONNECT, TLS, one request, close). Each request's time to first
// byte is kept: from writing the request on an open connection, and for a
// new connection from the dial, handshakes included.

const (
	variantTunnel    = "tunnel"
	variantIntercept = "intercept"
)

var interceptVariants = []string{variantTunnel, variantIntercept}

// Kinds of measurement.
const (
	kindKeepAlive = "keepalive" // small responses on keep-alive connections
	kindBulk      = "bulk"      // large responses on keep-alive connections
	kindNewConn   = "newconn"   // a new connection per request
)

// interceptTarget is the issue's: interception costs at most 20% of the
// tunnel's throughput.
const interceptTarget = 0.80

type interceptConfig struct {
	Proxy         target `json:"proxy"`
	InterceptHost string `json:"intercept_host"`
	TunnelHost    string `json:"tunnel_host"`
	Port          int    `json:"port"`
	Concurrency   []int  `json:"concurrency"`
	Rounds        int    `json:"rounds"`
	Warmup        string `json:"warmup"`
	Duration      string `json:"duration"`
	NewConnFor    string `json:"newconn_duration"`
	SmallBytes    int    `json:"small_bytes"`
	BulkBytes     int64  `json:"bulk_bytes"`
	BulkConc      int    `json:"bulk_concurrency"`
	Timeout       string `json:"timeout"`

	warmup, duration, newConnFor, timeout time.Duration
	serverPID                             int
	variants                              []string      // measured, in the even rounds' order
	pause                                 time.Duration // between measurements
}

// interceptMeasure is one variant's measurement of one kind in one round.
type interceptMeasure struct {
	Kind        string  `json:"kind"`
	Variant     string  `json:"variant"`
	Concurrency int     `json:"concurrency"`
	Round       int     `json:"round"`
	Seconds     float64 `json:"seconds"`
	Requests    int     `json:"requests"`
	Bytes       int64   `json:"bytes"`
	Errors      int     `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	PerSec      float64 `json:"per_sec"`
	MBps        float64 `json:"mb_per_s"`
	TTFBP50MS   float64 `json:"ttfb_p50_ms"`
	TTFBP99MS   float64 `json:"ttfb_p99_ms"`
	CPU         cpuUse  `json:"cpu_seconds"`

	ttfb []int64 // nanoseconds, for pooling across rounds
}

// interceptSummary pools a variant's rounds of one kind and concurrency.
type interceptSummary struct {
	Kind        string  `json:"kind"`
	Variant     string  `json:"variant"`
	Concurrency int     `json:"concurrency"`
	Rounds      int     `json:"rounds"`
	Requests    int     `json:"requests"`
	Errors      int     `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	PerSec      float64 `json:"per_sec_median"`
	PerSecMin   float64 `json:"per_sec_min"`
	PerSecMax   float64 `json:"per_sec_max"`
	MBps        float64 `json:"mb_per_s_median"`
	TTFBP50MS   float64 `json:"ttfb_p50_ms"`
	TTFBP99MS   float64 `json:"ttfb_p99_ms"`
	// CPU microseconds per request.
	ProxyUSPerReq  float64 `json:"proxy_cpu_us_per_req"`
	ServerUSPerReq float64 `json:"server_cpu_us_per_req"`
	ClientUSPerReq float64 `json:"client_cpu_us_per_req"`
	ProxyCores     float64 `json:"proxy_cores"`
	CoresBusy      float64 `json:"cores_busy"`
	OtherCores     float64 `json:"other_cores"`
}

// interceptRatio is intercept / tunnel for one metric.
type interceptRatio struct {
	Kind        string `json:"kind"`
	Concurrency int    `json:"concurrency"`
	Metric      string `json:"metric"` // per_sec, mb_per_s, ttfb_p50, ttfb_p99
	// Median, Lo, Hi: over rounds, each round's intercept over its tunnel
	// (for the percentiles of time to first byte: of the pooled rounds,
	// so Lo = Hi = Median).
	Median float64 `json:"median"`
	Lo     float64 `json:"lo"`
	Hi     float64 `json:"hi"`
	N      int     `json:"n"`
}

type interceptOutput struct {
	Started  time.Time          `json:"started"`
	Config   interceptConfig    `json:"config"`
	Checks   []check            `json:"checks"`
	Measures []interceptMeasure `json:"measures"`
	Summary  []interceptSummary `json:"summary"`
	Ratios   []interceptRatio   `json:"ratios"`
	MemAfter memInfo            `json:"mem_after"`
	Elapsed  string             `json:"elapsed"`
}

// interceptClients are the two variants' clients and the header each
// sends.
type interceptClients struct {
	c   map[string]*client
	hdr map[string]string
}

// newInterceptClients makes the tunnel's client (trusting the upstream's
// CA, sending the value) and the intercept's (trusting the proxy's CA,
// sending the placeholder).
func newInterceptClients(cfg *interceptConfig, serverRoots, proxyRoots *x509.CertPool, value, placeholder string) *interceptClients {
	return &interceptClients{
		c: map[string]*client{
			variantTunnel:    newClient(cfg.TunnelHost, serverRoots, cfg.timeout),
			variantIntercept: newClient(cfg.InterceptHost, proxyRoots, cfg.timeout),
		},
		hdr: map[string]string{
			variantTunnel:    "Authorization: Bearer " + value + "\r\n",
			variantIntercept: "Authorization: Bearer " + placeholder + "\r\n",
		},
	}
}

// timedGet sends GET path with the extra header lines hdr and reads the
// answer's body into buf-sized reads; ttfb is from since (if zero, from
// writing the request) to the answer's first byte.
func (s *session) timedGet(since time.Time, path, hdr string, keepAlive bool, buf []byte) (ttfb time.Duration, n int64, err error) {
	conn := "close"
	if keepAlive {
		conn = "keep-alive"
	}
	s.raw.SetDeadline(time.Now().Add(s.c.timeout))
	req := "GET " + path + " HTTP/1.1\r\nHost: " + net.JoinHostPort(s.c.host, strconv.Itoa(s.port)) +
		"\r\nUser-Agent: proxybench\r\n" + hdr + "Connection: " + conn + "\r\n\r\n"
	if since.IsZero() {
		since = time.Now()
	}
	if _, err := io.WriteString(s.tls, req); err != nil {
		return 0, 0, err
	}
	if _, err := s.br.Peek(1); err != nil {
		return 0, 0, err
	}
	ttfb = time.Since(since)
	n, err = readResponse(s.br, 0, buf)
	return ttfb, n, err
}

// fetchProxyCA gets the proxy's CA as the agent's init does: a plain GET of
// proxy.CAPath.
func fetchProxyCA(ctx context.Context, proxyAddr string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+proxyAddr+proxy.CAPath, nil)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &statusError{code: resp.StatusCode, body: string(b)}
	}
	return b, nil
}

// interceptChecks checks that the proxy intercepts the one variant and
// tunnels the other, and that the upstream gets the value only through the
// interception.
func interceptChecks(ctx context.Context, cfg *interceptConfig, ic *interceptClients, placeholder string) []check {
	var out []check
	buf := make([]byte, 16<<10)
	px := cfg.Proxy.Proxy
	small := "/auth/bytes?n=" + strconv.Itoa(cfg.SmallBytes)
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
	add := func(variant, what, want, got string) {
		out = append(out, check{Target: variant, What: what, Want: want, Got: got, OK: got == want})
	}
	for _, v := range interceptVariants {
		c := ic.c[v]
		// Each client trusts one CA only: the upstream's for the tunnel,
		// the proxy's for the interception, so a handshake that succeeds
		// says who answered it.
		issuer := "the upstream's CA"
		if v == variantIntercept {
			issuer = "the proxy's CA"
		}
		s, _, err := c.dialTLS(ctx, px, cfg.Port)
		got := result(err)
		if err == nil {
			got = "yes"
			s.Close()
		}
		add(v, fmt.Sprintf("CONNECT %s:%d, TLS certificate from %s", c.host, cfg.Port, issuer), "yes", got)
		_, n, err := oneGet(ctx, c, px, cfg.Port, small, ic.hdr[v], buf)
		if err == nil && n != int64(cfg.SmallBytes) {
			err = fmt.Errorf("body: %d bytes", n)
		}
		what := "GET /auth/ with the value"
		if v == variantIntercept {
			what = "GET /auth/ with the placeholder (the upstream wants the value)"
		}
		add(v, what, "200", result(err))
	}
	// The upstream does check: the placeholder through the tunnel, which
	// leaves it as it is, gets 401.
	_, _, err := oneGet(ctx, ic.c[variantTunnel], px, cfg.Port, small, "Authorization: Bearer "+placeholder+"\r\n", buf)
	add(variantTunnel, "GET /auth/ with the placeholder (left as it is)", "401", result(err))
	return out
}

// oneGet is one request on a new connection.
func oneGet(ctx context.Context, c *client, proxyAddr string, port int, path, hdr string, buf []byte) (time.Duration, int64, error) {
	start := time.Now()
	s, _, err := c.dialTLS(ctx, proxyAddr, port)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	return s.timedGet(start, path, hdr, false, buf)
}

// errNoCredential is a 401 from the upstream during a measurement.
var errNoCredential = errors.New("the upstream did not get the credential's value")

// runInterceptMeasure measures one variant: conc workers for warmup +
// duration, counting the requests that end within the duration.
func runInterceptMeasure(ctx context.Context, cfg *interceptConfig, ic *interceptClients, kind, variant string, conc int, duration time.Duration) (interceptMeasure, error) {
	c, hdr := ic.c[variant], ic.hdr[variant]
	px := cfg.Proxy.Proxy
	path := "/auth/bytes?n=" + strconv.Itoa(cfg.SmallBytes)
	size := int64(cfg.SmallBytes)
	if kind == kindBulk {
		path = "/auth/bytes?n=" + strconv.FormatInt(cfg.BulkBytes, 10)
		size = cfg.BulkBytes
	}
	type workerStats struct {
		ttfb     []int64
		bytes    int64
		errs     int
		firstErr error
		auth     bool // a 401
	}
	start := time.Now()
	t0 := start.Add(cfg.warmup)
	t1 := t0.Add(duration)
	ctx, cancel := context.WithDeadline(ctx, t1.Add(cfg.timeout))
	defer cancel()
	stats := make([]workerStats, conc)
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &stats[w]
			st.ttfb = make([]int64, 0, 4096)
			buf := make([]byte, 64<<10)
			var s *session
			defer func() {
				if s != nil {
					s.Close()
				}
			}()
			fail := func(err error) {
				var se *statusError
				if errors.As(err, &se) && se.code == http.StatusUnauthorized {
					st.auth = true
					cancel()
				}
				if time.Now().After(t0) && time.Now().Before(t1) {
					st.errs++
					if st.firstErr == nil {
						st.firstErr = err
					}
				}
				if s != nil {
					s.Close()
					s = nil
				}
				time.Sleep(5 * time.Millisecond) // no hot loop on a refused dial
			}
			for time.Now().Before(t1) && ctx.Err() == nil {
				var ttfb time.Duration
				var n int64
				var err error
				if kind == kindNewConn {
					// From the dial to the first byte of the answer.
					ttfb, n, err = func() (time.Duration, int64, error) {
						begin := time.Now()
						s, _, err := c.dialTLS(ctx, px, cfg.Port)
						if err != nil {
							return 0, 0, err
						}
						defer s.Close()
						return s.timedGet(begin, path, hdr, false, buf)
					}()
				} else {
					if s == nil {
						if s, _, err = c.dialTLS(ctx, px, cfg.Port); err != nil {
							s = nil
							fail(err)
							continue
						}
					}
					ttfb, n, err = s.timedGet(time.Time{}, path, hdr, true, buf)
				}
				if err == nil && n != size {
					err = fmt.Errorf("body: %d bytes of %d", n, size)
				}
				if err != nil {
					fail(err)
					continue
				}
				if e := time.Now(); e.After(t0) && !e.After(t1) {
					st.ttfb = append(st.ttfb, int64(ttfb))
					st.bytes += n
				}
			}
		}()
	}
	sample := func() cpuUse {
		u := cpuUse{Client: cpuSeconds(os.Getpid()), Other: cpuBusy()}
		if cfg.Proxy.PID > 0 && cfg.Proxy.PID != os.Getpid() {
			u.Proxy = treeCPUSeconds(cfg.Proxy.PID)
		}
		if cfg.serverPID > 0 && cfg.serverPID != os.Getpid() {
			u.Server = cpuSeconds(cfg.serverPID)
		}
		return u
	}
	time.Sleep(time.Until(t0))
	c0 := sample()
	time.Sleep(time.Until(t1))
	c1 := sample()
	wg.Wait()

	m := interceptMeasure{Kind: kind, Variant: variant, Concurrency: conc, Seconds: duration.Seconds(),
		CPU: cpuUse{Proxy: c1.Proxy - c0.Proxy, Server: c1.Server - c0.Server, Client: c1.Client - c0.Client}}
	m.CPU.Other = max(0, c1.Other-c0.Other-m.CPU.Proxy-m.CPU.Server-m.CPU.Client)
	auth := false
	for _, st := range stats {
		m.ttfb = append(m.ttfb, st.ttfb...)
		m.Bytes += st.bytes
		m.Errors += st.errs
		if st.firstErr != nil && m.FirstError == "" {
			m.FirstError = st.firstErr.Error()
		}
		auth = auth || st.auth
	}
	m.Requests = len(m.ttfb)
	m.PerSec = float64(m.Requests) / m.Seconds
	m.MBps = float64(m.Bytes) / m.Seconds / 1e6
	slices.Sort(m.ttfb)
	m.TTFBP50MS, m.TTFBP99MS = ms(percentile(m.ttfb, 0.50)), ms(percentile(m.ttfb, 0.99))
	if auth {
		return m, fmt.Errorf("%s %s: %w: %s", kind, variant, errNoCredential, m.FirstError)
	}
	return m, nil
}

// interceptSteps are one round's measurements, each run once per variant.
type interceptStep struct {
	kind     string
	conc     int
	duration time.Duration
}

func (cfg *interceptConfig) steps() []interceptStep {
	var steps []interceptStep
	for _, n := range cfg.Concurrency {
		steps = append(steps, interceptStep{kindKeepAlive, n, cfg.duration})
	}
	if cfg.BulkBytes > 0 && cfg.BulkConc > 0 {
		steps = append(steps, interceptStep{kindBulk, cfg.BulkConc, cfg.duration})
	}
	if cfg.newConnFor > 0 {
		steps = append(steps, interceptStep{kindNewConn, 1, cfg.newConnFor})
	}
	return steps
}

// runInterception checks the two variants, then measures them, interleaved
// round by round; an error means that a check failed or the upstream did
// not get the value, and the output says what was measured.
func runInterception(ctx context.Context, cfg interceptConfig, serverRoots *x509.CertPool, value, placeholder string) (interceptOutput, error) {
	if len(cfg.variants) == 0 {
		cfg.variants = interceptVariants
	}
	res := interceptOutput{Started: time.Now().UTC(), Config: cfg}
	caPEM, err := fetchProxyCA(ctx, cfg.Proxy.Proxy, cfg.timeout)
	res.Checks = append(res.Checks, check{Target: "proxy", What: "GET " + proxy.CAPath, Want: "200", Got: "200", OK: err == nil})
	if err != nil {
		res.Checks[0].Got = err.Error()
		return res, fmt.Errorf("the proxy's CA: %w", err)
	}
	proxyRoots := x509.NewCertPool()
	if !proxyRoots.AppendCertsFromPEM(caPEM) {
		return res, errors.New("the proxy's CA: no certificate in its answer")
	}
	ic := newInterceptClients(&cfg, serverRoots, proxyRoots, value, placeholder)
	res.Checks = append(res.Checks, interceptChecks(ctx, &cfg, ic, placeholder)...)
	failed := 0
	for _, ch := range res.Checks {
		mark := "ok"
		if !ch.OK {
			mark = "FAILED"
			failed++
		}
		logf("intercept check %-9s %-72s want %-4s got %-4s %s", ch.Target, ch.What, ch.Want, ch.Got, mark)
	}
	if failed > 0 {
		return res, fmt.Errorf("%d interception checks failed", failed)
	}

	started := time.Now()
	steps := cfg.steps()
	for round := range cfg.Rounds {
		for _, st := range steps {
			order := cfg.variants
			if round%2 == 1 {
				order = rotate(order, 1)
			}
			for _, v := range order {
				m, err := runInterceptMeasure(ctx, &cfg, ic, st.kind, v, st.conc, st.duration)
				m.Round = round
				res.Measures = append(res.Measures, m)
				logf("intercept %-9s c=%-3d round %d %-9s %8.0f req/s %8.1f MB/s  ttfb p50 %6.3f ms p99 %6.3f ms  errors %d  cpu proxy %.2fs server %.2fs client %.2fs other %.2fs",
					st.kind, st.conc, round, v, m.PerSec, m.MBps, m.TTFBP50MS, m.TTFBP99MS, m.Errors,
					m.CPU.Proxy, m.CPU.Server, m.CPU.Client, m.CPU.Other)
				if m.FirstError != "" {
					logf("  first error: %s", m.FirstError)
				}
				if err != nil {
					return res, err
				}
				time.Sleep(cfg.pause)
			}
		}
	}
	for _, st := range steps {
		for _, v := range cfg.variants {
			res.Summary = append(res.Summary, summariseIntercept(res.Measures, st.kind, v, st.conc))
		}
		if len(cfg.variants) == 2 {
			res.Ratios = append(res.Ratios, interceptRatios(&res, st.kind, st.conc)...)
		}
	}
	if cfg.Proxy.PID > 0 {
		res.MemAfter = readMem(cfg.Proxy.PID)
	}
	res.Elapsed = time.Since(started).Round(time.Second).String()
	return res, nil
}

func summariseIntercept(all []interceptMeasure, kind, variant string, conc int) interceptSummary {
	s := interceptSummary{Kind: kind, Variant: variant, Concurrency: conc}
	var rates, mbps []float64
	var ttfb []int64
	var cpu cpuUse
	var secs float64
	for _, m := range all {
		if m.Kind != kind || m.Variant != variant || m.Concurrency != conc {
			continue
		}
		s.Rounds++
		rates = append(rates, m.PerSec)
		mbps = append(mbps, m.MBps)
		s.Requests += m.Requests
		s.Errors += m.Errors
		if s.FirstError == "" {
			s.FirstError = m.FirstError
		}
		ttfb = append(ttfb, m.ttfb...)
		cpu.Proxy += m.CPU.Proxy
		cpu.Server += m.CPU.Server
		cpu.Client += m.CPU.Client
		cpu.Other += m.CPU.Other
		secs += m.Seconds
	}
	if s.Rounds == 0 {
		return s
	}
	slices.Sort(rates)
	slices.Sort(mbps)
	slices.Sort(ttfb)
	s.PerSec, s.PerSecMin, s.PerSecMax = median(rates), rates[0], rates[len(rates)-1]
	s.MBps = median(mbps)
	if len(ttfb) > 0 {
		s.TTFBP50MS, s.TTFBP99MS = ms(percentile(ttfb, 0.50)), ms(percentile(ttfb, 0.99))
	} else {
		// Read back from JSON: the rounds' own percentiles, median.
		var p50, p99 []float64
		for _, m := range all {
			if m.Kind == kind && m.Variant == variant && m.Concurrency == conc {
				p50, p99 = append(p50, m.TTFBP50MS), append(p99, m.TTFBP99MS)
			}
		}
		slices.Sort(p50)
		slices.Sort(p99)
		s.TTFBP50MS, s.TTFBP99MS = median(p50), median(p99)
	}
	if s.Requests > 0 {
		per := 1e6 / float64(s.Requests)
		s.ProxyUSPerReq, s.ServerUSPerReq, s.ClientUSPerReq = cpu.Proxy*per, cpu.Server*per, cpu.Client*per
	}
	if secs > 0 {
		s.ProxyCores = cpu.Proxy / secs
		s.CoresBusy = (cpu.Proxy + cpu.Server + cpu.Client) / secs
		s.OtherCores = cpu.Other / secs
	}
	return s
}

// interceptRatios are intercept / tunnel of one kind and concurrency: the
// rates round by round (each round's two measurements ran next to each
// other), the time to first byte of the pooled rounds.
func interceptRatios(res *interceptOutput, kind string, conc int) []interceptRatio {
	byRound := map[int][2]*interceptMeasure{}
	for i := range res.Measures {
		m := &res.Measures[i]
		if m.Kind != kind || m.Concurrency != conc {
			continue
		}
		v := byRound[m.Round]
		if m.Variant == variantTunnel {
			v[0] = m
		} else {
			v[1] = m
		}
		byRound[m.Round] = v
	}
	var rate, mb, p50 []float64
	for _, v := range byRound {
		if v[0] == nil || v[1] == nil {
			continue
		}
		if v[0].PerSec > 0 {
			rate = append(rate, v[1].PerSec/v[0].PerSec)
		}
		if v[0].MBps > 0 {
			mb = append(mb, v[1].MBps/v[0].MBps)
		}
		if v[0].TTFBP50MS > 0 {
			p50 = append(p50, v[1].TTFBP50MS/v[0].TTFBP50MS)
		}
	}
	mk := func(metric string, rs []float64) interceptRatio {
		med, lo, hi, n := medianRange(rs)
		return interceptRatio{Kind: kind, Concurrency: conc, Metric: metric, Median: med, Lo: lo, Hi: hi, N: n}
	}
	out := []interceptRatio{mk("per_sec", rate)}
	if kind == kindBulk {
		out = append(out, mk("mb_per_s", mb))
	}
	out = append(out, mk("ttfb_p50_rounds", p50))
	t := findInterceptSummary(res, kind, variantTunnel, conc)
	i := findInterceptSummary(res, kind, variantIntercept, conc)
	if t != nil && i != nil {
		for _, x := range []struct {
			metric string
			a, b   float64
		}{{"ttfb_p50", i.TTFBP50MS, t.TTFBP50MS}, {"ttfb_p99", i.TTFBP99MS, t.TTFBP99MS}} {
			r := ratio(x.a, x.b)
			out = append(out, interceptRatio{Kind: kind, Concurrency: conc, Metric: x.metric, Median: r, Lo: r, Hi: r, N: 1})
		}
	}
	return out
}

func findInterceptSummary(res *interceptOutput, kind, variant string, conc int) *interceptSummary {
	for i := range res.Summary {
		if s := &res.Summary[i]; s.Kind == kind && s.Variant == variant && s.Concurrency == conc {
			return s
		}
	}
	return nil
}

func findInterceptRatio(res *interceptOutput, kind string, conc int, metric string) *interceptRatio {
	for i := range res.Ratios {
		if r := &res.Ratios[i]; r.Kind == kind && r.Concurrency == conc && r.Metric == metric {
			return r
		}
	}
	return nil
}

func cmdIntercept(args []string) error {
	fs := flag.NewFlagSet("intercept", flag.ContinueOnError)
	serverDir := fs.String("server", "", "the test server's `DIR` (proxybench serve --dir)")
	var proxies proxyFlag
	fs.Var(&proxies, "proxy", "the proxy with the server's credential bound to INTERCEPT-HOST:PORT, `NAME=HOST:PORT@PID`; without it, one in this process")
	interceptHost := fs.String("intercept-host", "localhost", "the upstream's name that the credential is bound to")
	tunnelHost := fs.String("tunnel-host", "127.0.0.1", "the upstream's other name, not bound: a tunnel")
	concText := fs.String("conc", "1,16", "concurrency levels of the keep-alive measurement")
	rounds := fs.Int("rounds", 5, "rounds (variants interleaved, order alternated)")
	warmup := fs.Duration("warmup", 300*time.Millisecond, "warm-up before each measurement")
	duration := fs.Duration("duration", time.Second, "length of each keep-alive and bulk measurement")
	newConnFor := fs.Duration("newconn-duration", 500*time.Millisecond, "length of each new-connection measurement (0: none)")
	small := fs.Int("small", 1024, "bytes of a small response")
	bulkSize := fs.Int64("bulk-size", 1<<20, "bytes of a large response (0: none)")
	bulkConc := fs.Int("bulk-conc", 1, "concurrency of the large responses")
	timeout := fs.Duration("timeout", 10*time.Second, "timeout of one request")
	out := fs.String("out", "", "write the results as JSON to `FILE`")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of this process (with the in-process proxy) to `FILE`")
	only := fs.String("only", "", "measure this variant only, tunnel or intercept (for profiling; no ratios)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *serverDir == "" || *out == "" || len(proxies) > 1 {
		return errors.New("need --server, --out and at most one --proxy")
	}
	conc, err := parseInts(*concText)
	if err != nil {
		return err
	}
	info, roots, err := loadServer(*serverDir)
	if err != nil {
		return err
	}
	value, err := os.ReadFile(filepath.Join(info.CredDir, info.CredName))
	if err != nil {
		return fmt.Errorf("the credential's value: %w", err)
	}
	cfg := interceptConfig{
		InterceptHost: *interceptHost, TunnelHost: *tunnelHost, Port: info.TLSPort,
		Concurrency: conc, Rounds: *rounds, Warmup: warmup.String(), Duration: duration.String(),
		NewConnFor: newConnFor.String(), SmallBytes: *small, BulkBytes: *bulkSize, BulkConc: *bulkConc,
		Timeout: timeout.String(),
		warmup:  *warmup, duration: *duration, newConnFor: *newConnFor, timeout: *timeout, serverPID: info.PID,
		pause: 100 * time.Millisecond,
	}
	switch *only {
	case "":
		cfg.variants = interceptVariants
	case variantTunnel, variantIntercept:
		cfg.variants = []string{*only}
	default:
		return fmt.Errorf("--only %q: want tunnel or intercept", *only)
	}
	if len(proxies) == 1 {
		cfg.Proxy = proxies[0]
	} else {
		p, err := startInprocCredProxy(info, roots, strings.TrimSpace(string(value)), *interceptHost, *tunnelHost)
		if err != nil {
			return err
		}
		defer p.Close()
		cfg.Proxy = target{Name: "inproc", Proxy: p.addr, PID: os.Getpid()}
	}
	stopProfile, err := startCPUProfile(*cpuprofile)
	if err != nil {
		return err
	}
	res, err := runInterception(context.Background(), cfg, roots, strings.TrimSpace(string(value)), info.CredPlaceholder)
	stopProfile()
	if werr := writeJSON(*out, res); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return err
	}
	for _, r := range res.Ratios {
		if r.Metric == "per_sec" || r.Metric == "mb_per_s" {
			logf("intercept/tunnel %-9s c=%-3d %-8s %.2f× (rounds %.2f–%.2f)", r.Kind, r.Concurrency, r.Metric, r.Median, r.Lo, r.Hi)
		}
	}
	return nil
}

// startInprocCredProxy starts devaipod's proxy in this process with the
// server's credential bound to interceptHost:TLSPORT and the server's
// ports allowed by both names, as hack/bench-proxy.sh starts the binary.
func startInprocCredProxy(info serverInfo, roots *x509.CertPool, value, interceptHost, tunnelHost string) (*inprocProxy, error) {
	var allow []string
	for _, port := range []int{info.TLSPort, info.HTTPPort} {
		p := strconv.Itoa(port)
		allow = append(allow, interceptHost+":"+p, tunnelHost+":"+p)
	}
	return startInprocProxyOpts(proxy.Options{
		Allow:   allow,
		RootCAs: roots,
		Credentials: []proxy.Credential{{
			Name: info.CredName, Placeholder: info.CredPlaceholder, Value: value,
			Hosts: []string{net.JoinHostPort(interceptHost, strconv.Itoa(info.TLSPort))},
		}},
	})
}
