package proxy

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Answers masked. The proxy puts a credential's value into requests to its
// hosts, so a bound host can hand it back to the agent: an echo or debug
// endpoint, an error that quotes the Authorization header, a service that
// stores a header and shows it later. With Basic auth the echo is base64
// of user:value, which the agent decodes. So wherever a bound credential's
// value appears in an answer from the host it is bound to, as it is or in
// base64 (at each of the three byte offsets, whatever precedes it), the
// client gets as many '*' instead: in the status line, the headers and the
// trailer always, in the body when it is text (textBody). A body the host
// compressed although every intercepted request asks for identity
// (identityOnly) cannot be searched: it is refused (refuseEncoded).
// The mask has the value's length, so Content-Length and chunk sizes stay
// true. What it cannot catch is in docs/credentials.md: binary bodies,
// other encodings, values shorter than maskMinLen, and the bytes of an
// upgraded (101) connection.

// maskMinLen is the shortest value looked for in answers: a shorter one
// would mask text by chance.
const maskMinLen = 8

// maskForm is a byte string that shows a value in an answer, and the
// offset in it of its byte that text holds least often, where a search
// for it starts.
type maskForm struct {
	text []byte
	rare int
}

// revealingForms are the byte strings that show value in an answer: the
// value, and the characters of its base64 (standard and URL alphabets)
// that depend on its bytes alone, when it starts at a byte offset of 0, 1
// or 2 in what was encoded. Nil for a value shorter than maskMinLen.
func revealingForms(value string) []maskForm {
	if len(value) < maskMinLen {
		return nil
	}
	texts := [][]byte{[]byte(value)}
	for offset := range 3 {
		src := append(make([]byte, offset), value...)
		// A base64 character holds 6 bits: those from the first whole
		// one after the offset's bits to the last that the value's bits
		// fill.
		start, end := (8*offset+5)/6, 8*len(src)/6
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			text := []byte(enc.EncodeToString(src)[start:end])
			if !slices.ContainsFunc(texts, func(t []byte) bool { return bytes.Equal(t, text) }) {
				texts = append(texts, text)
			}
		}
	}
	forms := make([]maskForm, len(texts))
	for i, text := range texts {
		forms[i] = maskForm{text: text}
		for j, c := range text {
			if commonness(c) < commonness(text[forms[i].rare]) {
				forms[i].rare = j
			}
		}
	}
	return forms
}

// commonBytes are the bytes that JSON, English and code hold most often,
// the most common first.
const commonBytes = ` etaoinsrhldcu"mfpgwyb,:vk{}.0123456789_-/ETAOINSRHLDCUMFPGWYBVKXJQZxjqz` + "\n"

// commonness ranks how often text holds c: a byte not in commonBytes is
// the least common.
func commonness(c byte) int {
	if i := strings.IndexByte(commonBytes, c); i >= 0 {
		return len(commonBytes) - i
	}
	return 0
}

// index is the offset of f in b from from on, or -1. It looks for f's
// rarest byte with IndexByte, then at the whole form around it: a value's
// first byte (an "s" of "sk-...") is in every other word of JSON, and
// bytes.Index, which starts from it, fell back to its slow search there
// (BenchmarkAnswerMask on JSON, one busy machine: 1.8 GB/s against 4.2;
// quiet, this search masks 7.5 GB/s, about 140 µs per MiB, a tenth of
// what relaying a MiB costs the proxy).
func (f *maskForm) index(b []byte, from int) int {
	c := f.text[f.rare]
	for at := from + f.rare; at < len(b); {
		j := bytes.IndexByte(b[at:], c)
		if j < 0 {
			return -1
		}
		start := at + j - f.rare
		if start+len(f.text) > len(b) {
			return -1
		}
		if bytes.Equal(b[start:start+len(f.text)], f.text) {
			return start
		}
		at += j + 1
	}
	return -1
}

