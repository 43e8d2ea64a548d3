package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// The interceptions' connections to their upstreams: TLS, verified
// against Options.RootCAs (the system's roots when nil), dialled through
// the guard, HTTP/1.1 only. A request takes one from the pool (or dials
// one), uses it in the client connection's own goroutine, and gives it
// back once the answer has been read to its end: no goroutine of its own
// (an http.Transport runs two per connection and hands each request and
// answer over through channels, which cost most of an intercepted
// request's time on the proxy's one P), yet new client connections find
// an upstream connection ready, as with the Transport.

// Limits of the upstream pool, as the Transport's were.
const (
	maxIdleUpstreamPerHost = 64
	maxIdleUpstream        = 256
	upstreamIdleTimeout    = 90 * time.Second
	upstreamHandshake      = 10 * time.Second
	upstreamFresh          = 250 * time.Millisecond
	// maxResponseHeaderBytes bounds an answer's status line and headers
	// (the Transport's default).
	maxResponseHeaderBytes = 10 << 20
)

// upstreamConn is one TLS connection to an intercepted host.
type upstreamConn struct {
	key  string // host:port
	raw  net.Conn
	sr   *sockReader // under tls: reads raw
	tls  *tls.Conn
	lim  limitedReader // under br: bounds the answer's head
	br   *bufio.Reader
	bw   *bufio.Writer
	used bool      // has carried a request before
	idle time.Time // since when it waits in the pool
}

// close closes the connection without a close_notify: nothing waits for
// one, and the Transport sends none either. Any goroutine may close it;
// only its reader (the relay using it, or the pool) calls release.
func (uc *upstreamConn) close() { uc.raw.Close() }

// discard closes the connection and gives back its read buffer.
func (uc *upstreamConn) discard() {
	uc.raw.Close()
	uc.sr.release()
}

// pending reports whether reading the connection would find bytes at
// once: in its buffers, or in its socket.
func (uc *upstreamConn) pending() bool {
	return uc.br.Buffered() > 0 || uc.sr.buffered() > 0 || connReadable(uc.raw)
}

// sockReader reads a connection through the tunnels' pooled copy buffers
// (readReady): one that it takes only once bytes have arrived and gives
// back once they are read, a bulk one after a read that filled a small
// one. Under the TLS of an upstream connection, a large answer then takes
// a read(2) per up to 512 KiB rather than per TLS record or two, and
// whether more is waiting is known without a system call.
type sockReader struct {
	read func() (*[]byte, int, error)
	buf  *[]byte
	r, w int
	err  error // to return once buf is read
}

func newSockReader(c net.Conn) *sockReader { return &sockReader{read: readReady(c)} }

func (s *sockReader) Read(p []byte) (int, error) {
	if s.buf == nil {
		if s.err != nil {
			err := s.err
			s.err = nil
			return 0, err
		}
		bp, k, err := s.read()
		if k == 0 {
			if bp != nil {
				putBuffer(bp)
			}
			if err == nil {
				err = io.ErrNoProgress
			}
			return 0, err
		}
		s.buf, s.r, s.w, s.err = bp, 0, k, err
	}
	n := copy(p, (*s.buf)[s.r:s.w])
	s.r += n
	if s.r == s.w {
		putBuffer(s.buf)
		s.buf = nil
	}
	return n, nil
}

// buffered is how many bytes wait in the buffer.
func (s *sockReader) buffered() int {
	if s.buf == nil {
		return 0
	}
	return s.w - s.r
}

// release gives the buffer back, with what it held.
func (s *sockReader) release() {
	if s.buf != nil {
		putBuffer(s.buf)
		s.buf = nil
	}
}

// readerConn is a connection read through r.
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// upstreams is the pool of idle upstream connections, most recent last.
type upstreams struct {
	mu       sync.Mutex
	idle     map[string][]*upstreamConn
	n        int
	closed   bool
	sweeping bool

	cfgMu sync.Mutex
	cfgs  map[string]*tls.Config // per host:port
	// sessions lets a new connection to an upstream resume a TLS session
	// (one round trip and no certificate check instead of a full
	// handshake).
	sessions tls.ClientSessionCache
}

func newUpstreams() *upstreams {
	return &upstreams{
		idle:     make(map[string][]*upstreamConn),
		cfgs:     make(map[string]*tls.Config),
		sessions: tls.NewLRUClientSessionCache(maxIdleUpstream),
	}
}

// get returns an idle connection to key that is still open, or nil.
func (p *upstreams) get(key string) *upstreamConn {
	for {
		p.mu.Lock()
		list := p.idle[key]
		if len(list) == 0 {
			p.mu.Unlock()
			return nil
		}
		uc := list[len(list)-1]
		list[len(list)-1] = nil
		p.idle[key] = list[:len(list)-1]
		p.n--
		p.mu.Unlock()
		// A server closes idle connections when it likes; one that did
		// (its FIN, a close_notify or a 408 waits in the socket) would
		// fail the request sent on it, maybe after its body was gone. Not
		// looked at when it was idle for less than upstreamFresh: no
		// server closes a connection that soon after an answer without
		// saying so (Connection: close), and the look is a system call
		// per request on a busy host.
		idle := time.Since(uc.idle)
		if idle < upstreamIdleTimeout && uc.br.Buffered() == 0 && uc.sr.buffered() == 0 && (idle < upstreamFresh || connAlive(uc.raw)) {
			return uc
		}
		uc.discard()
	}
}

