package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/devaipod/devaipod/internal/endpoint"
)

// defaultDialTimeout is how long a bridge keeps retrying its target for one
// accepted connection. The target is often a server in the same container
// that is still starting (the agent's server, a sidecar's socket), so a
// client that connects early waits instead of failing.
const defaultDialTimeout = 10 * time.Second

// bridge listens on one endpoint and copies every accepted connection to a
// new connection to its target.
type bridge struct {
	listen      endpoint.Endpoint
	target      endpoint.Endpoint
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
	l, err := endpoint.Parse(s[:i], "unix", true)
	if err != nil {
		return nil, fmt.Errorf("%w, want %s", err, form)
	}
	t, err := endpoint.Parse(s[i+1:], "tcp", false)
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
	le, err := endpoint.Parse(l, "tcp", true)
	if err != nil {
		return nil, fmt.Errorf("%w, want %s", err, form)
	}
	te, err := endpoint.Parse(t, "unix", false)
	if err != nil {
		return nil, fmt.Errorf("%w, want %s", err, form)
	}
	return &bridge{listen: le, target: te, dialTimeout: defaultDialTimeout}, nil
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
		if b.target.Network == "unix" {
			conn, err = dialUnixNoFollow(ctx, &d, b.target.Address)
		} else {
			conn, err = d.DialContext(ctx, b.target.Network, b.target.Address)
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
