package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Host paths on request. The agent asks for a file or folder of the host
// that its pod was not given, with a reason: a POST of a PathRequest to
// RequestPathPath, to the proxy itself (origin form, as for CAPath). The
// proxy checks it, refuses at once a path that is or is under one of
// Options.ForbiddenPaths, and otherwise asks Options.Approver (an
// AskRequest of Kind AskPath) and holds the request until a person
// decides, as it holds a request an ask rule covers: the same timeout
// (Options.AskTimeout), the same bound on requests that wait at once
// (Options.MaxAsks), the same end at shutdown. devaipod on the host, which
// decides, copies the path into the pod before it writes the approval; the
// agent then sees it at HostPathPrefix+path. The answer is a PathAnswer:
// 200 granted, or a refusal (400 malformed, 403 forbidden, rejected or not
// decided in time, 404 in a pod without an approver, 503 too many waiting
// or the proxy stopping). Each request is audited as one record (two when
// it was asked about: decision "ask", then its end) with method POST, host
// PathRequestHost and the path in the detail.

// RequestPathPath is where the agent asks the proxy for a host path.
const RequestPathPath = "/devaipod/request-path"

// HostPathPrefix is where a granted host path appears in the agent:
// /host/home/me/src/lib for /home/me/src/lib.
const HostPathPrefix = "/host"

// PathRequestHost is the host of the audit records of path requests: no
// host of the network, devaipod itself.
const PathRequestHost = "devaipod"

// Bounds of a path request.
const (
	MaxPathRequestBody = 8 << 10 // bytes of the JSON body
	MaxRequestedPath   = 4096    // bytes of the path
	MaxPathReason      = 500     // bytes of the reason
)

// PathRequest is the body of a request for a host path.
type PathRequest struct {
	// Path is the host path: absolute and clean (see CheckRequestedPath).
	Path string `json:"path"`
	// Reason says why the task needs it; the person sees it.
	Reason string `json:"reason,omitempty"`
	// RW asks for a copy the agent may write to; read-only otherwise.
	RW bool `json:"rw,omitempty"`
}

// PathAnswer is the proxy's answer to a PathRequest.
type PathAnswer struct {
	Granted bool `json:"granted"`
	// At is where the agent sees a granted path (HostPathPrefix+path);
	// RW whether it may write to it.
	At string `json:"at,omitempty"`
	RW bool   `json:"rw"`
	// Reason is a refusal's reason (path-forbidden, rejected,
	// ask-timeout...), the proxy's header X-Devaipod-Proxy too.
	Reason string `json:"reason,omitempty"`
	// Message says what happened, for a person: who decided, and the
	// word of the one who rejected it.
	Message string `json:"message,omitempty"`
	// ID is the request's id where the person saw it (path-0a1b2c3d).
	ID string `json:"id,omitempty"`
}

// HostPathIn is where a granted host path p appears in the agent.
func HostPathIn(p string) string { return HostPathPrefix + p }

// CheckRequestedPath reports what is wrong with p as a requested host
// path: it must be absolute and clean (path.Clean leaves it as it is: no
// "..", ".", "//" or trailing "/"), not the root, at most
// MaxRequestedPath bytes, in valid UTF-8 without control characters
// (NUL among them) or invisible ones (bidirectional overrides,
// zero-width), so that the person sees exactly the path that is granted.
func CheckRequestedPath(p string) error {
	switch {
	case p == "":
		return errors.New("missing path")
	case len(p) > MaxRequestedPath:
		return fmt.Errorf("path of %d bytes: at most %d", len(p), MaxRequestedPath)
	case strings.IndexByte(p, 0) >= 0:
		return errors.New("the path has a NUL byte")
	}
	for _, r := range p {
		if r == utf8.RuneError {
			return errors.New("the path is not valid UTF-8")
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return fmt.Errorf("the path has the control or invisible character %U", r)
		}
	}
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q is not absolute: give the path on the host, from /", clip(p, 200))
	case p == "/":
		return errors.New("the host's whole file system is never shared: ask for the folder the task needs")
	case path.Clean(p) != p:
		return fmt.Errorf("%q is not clean: ask for %q", clip(p, 200), clip(path.Clean(p), 200))
	}
	return nil
}

// checkForbiddenPaths checks and cleans Options.ForbiddenPaths.
func checkForbiddenPaths(ps []string) ([]string, error) {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		if !path.IsAbs(p) {
			return nil, fmt.Errorf("forbidden path %q is not absolute", p)
		}
		out = append(out, path.Clean(p))
	}
	return out, nil
}

// forbiddenPath returns the forbidden path that p is or is under, if any.
// Lexical only: the host checks again after resolving symbolic links.
func (s *Server) forbiddenPath(p string) (string, bool) {
	for _, f := range s.forbidden {
		if p == f || f == "/" || strings.HasPrefix(p, f+"/") {
			return f, true
		}
	}
	return "", false
}

