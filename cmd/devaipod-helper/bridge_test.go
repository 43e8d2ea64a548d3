package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseExpose(t *testing.T) {
	tests := []struct {
		in         string
		wantListen string
		wantTarget string
		wantErr    string // substring; empty means success
	}{
		{in: "unix:/run/devaipod/agent.sock=tcp:127.0.0.1:4096",
			wantListen: "unix:/run/devaipod/agent.sock", wantTarget: "tcp:127.0.0.1:4096"},
		{in: "unix:/run/a.sock=tcp:[::1]:4096", wantListen: "unix:/run/a.sock", wantTarget: "tcp:[::1]:4096"},
		{in: "unix:/run/a.sock=tcp:localhost:80", wantListen: "unix:/run/a.sock", wantTarget: "tcp:localhost:80"},
		{in: "unix:/run/a=b.sock=tcp:127.0.0.1:1", wantListen: "unix:/run/a=b.sock", wantTarget: "tcp:127.0.0.1:1"},
		{in: "", wantErr: `missing "=", want unix:PATH=tcp:HOST:PORT`},
		{in: "unix:/run/a.sock", wantErr: `missing "="`},
		{in: "/run/a.sock=tcp:127.0.0.1:1", wantErr: `"/run/a.sock" does not start with "unix:"`},
		{in: "tcp:127.0.0.1:1=unix:/run/a.sock", wantErr: `does not start with "unix:"`},
		{in: "unix:=tcp:127.0.0.1:1", wantErr: "empty socket path"},
		{in: "unix:run/a.sock=tcp:127.0.0.1:1", wantErr: `socket path "run/a.sock" is not absolute`},
		{in: "unix:/" + strings.Repeat("x", 120) + "=tcp:127.0.0.1:1", wantErr: "is 121 bytes, the kernel allows 107"},
		{in: "unix:/run/a.sock=udp:127.0.0.1:1", wantErr: `does not start with "tcp:"`},
		{in: "unix:/run/a.sock=tcp:127.0.0.1", wantErr: "missing port in address"},
		{in: "unix:/run/a.sock=tcp::4096", wantErr: `missing host in ":4096"`},
		{in: "unix:/run/a.sock=tcp:127.0.0.1:http", wantErr: `bad port "http"`},
		{in: "unix:/run/a.sock=tcp:127.0.0.1:0", wantErr: `bad port "0"`},
		{in: "unix:/run/a.sock=tcp:127.0.0.1:65536", wantErr: `bad port "65536"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			b, err := parseExpose(tt.in)
			checkParse(t, "parseExpose", tt.in, b, err, tt.wantListen, tt.wantTarget, tt.wantErr)
		})
	}
}

func TestParseForward(t *testing.T) {
	tests := []struct {
		in         string
		wantListen string
		wantTarget string
		wantErr    string
	}{
		{in: "tcp:127.0.0.1:3128=unix:/run/devaipod/proxy.sock",
			wantListen: "tcp:127.0.0.1:3128", wantTarget: "unix:/run/devaipod/proxy.sock"},
		{in: "tcp:0.0.0.0:8765=unix:/run/g.sock", wantListen: "tcp:0.0.0.0:8765", wantTarget: "unix:/run/g.sock"},
		{in: "tcp:127.0.0.1:0=unix:/run/g.sock", wantListen: "tcp:127.0.0.1:0", wantTarget: "unix:/run/g.sock"},
		{in: "tcp:127.0.0.1:1=unix:/run/a=b", wantListen: "tcp:127.0.0.1:1", wantTarget: "unix:/run/a=b"},
		{in: "tcp:127.0.0.1:3128", wantErr: `missing "=", want tcp:HOST:PORT=unix:PATH`},
		{in: "unix:/run/a.sock=tcp:127.0.0.1:1", wantErr: `does not start with "tcp:"`},
		{in: "127.0.0.1:3128=unix:/run/a.sock", wantErr: `does not start with "tcp:"`},
		{in: "tcp:127.0.0.1:3128=/run/a.sock", wantErr: `"/run/a.sock" does not start with "unix:"`},
		{in: "tcp::3128=unix:/run/a.sock", wantErr: "missing host"},
		{in: "tcp:127.0.0.1:-1=unix:/run/a.sock", wantErr: `bad port "-1"`},
		{in: "tcp:127.0.0.1:3128=unix:", wantErr: "empty socket path"},
		{in: "tcp:127.0.0.1:3128=unix:a.sock", wantErr: "not absolute"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			b, err := parseForward(tt.in)
			checkParse(t, "parseForward", tt.in, b, err, tt.wantListen, tt.wantTarget, tt.wantErr)
		})
	}
}

func checkParse(t *testing.T, fn, in string, b *bridge, err error, wantListen, wantTarget, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("%s(%q) error = %v; want it to contain %q", fn, in, err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s(%q) error = %v", fn, in, err)
	}
	if got := b.listen.String(); got != wantListen {
		t.Errorf("%s(%q) listen = %q; want %q", fn, in, got, wantListen)
	}
	if got := b.target.String(); got != wantTarget {
		t.Errorf("%s(%q) target = %q; want %q", fn, in, got, wantTarget)
	}
}

func TestParseInitFlags(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		wantBridges []string
		wantCommand []string
		wantDial    time.Duration
		wantGrace   time.Duration
	}{
		{name: "nothing", args: nil, wantDial: defaultDialTimeout, wantGrace: defaultGrace},
		{
			name: "repeated bridges keep their order",
			args: []string{
				"--expose", "unix:/run/agent.sock=tcp:127.0.0.1:4096",
				"--forward", "tcp:127.0.0.1:3128=unix:/run/proxy.sock",
				"--forward=tcp:127.0.0.1:8765=unix:/run/gator.sock",
				"--dial-timeout", "3s", "--grace", "500ms",
				"--", "opencode", "serve", "--port", "4096",
			},
			wantBridges: []string{
				"unix:/run/agent.sock -> tcp:127.0.0.1:4096",
				"tcp:127.0.0.1:3128 -> unix:/run/proxy.sock",
				"tcp:127.0.0.1:8765 -> unix:/run/gator.sock",
			},
			wantCommand: []string{"opencode", "serve", "--port", "4096"},
			wantDial:    3 * time.Second,
			wantGrace:   500 * time.Millisecond,
		},
		{
			name:        "command without --",
			args:        []string{"sleep", "--flag-of-sleep"},
			wantCommand: []string{"sleep", "--flag-of-sleep"},
			wantDial:    defaultDialTimeout,
			wantGrace:   defaultGrace,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseInitFlags(tt.args, io.Discard)
			if err != nil {
				t.Fatalf("parseInitFlags(%q) error = %v", tt.args, err)
			}
			var got []string
			for _, b := range o.bridges {
				got = append(got, b.String())
				if b.dialTimeout != tt.wantDial {
					t.Errorf("bridge %s dialTimeout = %v; want %v", b, b.dialTimeout, tt.wantDial)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.wantBridges) {
				t.Errorf("bridges = %q; want %q", got, tt.wantBridges)
			}
			if fmt.Sprint(o.command) != fmt.Sprint(tt.wantCommand) {
				t.Errorf("command = %q; want %q", o.command, tt.wantCommand)
			}
			if o.grace != tt.wantGrace {
				t.Errorf("grace = %v; want %v", o.grace, tt.wantGrace)
			}
		})
	}
}

// testWriter sends log output to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// startChain starts the bridges of a pod in miniature: an expose from a unix
// socket to backend (the agent's server), and a forward from a free loopback
// port to that socket (what a client in another container uses). It returns
// the forward's TCP address, the socket path and a function that stops both
// bridges (also called at cleanup).
func startChain(t *testing.T, backend string, dialTimeout time.Duration) (addr, sock string, stop func()) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "run", "agent.sock")
	expose, err := parseExpose("unix:" + sock + "=tcp:" + backend)
	if err != nil {
		t.Fatal(err)
	}
	forward, err := parseForward("tcp:127.0.0.1:0=unix:" + sock)
	if err != nil {
		t.Fatal(err)
	}
	logger := log.New(testWriter{t}, "", 0)
	for _, b := range []*bridge{expose, forward} {
		b.dialTimeout = dialTimeout
		b.log = logger
	}
	stopBridges, err := startBridges(context.Background(), []*bridge{expose, forward})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			done := make(chan struct{})
			go func() {
				stopBridges()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				t.Error("bridges did not stop within 3s")
			}
		})
	}
	t.Cleanup(stop)
	return forward.listen.Address, sock, stop
}

// serveRaw runs handle for every connection to a new loopback TCP listener.
func serveRaw(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// closedPort returns a loopback address that nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func directClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		Timeout:   5 * time.Second,
	}
}

func TestBridgeHTTP(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Query().Get("name"))
	})
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: two\n\n")
	})
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d", n)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	addr, sock, _ := startChain(t, srv.Listener.Addr().String(), time.Second)

	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o666 {
		t.Errorf("socket %s mode = %v; want a socket with mode 0666", sock, fi.Mode())
	}

	client := directClient()
	t.Run("GET", func(t *testing.T) {
		resp, err := client.Get("http://" + addr + "/hello?name=pod")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if string(body) != "hello pod" {
			t.Errorf("GET /hello body = %q; want %q", body, "hello pod")
		}
	})

	t.Run("streamed response", func(t *testing.T) {
		resp, err := client.Get("http://" + addr + "/events")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		// The first event must arrive while the handler still holds the
		// response open: the bridges must not wait for the end.
		line, err := r.ReadString('\n')
		if err != nil || line != "data: one\n" {
			t.Fatalf("first line = %q, %v; want %q", line, err, "data: one\n")
		}
		close(release)
		rest, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if string(rest) != "\ndata: two\n\n" {
			t.Errorf("rest = %q; want %q", rest, "\ndata: two\n\n")
		}
	})

	t.Run("large upload", func(t *testing.T) {
		const size = 8 << 20
		resp, err := client.Post("http://"+addr+"/upload", "application/octet-stream",
			io.LimitReader(zeros{}, size))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if string(body) != fmt.Sprint(size) {
			t.Errorf("server read %s bytes; want %d", body, size)
		}
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestBridgeHalfClose(t *testing.T) {
	t.Run("client closes its write side first", func(t *testing.T) {
		// The backend answers only after the end of the request.
		backend := serveRaw(t, func(c net.Conn) {
			data, _ := io.ReadAll(c)
			fmt.Fprintf(c, "got %d bytes: %s", len(data), data)
		})
		addr, _, _ := startChain(t, backend, time.Second)
		c := dialTCP(t, addr)
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "got 5 bytes: hello" {
			t.Errorf("answer = %q; want %q", got, "got 5 bytes: hello")
		}
	})

	t.Run("backend closes its write side first", func(t *testing.T) {
		received := make(chan string, 1)
		backend := serveRaw(t, func(c net.Conn) {
			fmt.Fprint(c, "banner")
			c.(*net.TCPConn).CloseWrite()
			data, _ := io.ReadAll(c)
			received <- string(data)
		})
		addr, _, _ := startChain(t, backend, time.Second)
		c := dialTCP(t, addr)
		got, err := io.ReadAll(c)
		if err != nil || string(got) != "banner" {
			t.Fatalf("read = %q, %v; want %q", got, err, "banner")
		}
		// The other direction must still be open.
		if _, err := c.Write([]byte("still here")); err != nil {
			t.Fatal(err)
		}
		c.CloseWrite()
		select {
		case data := <-received:
			if data != "still here" {
				t.Errorf("backend received %q; want %q", data, "still here")
			}
		case <-time.After(3 * time.Second):
			t.Fatal("backend did not see the end of the client's data")
		}
	})
}

func dialTCP(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return c.(*net.TCPConn)
}

// expectClosed checks that the peer closes c soon, without sending data.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil || isTimeout(err) {
		t.Errorf("read = %d, %v; want the connection closed", n, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestBridgeTargetDown(t *testing.T) {
	t.Run("expose to a closed port", func(t *testing.T) {
		_, sock, _ := startChain(t, closedPort(t), 200*time.Millisecond)
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		expectClosed(t, c)
		if d := time.Since(start); d < 150*time.Millisecond {
			t.Errorf("closed after %v; want a retry for about 200ms first", d)
		}
	})

	t.Run("forward to a missing socket", func(t *testing.T) {
		forward, err := parseForward("tcp:127.0.0.1:0=unix:" + filepath.Join(t.TempDir(), "none.sock"))
		if err != nil {
			t.Fatal(err)
		}
		forward.dialTimeout = 100 * time.Millisecond
		forward.log = log.New(testWriter{t}, "", 0)
		stop, err := startBridges(context.Background(), []*bridge{forward})
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		c := dialTCP(t, forward.listen.Address)
		expectClosed(t, c)
	})
}

func TestBridgeTargetLate(t *testing.T) {
	// The socket appears only after the client connected: the bridge keeps
	// dialing for its dial timeout.
	late := filepath.Join(t.TempDir(), "late.sock")
	forward, err := parseForward("tcp:127.0.0.1:0=unix:" + late)
	if err != nil {
		t.Fatal(err)
	}
	forward.dialTimeout = 3 * time.Second
	forward.log = log.New(testWriter{t}, "", 0)
	stop, err := startBridges(context.Background(), []*bridge{forward})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	c := dialTCP(t, forward.listen.Address)
	time.Sleep(100 * time.Millisecond)
	ln, err := net.Listen("unix", late)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		fmt.Fprint(s, "late but here")
	}()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "late but here" {
		t.Errorf("read = %q, %v; want %q", got, err, "late but here")
	}
}

func TestStartBridgesFailsOnBusyPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	sock := filepath.Join(t.TempDir(), "ok.sock")
	expose, _ := parseExpose("unix:" + sock + "=tcp:127.0.0.1:1")
	forward, _ := parseForward("tcp:" + busy.Addr().String() + "=unix:/nonexistent.sock")
	_, err = startBridges(context.Background(), []*bridge{expose, forward})
	if err == nil || !strings.Contains(err.Error(), "address already in use") ||
		!strings.Contains(err.Error(), busy.Addr().String()) {
		t.Errorf("startBridges error = %v; want one naming %s and \"address already in use\"", err, busy.Addr())
	}
	// The bridge that did listen must be closed again.
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("Lstat(%s) error = %v; want the socket removed after the failed start", sock, err)
	}
}

func TestBridgeStopClosesConnections(t *testing.T) {
	got := make(chan struct{}, 1)
	backend := serveRaw(t, func(c net.Conn) {
		c.Read(make([]byte, 1))
		got <- struct{}{}
		io.Copy(io.Discard, c) // a stream that never ends by itself
	})
	addr, sock, stop := startChain(t, backend, time.Second)
	c := dialTCP(t, addr)
	c.Write([]byte("x"))
	select {
	case <-got:
	case <-time.After(3 * time.Second):
		t.Fatal("backend never got the connection")
	}
	stop()
	expectClosed(t, c)
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("Lstat(%s) error = %v; want the socket removed when the bridge stops", sock, err)
	}
}

// TestBridgeNoLeaks closes connections in every order and checks that the
// bridges end up with the goroutines and file descriptors they started with.
func TestBridgeNoLeaks(t *testing.T) {
	backend := serveRaw(t, func(c net.Conn) {
		b := make([]byte, 1)
		if _, err := c.Read(b); err != nil {
			return
		}
		switch b[0] {
		case 'b': // backend closes first
			fmt.Fprint(c, "bye")
		default: // wait for the client to finish
			io.Copy(io.Discard, c)
		}
	})
	addr, _, _ := startChain(t, backend, time.Second)
	goroutines, fds := runtime.NumGoroutine(), countFDs(t)

	roundTrip := func(mode byte) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte{mode})
		switch mode {
		case 'b':
			if got, err := io.ReadAll(c); err != nil || string(got) != "bye" {
				t.Errorf("read = %q, %v; want %q", got, err, "bye")
			}
		case 'r':
			// Abort with a reset instead of a clean close.
			time.Sleep(10 * time.Millisecond)
			c.(*net.TCPConn).SetLinger(0)
		}
	}
	for i := range 30 {
		roundTrip("cbr"[i%3])
	}
	waitFor(t, "goroutines and fds back to the baseline", func() bool {
		// io.Copy between TCP and unix sockets uses splice(2), whose
		// pipes Go pools and closes only when a GC drops them.
		runtime.GC()
		return runtime.NumGoroutine() <= goroutines && countFDs(t) <= fds
	})
}

func countFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBridgeRefusesSymlinkedSocket: a socket path replaced by a symlink
// (the agent owns the directory of agent.sock) is not followed.
func TestBridgeRefusesSymlinkedSocket(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.sock")
	ln, err := net.Listen("unix", real)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	link := filepath.Join(dir, "agent.sock")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Timeout: time.Second}
	if c, err := dialUnixNoFollow(context.Background(), &d, link); err == nil {
		c.Close()
		t.Fatal("dialled through a symlink")
	}
	c, err := dialUnixNoFollow(context.Background(), &d, real)
	if err != nil {
		t.Fatalf("dial of the socket itself: %v", err)
	}
	c.Close()
}
