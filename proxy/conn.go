package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// A connection whose first request is a CONNECT skips net/http's server:
// for a tunnel, net/http costs more than the rest of the proxy's user-space
// work together (a goroutine that reads in the background until the
// hijack, 8 KiB of buffers that a hijacked connection never gives back,
// contexts, connection tracking). serveConn reads that request itself,
// with the server's limits and checks, and hands it to ServeHTTP, that is
// to goproxy and its handlers, as net/http would, with a ResponseWriter
// that can be hijacked. Every other connection, and so every plain-HTTP
// request, goes to the http.Server untouched (the first bytes are only
// peeked at).

// maxHeaderBytes is the http.Server's MaxHeaderBytes; like net/http, the
// request line and headers may take 4096 bytes more.
const maxHeaderBytes = 64 << 10

// handoff is the listener of the http.Server: it hands over the
// connections that serveConn does not keep.
type handoff struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newHandoff(addr net.Addr) *handoff {
	return &handoff{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

func (h *handoff) Addr() net.Addr { return h.addr }

// give hands c to the http.Server, or closes it if the server is closed.
func (h *handoff) give(c net.Conn) {
	select {
	case h.conns <- c:
	case <-h.done:
		c.Close()
	}
}

// accept accepts connections on ln until it fails, and serves each in a
// goroutine of its own. It returns nil once ctx is done (Serve then closes
// ln), and ln's error otherwise. Temporary errors (too many open files)
// are waited out as the http.Server does.
func (s *Server) accept(ctx context.Context, ln net.Listener, plain *handoff) error {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Debug("accept", "err", err, "retry in", delay)
				select {
				case <-time.After(delay):
				case <-ctx.Done():
					return nil
				}
				continue
			}
			return err
		}
		delay = 0
		go s.serveConn(ctx, c, plain)
	}
}

// serveConn serves a new connection: a CONNECT here, anything else in the
// http.Server.
func (s *Server) serveConn(ctx context.Context, c net.Conn, plain *handoff) {
	if !s.trackConn(c, true) {
		c.Close()
		return
	}
	c.SetReadDeadline(time.Now().Add(s.opts.ReadHeaderTimeout))
	connect, err := peekConnect(c)
	if err != nil {
		s.trackConn(c, false)
		c.Close()
		return
	}
	if !connect {
		s.trackConn(c, false)
		c.SetReadDeadline(time.Time{})
		plain.give(c)
		return
	}
	growStack()
	defer func() {
		// As the http.Server does: a panic in a handler costs the
		// connection, not the proxy.
		if v := recover(); v != nil {
			s.log.Error("panic serving a CONNECT", "panic", v)
			c.Close()
		}
	}()
	cr := connectReaders.Get().(*connectReader)
	req, early, err := cr.read(c)
	connectReaders.Put(cr)
	if !s.trackConn(c, false) {
		c.Close() // shutting down
		return
	}
	if err != nil {
		writeRequestError(c, err)
		return
	}
	c.SetReadDeadline(time.Time{})
	// The exchange goes into the request's context here rather than in
	// ServeHTTP (one context and request copy less), with what serveTunnel
	// needs to know.
	x := &exchange{start: time.Now(), method: shorten(req.Method, 32), fast: true, early: early, conn: c}
	req = req.WithContext(context.WithValue(ctx, exchangeKey{}, x))
	if ra := c.RemoteAddr(); ra != nil {
		req.RemoteAddr = ra.String()
	}
	w := &connectWriter{c: c}
	s.ServeHTTP(w, req)
	if !w.hijacked {
		w.finish()
	}
}

// trackConn adds c to the connections Serve closes when it stops (while
// serveConn reads its request), or removes it. Adding fails once Serve is
// stopping; removing reports whether Serve is still running.
func (s *Server) trackConn(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add && !s.closing {
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
	return !s.closing
}

// connectReader reads a CONNECT request (see read); connectReaders keeps
// them for reuse.
type connectReader struct {
	conn *bufio.Reader // reads the connection
	head []byte        // the request line and headers
	hr   bytes.Reader  // reads head
	hbr  *bufio.Reader // reads hr, for http.ReadRequest
}

var connectReaders = sync.Pool{New: func() any {
	cr := &connectReader{conn: bufio.NewReaderSize(nil, 4096), head: make([]byte, 0, 1024)}
	cr.hbr = bufio.NewReaderSize(&cr.hr, 4096)
	return cr
}}

// read reads a request from c (see readConnect) and forgets c.
func (cr *connectReader) read(c net.Conn) (*http.Request, []byte, error) {
	cr.conn.Reset(c)
	req, early, err := cr.readConnect()
	cr.conn.Reset(nil)
	cr.hr.Reset(nil)
	cr.hbr.Reset(&cr.hr)
	if cap(cr.head) > 8<<10 {
		cr.head = make([]byte, 0, 1024)
	}
	return req, early, err
}

// requestError is a request that the http.Server would refuse, with its
// answer; a nil answer closes the connection without one.
type requestError struct {
	answer []byte
	err    error
}

func (e *requestError) Error() string { return e.err.Error() }

// errorAnswer is the http.Server's answer to a request it refuses.
func errorAnswer(code int, text string) []byte {
	status := strconv.Itoa(code) + " " + http.StatusText(code)
	if text != "" {
		status += ": " + text
	}
	return []byte("HTTP/1.1 " + status + "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" + status)
}

// readConnect reads a request from cr.conn, with the http.Server's limit
// on its size and its checks, and returns it with the bytes that followed
// it (already read into cr.conn). The error is a *requestError.
func (cr *connectReader) readConnect() (*http.Request, []byte, error) {
	// The request line and headers, up to the empty line that ends them.
	br, head := cr.conn, cr.head[:0]
	defer func() { cr.head = head }()
	for {
		line, err := br.ReadSlice('\n')
		head = append(head, line...)
		if len(head) > maxHeaderBytes+4096 {
			return nil, nil, &requestError{errorAnswer(http.StatusRequestHeaderFieldsTooLarge, ""), errors.New("request too large")}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			// The client went away or was too slow: no answer, as from
			// the http.Server. Or it ended the request early, which the
			// http.Server answers with 400.
			var answer []byte
			if errors.Is(err, io.EOF) && len(head) > 0 {
				answer = errorAnswer(http.StatusBadRequest, "")
			}
			return nil, nil, &requestError{answer, err}
		}
		if len(line) == 1 || len(line) == 2 && line[0] == '\r' {
			if len(head) > len(line) { // the empty line ends the headers, not the request line
				break
			}
		}
	}
	cr.hr.Reset(head)
	cr.hbr.Reset(&cr.hr)
	req, err := http.ReadRequest(cr.hbr)
	if err != nil {
		return nil, nil, &requestError{errorAnswer(http.StatusBadRequest, ""), err}
	}
	if err := checkHead(req, head); err != nil {
		return nil, nil, err
	}
	// A CONNECT has no body: what follows the headers is for the tunnel
	// (RFC 9110, 9.3.6), early data.
	req.Body, req.ContentLength = http.NoBody, 0
	var early []byte
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		early = bytes.Clone(b)
	}
	return req, early, nil
}

