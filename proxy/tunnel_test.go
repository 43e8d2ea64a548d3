package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// A server for tunnel tests: it reads a line "UP DOWN PAUSE" (DOWN bytes to
// send, PAUSE between 1 KiB pieces, as Go durations, 0 for none), then UP
// bytes, answers with the SHA-256 of what it read and then DOWN bytes of a
// known pattern, and closes. With UP -1 it reads until the client's
// half-close instead; with DOWN -1 it sends nothing and keeps the
// connection open until the client closes it.
func newTunnelServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serveTunnelTest(c)
			})
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return portOf(t, ln.Addr().String())
}

func serveTunnelTest(c net.Conn) {
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	var up, down int64
	var pauseText string
	if _, err := fmt.Fscanf(br, "%d %d %s\n", &up, &down, &pauseText); err != nil {
		return
	}
	pause, err := time.ParseDuration(pauseText)
	if err != nil {
		return
	}
	h := sha256.New()
	src := io.Reader(br)
	if up >= 0 {
		src = io.LimitReader(br, up)
	}
	if _, err := io.Copy(h, src); err != nil {
		return
	}
	if _, err := c.Write(h.Sum(nil)); err != nil {
		return
	}
	if down < 0 {
		io.Copy(io.Discard, br)
		return
	}
	data, piece := pattern(int(down)), 64<<10
	if pause > 0 {
		piece = 1 << 10
	}
	for len(data) > 0 {
		k := min(len(data), piece)
		time.Sleep(pause)
		if _, err := c.Write(data[:k]); err != nil {
			return
		}
		data = data[k:]
	}
}

// pattern is n bytes of a pattern that does not repeat every power of two.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// tunnelTo opens a CONNECT tunnel through the proxy at addr (network tcp
// or unix) to target.
func tunnelTo(t *testing.T, network, addr, target string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s = %d", target, resp.StatusCode)
	}
	return conn, br
}

// exchangeThrough sends up bytes, reads the server's hash of them and down
// bytes back, checking both.
func exchangeThrough(t *testing.T, conn net.Conn, br *bufio.Reader, up, down int, pause time.Duration) {
	t.Helper()
	fmt.Fprintf(conn, "%d %d %s\n", up, down, pause)
	payload := pattern(up)
	go conn.Write(payload)
	sum := make([]byte, sha256.Size)
	if _, err := io.ReadFull(br, sum); err != nil {
		t.Fatalf("reading the server's hash: %v", err)
	}
	if want := sha256.Sum256(payload); !bytes.Equal(sum, want[:]) {
		t.Fatal("the server got other bytes than were sent")
	}
	got, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("reading %d bytes: %v", down, err)
	}
	if !bytes.Equal(got, pattern(down)) {
		t.Fatalf("got %d bytes, not the %d sent", len(got), down)
	}
}

// lineLen is the length of the request line exchangeThrough sends.
func lineLen(up, down int, pause time.Duration) int64 {
	return int64(len(fmt.Sprintf("%d %d %s\n", up, down, pause)))
}

// hiddenListener hands out connections that hide their type, so that the
// proxy cannot reach the socket (readBlocking).
type hiddenListener struct{ net.Listener }

type hiddenConn struct{ net.Conn }

func (l hiddenListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return hiddenConn{c}, nil
}

// startProxyOn is startProxy on a listener of the test's choice.
func startProxyOn(t *testing.T, ln net.Listener, opts Options) *testProxy {
	t.Helper()
	p := &testProxy{audit: &auditBuffer{}, done: make(chan error, 1), addr: ln.Addr().String()}
	p.url = &url.URL{Scheme: "http", Host: p.addr}
	opts.Pod = "demo"
	opts.Audit = p.audit
	var err error
	if p.s, err = New(opts); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	p.audit.flush = p.s.audit.flush
	var ctx context.Context
	ctx, p.cancel = context.WithCancel(context.Background())
	go func() { p.done <- p.s.Serve(ctx, ln) }()
	t.Cleanup(p.stop)
	return p
}

