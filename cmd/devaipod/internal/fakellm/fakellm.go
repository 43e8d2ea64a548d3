// Package fakellm is a scripted stand-in for an OpenAI-compatible chat completions API, for tests
// that drive a real coding agent (opencode) without a real model.
//
// A Server answers POST /v1/chat/completions (streaming and not) and GET /v1/models. Its Script
// is an ordered list of turns; each turn is either a text answer or one or more tool calls. An
// incoming request is answered by the next unused turn whose precondition (Turn.When) holds; by
// default turn N waits until the conversation holds as many tool results as the turns before it
// asked for, so a turn is played only after the agent has run the tools of the previous one.
//
// Agents send side requests besides the main conversation: opencode asks for a session title
// with a separate system prompt and no tools. IsAuxiliary (DefaultIsAuxiliary unless set) picks
// those out; they get AuxiliaryText and consume no turn. Every request is recorded (Requests) so
// a test can assert on the model, the messages and the tools the agent offered.
//
// Server is an http.Handler: serve it with httptest.NewServer or http.Serve on a loopback
// listener.
package fakellm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// DefaultModel is the model id GET /v1/models lists when Server.Models is empty.
const DefaultModel = "fake-model"

// DefaultAuxiliaryText answers auxiliary requests when Server.AuxiliaryText is empty.
const DefaultAuxiliaryText = "Scripted session"

// NoTurnText answers a main-conversation request that no remaining turn matches. It ends the
// agent's loop (finish_reason "stop") instead of failing the HTTP request, because agents retry
// failed requests with backoff and a test would then hang rather than fail; the request is
// recorded with KindUnmatched so the test can fail on it.
const NoTurnText = "fakellm: no scripted turn matches this request"

// Turn is one scripted answer: text, or tool calls (then Text, if set, is sent before them).
type Turn struct {
	// Name labels the turn in errors and in Request.TurnName.
	Name string
	// When reports whether the turn may answer req. Nil means AfterToolResults(k), k being the
	// number of tool calls in all earlier turns of the script.
	When Match
	// Text is the assistant's text. A turn without tool calls ends the agent's loop
	// (finish_reason "stop").
	Text string
	// ToolCalls are the tools the assistant calls (finish_reason "tool_calls").
	ToolCalls []ToolCall
}

// ToolCall is one function call the model makes.
type ToolCall struct {
	// ID is the tool call id; empty means "call_<turn>_<index>".
	ID string
	// Name is the function (tool) name, e.g. "write" or "bash" for opencode.
	Name string
	// Args are the function arguments: any value json.Marshal accepts, a json.RawMessage or a
	// string holding JSON (sent as it is), or an ArgsFunc computing one of those from the request
	// being answered.
	Args any
}

// ArgsFunc computes tool call arguments from the request being answered, e.g. a path in the
// agent's working directory (Request.WorkingDirectory).
type ArgsFunc func(req *Request) any

// Match is a turn precondition.
type Match func(req *Request) bool

// Text is a turn answering with text s.
func Text(s string) Turn { return Turn{Text: s} }

// Calls is a turn making the tool calls calls.
func Calls(calls ...ToolCall) Turn { return Turn{ToolCalls: calls} }

// Call is a tool call of function name with arguments args (see ToolCall.Args).
func Call(name string, args any) ToolCall { return ToolCall{Name: name, Args: args} }

// AfterToolResults matches once the conversation holds at least n tool results.
func AfterToolResults(n int) Match {
	return func(req *Request) bool { return len(req.ToolResults()) >= n }
}

// Always matches every request.
func Always(*Request) bool { return true }

// Kind says how the server answered a request.
type Kind string

