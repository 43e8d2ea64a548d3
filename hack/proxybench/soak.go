package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	_ "net/http/pprof" // served only with --pprof
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/devaipod/devaipod/proxy"
)

// inprocProxy is devaipod's proxy (package proxy) run in this process, so
// that its goroutines can be counted and its CPU profiled.
type inprocProxy struct {
	addr   string
	cancel context.CancelFunc
	done   chan error
	dir    string
}

func startInprocProxy(allow []string) (*inprocProxy, error) {
	return startInprocProxyOpts(proxy.Options{Allow: allow})
}

// startInprocProxyOpts starts it with opts, whose Pod, PolicyFile and
// Audit it sets.
func startInprocProxyOpts(opts proxy.Options) (*inprocProxy, error) {
	dir, err := os.MkdirTemp("", "proxybench-inproc-")
	if err != nil {
		return nil, err
	}
	opts.Pod, opts.PolicyFile, opts.Audit = "bench", dir+"/policy.json", io.Discard
	srv, err := proxy.New(opts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &inprocProxy{addr: ln.Addr().String(), cancel: cancel, done: make(chan error, 1), dir: dir}
	go func() { p.done <- srv.Serve(ctx, ln) }()
	return p, nil
}

func (p *inprocProxy) Close() error {
	p.cancel()
	err := <-p.done
	os.RemoveAll(p.dir)
	return err
}

// --------------------------------------------------------------------------
// soak
// --------------------------------------------------------------------------

// soakOps are the soak's kinds of request, with their weights: mostly what
// an agent does, plus the ways a client goes away early.
var soakOps = []struct {
	name   string
	weight int
}{
	{"short", 43},       // new tunnel, TLS, GET /small, close
	{"keepalive", 10},   // one tunnel, 5 GETs
	{"denied", 10},      // CONNECT to a port off the list: 403
	{"plain", 10},       // plain-HTTP GET through the proxy
	{"medium", 8},       // GET 4 MiB through a tunnel
	{"abort", 6},        // GET 64 MiB, read 256 KiB, close
	{"connect-only", 5}, // CONNECT, 200, close without a byte
	{"idle", 2},         // tunnel + TLS, 200 ms idle, GET, close
	{"garbage", 3},      // not HTTP at all
	{"silent-close", 3}, // connect to the proxy and close
}

type soakSample struct {
	T            float64 `json:"t_s"` // seconds since the load started (negative: before)
	Phase        string  `json:"phase"`
	ProxyFDs     int     `json:"proxy_fds"`
	ProxyRSSKB   int64   `json:"proxy_rss_kb"`
	ProxyThreads int64   `json:"proxy_threads"`
	Goroutines   int     `json:"inproc_goroutines"`
	InprocFDs    int     `json:"inproc_fds"` // this process: in-process proxy, client and its server side
	HeapKB       uint64  `json:"inproc_heap_kb"`
	Requests     int64   `json:"requests"`
	Failures     int64   `json:"failures"`
}

type growth struct {
	What      string `json:"what"`
	Before    int64  `json:"before"`    // idle, before the load
	After     int64  `json:"after"`     // idle, after the load and settling
	Max       int64  `json:"max"`       // the most seen under load
	EarlyMax  int64  `json:"early_max"` // the most in the first quarter of the load
	LateMax   int64  `json:"late_max"`  // the most in the last quarter
	Grows     bool   `json:"grows"`     // after > before+slack, or late_max > early_max*1.25+slack
	Slack     int64  `json:"slack"`
	Explained string `json:"explained,omitempty"`
}

type soakOutput struct {
	Started       time.Time         `json:"started"`
	Duration      string            `json:"duration"`
	Settle        string            `json:"settle"`
	Workers       int               `json:"workers_per_proxy"`
	Proxy         target            `json:"proxy"`
	Ops           map[string]int64  `json:"ops"`
	OpFailures    map[string]int64  `json:"op_failures"`
	FirstFailures map[string]string `json:"first_failures,omitempty"`
	Requests      int64             `json:"requests"`
	Failures      int64             `json:"failures"`
	Samples       []soakSample      `json:"samples"`
	Growth        []growth          `json:"growth"`
	SettledAfter  string            `json:"settled_after"`
}

type soakRunner struct {
	c        *client
	info     serverInfo
	mu       sync.Mutex
	ops      map[string]int64
	opFail   map[string]int64
	firstErr map[string]string
	req, bad atomic.Int64
}

func (s *soakRunner) note(op string, err error) {
	s.req.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops[op]++
	if err != nil {
		s.bad.Add(1)
		s.opFail[op]++
		if _, ok := s.firstErr[op]; !ok {
			s.firstErr[op] = err.Error()
		}
	}
}

// do runs one op through the proxy at addr; only an unexpected outcome is an
// error.
func (s *soakRunner) do(ctx context.Context, op, addr string, buf []byte) error {
	c, port := s.c, s.info.TLSPort
	switch op {
	case "short":
		_, err := c.shortHTTPS(ctx, addr, port, buf)
		return err
	case "keepalive":
		ss, _, err := c.dialTLS(ctx, addr, port)
		if err != nil {
			return err
		}
		defer ss.Close()
		for i := range 5 {
			if _, err := ss.get("/small", i < 4, 0, buf); err != nil {
				return fmt.Errorf("request %d: %w", i+1, err)
			}
		}
		return nil
	case "denied":
		conn, _, err := c.tunnel(ctx, addr, 1)
		if conn != nil {
			conn.Close()
			return errors.New("CONNECT to port 1 got 200")
		}
		var se *statusError
		if errors.As(err, &se) && se.code == http.StatusForbidden {
			return nil
		}
		return err
	case "plain":
		_, err := c.plainHTTP(ctx, addr, s.info.HTTPPort, "/small", buf)
		return err
	case "medium":
		ss, _, err := c.dialTLS(ctx, addr, port)
		if err != nil {
			return err
		}
		defer ss.Close()
		_, err = ss.get("/bytes?n="+fmt.Sprint(4<<20), false, 0, buf)
		return err
	case "abort":
		ss, _, err := c.dialTLS(ctx, addr, port)
		if err != nil {
			return err
		}
		_, err = ss.get("/bytes?n="+fmt.Sprint(64<<20), false, 256<<10, buf)
		ss.raw.Close() // no close_notify: the client just goes away
		return err
	case "connect-only":
		conn, _, err := c.tunnel(ctx, addr, port)
		if err != nil {
			return err
		}
		return conn.Close()
	case "idle":
		ss, _, err := c.dialTLS(ctx, addr, port)
		if err != nil {
			return err
		}
		defer ss.Close()
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return nil
		}
		_, err = ss.get("/small", false, 0, buf)
		return err
	case "garbage":
		conn, err := c.dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(c.timeout))
		io.WriteString(conn, "\x16\x03\x01 this is not HTTP\r\n\r\n")
		io.Copy(io.Discard, conn) // the proxy answers 400 and closes
		return nil
	case "silent-close":
		conn, err := c.dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	return fmt.Errorf("unknown op %q", op)
}

