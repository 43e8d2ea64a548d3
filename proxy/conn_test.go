package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawAnswer sends request to addr and returns everything that comes back
// until the other side closes.
func rawAnswer(t *testing.T, addr, request string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	go io.WriteString(conn, request)
	b, _ := io.ReadAll(conn)
	return string(b)
}

// TestConnectRequestErrors: a CONNECT request that serveConn reads and
// refuses gets the answer net/http's server gives (byte for byte).
func TestConnectRequestErrors(t *testing.T) {
	t.Parallel()
	p := startProxy(t, Options{Allow: []string{"api.allowed.test:*"}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reference := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(299) }),
		ReadHeaderTimeout: time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go reference.Serve(ln)
	t.Cleanup(func() { reference.Close() })

	tests := []struct {
		name, request, wantPrefix string
	}{
		{"bad port", "CONNECT api.allowed.test:+443 HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
		{"HTTP/2", "CONNECT api.allowed.test:443 HTTP/2.0\r\nHost: x\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported: unsupported protocol version\r\n"},
		{"bad version", "CONNECT api.allowed.test:443 HTTP/x\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
		{"malformed Host", "CONNECT api.allowed.test:443 HTTP/1.1\r\nHost: a b\r\n\r\n", "HTTP/1.1 400 Bad Request: malformed Host header\r\n"},
		{"bad header value", "CONNECT api.allowed.test:443 HTTP/1.1\r\nX: a\x00b\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"bad header name", "CONNECT api.allowed.test:443 HTTP/1.1\r\nX Y: z\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"too large", "CONNECT api.allowed.test:443 HTTP/1.1\r\nX: " + strings.Repeat("a", maxHeaderBytes+8192) + "\r\n\r\n",
			"HTTP/1.1 431 Request Header Fields Too Large\r\n"},
		{"cut short", "CONNECT api.allowed.test:443 HTTP/1.1\r\nHost: x\r\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			request := tt.request
			if tt.name == "cut short" {
				// The client half-closes after an unfinished request.
				got := halfClosedAnswer(t, p.addr, request)
				want := halfClosedAnswer(t, ln.Addr().String(), request)
				if got != want || !strings.HasPrefix(got, "HTTP/1.1 400 Bad Request\r\n") {
					t.Errorf("answer %q; net/http's %q", got, want)
				}
				return
			}
			got := rawAnswer(t, p.addr, request)
			want := rawAnswer(t, ln.Addr().String(), request)
			if got != want {
				t.Errorf("answer %q; net/http's %q", got, want)
			}
			if !strings.HasPrefix(got, tt.wantPrefix) {
				t.Errorf("answer %q; want it to start with %q", got, tt.wantPrefix)
			}
		})
	}
}

func halfClosedAnswer(t *testing.T, addr, request string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, request)
	conn.(*net.TCPConn).CloseWrite()
	b, _ := io.ReadAll(conn)
	return string(b)
}

// TestConnectEarlyData: bytes that the client sends right behind its
// CONNECT, before the answer, reach the server first.
func TestConnectEarlyData(t *testing.T) {
	t.Parallel()
	target := "127.0.0.1:" + strconv.Itoa(newTunnelServer(t))
	p := startProxy(t, Options{Allow: []string{target}})
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	payload := pattern(1000)
	line := "1000 2000 0s\n"
	io.WriteString(conn, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"+line+string(payload))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	sum := make([]byte, sha256.Size)
	if _, err := io.ReadFull(br, sum); err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(payload); !bytes.Equal(sum, want[:]) {
		t.Fatal("the server did not get the early bytes")
	}
	got, _ := io.ReadAll(br)
	if !bytes.Equal(got, pattern(2000)) {
		t.Fatalf("got %d bytes back", len(got))
	}
	conn.Close()
	p.audit.waitRecord(t, "for the tunnel", func(r Record) bool {
		return r.Method == http.MethodConnect && r.BytesUp == int64(len(line)+1000) && r.BytesDown == 2000+sha256.Size
	})
}

// TestConnectSplit: a CONNECT that arrives a few bytes at a time is still
// one.
func TestConnectSplit(t *testing.T) {
	t.Parallel()
	target := "127.0.0.1:" + strconv.Itoa(newTunnelServer(t))
	p := startProxy(t, Options{Allow: []string{target}})
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	request := "CONNECT " + target + " HTTP/1.1\r\n\r\n"
	for _, piece := range []string{request[:3], request[3:7], request[7:20], request[20:]} {
		io.WriteString(conn, piece)
		time.Sleep(30 * time.Millisecond)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT in pieces: %v %v", resp, err)
	}
	exchangeThrough(t, conn, br, 10, 10, 0)
}

// TestNotConnect: what only starts like a CONNECT goes to net/http.
func TestNotConnect(t *testing.T) {
	t.Parallel()
	p := startProxy(t, Options{})
	got := rawAnswer(t, p.addr, "CONNECTX http://x.test/ HTTP/1.1\r\nHost: x.test\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 405 ") {
		t.Errorf("CONNECTX: %q; want 405 from the plain-HTTP path", got)
	}
	// A connection that ends before its first bytes tell goes to net/http
	// too, at once.
	start := time.Now()
	if got := halfClosedAnswer(t, p.addr, "CONN"); !strings.HasPrefix(got, "HTTP/1.1 400 Bad Request\r\n") {
		t.Errorf("CONN and the end: %q; want net/http's 400", got)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("CONN and the end: answered after %v", d)
	}
}

// TestConnectAfterPlain: a CONNECT on a connection that carried a
// plain-HTTP request first takes net/http's way, and works the same.
func TestConnectAfterPlain(t *testing.T) {
	t.Parallel()
	_, httpPort := newHTTPServer(t)
	target := "127.0.0.1:" + strconv.Itoa(newTunnelServer(t))
	p := startProxy(t, Options{Allow: []string{target, "127.0.0.1:" + strconv.Itoa(httpPort)}})
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	fmt.Fprintf(conn, "GET http://127.0.0.1:%d/first HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", httpPort)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT after GET: %v %v", resp, err)
	}
	exchangeThrough(t, conn, br, 100<<10, 200<<10, 0)
	conn.Close()
	p.audit.waitRecord(t, "for the tunnel", func(r Record) bool {
		return r.Method == http.MethodConnect && r.BytesDown == 200<<10+sha256.Size && r.Reason == ""
	})
}

// TestShutdownWhileReading: Serve closes a connection whose CONNECT
// request it is still reading when it stops.
func TestShutdownWhileReading(t *testing.T) {
	t.Parallel()
	p := startProxy(t, Options{})
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "CONNECT x.test:443 HTTP/1.1\r\n")
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	p.stop()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read after shutdown: %v; want EOF", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("shutdown and close took %v", d)
	}
}