const (
	// KindScript: answered by a script turn (Request.Turn).
	KindScript Kind = "script"
	// KindReplay: the same conversation state as the request that consumed the last used turn
	// (an agent retry); answered with that turn again.
	KindReplay Kind = "replay"
	// KindAuxiliary: a side request (IsAuxiliary), answered with AuxiliaryText.
	KindAuxiliary Kind = "auxiliary"
	// KindUnmatched: no remaining turn matched; answered with NoTurnText.
	KindUnmatched Kind = "unmatched"
	// KindInvalid: the body was not a chat completions request; answered with HTTP 400.
	KindInvalid Kind = "invalid"
)

// Server is the fake chat completions API. Set its fields before it serves; they are not
// guarded against later changes.
type Server struct {
	// Script is played in order.
	Script []Turn
	// Models are listed by GET /v1/models; empty means DefaultModel.
	Models []string
	// IsAuxiliary picks out side requests that must not consume a turn; nil means
	// DefaultIsAuxiliary.
	IsAuxiliary func(req *Request) bool
	// AuxiliaryText answers auxiliary requests; empty means DefaultAuxiliaryText.
	AuxiliaryText string

	mu       sync.Mutex
	next     int       // index of the first unused turn
	last     *Request  // the request that consumed the last used turn
	requests []Request // every chat completions request, in arrival order
	finished chan struct{}
	once     sync.Once
}

// New returns a server playing script.
func New(script ...Turn) *Server {
	return &Server{Script: script}
}

// Request is one recorded chat completions request.
type Request struct {
	// Model is the requested model id.
	Model string
	// Stream is whether the client asked for server-sent events.
	Stream bool
	// Messages is the conversation sent.
	Messages []Message
	// Tools are the tools offered.
	Tools []Tool
	// Header is the HTTP request header (e.g. Authorization).
	Header http.Header
	// Body is the raw request body.
	Body json.RawMessage

	// Kind says how the server answered.
	Kind Kind
	// Turn is the index of the script turn that answered (KindScript, KindReplay), else -1.
	Turn int
	// TurnName is that turn's Name.
	TurnName string
}

// Message is one conversation message.
type Message struct {
	Role string `json:"role"`
	// Content is the message text; when the client sent an array of content parts, the text
	// parts joined with newlines.
	Content string `json:"-"`
	// RawContent is content exactly as sent (a JSON string, array or null).
	RawContent json.RawMessage   `json:"content"`
	ToolCalls  []MessageToolCall `json:"tool_calls,omitempty"`
	ToolCallID string            `json:"tool_call_id,omitempty"`
}

// MessageToolCall is a tool call in an assistant message of the conversation.
type MessageToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Tool is one offered tool (function).
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// System is the text of the request's system messages, joined with newlines.
func (r *Request) System() string {
	var parts []string
	for _, m := range r.Messages {
		if m.Role == "system" || m.Role == "developer" {
			parts = append(parts, m.Content)
		}
	}
	return strings.Join(parts, "\n")
}

// ToolResults are the request's tool result messages (role "tool"), in order.
func (r *Request) ToolResults() []Message {
	var out []Message
	for _, m := range r.Messages {
		if m.Role == "tool" {
			out = append(out, m)
		}
	}
	return out
}

// ToolResult is the content of the tool result answering tool call id, and whether there is one.
func (r *Request) ToolResult(id string) (string, bool) {
	for _, m := range r.Messages {
		if m.Role == "tool" && m.ToolCallID == id {
			return m.Content, true
		}
	}
	return "", false
}

// ToolNames are the names of the offered tools, in order.
func (r *Request) ToolNames() []string {
	names := make([]string, 0, len(r.Tools))
	for _, t := range r.Tools {
		names = append(names, t.Function.Name)
	}
	return names
}

// HasTool reports whether a tool called name was offered.
func (r *Request) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t.Function.Name == name {
			return true
		}
	}
	return false
}

// WorkingDirectory is the directory the agent's system prompt names on a line
// "Working directory: DIR" (opencode's <env> block), or "" when there is none.
func (r *Request) WorkingDirectory() string {
	for _, line := range strings.Split(r.System(), "\n") {
		if dir, ok := strings.CutPrefix(strings.TrimSpace(line), "Working directory:"); ok {
			return strings.TrimSpace(dir)
		}
	}
	return ""
}