// readPathRequest reads and checks the body of a path request, at most
// MaxPathRequestBody bytes within ReadHeaderTimeout.
func (s *Server) readPathRequest(w http.ResponseWriter, r *http.Request) (PathRequest, error) {
	var req PathRequest
	if r.ContentLength > MaxPathRequestBody {
		return req, fmt.Errorf("a body of %d bytes: at most %d", r.ContentLength, MaxPathRequestBody)
	}
	// A body that trickles in holds no place for long. Cleared at once
	// after: a deadline that fired later would end the request.
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(s.opts.ReadHeaderTimeout)) == nil {
		defer rc.SetReadDeadline(time.Time{})
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxPathRequestBody+1))
	switch {
	case err != nil:
		return req, fmt.Errorf("reading the body: %s", describeError(err))
	case len(body) > MaxPathRequestBody:
		return req, fmt.Errorf("a body of more than %d bytes", MaxPathRequestBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf(`want a JSON object {"path": "/abs/host/path", "reason": "...", "rw": false}: %s`, clip(err.Error(), 200))
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, errors.New("more than one JSON value in the body")
	}
	if err := CheckRequestedPath(req.Path); err != nil {
		return req, err
	}
	if len(req.Reason) > MaxPathReason {
		return req, fmt.Errorf("reason of %d bytes: at most %d", len(req.Reason), MaxPathReason)
	}
	req.Reason = printable(req.Reason, MaxPathReason)
	return req, nil
}

// pathWhat is a path request in one line: "read /p" or "read-write /p".
func pathWhat(req PathRequest) string {
	if req.RW {
		return "read-write " + req.Path
	}
	return "read " + req.Path
}

// servePathRequest answers a request for a host path (see
// RequestPathPath); ServeHTTP audits its end from x.
func (s *Server) servePathRequest(w http.ResponseWriter, r *http.Request, x *exchange) {
	x.host, x.port = PathRequestHost, 0
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.refusePath(w, x, http.StatusMethodNotAllowed, ReasonBadRequest,
			fmt.Sprintf("%s %s: POST a JSON request for a host path", x.method, RequestPathPath), "")
		return
	}
	if s.opts.Approver == nil {
		s.refusePath(w, x, http.StatusNotFound, ReasonNoApprovals,
			"no approvals in this pod: nobody on the host is asked, so no host path can be requested", "")
		return
	}
	req, err := s.readPathRequest(w, r)
	if err != nil {
		s.refusePath(w, x, http.StatusBadRequest, ReasonBadRequest, "bad path request: "+err.Error(), "")
		return
	}
	what := pathWhat(req)
	audited := clip(what, 1024) // the detail's start: the path, clipped
	if f, ok := s.forbiddenPath(req.Path); ok {
		msg := req.Path + " is never shared with this pod"
		if f != req.Path {
			msg += " (it is under " + f + ")"
		}
		s.refusePath(w, x, http.StatusForbidden, ReasonPathForbidden, msg, audited)
		return
	}
	if !s.reserveAsk() {
		s.refusePath(w, x, http.StatusServiceUnavailable, ReasonAskLimit,
			fmt.Sprintf("%d requests wait for a decision, the limit; try again later", s.opts.MaxAsks), audited)
		return
	}
	defer s.asking.Add(-1)

	detail := fmt.Sprintf("%s: waits up to %v for a person's decision", audited, s.opts.AskTimeout)
	if req.Reason != "" {
		detail += "; reason: " + clip(req.Reason, 200)
	}
	s.audit.writeRequest(&Record{
		Event: EventRequest, Method: x.method, Host: x.host, Decision: DecisionAsk, Detail: detail,
		DurationMS: time.Since(x.start).Milliseconds(),
	})
	// The request's context ends when the client goes away (it sent its
	// whole body, so the server watches the connection) and when the
	// proxy stops.
	d, no := s.waitDecision(r.Context(), AskRequest{Kind: AskPath, Method: x.method, Rule: req.Path, What: what,
		Path: req.Path, Reason: req.Reason, RW: req.RW})
	if no != nil {
		if no.reason == ReasonRejected {
			x.decidedBy = d.By
		}
		s.refusePath(w, x, no.status, no.reason, no.detail, audited)
		return
	}
	at := HostPathIn(req.Path)
	mode := "read-only"
	if d.RW {
		mode = "read-write"
	}
	msg := "approved by " + d.By
	if d.Reason != "" {
		msg += ": " + d.Reason
	}
	msg = withID(msg, d.ID) + "; visible at " + at + " (" + mode + ")"
	x.allow, x.decidedBy, x.status, x.reason = true, d.By, http.StatusOK, ""
	x.detail = audited + ": " + msg
	writePathAnswer(w, http.StatusOK, PathAnswer{Granted: true, At: at, RW: d.RW, Message: msg, ID: d.ID})
}

// refusePath refuses a path request: x for the audit (its detail is
// message, after what when that is set), a PathAnswer for the agent.
func (s *Server) refusePath(w http.ResponseWriter, x *exchange, status int, reason, message, what string) {
	detail := message
	if what != "" {
		detail = what + ": " + message
	}
	x.refuse(status, reason, detail)
	w.Header().Set("X-Devaipod-Proxy", reason)
	writePathAnswer(w, status, PathAnswer{Reason: reason, Message: message})
}

func writePathAnswer(w http.ResponseWriter, status int, a PathAnswer) {
	b, _ := json.Marshal(a) // strings and booleans: cannot fail
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// clip returns s made printable and cut to at most n bytes, with "..."
// at the end when it was cut.
func clip(s string, n int) string {
	p := printable(s, len(s))
	if len(p) <= n {
		return p
	}
	return printable(p, n-3) + "..."
}
