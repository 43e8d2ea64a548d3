package fakellm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"unicode/utf8"
)

// response writes one turn as a chat completion, whole or as server-sent events.
type response struct {
	req     *Request // the request answered, for ArgsFunc
	id      string
	model   string
	created int64
	turn    Turn
	turnIdx int // -1 when the turn is no script turn
}

// wireToolCall is a tool call as the API sends it.
type wireToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// fixedUsage is reported for every answer; agents show it, tests do not care.
var fixedUsage = usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}

func (r response) finishReason() string {
	if len(r.turn.ToolCalls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

// calls are the turn's tool calls with ids and JSON argument strings filled in.
func (r response) calls() []wireToolCall {
	out := make([]wireToolCall, 0, len(r.turn.ToolCalls))
	for i, c := range r.turn.ToolCalls {
		var w wireToolCall
		w.ID = c.ID
		if w.ID == "" {
			w.ID = fmt.Sprintf("call_%d_%d", max(r.turnIdx, 0), i)
		}
		w.Type = "function"
		w.Function.Name = c.Name
		args := c.Args
		switch f := args.(type) {
		case ArgsFunc:
			args = f(r.req)
		case func(*Request) any:
			args = f(r.req)
		}
		w.Function.Arguments = argsJSON(args)
		out = append(out, w)
	}
	return out
}

// argsJSON renders tool call arguments as the JSON text the API carries in a string.
func argsJSON(args any) string {
	switch a := args.(type) {
	case nil:
		return "{}"
	case string:
		return a
	case json.RawMessage:
		return string(a)
	case []byte:
		return string(a)
	}
	b, err := json.Marshal(args)
	if err != nil {
		// A script bug; send it so that the agent reports a bad tool call the test can see.
		return fmt.Sprintf(`{"fakellm_error":%q}`, err.Error())
	}
	return string(b)
}

func (r response) whole(w http.ResponseWriter) {
	type message struct {
		Role      string         `json:"role"`
		Content   *string        `json:"content"`
		ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
	}
	type choice struct {
		Index        int     `json:"index"`
		Message      message `json:"message"`
		FinishReason string  `json:"finish_reason"`
	}
	msg := message{Role: "assistant"}
	if r.turn.Text != "" || len(r.turn.ToolCalls) == 0 {
		text := r.turn.Text
		msg.Content = &text
	}
	if len(r.turn.ToolCalls) > 0 {
		msg.ToolCalls = r.calls()
	}
	writeJSON(w, http.StatusOK, struct {
		ID      string   `json:"id"`
		Object  string   `json:"object"`
		Created int64    `json:"created"`
		Model   string   `json:"model"`
		Choices []choice `json:"choices"`
		Usage   usage    `json:"usage"`
	}{r.id, "chat.completion", r.created, r.model,
		[]choice{{Index: 0, Message: msg, FinishReason: r.finishReason()}}, fixedUsage})
}

// chunk is one chat.completion.chunk event.
type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
}

// stream writes the turn as OpenAI does: a role chunk, the text in pieces, each tool call as a
// head (index, id, type, name) followed by its arguments in pieces, a chunk with the finish
// reason, a usage chunk when asked for, and "data: [DONE]".
func (r response) stream(w http.ResponseWriter, includeUsage bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(c chunk) {
		c.ID, c.Object, c.Created, c.Model = r.id, "chat.completion.chunk", r.created, r.model
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	deltaChunk := func(d delta) chunk { return chunk{Choices: []chunkChoice{{Delta: d}}} }

	empty := ""
	send(deltaChunk(delta{Role: "assistant", Content: &empty}))
	for _, piece := range pieces(r.turn.Text, 16) {
		send(deltaChunk(delta{Content: &piece}))
	}
	for i, c := range r.calls() {
		head := c
		head.Index = &i
		head.Function.Arguments = ""
		send(deltaChunk(delta{ToolCalls: []wireToolCall{head}}))
		for _, piece := range pieces(c.Function.Arguments, 24) {
			var part wireToolCall
			part.Index = &i
			part.Function.Arguments = piece
			send(deltaChunk(delta{ToolCalls: []wireToolCall{part}}))
		}
	}
	reason := r.finishReason()
	send(chunk{Choices: []chunkChoice{{Delta: delta{}, FinishReason: &reason}}})
	if includeUsage {
		u := fixedUsage
		send(chunk{Choices: []chunkChoice{}, Usage: &u})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

// pieces splits s into pieces of about n bytes, on rune boundaries, so that clients see a
// message arrive in several deltas.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		cut := min(n, len(s))
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return out
}