// put gives an idle connection back, or closes it when the pool is full
// or closed.
func (p *upstreams) put(uc *upstreamConn) {
	uc.used = true
	uc.idle = time.Now()
	if uc.br.Buffered() > 0 || uc.sr.buffered() > 0 {
		uc.discard() // the server sent more than its answer
		return
	}
	p.mu.Lock()
	if p.closed || p.n >= maxIdleUpstream || len(p.idle[uc.key]) >= maxIdleUpstreamPerHost {
		p.mu.Unlock()
		uc.discard()
		return
	}
	p.idle[uc.key] = append(p.idle[uc.key], uc)
	p.n++
	sweep := !p.sweeping
	p.sweeping = true
	p.mu.Unlock()
	if sweep {
		time.AfterFunc(upstreamIdleTimeout/2, p.sweep)
	}
}

// sweep closes the connections idle for longer than upstreamIdleTimeout,
// and runs again while any are left.
func (p *upstreams) sweep() {
	var old []*upstreamConn
	p.mu.Lock()
	for key, list := range p.idle {
		kept := list[:0]
		for _, uc := range list {
			if time.Since(uc.idle) >= upstreamIdleTimeout {
				old = append(old, uc)
			} else {
				kept = append(kept, uc)
			}
		}
		clear(list[len(kept):])
		if len(kept) == 0 {
			delete(p.idle, key)
		} else {
			p.idle[key] = kept
		}
	}
	p.n -= len(old)
	again := p.n > 0 && !p.closed
	p.sweeping = again
	p.mu.Unlock()
	for _, uc := range old {
		uc.discard()
	}
	if again {
		time.AfterFunc(upstreamIdleTimeout/2, p.sweep)
	}
}

// closeIdle closes the idle connections, and every one given back later.
func (p *upstreams) closeIdle() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = make(map[string][]*upstreamConn)
	p.n = 0
	p.mu.Unlock()
	for _, list := range idle {
		for _, uc := range list {
			uc.discard()
		}
	}
}

// config is the TLS configuration for host (at key, host:port), made once:
// verified against roots, HTTP/1.1 only (ALPN), resuming sessions.
func (p *upstreams) config(key, host string, roots *x509.CertPool) *tls.Config {
	p.cfgMu.Lock()
	defer p.cfgMu.Unlock()
	if c, ok := p.cfgs[key]; ok {
		return c
	}
	c := &tls.Config{
		ServerName:         host,
		RootCAs:            roots,
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"http/1.1"},
		ClientSessionCache: p.sessions,
	}
	if len(p.cfgs) >= maxLeaves {
		clear(p.cfgs)
	}
	p.cfgs[key] = c
	return c
}

// dialUpstream connects to the interception's host and port through the
// guard and does the TLS handshake, within ctx.
func (s *Server) dialUpstream(ctx context.Context, key, host string) (*upstreamConn, error) {
	raw, err := s.guard.dialContext(ctx, "tcp", key)
	if err != nil {
		return nil, err
	}
	sr := newSockReader(raw)
	tc := tls.Client(readerConn{Conn: raw, r: sr}, s.upstreams.config(key, host, s.opts.RootCAs))
	hctx, cancel := context.WithTimeout(ctx, upstreamHandshake)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err == nil {
		if p := tc.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
			err = errors.New("the server chose " + p + " over HTTP/1.1")
		}
	}
	if err != nil {
		raw.Close()
		sr.release()
		return nil, err
	}
	uc := &upstreamConn{key: key, raw: raw, sr: sr, tls: tc}
	uc.lim.r = tc
	uc.lim.n = -1
	uc.br = bufio.NewReaderSize(&uc.lim, 4096)
	uc.bw = bufio.NewWriterSize(tc, 4096)
	return uc, nil
}

// limitedReader reads r; while n >= 0 it gives at most n bytes more, then
// errHeadTooLarge (it bounds a message's head; n < 0 is no bound).
type limitedReader struct {
	r   io.Reader
	n   int64
	hit bool
	got int64 // bytes read in all
	// head, when tee, gets a copy of what is read (a request's head, for
	// the checks that http.ReadRequest leaves out).
	tee  bool
	head []byte
}

var errHeadTooLarge = errors.New("head too large")

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n >= 0 {
		if l.n == 0 {
			l.hit = true
			return 0, errHeadTooLarge
		}
		if int64(len(p)) > l.n {
			p = p[:l.n]
		}
	}
	n, err := l.r.Read(p)
	l.got += int64(n)
	if l.n >= 0 {
		l.n -= int64(n)
	}
	if l.tee {
		l.head = append(l.head, p[:n]...)
	}
	return n, err
}