func pickOp(r *rand.Rand) string {
	total := 0
	for _, o := range soakOps {
		total += o.weight
	}
	n := r.IntN(total)
	for _, o := range soakOps {
		if n < o.weight {
			return o.name
		}
		n -= o.weight
	}
	return soakOps[0].name
}

func cmdSoak(args []string) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	serverDir := fs.String("server", "", "the test server's `DIR`")
	var proxies proxyFlag
	fs.Var(&proxies, "proxy", "the proxy binary to soak, `NAME=HOST:PORT@PID`")
	var allow listFlag
	fs.Var(&allow, "allow", "a rule for the in-process proxy (repeatable): the binary's rules")
	host := fs.String("host", "localhost", "the name the test server is reached by")
	duration := fs.Duration("duration", 10*time.Minute, "how long the load runs")
	settle := fs.Duration("settle", 100*time.Second, "how long, at most, to wait after the load for the counts to come back down")
	workers := fs.Int("workers", 8, "concurrent clients per proxy")
	interval := fs.Duration("interval", 0, "sample every `D` (0: duration/40, at least 1s)")
	timeout := fs.Duration("timeout", 10*time.Second, "timeout of one request")
	out := fs.String("out", "", "write the results as JSON to `FILE`")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on `ADDR` (127.0.0.1:PORT)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *serverDir == "" || *out == "" || len(proxies) != 1 || len(allow) == 0 {
		return errors.New("need --server, --out, one --proxy and its --allow rules")
	}
	if *interval <= 0 {
		*interval = max(time.Second, *duration/40)
	}
	if *pprofAddr != "" {
		go http.ListenAndServe(*pprofAddr, nil)
	}
	info, roots, err := loadServer(*serverDir)
	if err != nil {
		return err
	}
	bin := proxies[0]
	inproc, err := startInprocProxy(allow)
	if err != nil {
		return fmt.Errorf("in-process proxy: %w", err)
	}
	defer inproc.Close()

	s := &soakRunner{
		c: newClient(*host, roots, *timeout), info: info,
		ops: map[string]int64{}, opFail: map[string]int64{}, firstErr: map[string]string{},
	}
	res := soakOutput{
		Started: time.Now().UTC(), Duration: duration.String(), Settle: settle.String(),
		Workers: *workers, Proxy: bin,
	}
	var loadStart time.Time
	sample := func(phase string) soakSample {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		sm := soakSample{
			Phase:        phase,
			ProxyFDs:     fdCount(bin.PID),
			ProxyRSSKB:   statusKB(bin.PID, "VmRSS"),
			ProxyThreads: statusInt(bin.PID, "Threads"),
			Goroutines:   runtime.NumGoroutine(),
			InprocFDs:    fdCount(os.Getpid()),
			HeapKB:       ms.HeapInuse >> 10,
			Requests:     s.req.Load(),
			Failures:     s.bad.Load(),
		}
		if !loadStart.IsZero() {
			sm.T = time.Since(loadStart).Seconds()
		}
		res.Samples = append(res.Samples, sm)
		return sm
	}

	// Idle baseline: the in-process proxy has served one request (so that
	// its lazily started parts exist), as has the binary.
	warm := make([]byte, 16<<10)
	for _, a := range []string{bin.Proxy, inproc.addr} {
		if _, err := s.c.shortHTTPS(context.Background(), a, info.TLSPort, warm); err != nil {
			return fmt.Errorf("first request through %s: %w", a, err)
		}
		if _, err := s.c.plainHTTP(context.Background(), a, info.HTTPPort, "/small", warm); err != nil {
			return fmt.Errorf("first plain request through %s: %w", a, err)
		}
	}
	time.Sleep(2 * time.Second)
	before := sample("before")
	logf("soak: before: proxy fds %d, in-process goroutines %d, fds %d", before.ProxyFDs, before.Goroutines, before.InprocFDs)

	loadStart = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 2 * *workers {
		addr := bin.Proxy
		if w%2 == 1 {
			addr = inproc.addr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			buf := make([]byte, 64<<10)
			for ctx.Err() == nil {
				op := pickOp(r)
				err := s.do(ctx, op, addr, buf)
				if ctx.Err() != nil {
					return // cut short by the end of the soak: not counted
				}
				s.note(op, err)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	tick := time.NewTicker(*interval)
	next := time.Now().Add(time.Minute)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			sm := sample("load")
			if time.Now().After(next) {
				next = next.Add(time.Minute)
				logf("soak: %3.0fs: %d requests, %d failed; proxy fds %d rss %d KiB; in-process goroutines %d",
					sm.T, sm.Requests, sm.Failures, sm.ProxyFDs, sm.ProxyRSSKB, sm.Goroutines)
			}
		}
	}
	tick.Stop()
	wg.Wait()
	loadEnd := time.Now()

	// Settle: the clients have closed everything; wait for both proxies to
	// close their side (the binary's plain-HTTP upstream connections idle
	// out after 90 s).
	var after soakSample
	settleEnd := loadEnd.Add(*settle)
	for {
		time.Sleep(time.Second)
		after = sample("settle")
		if after.ProxyFDs <= before.ProxyFDs && after.Goroutines <= before.Goroutines && after.InprocFDs <= before.InprocFDs {
			break
		}
		if time.Now().After(settleEnd) {
			break
		}
	}
	res.SettledAfter = time.Since(loadEnd).Round(time.Second).String()
	after.Phase = "after"
	res.Samples[len(res.Samples)-1] = after
	res.Ops, res.OpFailures, res.FirstFailures = s.ops, s.opFail, s.firstErr
	res.Requests, res.Failures = s.req.Load(), s.bad.Load()
	logf("soak: after %s settling: proxy fds %d, in-process goroutines %d, fds %d; %d requests, %d failed",
		res.SettledAfter, after.ProxyFDs, after.Goroutines, after.InprocFDs, res.Requests, res.Failures)

	res.Growth = []growth{
		measureGrowth("binary proxy: open fds", res.Samples, func(s soakSample) int64 { return int64(s.ProxyFDs) }, 2),
		measureGrowth("binary proxy: threads", res.Samples, func(s soakSample) int64 { return s.ProxyThreads }, 2),
		measureGrowth("in-process proxy: goroutines", res.Samples, func(s soakSample) int64 { return int64(s.Goroutines) }, 2),
		measureGrowth("in-process: open fds", res.Samples, func(s soakSample) int64 { return int64(s.InprocFDs) }, 2),
	}
	for _, g := range res.Growth {
		logf("soak: %-30s before %4d  max %5d  early max %5d  late max %5d  after %4d  grows: %v",
			g.What, g.Before, g.Max, g.EarlyMax, g.LateMax, g.After, g.Grows)
	}
	return writeJSON(*out, res)
}

