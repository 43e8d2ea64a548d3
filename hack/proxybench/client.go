package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// client makes the benchmark's requests. Every request opens a new TCP
// connection (to the proxy, or directly), so every HTTPS request is a new
// CONNECT tunnel and a full TLS handshake; nothing is kept alive between
// requests.
type client struct {
	host    string // the name the test server is reached by (localhost)
	tlsConf *tls.Config
	timeout time.Duration // per request, end to end
	dialer  net.Dialer
}

func newClient(host string, roots *x509.CertPool, timeout time.Duration) *client {
	return &client{
		host: host,
		tlsConf: &tls.Config{
			RootCAs:    roots,
			ServerName: host,
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"},
			// No ClientSessionCache: every tunnel is a full handshake, as
			// for a client that starts afresh (curl, a new process).
		},
		timeout: timeout,
		dialer:  net.Dialer{Timeout: timeout},
	}
}

// statusError is a proxy's or server's answer other than the one wanted.
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("status %d: %.120q", e.code, e.body)
}

// tunnel connects to host:port, directly if proxy is "" or else through a
// CONNECT to proxy (host:port). It returns the connection, with a deadline
// timeout from now, and how long the CONNECT took (dial to 200).
func (c *client) tunnel(ctx context.Context, proxy string, port int) (net.Conn, time.Duration, error) {
	target := net.JoinHostPort(c.host, strconv.Itoa(port))
	start := time.Now()
	addr := proxy
	if proxy == "" {
		addr = target
	}
	conn, err := c.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	conn.SetDeadline(start.Add(c.timeout))
	if proxy == "" {
		return conn, 0, nil
	}
	if _, err := io.WriteString(conn, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\nUser-Agent: proxybench\r\n\r\n"); err != nil {
		conn.Close()
		return nil, 0, err
	}
	if err := readConnectResponse(conn); err != nil {
		conn.Close()
		return nil, 0, err
	}
	return conn, time.Since(start), nil
}

// readConnectResponse reads a proxy's answer to CONNECT: nil for 200 (and
// nothing read past it), a *statusError with the body otherwise.
func readConnectResponse(conn net.Conn) error {
	br := bufio.NewReaderSize(conn, 1024)
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return fmt.Errorf("reading CONNECT response: %w", err)
	}
	// "HTTP/1.1 200 Connection established"
	_, rest, ok := cutSpace(line)
	codeText, _, _ := cutSpace(rest)
	code, err := strconv.Atoi(codeText)
	if !ok || err != nil {
		return fmt.Errorf("bad CONNECT response %.80q", line)
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return fmt.Errorf("reading CONNECT response headers: %w", err)
	}
	if code == http.StatusOK {
		if br.Buffered() > 0 {
			return errors.New("proxy sent bytes after its 200 to CONNECT")
		}
		return nil
	}
	var body []byte
	if n, err := strconv.Atoi(hdr.Get("Content-Length")); err == nil && n > 0 {
		body = make([]byte, min(n, 4096))
		n, _ := io.ReadFull(br, body)
		body = body[:n]
	}
	return &statusError{code: code, body: string(body)}
}

func cutSpace(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// session is one TLS connection to the test server, through a tunnel or
// direct.
type session struct {
	c    *client
	port int
	raw  net.Conn
	tls  *tls.Conn
	br   *bufio.Reader
}

// dialTLS opens a tunnel (or a direct connection) and does the TLS
// handshake.
func (c *client) dialTLS(ctx context.Context, proxy string, port int) (*session, time.Duration, error) {
	raw, connectTime, err := c.tunnel(ctx, proxy, port)
	if err != nil {
		return nil, 0, err
	}
	tc := tls.Client(raw, c.tlsConf)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, 0, fmt.Errorf("TLS handshake: %w", err)
	}
	return &session{c: c, port: port, raw: raw, tls: tc, br: bufio.NewReaderSize(tc, 4096)}, connectTime, nil
}

// get sends GET path and reads the answer's body, all of it or (limit > 0)
// at most limit bytes, into buf-sized reads. It returns the body bytes read.
func (s *session) get(path string, keepAlive bool, limit int64, buf []byte) (int64, error) {
	conn := "close"
	if keepAlive {
		conn = "keep-alive"
	}
	s.raw.SetDeadline(time.Now().Add(s.c.timeout))
	req := "GET " + path + " HTTP/1.1\r\nHost: " + net.JoinHostPort(s.c.host, strconv.Itoa(s.port)) +
		"\r\nUser-Agent: proxybench\r\nConnection: " + conn + "\r\n\r\n"
	if _, err := io.WriteString(s.tls, req); err != nil {
		return 0, err
	}
	return readResponse(s.br, limit, buf)
}