// answerMask masks the values of the credentials bound to one
// interception's host in the answers it relays, and remembers which it
// masked. Only the interception's goroutine uses it.
type answerMask struct {
	creds []*credential
	found []bool // per credential of creds, since take
	spans [][2]int
	// held are the bytes a maskedBody holds back, as they came;
	// heldMasked the same masked by what the last read found.
	held, heldMasked []byte
}

// newAnswerMask returns the mask of creds, nil when no value of theirs is
// long enough to look for.
func newAnswerMask(creds []*credential) *answerMask {
	m := &answerMask{}
	for _, c := range creds {
		if len(c.forms) == 0 {
			continue
		}
		m.creds = append(m.creds, c)
	}
	if len(m.creds) == 0 {
		return nil
	}
	m.found = make([]bool, len(m.creds))
	return m
}

// in reports whether b holds a value's form.
func (m *answerMask) in(b []byte) bool {
	if m == nil {
		return false
	}
	for _, c := range m.creds {
		for i := range c.forms {
			if c.forms[i].index(b, 0) >= 0 {
				return true
			}
		}
	}
	return false
}

// mask overwrites every form of a value in b with '*'. Every form is
// looked for in b as it came, so that masking one cannot hide another
// that overlaps it.
func (m *answerMask) mask(b []byte) {
	if m == nil {
		return
	}
	spans := m.spans[:0]
	for i, c := range m.creds {
		for k := range c.forms {
			f := &c.forms[k]
			for at := 0; ; at++ {
				if at = f.index(b, at); at < 0 {
					break
				}
				spans = append(spans, [2]int{at, at + len(f.text)})
				m.found[i] = true
			}
		}
	}
	for _, s := range spans {
		for k := s[0]; k < s[1]; k++ {
			b[k] = '*'
		}
	}
	m.spans = spans
}

// masked is a masked copy of b, b itself when it holds no value.
func (m *answerMask) masked(b []byte) []byte {
	if !m.in(b) {
		return b
	}
	b = bytes.Clone(b)
	m.mask(b)
	return b
}

// maskHeader masks the values of h (not Content-Length: the relay's
// framing is its number).
func (m *answerMask) maskHeader(h http.Header) {
	if m == nil {
		return
	}
	for k, vv := range h {
		if k == hdrContentLength {
			continue
		}
		for i, v := range vv {
			if b := []byte(v); m.in(b) {
				m.mask(b)
				vv[i] = string(b)
			}
		}
	}
}

// take returns the names of the credentials masked since the last take.
func (m *answerMask) take() []string {
	if m == nil {
		return nil
	}
	var masked []string
	for i, c := range m.creds {
		if m.found[i] {
			masked = append(masked, c.name)
			m.found[i] = false
		}
	}
	return masked
}

// heldBack is how many bytes at the end of b could begin a value's form
// that the next bytes complete: the longest end of b that is a form's
// beginning.
func (m *answerMask) heldBack(b []byte) int {
	best := 0
	for _, c := range m.creds {
		for _, f := range c.forms {
			tail := b[max(0, len(b)-len(f.text)+1):]
			for i := 0; len(tail)-i > best; i++ {
				j := bytes.IndexByte(tail[i:], f.text[0])
				if j < 0 {
					break
				}
				i += j
				if len(tail)-i > best && bytes.HasPrefix(f.text, tail[i:]) {
					best = len(tail) - i
					break
				}
			}
		}
	}
	return best
}

// body returns r, an answer's body, masked as it is read.
func (m *answerMask) body(r io.Reader) io.Reader {
	m.held, m.heldMasked = m.held[:0], m.heldMasked[:0]
	return &maskedBody{r: r, m: m}
}

// maskedBody is an answer's body with the values masked. A value may come
// split over two reads: the bytes at the end of a read that could begin
// one wait for the next read (or the end), and only those, so that a
// server-sent event is not held back unless it ends in what could be the
// start of a value. They are searched again with the next bytes as they
// came, and masked where the last search found a value in them: the body
// comes out as if masked whole, however it is cut (FuzzAnswerMask).
type maskedBody struct {
	r   io.Reader
	m   *answerMask
	err error // the reader's error, returned with the held bytes
}