// measureGrowth compares the idle counts before and after the load, and
// the peaks of the load's first and last quarters.
func measureGrowth(what string, samples []soakSample, f func(soakSample) int64, slack int64) growth {
	g := growth{What: what, Slack: slack}
	var load []int64
	for _, s := range samples {
		switch s.Phase {
		case "before":
			g.Before = f(s)
		case "after":
			g.After = f(s)
		case "load":
			load = append(load, f(s))
		}
	}
	q := max(1, len(load)/4)
	for i, v := range load {
		g.Max = max(g.Max, v)
		if i < q {
			g.EarlyMax = max(g.EarlyMax, v)
		}
		if i >= len(load)-q {
			g.LateMax = max(g.LateMax, v)
		}
	}
	g.Grows = g.After > g.Before+slack || float64(g.LateMax) > float64(g.EarlyMax)*1.25+float64(slack)
	return g
}

// --------------------------------------------------------------------------
// inproc: load against the in-process proxy only, for profiling
// --------------------------------------------------------------------------

func cmdInproc(args []string) error {
	fs := flag.NewFlagSet("inproc", flag.ContinueOnError)
	serverDir := fs.String("server", "", "the test server's `DIR`")
	var allow listFlag
	fs.Var(&allow, "allow", "a rule (repeatable)")
	host := fs.String("host", "localhost", "the name the test server is reached by")
	conc := fs.Int("conc", 16, "concurrent clients (short mode)")
	duration := fs.Duration("duration", 10*time.Second, "how long (short mode)")
	mode := fs.String("mode", "short", "short (tunnels per second) or bulk (one large download)")
	bulkSize := fs.Int64("bulk-size", 1<<30, "bytes in the bulk transfer")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole process to `FILE`")
	memprofile := fs.String("memprofile", "", "write an allocation profile to `FILE`")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on `ADDR`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *serverDir == "" || len(allow) == 0 {
		return errors.New("need --server and --allow rules")
	}
	if *pprofAddr != "" {
		go http.ListenAndServe(*pprofAddr, nil)
	}
	info, roots, err := loadServer(*serverDir)
	if err != nil {
		return err
	}
	p, err := startInprocProxy(allow)
	if err != nil {
		return err
	}
	defer p.Close()
	c := newClient(*host, roots, 10*time.Second)
	t := target{Name: "inproc", Proxy: p.addr}
	stopProfile, err := startCPUProfile(*cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	if *memprofile != "" {
		runtime.MemProfileRate = 4096
		defer func() {
			if f, err := os.Create(*memprofile); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	switch *mode {
	case "short":
		r := runLoad(context.Background(), c, loadSpec{target: t, port: info.TLSPort, concurrency: *conc,
			warmup: time.Second, duration: *duration, serverPID: info.PID})
		logf("inproc c=%d: %.0f tunnels/s p50 %.2f ms p99 %.2f ms errors %d %s", *conc, r.PerSec, r.P50MS, r.P99MS, r.Errors, r.FirstError)
	case "bulk":
		r := runBulk(context.Background(), c, t, info.TLSPort, *bulkSize, info.PID)
		logf("inproc bulk: %.1f MB/s in %.2fs %s", r.MBps, r.Seconds, r.Error)
	default:
		return fmt.Errorf("unknown mode %q", *mode)
	}
	return nil
}

// --------------------------------------------------------------------------
// proxy: the proxy alone in this process, as "devaipod-helper proxy" runs
// it, with profiles
// --------------------------------------------------------------------------

func cmdProxy(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen on `HOST:PORT`")
	var allow listFlag
	fs.Var(&allow, "allow", "a rule (repeatable)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile to `FILE` (until SIGTERM)")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on `ADDR`")
	life := fs.Duration("for", 10*time.Minute, "stop after this long at the latest")
	serverDir := fs.String("server", "", "bind the credential of the test server in `DIR` to --credential-host:TLSPORT, trusting its CA upstream (as proxybench intercept wants)")
	credHost := fs.String("credential-host", "localhost", "with --server: the host the credential is bound to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := proxy.Options{Pod: "bench", Allow: allow, Audit: os.Stdout}
	if *serverDir != "" {
		info, roots, err := loadServer(*serverDir)
		if err != nil {
			return err
		}
		value, err := os.ReadFile(filepath.Join(info.CredDir, info.CredName))
		if err != nil {
			return err
		}
		opts.RootCAs = roots
		opts.Credentials = []proxy.Credential{{Name: info.CredName, Placeholder: info.CredPlaceholder,
			Value: strings.TrimSpace(string(value)), Hosts: []string{net.JoinHostPort(*credHost, strconv.Itoa(info.TLSPort))}}}
	}
	if *pprofAddr != "" {
		runtime.MemProfileRate = 4096
		go http.ListenAndServe(*pprofAddr, nil)
	}
	// The runtime settings of "devaipod-helper proxy".
	defer proxy.TuneRuntime(os.Getenv)()
	dir, err := os.MkdirTemp("", "proxybench-proxy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	opts.PolicyFile = dir + "/policy.json"
	srv, err := proxy.New(opts)
	if err != nil {
		return err
	}
	// As "devaipod-helper proxy" listens on TCP: no keep-alive.
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", *listen)
	if err != nil {
		return err
	}
	logf("proxy listening on %s", ln.Addr())
	stopProfile, err := startCPUProfile(*cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *life)
	defer cancel()
	if len(opts.Credentials) > 0 && os.Getenv("GOMAXPROCS") == "" {
		go proxy.AdaptMaxProcs(ctx, srv, 50*time.Millisecond) // as the helper does
	}
	return srv.Serve(ctx, ln)
}

// startCPUProfile profiles the process into path ("" for no profile) until
// the returned func is called.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