// readResponse reads an HTTP response from br and its body (up to limit
// bytes if limit > 0); anything but 200 is a *statusError.
func readResponse(br *bufio.Reader, limit int64, buf []byte) (int64, error) {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, &statusError{code: resp.StatusCode, body: string(b)}
	}
	var n int64
	for limit <= 0 || n < limit {
		k, err := resp.Body.Read(buf)
		n += int64(k)
		if err == io.EOF {
			if resp.ContentLength >= 0 && n != resp.ContentLength {
				return n, fmt.Errorf("body: got %d bytes of %d", n, resp.ContentLength)
			}
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (s *session) Close() error { return s.tls.Close() }

// shortHTTPS is one benchmark request: a new tunnel, a TLS handshake, GET
// /small, close. It returns the time to the CONNECT's 200.
func (c *client) shortHTTPS(ctx context.Context, proxy string, port int, buf []byte) (time.Duration, error) {
	s, connectTime, err := c.dialTLS(ctx, proxy, port)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	n, err := s.get("/small", false, 0, buf)
	if err == nil && n != smallSize {
		err = fmt.Errorf("short body: %d bytes", n)
	}
	return connectTime, err
}

// plainHTTP sends GET http://host:port/path through proxy as a plain-HTTP
// proxy request (or directly), on a new connection, and reads the body.
func (c *client) plainHTTP(ctx context.Context, proxy string, port int, path string, buf []byte) (int64, error) {
	hostPort := net.JoinHostPort(c.host, strconv.Itoa(port))
	addr, target := proxy, "http://"+hostPort+path
	if proxy == "" {
		addr, target = hostPort, path
	}
	conn, err := c.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(c.timeout))
	req := "GET " + target + " HTTP/1.1\r\nHost: " + hostPort + "\r\nUser-Agent: proxybench\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, err
	}
	return readResponse(bufio.NewReaderSize(conn, 4096), 0, buf)
}

// --------------------------------------------------------------------------
// load: N workers for a fixed time
// --------------------------------------------------------------------------

// cpuUse is CPU seconds used during a measurement, per process.
type cpuUse struct {
	Proxy  float64 `json:"proxy"`
	Server float64 `json:"server"`
	Client float64 `json:"client"`
	// Other is the machine's busy time not spent in these three: other
	// processes, the kernel's softirq work for everyone.
	Other float64 `json:"other"`
}

