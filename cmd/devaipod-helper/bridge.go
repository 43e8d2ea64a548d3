package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxUnixPath is the longest unix socket path the kernel accepts: sun_path
// is 108 bytes including the terminating NUL.
const maxUnixPath = 107

// defaultDialTimeout is how long a bridge keeps retrying its target for one
// accepted connection. The target is often a server in the same container
// that is still starting (the agent's server, a sidecar's socket), so a
// client that connects early waits instead of failing.
const defaultDialTimeout = 10 * time.Second

// endpoint is one side of a bridge.
type endpoint struct {
	network string // "tcp" or "unix"
	address string // host:port or an absolute path
}

func (e endpoint) String() string { return e.network + ":" + e.address }

// bridge listens on one endpoint and copies every accepted connection to a
// new connection to its target.
type bridge struct {
	listen      endpoint
	target      endpoint
	dialTimeout time.Duration
	log         *log.Logger
}

func (b *bridge) String() string { return b.listen.String() + " -> " + b.target.String() }

// parseExpose parses unix:PATH=tcp:HOST:PORT: listen on a unix socket and
// forward to TCP. The split is at the last "=" because HOST:PORT cannot
// contain one and PATH, in principle, can.
func parseExpose(s string) (*bridge, error) {
	const form = "unix:PATH=tcp:HOST:PORT"
	i := strings.LastIndex(s, "=")
	if i < 0 {
		return nil, fmt.Errorf("missing \"=\", want %s", form)
	}
	l, err := parseEndpoint(s[:i], "unix", true)
	if err != nil {
		return nil, fmt.Errorf("%w, want %s", err, form)
	}
	t, err := parseEndpoint(s[i+1:], "tcp", false)
	if err != nil {
		return nil, fmt.Errorf("%w, want %s", err, form)
	}
	return &bridge{listen: l, target: t, dialTimeout: defaultDialTimeout}, nil
}

// parseForward parses tcp:HOST:PORT=unix:PATH: listen on TCP and forward to
// a unix socket. The split is at the first "=" (see parseExpose).
func parseForward(s string) (*bridge, error) {
	const form = "tcp:HOST:PORT=unix:PATH"
	l, t, ok := strings.Cut(s, "=")
	if !ok {
		return nil, fmt.Errorf("missing \"=\", want %s", form)
	}
	le, err := parseEndpoint(l, "tcp", true)
	if err != nil {
		return nil, fmt.Errorf("%w, want %s", err, form)
	}
	te, err := parseEndpoint(t, "unix", false)
	if err != nil {
		return nil, fmt.Errorf("%w, want %s", err, form)
	}
	return &bridge{listen: le, target: te, dialTimeout: defaultDialTimeout}, nil
}

// parseEndpoint parses "unix:PATH" or "tcp:HOST:PORT", whichever network
// says. Port 0 (any free port) is allowed only on the listening side, where
// the startup log shows the port actually chosen.
func parseEndpoint(s, network string, listening bool) (endpoint, error) {
	addr, ok := strings.CutPrefix(s, network+":")
	if !ok {
		return endpoint{}, fmt.Errorf("%q does not start with %q", s, network+":")
	}
	switch network {
	case "unix":
		switch {
		case addr == "":
			return endpoint{}, errors.New("empty socket path")
		case !filepath.IsAbs(addr):
			// A relative path would depend on the working directory of
			// whoever starts the container.
			return endpoint{}, fmt.Errorf("socket path %q is not absolute", addr)
		case len(addr) > maxUnixPath:
			return endpoint{}, fmt.Errorf("socket path %q is %d bytes, the kernel allows %d", addr, len(addr), maxUnixPath)
		}
	case "tcp":
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return endpoint{}, fmt.Errorf("tcp %w", err)
		}
		if host == "" {
			// An empty host listens on every interface; make that a choice
			// (0.0.0.0) rather than an accident.
			return endpoint{}, fmt.Errorf("missing host in %q", addr)
		}
		n, err := strconv.Atoi(port)
		lowest := 1
		if listening {
			lowest = 0
		}
		if err != nil || n < lowest || n > 65535 {
			return endpoint{}, fmt.Errorf("bad port %q in %q", port, addr)
		}
	}
	return endpoint{network: network, address: addr}, nil
}

// listenOn opens the bridge's listener.
func (b *bridge) listenOn() (net.Listener, error) {
	if b.listen.network == "unix" {
		return listenUnix(b.listen.address)
	}
	return net.Listen(b.listen.network, b.listen.address)
}

// listenUnix listens on a unix socket at path, replacing a socket left over
// from an earlier run of the container. Go removes the socket file again when
// the listener is closed.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode()&fs.ModeSocket == 0:
		// Not ours to delete: refuse rather than clobber a file.
		return nil, fmt.Errorf("%s exists and is not a socket", path)
	case err == nil:
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("stat socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// The clients run as other uids in other containers, and connect(2)
	// needs write permission on the socket file.
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod socket: %w", err)
	}
	return ln, nil
}

// serve accepts connections on ln until ctx is done, then closes ln and every
// open connection and returns once all of them are finished.
func (b *bridge) serve(ctx context.Context, ln net.Listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()

	backoff := 5 * time.Millisecond
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Usually EMFILE. Keep serving: a bridge that quietly stops
			// would cut the agent off for the rest of its life.
			b.log.Printf("%s: accept: %v", b, err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.handle(ctx, conn)
		}()
	}
}

// handle connects client to a new connection to the target and copies
// between them until both directions are done.
func (b *bridge) handle(ctx context.Context, client net.Conn) {
	defer client.Close()
	target, err := b.dial(ctx)
	if err != nil {
		if ctx.Err() == nil {
			b.log.Printf("%s: %v", b, err)
		}
		return
	}
	defer target.Close()
	stop := context.AfterFunc(ctx, func() {
		client.Close()
		target.Close()
	})
	defer stop()
	splice(client, target)
}

// dial connects to the target, retrying for up to b.dialTimeout.
func (b *bridge) dial(ctx context.Context) (net.Conn, error) {
	deadline := time.Now().Add(b.dialTimeout)
	d := net.Dialer{Timeout: 2 * time.Second}
	wait := 20 * time.Millisecond
	for {
		var conn net.Conn
		var err error
		if b.target.network == "unix" {
			conn, err = dialUnixNoFollow(ctx, &d, b.target.address)
		} else {
			conn, err = d.DialContext(ctx, b.target.network, b.target.address)
		}
		if err == nil {
			return conn, nil
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(min(wait, remaining)):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// closeWriter is implemented by *net.TCPConn and *net.UnixConn.
type closeWriter interface {
	CloseWrite() error
}

// splice copies a to b and b to a concurrently and returns when both
// directions are done. A clean end of input on one side is passed on as a
// half-close, so a peer that shuts down its write side still gets its answer
// and long-lived streams stay open as long as either side sends. An error in
// either direction closes both connections so that neither copy stays
// blocked.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		copyHalf(b, a)
	}()
	go func() {
		defer wg.Done()
		copyHalf(a, b)
	}()
	wg.Wait()
}

func copyHalf(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err == nil {
		if cw, ok := dst.(closeWriter); ok && cw.CloseWrite() == nil {
			return
		}
	}
	src.Close()
	dst.Close()
}
