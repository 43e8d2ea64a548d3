package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/elazarl/goproxy"
)

// An allowed CONNECT does not take goproxy's generic tunnel path (one
// goroutine that waits for two that copy through a fresh 32 KiB buffer
// each, around a wrapped connection): allowConnect answers it with
// ConnectHijack, and serveTunnel runs the tunnel on the connection goproxy
// hijacked, in two goroutines, which on Linux read and write the sockets
// directly (see tunnel_linux.go). Everything goproxy does not hand to
// serveTunnel still ends in rejectConnect.

// tunnel is one open CONNECT tunnel: the client's connection and the one
// to the server. It counts the bytes each way, closes itself after
// IdleTimeout without traffic, and audits itself when it has ended.
type tunnel struct {
	s      *Server
	x      *exchange
	client net.Conn
	server net.Conn
	// toClient and toServer write all of a slice to client and server.
	toClient, toServer func([]byte) (int, error)

	up, down atomic.Int64 // bytes client to server, server to client
	idle     idleWatch    // its clock moves with each byte seen in user space

	once      sync.Once
	reason    string // the audit reason of the end, set in once
	pumps     sync.WaitGroup
	pumpsDone atomic.Int32 // directions that reached the end of their source
}

// serveTunnel runs an allowed CONNECT on the client connection that goproxy
// hijacked for it: it dials the target through the guard and starts the
// tunnel, which answers 200, copies both ways until it ends and audits
// itself. A failed dial is answered with a 403 (the guard refused the
// address) or 502 and audited by ServeHTTP.
func (s *Server) serveTunnel(req *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
	x := exchangeOf(req)
	if x == nil || !x.allow || !x.slot {
		// goproxy hands over only what allowConnect allowed.
		client.Close()
		return
	}
	server, err := s.guard.dialTunnel(req.Context(), net.JoinHostPort(x.host, strconv.Itoa(x.port)))
	var t *tunnel
	if err == nil {
		t, err = s.openTunnel(x, client, server)
	}
	if err != nil {
		s.refuseHijacked(req, client, x, err)
		return
	}
	// Answer now; the copying may start a moment later.
	early := x.early
	x.early = nil
	if err := t.answer(connectEstablished(req), early); err != nil {
		t.end("")
		t.finish()
		return
	}
	if x.fast {
		// serveConn's goroutine has nothing to let go of.
		t.run()
		return
	}
	// A goroutine of its own, so that this one, with net/http's buffers
	// and the request, goes now rather than when the tunnel ends.
	go t.run()
}

// refuseHijacked answers a hijacked CONNECT that could not be served
// (err: the guard refused the address, the upstream failed, the proxy is
// stopping) with its refusal, and closes the connection; ServeHTTP audits
// it.
func (s *Server) refuseHijacked(req *http.Request, client net.Conn, x *exchange, err error) {
	s.upstreamFailed(x, err)
	if err := s.refusal(req, x).Write(client); err != nil {
		s.log.Debug("write CONNECT refusal", "host", x.host, "err", err)
	}
	client.Close()
}

// connectEstablished is the answer to an accepted CONNECT, in the
// request's HTTP version (as goproxy answers).
func connectEstablished(r *http.Request) string {
	if r.ProtoMajor == 1 && r.ProtoMinor == 0 {
		return "HTTP/1.0 200 Connection established\r\n\r\n"
	}
	return "HTTP/1.1 200 Connection established\r\n\r\n"
}

// openTunnel registers a tunnel between client and server, unless the
// proxy is shutting down (then it closes server), and starts its idle
// timer.
func (s *Server) openTunnel(x *exchange, client, server net.Conn) (*tunnel, error) {
	t := &tunnel{s: s, x: x, client: client, server: server,
		toClient: writeReady(client), toServer: writeReady(server)}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		server.Close()
		return nil, errShuttingDown
	}
	s.tunnels[t] = struct{}{}
	s.tunnelWG.Add(1)
	s.mu.Unlock()
	t.idle.start(s.opts.IdleTimeout, func() { t.end(ReasonIdleTimeout) })
	x.served, x.status = t, http.StatusOK
	return t, nil
}

// answer tells the client that the tunnel is open, and sends the server
// what the client sent before that answer.
func (t *tunnel) answer(answer string, early []byte) error {
	if _, err := t.toClient([]byte(answer)); err != nil {
		return err
	}
	if len(early) > 0 {
		k, err := t.toServer(early)
		t.up.Add(int64(k))
		return err
	}
	return nil
}

// run copies both ways (server to client in this goroutine) until both
// directions are done or the tunnel is ended, and audits the tunnel.
func (t *tunnel) run() {
	t.pumps.Go(func() { t.pump(t.server, t.toServer, t.client, &t.up) })
	t.pump(t.client, t.toClient, t.server, &t.down)
	t.pumps.Wait()
	t.end("")
	t.finish()
}