// LastUser is the text of the last user message.
func (r *Request) LastUser() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

// DefaultIsAuxiliary reports whether req is a side request rather than a step of the main
// conversation: it offers no tools (a coding agent's main loop always offers its tools, while
// opencode's title, summary and compaction agents deny every tool), or its system prompt holds
// the opening of one of those agents' prompts in opencode 1.18 ("You are a title generator",
// "Summarize what was done in this conversation", "You are a context summarization agent").
func DefaultIsAuxiliary(req *Request) bool {
	if len(req.Tools) == 0 {
		return true
	}
	sys := req.System()
	for _, p := range []string{
		"You are a title generator",
		"Summarize what was done in this conversation",
		"You are a context summarization agent",
	} {
		if strings.Contains(sys, p) {
			return true
		}
	}
	return false
}

// Requests returns a copy of the recorded chat completions requests, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// RequestsOf returns the recorded requests answered as kind.
func (s *Server) RequestsOf(kind Kind) []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// Used is the number of script turns played so far.
func (s *Server) Used() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next
}

// Finished is closed once the last script turn has been played (at once for an empty script,
// when first called).
func (s *Server) Finished() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if len(s.Script) == 0 {
		s.once.Do(func() { close(s.finished) })
	}
	return s.finished
}

// Check returns an error naming the problems a test should fail on: unplayed turns, requests no
// turn matched, and invalid requests.
func (s *Server) Check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.next < len(s.Script) {
		errs = append(errs, fmt.Errorf("fakellm: %d of %d script turns unplayed, next is %s",
			len(s.Script)-s.next, len(s.Script), s.turnLabel(s.next)))
	}
	for i, r := range s.requests {
		switch r.Kind {
		case KindUnmatched:
			errs = append(errs, fmt.Errorf("fakellm: request %d (%d messages, %d tool results, last: %.200q) matched no turn",
				i, len(r.Messages), len(r.ToolResults()), lastContent(r.Messages)))
		case KindInvalid:
			errs = append(errs, fmt.Errorf("fakellm: request %d was not a valid chat completions request", i))
		}
	}
	return errors.Join(errs...)
}

// lastContent is the content of the last message of msgs, for error messages.
func lastContent(msgs []Message) string {
	if len(msgs) == 0 {
		return ""
	}
	return msgs[len(msgs)-1].Content
}

func (s *Server) turnLabel(i int) string {
	if i < 0 || i >= len(s.Script) {
		return "none"
	}
	if n := s.Script[i].Name; n != "" {
		return fmt.Sprintf("turn %d (%s)", i, n)
	}
	return fmt.Sprintf("turn %d", i)
}

func (s *Server) initLocked() {
	if s.finished == nil {
		s.finished = make(chan struct{})
	}
}

// ServeHTTP implements http.Handler. Paths are accepted with or without the /v1 prefix.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/v1")
	switch {
	case path == "/chat/completions" && r.Method == http.MethodPost:
		s.serveChat(w, r)
	case path == "/chat/completions":
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
	case path == "/models" && r.Method == http.MethodGet:
		s.serveModels(w)
	default:
		writeError(w, http.StatusNotFound, "fakellm: no route for "+r.Method+" "+r.URL.Path)
	}
}