// TestTunnelBytes moves data both ways through tunnels, with the client on
// TCP, on a unix socket and on a connection the proxy cannot see through,
// and checks the data and the audited byte counts.
func TestTunnelBytes(t *testing.T) {
	t.Parallel()
	target := "127.0.0.1:" + strconv.Itoa(newTunnelServer(t))
	opts := Options{Allow: []string{target}}
	listeners := map[string]func() (net.Listener, string){
		"tcp": func() (net.Listener, string) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			return ln, "tcp"
		},
		"unix": func() (net.Listener, string) {
			ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "proxy.sock"))
			if err != nil {
				if os.Getenv("CI") != "" {
					t.Fatalf("unix socket under CI: %v", err)
				}
				t.Skipf("no unix sockets here: %v", err)
			}
			return ln, "unix"
		},
		"hidden": func() (net.Listener, string) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			return hiddenListener{ln}, "tcp"
		},
	}
	for name, listen := range listeners {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ln, network := listen()
			p := startProxyOn(t, ln, opts)
			for _, size := range []struct{ up, down int }{{0, 0}, {1, 1}, {100, 3 << 20}, {3 << 20, 100}, {5 << 20, 5 << 20}} {
				conn, br := tunnelTo(t, network, p.addr, target)
				exchangeThrough(t, conn, br, size.up, size.down, 0)
				conn.Close()
				wantUp := int64(size.up) + lineLen(size.up, size.down, 0)
				wantDown := int64(size.down) + sha256.Size
				r := p.audit.waitRecord(t, fmt.Sprintf("for %d up, %d down", size.up, size.down), func(r Record) bool {
					return r.Method == http.MethodConnect && r.BytesUp == wantUp
				})
				if r.BytesDown != wantDown || r.Decision != DecisionAllow || r.Status != 200 || r.Reason != "" {
					t.Errorf("%d up, %d down: audit record %+v; want bytes_down %d", size.up, size.down, r, wantDown)
				}
			}
		})
	}
}

// TestTunnelHalfClose: the client's half-close reaches the server, and the
// server's answer still reaches the client.
func TestTunnelHalfClose(t *testing.T) {
	t.Parallel()
	target := "127.0.0.1:" + strconv.Itoa(newTunnelServer(t))
	p := startProxy(t, Options{Allow: []string{target}})
	conn, br := tunnelTo(t, "tcp", p.addr, target)
	payload := pattern(200 << 10)
	fmt.Fprintf(conn, "-1 %d 0s\n", 300<<10)
	conn.Write(payload)
	conn.(*net.TCPConn).CloseWrite()
	sum := make([]byte, sha256.Size)
	if _, err := io.ReadFull(br, sum); err != nil {
		t.Fatalf("no answer after the half-close: %v", err)
	}
	if want := sha256.Sum256(payload); !bytes.Equal(sum, want[:]) {
		t.Fatal("the server got other bytes than were sent")
	}
	got, err := io.ReadAll(br)
	if err != nil || !bytes.Equal(got, pattern(300<<10)) {
		t.Fatalf("read %d bytes, %v; want %d", len(got), err, 300<<10)
	}
	p.audit.waitRecord(t, "for the half-closed tunnel", func(r Record) bool {
		return r.Method == http.MethodConnect && r.BytesDown == 300<<10+sha256.Size && r.Reason == ""
	})
}

// TestIdleTimeoutTransfers: a tunnel that carries a slow stream longer
// than the idle timeout, either way, stays open; once the bytes stop, the
// idle timeout closes it, and the audit counts every byte.
func TestIdleTimeoutTransfers(t *testing.T) {
	t.Parallel()
	// Pieces come every pause; the idle timeout is five pauses, so that
	// a loaded machine's late wake-ups do not end a live tunnel, and the
	// whole stream lasts four idle timeouts.
	const (
		pause  = 100 * time.Millisecond
		idle   = 5 * pause
		pieces = int(4 * idle / pause)
	)
	target := "127.0.0.1:" + strconv.Itoa(newTunnelServer(t))
	p := startProxy(t, Options{Allow: []string{target}, IdleTimeout: idle})

	t.Run("down", func(t *testing.T) {
		t.Parallel()
		conn, br := tunnelTo(t, "tcp", p.addr, target)
		start := time.Now()
		exchangeThrough(t, conn, br, 10, pieces<<10, pause)
		if d := time.Since(start); d < 4*idle {
			t.Fatalf("the stream took only %v", d)
		}
		conn.Close()
		r := p.audit.waitRecord(t, "for the slow download", func(r Record) bool { return r.BytesDown == int64(pieces)<<10+sha256.Size })
		if r.Reason != "" {
			t.Errorf("slow download ended with reason %q: %+v", r.Reason, r)
		}
	})

	t.Run("up", func(t *testing.T) {
		t.Parallel()
		// The server keeps the tunnel open after reading; the pieces, a
		// pause apart, then silence.
		conn, br := tunnelTo(t, "tcp", p.addr, target)
		line := fmt.Sprintf("%d -1 0s\n", pieces<<10)
		io.WriteString(conn, line)
		piece := pattern(1 << 10)
		for range pieces {
			time.Sleep(pause)
			if _, err := conn.Write(piece); err != nil {
				t.Fatalf("the slow upload was cut: %v", err)
			}
		}
		sum := make([]byte, sha256.Size)
		if _, err := io.ReadFull(br, sum); err != nil {
			t.Fatalf("reading the server's hash: %v", err)
		}
		lastByte := time.Now()
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("read from the quiet tunnel: %v; want EOF", err)
		}
		if d := time.Since(lastByte); d > idle+time.Second {
			t.Errorf("the quiet tunnel was closed %v after the last byte; idle timeout %v", d, idle)
		}
		r := p.audit.waitRecord(t, "for the slow upload", func(r Record) bool { return r.BytesUp == int64(len(line))+int64(pieces)<<10 })
		if r.Reason != ReasonIdleTimeout || r.BytesDown != sha256.Size || r.DurationMS < (time.Duration(pieces)*pause+idle).Milliseconds() {
			t.Errorf("audit record %+v", r)
		}
	})
}

