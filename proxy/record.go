package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// record writes x's audit line. reason, if set, overrides x.reason (a
// tunnel's end).
func (s *Server) record(x *exchange, up, down int64, reason string) {
	if x.unaudited {
		return
	}
	r := Record{
		Event:       EventRequest,
		Method:      x.method,
		Host:        x.host,
		Port:        x.port,
		Decision:    DecisionDeny,
		Rule:        x.rule,
		Reason:      x.reason,
		Detail:      x.detail,
		Status:      x.status,
		BytesUp:     up,
		BytesDown:   down,
		DurationMS:  time.Since(x.start).Milliseconds(),
		Credentials: x.credentials,
		Masked:      x.masked,
		DecidedBy:   x.decidedBy,
	}
	if x.allow {
		r.Decision = DecisionAllow
	}
	if reason != "" {
		r.Reason = reason
	}
	s.audit.writeRequest(&r)
}

func (s *Server) policyChanged(p *policy, err error) {
	r := Record{Event: EventPolicy, File: s.opts.PolicyFile}
	if p != nil {
		r.Allow, r.Deny = p.allowText, p.denyText
	}
	if err != nil {
		r.Error = err.Error()
		s.log.Error("policy not applied, keeping the previous one", "err", err)
	} else {
		s.log.Info("policy in force", "allow", len(r.Allow), "deny", len(r.Deny))
	}
	s.audit.write(r)
}

// statusWriter records the status and counts the body bytes of a plain-HTTP
// answer. It passes Flush and Hijack through (goproxy needs both).
type statusWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countingReader counts the request body bytes read. The transport may
// read it on another goroutine.
type countingReader struct {
	io.ReadCloser
	n atomic.Int64
	// broken is set when the body failed to read (a malformed chunk, the
	// client gone): the connection cannot carry another request, for the
	// rest of the body would be read as one.
	broken atomic.Bool
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n.Add(int64(n))
	if err != nil && err != io.EOF {
		r.broken.Store(true)
	}
	return n, err
}

// failed reports whether the body failed to read.
func (r *countingReader) failed() bool { return r != nil && r.broken.Load() }

func (r *countingReader) count() int64 {
	if r == nil {
		return 0
	}
	return r.n.Load()
}

// goproxyLogger sends goproxy's messages (its warnings are mostly about
// clients going away) to the debug level.
type goproxyLogger struct{ log *slog.Logger }

func (g goproxyLogger) Printf(format string, v ...any) {
	if g.log.Enabled(context.Background(), slog.LevelDebug) {
		g.log.Debug(strings.TrimSpace(fmt.Sprintf(format, v...)), "from", "goproxy")
	}
}

// shorten truncates s to at most n bytes for logs and messages.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
