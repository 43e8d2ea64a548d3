package fakellm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// chatBody is a chat completions request body as an agent sends it.
type chatBody struct {
	Model         string           `json:"model"`
	Stream        bool             `json:"stream,omitempty"`
	StreamOptions map[string]bool  `json:"stream_options,omitempty"`
	Messages      []map[string]any `json:"messages"`
	Tools         []map[string]any `json:"tools,omitempty"`
}

func tool(name string) map[string]any {
	return map[string]any{"type": "function", "function": map[string]any{
		"name": name, "description": name + " tool", "parameters": map[string]any{"type": "object"},
	}}
}

var agentTools = []map[string]any{tool("write"), tool("bash")}

// conversation is a main-loop request body: system and user prompt, then for each earlier tool
// call an assistant message with the call and its result.
func conversation(stream bool, toolResults ...string) chatBody {
	msgs := []map[string]any{
		{"role": "system", "content": "You are a coding agent."},
		{"role": "user", "content": "do the task"},
	}
	for i, r := range toolResults {
		id := "call_" + string(rune('a'+i))
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": "", "tool_calls": []map[string]any{{
				"id": id, "type": "function", "function": map[string]any{"name": "bash", "arguments": "{}"},
			}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": r},
		)
	}
	b := chatBody{Model: "fake-model", Stream: stream, Messages: msgs, Tools: agentTools}
	if stream {
		b.StreamOptions = map[string]bool{"include_usage": true}
	}
	return b
}