// checkHead checks what net/http's server checks beyond http.ReadRequest,
// on req and head, its request line and headers as read.
func checkHead(req *http.Request, head []byte) error {
	if req.ProtoMajor != 1 {
		return &requestError{errorAnswer(http.StatusHTTPVersionNotSupported, "unsupported protocol version"), errors.New("not HTTP/1")}
	}
	hosts, host := hostHeaders(head)
	if hosts == 0 && req.ProtoAtLeast(1, 1) && req.Method != http.MethodConnect {
		return &requestError{errorAnswer(http.StatusBadRequest, "missing required Host header"), errors.New("no Host header")}
	}
	if hosts == 1 && !httpguts.ValidHostHeader(string(host)) {
		return &requestError{errorAnswer(http.StatusBadRequest, "malformed Host header"), errors.New("malformed Host header")}
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return &requestError{errorAnswer(http.StatusBadRequest, "invalid header name"), errors.New("invalid header name")}
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return &requestError{errorAnswer(http.StatusBadRequest, "invalid header value"), errors.New("invalid header value")}
			}
		}
	}
	return nil
}

// hostHeaders counts the Host header lines of a request's head (which
// http.ReadRequest has accepted, and whose Host headers it drops), and
// returns the first one's value, as textproto reads them.
func hostHeaders(head []byte) (n int, first []byte) {
	_, rest, _ := bytes.Cut(head, []byte("\n")) // the request line
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		if len(line) == 0 || len(line) == 1 && line[0] == '\r' {
			break // the end of the headers (what follows is a body)
		}
		key, value, ok := bytes.Cut(line, []byte(":"))
		if ok && len(key) == 4 && (key[0]|0x20) == 'h' && (key[1]|0x20) == 'o' && (key[2]|0x20) == 's' && (key[3]|0x20) == 't' {
			if n == 0 {
				first = bytes.Trim(value, " \t\r")
			}
			n++
		}
	}
	return n, first
}

// writeRequestError answers a refused request as the http.Server does,
// and closes the connection.
func writeRequestError(c net.Conn, err error) {
	defer c.Close()
	var re *requestError
	if !errors.As(err, &re) || re.answer == nil {
		return
	}
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	c.Write(re.answer)
	if bytes.HasPrefix(re.answer, []byte("HTTP/1.1 431 ")) {
		// As the http.Server does after 431: give the client time to read
		// the answer before the close resets the connection (the unread
		// rest of the request would).
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// connectWriter is the http.ResponseWriter of a CONNECT that serveConn
// read: goproxy hijacks it for every answer it gives, and an answer
// written to it (ServeHTTP's own, when shutting down) is sent when
// ServeHTTP returns, with the connection closed after it.
type connectWriter struct {
	c        net.Conn
	header   http.Header
	status   int
	body     bytes.Buffer
	hijacked bool
}

func (w *connectWriter) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header)
	}
	return w.header
}

func (w *connectWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *connectWriter) Write(p []byte) (int, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
	}
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

// Hijack hands the connection over; the ReadWriter's reader is empty (the
// request's early bytes travel in its context).
func (w *connectWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	w.hijacked = true
	return w.c, bufio.NewReadWriter(bufio.NewReaderSize(w.c, 16), bufio.NewWriterSize(w.c, 16)), nil
}

// finish sends what was written and closes the connection.
func (w *connectWriter) finish() {
	defer w.c.Close()
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", w.status, http.StatusText(w.status))
	w.Header().Set("Content-Length", strconv.Itoa(w.body.Len()))
	w.Header().Set("Connection", "close")
	w.header.Write(&b)
	b.WriteString("\r\n")
	b.Write(w.body.Bytes())
	w.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	w.c.Write(b.Bytes())
}

// stackPadIndex is always 0; growStack's use of it keeps the compiler from
// dropping the array.
var stackPadIndex int

// growStack grows the goroutine's stack while it is shallow, to the size
// that the CONNECT path (goproxy, the guard's resolution and dial, the
// copy) needs anyway: grown later, deep in net's dialer, the runtime
// copies and adjusts every frame above, which cost about 5% of the
// proxy's CPU per tunnel.
//
//go:noinline
func growStack() byte {
	var pad [6 << 10]byte
	pad[stackPadIndex] = 1
	return pad[stackPadIndex]
}