func (s *Server) serveModels(w http.ResponseWriter) {
	models := s.Models
	if len(models) == 0 {
		models = []string{DefaultModel}
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list"}
	for _, id := range models {
		list.Data = append(list.Data, model{ID: id, Object: "model", Created: 1700000000, OwnedBy: "fakellm"})
	}
	writeJSON(w, http.StatusOK, list)
}

// chatRequest is the part of a chat completions request body the server reads.
type chatRequest struct {
	Model         string    `json:"model"`
	Stream        bool      `json:"stream"`
	Messages      []Message `json:"messages"`
	Tools         []Tool    `json:"tools"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (s *Server) serveChat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the request: "+err.Error())
		return
	}
	var cr chatRequest
	rec := Request{Header: r.Header.Clone(), Body: append(json.RawMessage(nil), body...), Turn: -1}
	if err := json.Unmarshal(body, &cr); err != nil || len(cr.Messages) == 0 {
		rec.Kind = KindInvalid
		s.record(rec)
		msg := "the body is not a chat completions request with messages"
		if err != nil {
			msg = "decoding the request: " + err.Error()
		}
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	for i := range cr.Messages {
		cr.Messages[i].Content = contentText(cr.Messages[i].RawContent)
	}
	rec.Model, rec.Stream, rec.Messages, rec.Tools = cr.Model, cr.Stream, cr.Messages, cr.Tools

	turn, idx, seq := s.answer(&rec)
	resp := response{
		req:     &rec,
		id:      fmt.Sprintf("chatcmpl-fake-%d", seq),
		model:   cr.Model,
		created: time.Now().Unix(),
		turn:    turn,
		turnIdx: idx,
	}
	if cr.Stream {
		resp.stream(w, cr.StreamOptions != nil && cr.StreamOptions.IncludeUsage)
	} else {
		resp.whole(w)
	}
}

// answer picks the turn answering rec, records rec and returns the turn, its index (-1 for
// answers that are no script turn) and the request's number.
func (s *Server) answer(rec *Request) (turn Turn, index, seq int) {
	isAux := s.IsAuxiliary
	if isAux == nil {
		isAux = DefaultIsAuxiliary
	}
	aux := isAux(rec)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	defer func() {
		s.requests = append(s.requests, *rec)
		seq = len(s.requests)
	}()
	if aux {
		rec.Kind = KindAuxiliary
		text := s.AuxiliaryText
		if text == "" {
			text = DefaultAuxiliaryText
		}
		return Text(text), -1, 0
	}
	for i := s.next; i < len(s.Script); i++ {
		if s.precondition(i)(rec) {
			rec.Kind, rec.Turn, rec.TurnName = KindScript, i, s.Script[i].Name
			s.next = i + 1
			last := *rec
			s.last = &last
			if s.next == len(s.Script) {
				s.once.Do(func() { close(s.finished) })
			}
			return s.Script[i], i, 0
		}
	}
	if s.last != nil && sameState(s.last, rec) {
		i := s.last.Turn
		rec.Kind, rec.Turn, rec.TurnName = KindReplay, i, s.Script[i].Name
		return s.Script[i], i, 0
	}
	rec.Kind = KindUnmatched
	return Text(NoTurnText), -1, 0
}

// precondition is turn i's When, or its default.
func (s *Server) precondition(i int) Match {
	if w := s.Script[i].When; w != nil {
		return w
	}
	calls := 0
	for _, t := range s.Script[:i] {
		calls += len(t.ToolCalls)
	}
	return AfterToolResults(calls)
}

// sameState reports whether b repeats the conversation of a (a retried request).
func sameState(a, b *Request) bool {
	if len(a.Messages) != len(b.Messages) {
		return false
	}
	for i := range a.Messages {
		x, y := a.Messages[i], b.Messages[i]
		if x.Role != y.Role || x.Content != y.Content || x.ToolCallID != y.ToolCallID || len(x.ToolCalls) != len(y.ToolCalls) {
			return false
		}
	}
	return true
}

func (s *Server) record(rec Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, rec)
}

// contentText flattens a message content (a string, an array of parts, or null) to text.
func contentText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var texts []string
		for _, p := range parts {
			if p.Type == "text" || p.Text != "" {
				texts = append(texts, p.Text)
			}
		}
		return strings.Join(texts, "\n")
	}
	return string(raw)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes an error in OpenAI's error format.
func writeError(w http.ResponseWriter, status int, msg string) {
	type apiError struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	}
	writeJSON(w, status, struct {
		Error apiError `json:"error"`
	}{apiError{Message: msg, Type: "invalid_request_error"}})
}