// TestTunnelBuffersNotHeld: an open tunnel that waits for data holds no
// copy buffer.
func TestTunnelBuffersNotHeld(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers at random, so it makes new ones")
	}
	target := "127.0.0.1:" + strconv.Itoa(newTunnelServer(t))
	p := startProxy(t, Options{Allow: []string{target}})
	const tunnels = 40
	before := copyBuffersMade.Load()
	for range tunnels {
		conn, br := tunnelTo(t, "tcp", p.addr, target)
		fmt.Fprintf(conn, "%d -1 0s\n", 5)
		io.WriteString(conn, "hello")
		sum := make([]byte, sha256.Size)
		if _, err := io.ReadFull(br, sum); err != nil {
			t.Fatal(err)
		}
	}
	// Every tunnel is open, both directions waiting.
	if made := copyBuffersMade.Load() - before; made > tunnels/4 {
		t.Errorf("%d copy buffers made for %d waiting tunnels", made, tunnels)
	}
}

// TestGoproxyDialsNoConnect: goproxy's own CONNECT dialers refuse, so that
// only serveTunnel, after a decision and through the guard, dials.
func TestGoproxyDialsNoConnect(t *testing.T) {
	t.Parallel()
	target := "127.0.0.1:" + strconv.Itoa(newEchoServer(t))
	p := startProxy(t, Options{Allow: []string{target}})
	req, _ := http.NewRequest(http.MethodConnect, "http://"+target, nil)
	if c, err := p.s.gp.ConnectDialWithReq(req, "tcp", target); err == nil {
		c.Close()
		t.Error("goproxy's ConnectDialWithReq dialled")
	}
	if c, err := p.s.gp.ConnectDial("tcp", target); err == nil {
		c.Close()
		t.Error("goproxy's ConnectDial dialled")
	}
}

// TestBulkBuffers: a direction that moves a lot reads into bulk buffers, at
// most maxBulkBuffers of them are out at a time, and a finished tunnel
// gives them all back. Not parallel: it counts shared buffers.
func TestBulkBuffers(t *testing.T) {
	var taken []*[]byte
	bulk := 0
	for range maxBulkBuffers + 3 {
		bp := getBuffer(true)
		if len(*bp) == bulkBufferSize {
			bulk++
		}
		taken = append(taken, bp)
	}
	if bulk != maxBulkBuffers || bulkBuffersOut.Load() != maxBulkBuffers {
		t.Errorf("%d bulk buffers taken, %d counted out; want %d", bulk, bulkBuffersOut.Load(), maxBulkBuffers)
	}
	if bp := getBuffer(false); len(*bp) != copyBufferSize {
		t.Errorf("a small buffer of %d bytes", len(*bp))
	} else {
		putBuffer(bp)
	}
	for _, bp := range taken {
		putBuffer(bp)
	}
	if n := bulkBuffersOut.Load(); n != 0 {
		t.Fatalf("%d bulk buffers out after all were given back", n)
	}

	target := "127.0.0.1:" + strconv.Itoa(newTunnelServer(t))
	p := startProxy(t, Options{Allow: []string{target}})
	before := bulkBuffersTaken.Load()
	conn, br := tunnelTo(t, "tcp", p.addr, target)
	exchangeThrough(t, conn, br, 8<<20, 16<<20, 0)
	conn.Close()
	p.audit.waitRecord(t, "for the bulk tunnel", func(r Record) bool { return r.BytesDown == 16<<20+sha256.Size })
	if bulkBuffersTaken.Load() == before {
		t.Error("24 MiB went through a tunnel in small buffers only")
	}
	if n := bulkBuffersOut.Load(); n != 0 {
		t.Errorf("%d bulk buffers out after the tunnel ended", n)
	}
}