// finish forgets the ended tunnel and audits it.
func (t *tunnel) finish() {
	s := t.s
	s.mu.Lock()
	delete(s.tunnels, t)
	s.mu.Unlock()
	s.openTunnels.Add(-1)
	s.record(t.x, t.up.Load(), t.down.Load(), t.reason)
	s.tunnelWG.Done()
}

// pump copies src to dst until src ends, then passes the half-close on:
// the peer may still be sending the other way. When both directions are
// done, or one fails, or dst cannot half-close (then as in goproxy), the
// tunnel ends, which also stops the other direction.
func (t *tunnel) pump(dst net.Conn, write func([]byte) (int, error), src net.Conn, n *atomic.Int64) {
	err := t.copy(write, src, n)
	if err != nil || !canCloseWrite(dst) || t.pumpsDone.Add(1) == 2 {
		t.end("") // closing sends the FIN too
		return
	}
	closeWrite(dst)
}

// Copy buffers. A read takes one only once data has arrived (see
// readReady) and gives it back once that data is written, so an open
// tunnel that waits holds none. A direction reads into a small buffer until
// a read brings at least a small buffer's worth: then more is waiting (a
// download, an upload), and its next reads take bulk buffers. On loopback
// that cut the proxy's CPU per GB by about a third and raised the bulk
// throughput by about a tenth (a third as many reads, writes and
// wake-ups). At most maxBulkBuffers are out at a time, whatever the number
// of busy tunnels, so the memory they take stays bounded; a read that
// finds none free takes a small one.
const (
	copyBufferSize = 32 << 10
	bulkBufferSize = 512 << 10
	maxBulkBuffers = 8
)

// copyBuffers and bulkBuffers are shared by all tunnels. copyBuffersMade
// counts the small buffers made and bulkBuffersTaken the bulk ones taken
// (for tests); bulkBuffersOut counts the bulk buffers taken and not given
// back.
var (
	copyBuffersMade atomic.Int64
	copyBuffers     = sync.Pool{New: func() any {
		copyBuffersMade.Add(1)
		b := make([]byte, copyBufferSize)
		return &b
	}}
	bulkBuffersTaken atomic.Int64
	bulkBuffersOut   atomic.Int32
	bulkBuffers      = sync.Pool{New: func() any {
		b := make([]byte, bulkBufferSize)
		return &b
	}}
)

// getBuffer takes a copy buffer: a bulk one if bulk and one is free, else
// a small one. putBuffer gives it back.
func getBuffer(bulk bool) *[]byte {
	if bulk {
		if bulkBuffersOut.Add(1) <= maxBulkBuffers {
			bulkBuffersTaken.Add(1)
			return bulkBuffers.Get().(*[]byte)
		}
		bulkBuffersOut.Add(-1)
	}
	return copyBuffers.Get().(*[]byte)
}

// putBuffer gives back a buffer from getBuffer.
func putBuffer(bp *[]byte) {
	if len(*bp) == bulkBufferSize {
		bulkBuffers.Put(bp)
		bulkBuffersOut.Add(-1)
		return
	}
	copyBuffers.Put(bp)
}

// copy copies src to write, counting the bytes written into n and moving
// the idle clock with each write. It returns nil at the end of src.
func (t *tunnel) copy(write func([]byte) (int, error), src net.Conn, n *atomic.Int64) error {
	read := readReady(src)
	for {
		bp, k, err := read()
		if k > 0 {
			w, werr := write((*bp)[:k])
			putBuffer(bp)
			if w > 0 {
				n.Add(int64(w))
				t.idle.touch()
			}
			if werr != nil {
				return werr
			}
			if w < k {
				return io.ErrShortWrite
			}
			continue
		}
		if bp != nil {
			putBuffer(bp)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// readBlocking reads c into a small pooled buffer, which it holds while the
// read waits: readReady's fallback.
func readBlocking(c net.Conn) func() (*[]byte, int, error) {
	return func() (*[]byte, int, error) {
		bp := getBuffer(false)
		k, err := c.Read(*bp)
		return bp, k, err
	}
}

// end closes both connections, which stops both directions, once; reason
// is the audit reason (empty for a normal end).
func (t *tunnel) end(reason string) {
	t.once.Do(func() {
		t.reason = reason
		t.idle.stop()
		t.server.Close()
		t.client.Close()
	})
}

// canCloseWrite reports whether c can be half-closed.
func canCloseWrite(c net.Conn) bool {
	_, ok := c.(interface{ CloseWrite() error })
	return ok
}