func post(t *testing.T, url string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// completion is a whole (non-streamed) answer.
type completion struct {
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

func complete(t *testing.T, url string, body chatBody) completion {
	t.Helper()
	resp := post(t, url+"/v1/chat/completions", body)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var c completion
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	if len(c.Choices) != 1 {
		t.Fatalf("%d choices", len(c.Choices))
	}
	return c
}

func text(c completion) string {
	if p := c.Choices[0].Message.Content; p != nil {
		return *p
	}
	return ""
}

// streamed is a streamed answer put back together the way an OpenAI client does.
type streamed struct {
	chunks       int
	role         string
	content      string
	calls        []wireToolCall // by index
	finishReason string
	usage        *usage
	done         bool // "data: [DONE]" came last
}

func stream(t *testing.T, url string, body chatBody) streamed {
	t.Helper()
	resp := post(t, url+"/v1/chat/completions", body)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	var s streamed
	sc := bufio.NewScanner(resp.Body)
	expectBlank := false
	for sc.Scan() {
		line := sc.Text()
		if expectBlank {
			if line != "" {
				t.Fatalf("event not followed by a blank line: %q", line)
			}
			expectBlank = false
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not a data line", line)
		}
		expectBlank = true
		if s.done {
			t.Fatalf("data after [DONE]: %q", data)
		}
		if data == "[DONE]" {
			s.done = true
			continue
		}
		var c struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Role      string         `json:"role"`
					Content   *string        `json:"content"`
					ToolCalls []wireToolCall `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if c.Object != "chat.completion.chunk" || c.ID == "" {
			t.Errorf("chunk %q: object %q id %q", data, c.Object, c.ID)
		}
		s.chunks++
		if c.Usage != nil {
			s.usage = c.Usage
		}
		for _, ch := range c.Choices {
			if s.finishReason != "" {
				t.Errorf("choice after the finish reason: %q", data)
			}
			if ch.Delta.Role != "" {
				s.role = ch.Delta.Role
			}
			if ch.Delta.Content != nil {
				s.content += *ch.Delta.Content
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Index == nil {
					t.Fatalf("tool call delta without index: %q", data)
				}
				i := *tc.Index
				switch {
				case i == len(s.calls): // a new call: its head
					if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
						t.Errorf("tool call head %q lacks id, type or name", data)
					}
					s.calls = append(s.calls, tc)
				case i < len(s.calls):
					if tc.ID != "" || tc.Function.Name != "" {
						t.Errorf("tool call continuation %q repeats the head", data)
					}
					s.calls[i].Function.Arguments += tc.Function.Arguments
				default:
					t.Fatalf("tool call index %d skips ahead: %q", i, data)
				}
			}
			if ch.FinishReason != nil {
				s.finishReason = *ch.FinishReason
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !s.done {
		t.Error("the stream did not end with data: [DONE]")
	}
	return s
}

func TestStreamText(t *testing.T) {
	long := strings.Repeat("Ünïcode text, streamed in pieces. ", 5)
	srv := httptest.NewServer(New(Text(long)))
	defer srv.Close()

	s := stream(t, srv.URL, conversation(true))
	if s.role != "assistant" || s.content != long || s.finishReason != "stop" || len(s.calls) != 0 {
		t.Errorf("got role %q content %q finish %q calls %v", s.role, s.content, s.finishReason, s.calls)
	}
	if s.chunks < 4 {
		t.Errorf("%d chunks: want the text in several deltas", s.chunks)
	}
	if s.usage == nil || s.usage.TotalTokens == 0 {
		t.Errorf("no usage chunk, though stream_options.include_usage was set")
	}
}

func TestStreamWithoutUsage(t *testing.T) {
	srv := httptest.NewServer(New(Text("hi")))
	defer srv.Close()
	body := conversation(true)
	body.StreamOptions = nil
	if s := stream(t, srv.URL, body); s.usage != nil {
		t.Errorf("usage %+v sent without stream_options.include_usage", s.usage)
	}
}

func TestStreamToolCalls(t *testing.T) {
	srv := httptest.NewServer(New(Turn{
		Text: "Two tools.",
		ToolCalls: []ToolCall{
			Call("write", map[string]any{"filePath": "/w/a.txt", "content": strings.Repeat("x", 100)}),
			{ID: "mine", Name: "bash", Args: `{"command":"ls"}`},
		},
	}))
	defer srv.Close()

	s := stream(t, srv.URL, conversation(true))
	if s.finishReason != "tool_calls" || s.content != "Two tools." {
		t.Errorf("finish %q content %q", s.finishReason, s.content)
	}
	if len(s.calls) != 2 {
		t.Fatalf("%d tool calls, want 2", len(s.calls))
	}
	if c := s.calls[0]; c.ID != "call_0_0" || c.Function.Name != "write" {
		t.Errorf("first call: %+v", c)
	}
	var args map[string]string
	if err := json.Unmarshal([]byte(s.calls[0].Function.Arguments), &args); err != nil ||
		args["filePath"] != "/w/a.txt" || len(args["content"]) != 100 {
		t.Errorf("first call arguments %q (%v)", s.calls[0].Function.Arguments, err)
	}
	if c := s.calls[1]; c.ID != "mine" || c.Function.Name != "bash" || c.Function.Arguments != `{"command":"ls"}` {
		t.Errorf("second call: %+v", c)
	}
}

func TestWholeAnswers(t *testing.T) {
	srv := httptest.NewServer(New(
		Calls(Call("bash", json.RawMessage(`{"command":"true"}`))),
		Text("finished"),
	))
	defer srv.Close()

	c := complete(t, srv.URL, conversation(false))
	if c.Object != "chat.completion" || c.Model != "fake-model" || c.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("first answer: %+v", c)
	}
	if c.Choices[0].Message.Content != nil {
		t.Errorf("content %q with tool calls and no text: want null", *c.Choices[0].Message.Content)
	}
	calls := c.Choices[0].Message.ToolCalls
	if len(calls) != 1 || calls[0].ID != "call_0_0" || calls[0].Type != "function" ||
		calls[0].Function.Name != "bash" || calls[0].Function.Arguments != `{"command":"true"}` {
		t.Errorf("tool calls %+v", calls)
	}

	c = complete(t, srv.URL, conversation(false, "ok"))
	if text(c) != "finished" || c.Choices[0].FinishReason != "stop" || len(c.Choices[0].Message.ToolCalls) != 0 || c.Usage == nil {
		t.Errorf("second answer: %+v", c)
	}
}

func TestScriptProgress(t *testing.T) {
	llm := New(
		Turn{Name: "two calls", ToolCalls: []ToolCall{Call("bash", nil), Call("bash", nil)}},
		Turn{Name: "one call", ToolCalls: []ToolCall{Call("write", nil)}},
		Turn{Name: "end", Text: "done"},
	)
	srv := httptest.NewServer(llm)
	defer srv.Close()

	select {
	case <-llm.Finished():
		t.Fatal("finished before any request")
	default:
	}
	steps := []struct {
		results []string
		want    string // tool name of the first call, or the text
		kind    Kind
		turn    int
	}{
		{nil, "bash", KindScript, 0},
		{nil, "bash", KindReplay, 0},                    // a retry of the same conversation
		{[]string{"r1"}, NoTurnText, KindUnmatched, -1}, // only one of two results: not yet turn 1
		{[]string{"r1", "r2"}, "write", KindScript, 1},
		{[]string{"r1", "r2", "r3"}, "done", KindScript, 2},
		{[]string{"r1", "r2", "r3", "r4"}, NoTurnText, KindUnmatched, -1},
	}
	for i, st := range steps {
		c := complete(t, srv.URL, conversation(false, st.results...))
		got := text(c)
		if calls := c.Choices[0].Message.ToolCalls; len(calls) > 0 {
			got = calls[0].Function.Name
		}
		if got != st.want {
			t.Errorf("step %d: answered %q, want %q", i, got, st.want)
		}
		reqs := llm.Requests()
		if r := reqs[len(reqs)-1]; r.Kind != st.kind || r.Turn != st.turn {
			t.Errorf("step %d: recorded kind %s turn %d, want %s %d", i, r.Kind, r.Turn, st.kind, st.turn)
		}
	}
	select {
	case <-llm.Finished():
	default:
		t.Error("Finished not closed after the last turn")
	}
	if llm.Used() != 3 {
		t.Errorf("Used %d, want 3", llm.Used())
	}
	err := llm.Check()
	if err == nil || strings.Count(err.Error(), "matched no turn") != 2 || strings.Contains(err.Error(), "unplayed") {
		t.Errorf("Check: %v; want the two unmatched requests and nothing else", err)
	}
	if n := len(llm.RequestsOf(KindScript)); n != 3 {
		t.Errorf("RequestsOf(KindScript): %d, want 3", n)
	}
}

func TestCheckReportsUnplayedTurns(t *testing.T) {
	llm := New(Calls(Call("bash", nil)), Turn{Name: "closing words", Text: "bye"})
	srv := httptest.NewServer(llm)
	defer srv.Close()
	complete(t, srv.URL, conversation(false))
	err := llm.Check()
	if err == nil || !strings.Contains(err.Error(), "1 of 2 script turns unplayed, next is turn 1 (closing words)") {
		t.Errorf("Check: %v", err)
	}
}

func TestEmptyScriptIsFinished(t *testing.T) {
	llm := New()
	select {
	case <-llm.Finished():
	case <-time.After(time.Second):
		t.Error("an empty script is not finished")
	}
	if err := llm.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestArgsFromRequest(t *testing.T) {
	llm := New(Calls(
		Call("write", ArgsFunc(func(r *Request) any {
			return map[string]string{"filePath": r.WorkingDirectory() + "/a.txt"}
		})),
		Call("bash", func(r *Request) any { return map[string]string{"command": "echo " + r.LastUser()} }),
	))
	srv := httptest.NewServer(llm)
	defer srv.Close()

	body := conversation(false)
	body.Messages[0]["content"] = "Agent prompt.\n<env>\n  Working directory: /workspaces/demo\n  Platform: linux\n</env>"
	calls := complete(t, srv.URL, body).Choices[0].Message.ToolCalls
	if len(calls) != 2 || calls[0].Function.Arguments != `{"filePath":"/workspaces/demo/a.txt"}` ||
		calls[1].Function.Arguments != `{"command":"echo do the task"}` {
		t.Errorf("tool calls %+v", calls)
	}
	if got := (&Request{}).WorkingDirectory(); got != "" {
		t.Errorf("WorkingDirectory without a system prompt = %q", got)
	}
}

func TestCustomPrecondition(t *testing.T) {
	llm := New(
		Turn{Text: "first", When: func(r *Request) bool { return strings.Contains(r.LastUser(), "go") }},
		Turn{Text: "second", When: Always},
	)
	srv := httptest.NewServer(llm)
	defer srv.Close()

	body := conversation(false)
	body.Messages[1]["content"] = "go on"
	if got := text(complete(t, srv.URL, body)); got != "first" {
		t.Errorf("answered %q, want first", got)
	}
	body.Messages[1]["content"] = "anything"
	if got := text(complete(t, srv.URL, body)); got != "second" {
		t.Errorf("answered %q, want second", got)
	}
}

// A turn whose precondition fails is skipped for a later one that matches ("the next turn whose
// precondition matches"), and is not played afterwards.
func TestLaterTurnMatches(t *testing.T) {
	llm := New(
		Turn{Name: "never", Text: "never", When: func(*Request) bool { return false }},
		Turn{Name: "now", Text: "now", When: Always},
	)
	srv := httptest.NewServer(llm)
	defer srv.Close()
	if got := text(complete(t, srv.URL, conversation(false))); got != "now" {
		t.Errorf("answered %q, want now", got)
	}
	if llm.Used() != 2 {
		t.Errorf("Used %d, want 2", llm.Used())
	}
}

func TestAuxiliaryRequests(t *testing.T) {
	llm := New(Text("main answer"))
	srv := httptest.NewServer(llm)
	defer srv.Close()

	title := chatBody{Model: "fake-model", Stream: true, Messages: []map[string]any{
		{"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
		{"role": "user", "content": "Generate a title for this conversation:\n"},
		{"role": "user", "content": "do the task"},
	}}
	if s := stream(t, srv.URL, title); s.content != DefaultAuxiliaryText || s.finishReason != "stop" {
		t.Errorf("title request answered %q (%s)", s.content, s.finishReason)
	}
	// The prompt alone is enough, even when tools are offered.
	withTools := conversation(false)
	withTools.Messages[0]["content"] = "Summarize what was done in this conversation. Write like a pull request description."
	llm.AuxiliaryText = "short"
	if got := text(complete(t, srv.URL, withTools)); got != "short" {
		t.Errorf("summary request answered %q", got)
	}
	if llm.Used() != 0 {
		t.Fatalf("auxiliary requests consumed %d turns", llm.Used())
	}
	if got := text(complete(t, srv.URL, conversation(false))); got != "main answer" {
		t.Errorf("main request answered %q", got)
	}
	if n := len(llm.RequestsOf(KindAuxiliary)); n != 2 {
		t.Errorf("%d auxiliary requests recorded, want 2", n)
	}
	if err := llm.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestCustomIsAuxiliary(t *testing.T) {
	llm := New(Text("main"))
	llm.IsAuxiliary = func(r *Request) bool { return r.Model == "small" }
	srv := httptest.NewServer(llm)
	defer srv.Close()

	noTools := conversation(false)
	noTools.Tools = nil
	if got := text(complete(t, srv.URL, noTools)); got != "main" {
		t.Errorf("a request without tools answered %q: the custom classifier should treat it as main", got)
	}
	small := conversation(false, "x")
	small.Model = "small"
	if got := text(complete(t, srv.URL, small)); got != DefaultAuxiliaryText {
		t.Errorf("small model request answered %q", got)
	}
}

func TestRecording(t *testing.T) {
	llm := New(Text("ok"))
	srv := httptest.NewServer(llm)
	defer srv.Close()

	body := conversation(true, "result one")
	body.Messages[1]["content"] = []map[string]any{
		{"type": "text", "text": "part one"},
		{"type": "image_url", "image_url": map[string]string{"url": "data:,"}},
		{"type": "text", "text": "part two"},
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	reqs := llm.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests recorded", len(reqs))
	}
	r := reqs[0]
	if r.Model != "fake-model" || !r.Stream || r.Header.Get("Authorization") != "Bearer k" || !bytes.Equal(r.Body, b) {
		t.Errorf("recorded model %q stream %v auth %q", r.Model, r.Stream, r.Header.Get("Authorization"))
	}
	if r.System() != "You are a coding agent." || r.LastUser() != "part one\npart two" {
		t.Errorf("system %q last user %q", r.System(), r.LastUser())
	}
	if got, ok := r.ToolResult("call_a"); !ok || got != "result one" {
		t.Errorf("ToolResult(call_a) = %q, %v", got, ok)
	}
	if _, ok := r.ToolResult("call_z"); ok {
		t.Error("ToolResult found a result for an unknown id")
	}
	if !reflect.DeepEqual(r.ToolNames(), []string{"write", "bash"}) || !r.HasTool("bash") || r.HasTool("webfetch") {
		t.Errorf("tools %v", r.ToolNames())
	}
	asst := r.Messages[2]
	if asst.Role != "assistant" || len(asst.ToolCalls) != 1 || asst.ToolCalls[0].Function.Name != "bash" {
		t.Errorf("assistant message %+v", asst)
	}
	if r.Tools[0].Function.Description != "write tool" || string(r.Tools[0].Function.Parameters) != `{"type":"object"}` {
		t.Errorf("tool %+v", r.Tools[0])
	}
}

func TestModels(t *testing.T) {
	for _, tc := range []struct {
		models, want []string
	}{
		{nil, []string{DefaultModel}},
		{[]string{"a", "b"}, []string{"a", "b"}},
	} {
		llm := New()
		llm.Models = tc.models
		srv := httptest.NewServer(llm)
		for _, path := range []string{"/v1/models", "/models"} {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			var list struct {
				Object string `json:"object"`
				Data   []struct {
					ID     string `json:"id"`
					Object string `json:"object"`
				} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			var ids []string
			for _, m := range list.Data {
				ids = append(ids, m.ID)
				if m.Object != "model" {
					t.Errorf("model object %q", m.Object)
				}
			}
			if err != nil || list.Object != "list" || !slices.Equal(ids, tc.want) {
				t.Errorf("GET %s: %+v (%v), want %v", path, list, err, tc.want)
			}
		}
		srv.Close()
	}
}

func TestBadRequests(t *testing.T) {
	llm := New(Text("never"))
	srv := httptest.NewServer(llm)
	defer srv.Close()

	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{http.MethodPost, "/v1/chat/completions", "{not json", http.StatusBadRequest},
		{http.MethodPost, "/v1/chat/completions", `{"model":"m","messages":[]}`, http.StatusBadRequest},
		{http.MethodGet, "/v1/chat/completions", "", http.StatusMethodNotAllowed},
		{http.MethodPost, "/v1/completions", "{}", http.StatusNotFound},
		{http.MethodPost, "/v1/models", "{}", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tc.status || err != nil || e.Error.Message == "" {
			t.Errorf("%s %s %q: status %d error %q (%v), want %d with an OpenAI-style error",
				tc.method, tc.path, tc.body, resp.StatusCode, e.Error.Message, err, tc.status)
		}
	}
	if llm.Used() != 0 {
		t.Errorf("bad requests consumed %d turns", llm.Used())
	}
	if n := len(llm.RequestsOf(KindInvalid)); n != 2 {
		t.Errorf("%d invalid requests recorded, want 2", n)
	}
	if err := llm.Check(); err == nil || !strings.Contains(err.Error(), "not a valid chat completions request") {
		t.Errorf("Check: %v", err)
	}
}

func TestArgsJSON(t *testing.T) {
	for _, tc := range []struct {
		args any
		want string
	}{
		{nil, "{}"},
		{`{"a":1}`, `{"a":1}`},
		{json.RawMessage(`{"b":2}`), `{"b":2}`},
		{[]byte(`{"c":3}`), `{"c":3}`},
		{map[string]int{"d": 4}, `{"d":4}`},
		{struct {
			E string `json:"e"`
		}{"x"}, `{"e":"x"}`},
	} {
		if got := argsJSON(tc.args); got != tc.want {
			t.Errorf("argsJSON(%#v) = %s, want %s", tc.args, got, tc.want)
		}
	}
	if got := argsJSON(func() {}); !strings.Contains(got, "fakellm_error") || !json.Valid([]byte(got)) {
		t.Errorf("argsJSON of an unmarshalable value = %s, want a JSON error object", got)
	}
}

func TestPieces(t *testing.T) {
	for _, s := range []string{"", "a", "exactly16bytes!!", strings.Repeat("é", 20), "日本語のテキストを分割する"} {
		p := pieces(s, 4)
		if strings.Join(p, "") != s {
			t.Errorf("pieces(%q) = %q: does not join back", s, p)
		}
		for _, x := range p {
			if x == "" || !utf8.ValidString(x) {
				t.Errorf("pieces(%q): piece %q is empty or splits a rune", s, x)
			}
		}
	}
}

func TestOpencodeConfig(t *testing.T) {
	var cfg struct {
		Model      string            `json:"model"`
		SmallModel string            `json:"small_model"`
		Enabled    []string          `json:"enabled_providers"`
		Share      string            `json:"share"`
		Autoupdate *bool             `json:"autoupdate"`
		Permission map[string]string `json:"permission"`
		Provider   map[string]struct {
			NPM     string `json:"npm"`
			Options struct {
				BaseURL string `json:"baseURL"`
				APIKey  string `json:"apiKey"`
			} `json:"options"`
			Models map[string]struct {
				ToolCall bool `json:"tool_call"`
			} `json:"models"`
		} `json:"provider"`
	}
	if err := json.Unmarshal([]byte(OpencodeConfig("http://10.0.0.1:8080/v1/", "m1", "")), &cfg); err != nil {
		t.Fatal(err)
	}
	p := cfg.Provider[OpencodeProviderID]
	if cfg.Model != "fakellm/m1" || cfg.SmallModel != "fakellm/m1" || !slices.Equal(cfg.Enabled, []string{"fakellm"}) ||
		p.NPM != "@ai-sdk/openai-compatible" || p.Options.BaseURL != "http://10.0.0.1:8080/v1" || p.Options.APIKey == "" ||
		!p.Models["m1"].ToolCall {
		t.Errorf("config %+v", cfg)
	}
	if cfg.Share != "disabled" || cfg.Autoupdate == nil || *cfg.Autoupdate {
		t.Errorf("share %q autoupdate %v", cfg.Share, cfg.Autoupdate)
	}
	for _, k := range []string{"edit", "bash", "webfetch", "external_directory", "doom_loop"} {
		if cfg.Permission[k] != "allow" {
			t.Errorf("permission %s = %q, want allow", k, cfg.Permission[k])
		}
	}
	if cfg.Permission["question"] != "deny" || !strings.Contains(OpencodeConfig("http://h/v1", "", ""), `"permission":{"*":"allow",`) {
		t.Errorf("permission: want the fallback \"*\" first (opencode applies the last matching rule) and question denied")
	}
	if !strings.Contains(OpencodeConfig("http://h/v1", "", ""), `"fakellm/`+DefaultModel+`"`) {
		t.Error("an empty model does not default to DefaultModel")
	}
}