// loadResult is one measurement: one target, one concurrency, one round.
type loadResult struct {
	Target       string  `json:"target"`
	Concurrency  int     `json:"concurrency"`
	Round        int     `json:"round"`
	Seconds      float64 `json:"seconds"`
	Requests     int     `json:"requests"`
	Errors       int     `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	PerSec       float64 `json:"per_sec"`
	P50MS        float64 `json:"p50_ms"`
	P90MS        float64 `json:"p90_ms"`
	P99MS        float64 `json:"p99_ms"`
	MaxMS        float64 `json:"max_ms"`
	ConnectP50MS float64 `json:"connect_p50_ms"`
	ConnectP99MS float64 `json:"connect_p99_ms"`
	CPU          cpuUse  `json:"cpu_seconds"`

	lat, conn []int64 // nanoseconds, for pooling across rounds
}

// loadSpec says what to measure.
type loadSpec struct {
	target      target
	port        int
	concurrency int
	warmup      time.Duration
	duration    time.Duration
	serverPID   int
}

// runLoad runs spec.concurrency workers, each doing shortHTTPS in a loop,
// for warmup+duration, and measures the requests that end within the
// duration after the warm-up.
func runLoad(ctx context.Context, c *client, spec loadSpec) loadResult {
	type workerStats struct {
		lat, conn []int64
		errs      int
		firstErr  error
	}
	start := time.Now()
	t0 := start.Add(spec.warmup)
	t1 := t0.Add(spec.duration)
	ctx, cancel := context.WithDeadline(ctx, t1.Add(c.timeout))
	defer cancel()

	stats := make([]workerStats, spec.concurrency)
	var wg sync.WaitGroup
	for w := range spec.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &stats[w]
			st.lat = make([]int64, 0, 4096)
			buf := make([]byte, 16<<10)
			for {
				s := time.Now()
				if !s.Before(t1) || ctx.Err() != nil {
					return
				}
				connectTime, err := c.shortHTTPS(ctx, spec.target.Proxy, spec.port, buf)
				e := time.Now()
				if e.Before(t0) || e.After(t1) {
					continue
				}
				if err != nil {
					st.errs++
					if st.firstErr == nil {
						st.firstErr = err
					}
					time.Sleep(5 * time.Millisecond) // no hot loop on a refused dial
					continue
				}
				st.lat = append(st.lat, int64(e.Sub(s)))
				if spec.target.Proxy != "" {
					st.conn = append(st.conn, int64(connectTime))
				}
			}
		}()
	}

	// CPU of the proxy, the server and this process over [t0, t1].
	sample := func() cpuUse {
		u := cpuUse{Client: cpuSeconds(os.Getpid()), Other: cpuBusy()}
		if spec.target.PID > 0 {
			u.Proxy = treeCPUSeconds(spec.target.PID)
		}
		if spec.serverPID > 0 && spec.serverPID != os.Getpid() {
			u.Server = cpuSeconds(spec.serverPID)
		}
		return u
	}
	time.Sleep(time.Until(t0))
	c0 := sample()
	time.Sleep(time.Until(t1))
	c1 := sample()
	wg.Wait()

	r := loadResult{
		Target:      spec.target.Name,
		Concurrency: spec.concurrency,
		Seconds:     spec.duration.Seconds(),
		CPU: cpuUse{
			Proxy:  c1.Proxy - c0.Proxy,
			Server: c1.Server - c0.Server,
			Client: c1.Client - c0.Client,
		},
	}
	r.CPU.Other = max(0, c1.Other-c0.Other-r.CPU.Proxy-r.CPU.Server-r.CPU.Client)
	for _, st := range stats {
		r.lat = append(r.lat, st.lat...)
		r.conn = append(r.conn, st.conn...)
		r.Errors += st.errs
		if st.firstErr != nil && r.FirstError == "" {
			r.FirstError = st.firstErr.Error()
		}
	}
	r.Requests = len(r.lat)
	r.PerSec = float64(r.Requests) / r.Seconds
	r.fillPercentiles()
	return r
}

func (r *loadResult) fillPercentiles() {
	slices.Sort(r.lat)
	slices.Sort(r.conn)
	r.P50MS = ms(percentile(r.lat, 0.50))
	r.P90MS = ms(percentile(r.lat, 0.90))
	r.P99MS = ms(percentile(r.lat, 0.99))
	r.MaxMS = ms(percentile(r.lat, 1))
	r.ConnectP50MS = ms(percentile(r.conn, 0.50))
	r.ConnectP99MS = ms(percentile(r.conn, 0.99))
}

// percentile is the q-quantile (nearest rank) of sorted, 0 if empty.
func percentile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// --------------------------------------------------------------------------
// bulk: one large download through one tunnel
// --------------------------------------------------------------------------

type bulkResult struct {
	Target  string  `json:"target"`
	Rep     int     `json:"rep"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	MBps    float64 `json:"mb_per_s"` // 10^6 bytes per second
	CPU     cpuUse  `json:"cpu_seconds"`
	Error   string  `json:"error,omitempty"`
}

func runBulk(ctx context.Context, c *client, t target, port int, size int64, serverPID int) bulkResult {
	r := bulkResult{Target: t.Name}
	c0p, c0s, c0c := treeCPUSecondsOr0(t.PID), cpuSeconds(serverPID), cpuSeconds(os.Getpid())
	start := time.Now()
	n, err := func() (int64, error) {
		// A 1 GiB transfer on a slow machine may take a while: the
		// deadline is the client's timeout per 64 MiB.
		bc := *c
		bc.timeout = c.timeout * time.Duration(1+size/(64<<20))
		s, _, err := bc.dialTLS(ctx, t.Proxy, port)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		return s.get("/bytes?n="+strconv.FormatInt(size, 10), false, 0, make([]byte, 256<<10))
	}()
	el := time.Since(start)
	r.Bytes, r.Seconds = n, el.Seconds()
	r.CPU = cpuUse{
		Proxy:  treeCPUSecondsOr0(t.PID) - c0p,
		Server: cpuSeconds(serverPID) - c0s,
		Client: cpuSeconds(os.Getpid()) - c0c,
	}
	if err == nil && n != size {
		err = fmt.Errorf("got %d bytes of %d", n, size)
	}
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.MBps = float64(n) / el.Seconds() / 1e6
	return r
}

func treeCPUSecondsOr0(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	return treeCPUSeconds(pid)
}

// counter is a shared request counter for the soak.
type counter struct{ ok, fail atomic.Int64 }