func (b *maskedBody) Read(p []byte) (int, error) {
	m := b.m
	if len(p) <= len(m.held) {
		// The relay's buffers are far larger than a value; this is for
		// a caller whose are not.
		return 0, io.ErrShortBuffer
	}
	h := copy(p, m.held)
	n, err := h, b.err
	if err == nil {
		var k int
		k, err = b.r.Read(p[h:])
		n += k
	}
	k := 0
	if err == nil {
		k = m.heldBack(p[:n])
	}
	b.err = err
	m.held = append(m.held[:0], p[n-k:n]...)
	m.mask(p[:n])
	for i, c := range m.heldMasked {
		if c == '*' {
			p[i] = '*'
		}
	}
	m.heldMasked = append(m.heldMasked[:0], p[n-k:n]...)
	return n - k, err
}

// maskedHeaderBody reports whether the body of an answer with headers h
// is searched for values (see textBody, identityCoding).
func maskedHeaderBody(h http.Header) bool {
	for _, v := range h["Content-Encoding"] {
		if !identityCoding(v) {
			return false
		}
	}
	for _, v := range h["Content-Type"] {
		if !textBody(v) {
			return false
		}
	}
	return true
}

// compressed returns the first Content-Encoding of values that is not
// identity.
func compressed(values []string) (string, bool) {
	for _, v := range values {
		if !identityCoding(v) {
			return v, true
		}
	}
	return "", false
}

// refuseEncoded answers the client in place of an answer of a bound host
// whose body is compressed (encoding) although identity was asked for: a
// value in it could not be masked. The answer is left unread, its
// connection not used again.
func (ic *interception) refuseEncoded(x *exchange, encoding string, keep bool) (down int64, clientOK bool) {
	rule := x.rule
	x.refuse(http.StatusBadGateway, ReasonEncodedAnswer, fmt.Sprintf("it came with Content-Encoding %q although the proxy asked for identity, and a credential's value in it could not be masked", strings.TrimSpace(encoding)))
	x.allow, x.rule = true, rule // the request went, by its rule; its answer did not
	resp := ic.s.refusal(nil, x)
	ic.writeHead(resp.StatusCode, resp.Header, strconv.FormatInt(resp.ContentLength, 10), !keep)
	n, _ := io.Copy(ic.bw, resp.Body)
	return n, ic.bw.Flush() == nil && keep
}

// identityCoding reports whether a Content-Encoding leaves the body as it
// is: a compressed body cannot be searched. (Every intercepted request
// asks for identityOnly.)
func identityCoding(contentEncoding string) bool {
	v := strings.TrimSpace(contentEncoding)
	return v == "" || strings.EqualFold(v, "identity")
}

// textBody reports whether a body of this Content-Type is searched for
// values: text, or of no type. A binary body is not: it cannot be
// searched for as little as text is (BenchmarkAnswerMask's random bytes:
// about 300 µs per MiB, a fifth of what relaying a MiB costs the proxy)
// and the values it could hold are bytes that no client shows as text.
func textBody(contentType string) bool {
	// Read by hand rather than with mime.ParseMediaType, which allocates:
	// this runs for every answer of a bound host.
	mt, _, _ := strings.Cut(contentType, ";")
	kind, sub, ok := strings.Cut(strings.TrimSpace(mt), "/")
	if !ok {
		return true // no type, or an unreadable one: searched, to be safe
	}
	if strings.EqualFold(kind, "text") {
		return true
	}
	if !strings.EqualFold(kind, "application") {
		return false
	}
	sub = strings.ToLower(sub)
	if strings.HasSuffix(sub, "+json") || strings.HasSuffix(sub, "+xml") {
		return true
	}
	switch sub {
	case "json", "xml", "yaml", "x-yaml", "javascript", "x-javascript", "x-www-form-urlencoded",
		"x-ndjson", "ndjson", "jsonl", "graphql":
		return true
	}
	return false
}
