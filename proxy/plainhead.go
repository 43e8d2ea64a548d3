package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Plain heads: the relay's fast path. Reading a request with
// http.ReadRequest and writing it again with Request.Write, and an answer
// with http.ReadResponse and the relay's writeHead, builds header maps and
// strings that are then thrown away: at concurrency 16 that was about a
// third of an intercepted request's CPU in the proxy
// (docs/benchmarks-proxy.md). Almost every head a client or an API sends
// is in a narrow, unambiguous subset of HTTP/1.1: CRLF line ends, header
// names that are tokens, values of printable ASCII, at most one
// Content-Length in canonical digits, no obs-fold. A head in that subset,
// arrived whole in the reader's buffer, is checked and passed on line by
// line, with the hop-by-hop headers left out and the credentials put in, as
// the parsed head would be; anything else (a byte out of the subset, a
// header the relay must act on: Transfer-Encoding of a request, Expect,
// Upgrade, Te, Trailer, a Connection option but close and keep-alive, two
// Hosts, a refusal to make) goes to net/http's parser as before, which
// reads it from the same buffer. So the plain subset decides nothing that
// net/http would decide otherwise: FuzzPlainRequest and FuzzPlainResponse
// check that whatever it accepts, net/http reads alike, and that what the
// relay writes reads the same as what the parsed path would write.

// plainField is a header line of a plain head, read in place.
type plainField struct {
	k           string // the name as knownHeader knows it, or ""
	name, value []byte // as written, the value without the whitespace around it
}

// plainRequest is a request head in the plain subset, read in place.
type plainRequest struct {
	head   []byte       // the request line, the headers and the empty line
	fields []plainField // its header lines, in head
	method string       // one of plainMethods (a constant)
	host   []byte       // the Host header's value
	length int64        // Content-Length, 0 without one
	close  bool         // Connection: close
	// idempotent: an Idempotency-Key header, which makes a request that
	// failed on a pooled connection one to send again (see replayable).
	idempotent bool
}

// plainResponse is an answer's head in the plain subset, read in place.
type plainResponse struct {
	head    []byte
	fields  []plainField // its header lines, in head
	status  int
	length  int64 // Content-Length, or -1: chunked; 0 for an answer without a body
	close   bool  // Connection: close
	hasDate bool
}

// The headers the plain subset looks at, as they are canonically written.
const (
	hdrHost             = "Host"
	hdrContentLength    = "Content-Length"
	hdrConnection       = "Connection"
	hdrTransferEncoding = "Transfer-Encoding"
	hdrAuthorization    = "Authorization"
	hdrDate             = "Date"
	hdrAcceptEncoding   = "Accept-Encoding"
	hdrContentType      = "Content-Type"
	hdrContentEncoding  = "Content-Encoding"
)

// plainKnown are the header names the plain subset acts on; the rest pass
// as they are.
var plainKnown = []string{
	hdrHost, hdrContentLength, hdrConnection, hdrTransferEncoding, hdrAuthorization, hdrDate,
	hdrAcceptEncoding, hdrContentType, hdrContentEncoding,
	"Expect", "Upgrade", "Te", "Trailer", "Pragma", "Proxy-Connection", "Keep-Alive",
	"Proxy-Authenticate", "Proxy-Authorization", "Forwarded", "X-Forwarded-For",
	"X-Forwarded-Host", "X-Forwarded-Proto", "Idempotency-Key", "X-Idempotency-Key",
}

// knownHeader returns the canonical name of name if the plain subset acts
// on it, or "".
func knownHeader(name []byte) string {
	for _, k := range plainKnown {
		if len(k) == len(name) && asciiEqualFold(name, k) {
			return k
		}
	}
	return ""
}

// requestPlainAction says what the relay does with a request header: pass
// it, leave it out (hop-by-hop, as removeHopByHop does; forwarding headers,
// as forward does), or leave the whole head to net/http.
func requestPlainAction(k string) (drop, slow bool) {
	switch k {
	case "Expect", "Upgrade", "Te", "Trailer", hdrTransferEncoding,
		// net/http adds Cache-Control: no-cache for Pragma: no-cache.
		"Pragma":
		return false, true
	case hdrConnection, "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
		// Written again as identityOnly.
		hdrAcceptEncoding:
		return true, false
	}
	return false, false
}

// responsePlainAction is requestPlainAction for an answer's headers.
func responsePlainAction(k string) (drop, slow bool) {
	switch k {
	case "Upgrade", "Trailer":
		return false, true
	case hdrConnection, hdrTransferEncoding, "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te":
		return true, false
	}
	return false, false
}

// parsePlainRequest reads head (a request line, headers and an empty line,
// as bytes.Index of headEnd cut it) if it is in the plain subset: an origin
// form target, HTTP/1.1, exactly one Host, no body but of a Content-Length.
// Its fields are appended to fields[:0] (a slice to reuse, or nil), which
// it returns in any case.
func parsePlainRequest(head []byte, fields []plainField) (plainRequest, bool) {
	pr := plainRequest{head: head, fields: fields[:0]}
	line, rest, ok := cutLine(head)
	if !ok {
		return pr, false
	}
	method, target, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return pr, false
	}
	if pr.method = plainMethod(method); pr.method == "" {
		return pr, false
	}
	target, proto, ok := bytes.Cut(target, []byte(" "))
	if !ok || string(proto) != "HTTP/1.1" || !plainTarget(target) {
		return pr, false
	}
	hosts, lengths := 0, 0
	if pr.fields, ok = plainFields(rest, pr.fields); !ok {
		return pr, false
	}
	for _, f := range pr.fields {
		k, value := f.k, f.value
		if _, slow := requestPlainAction(k); slow {
			return pr, false
		}
		switch k {
		case hdrHost:
			hosts++
			pr.host = value
		case hdrContentLength:
			lengths++
			if pr.length, ok = plainLength(value); !ok {
				return pr, false
			}
		case hdrConnection:
			closing, ok := plainConnection(value)
			if !ok {
				return pr, false
			}
			pr.close = pr.close || closing
		case "Idempotency-Key", "X-Idempotency-Key":
			pr.idempotent = true
		}
	}
	if hosts != 1 || len(pr.host) == 0 || lengths > 1 || !httpguts.ValidHostHeader(string(pr.host)) {
		return pr, false
	}
	return pr, true
}

// parsePlainResponse reads head, the answer to a request of method, if it
// is in the plain subset: HTTP/1.1, a final status (not 1xx), and a body of
// a Content-Length, chunked, or none that its status or method rules out.
// Its fields are appended to fields[:0] (a slice to reuse, or nil), which
// it returns in any case.
func parsePlainResponse(head []byte, method string, fields []plainField) (plainResponse, bool) {
	pr := plainResponse{head: head, fields: fields[:0]}
	line, rest, ok := cutLine(head)
	if !ok || len(line) < len("HTTP/1.1 200") || string(line[:9]) != "HTTP/1.1 " {
		return pr, false
	}
	code := line[9:12]
	if code[0] < '2' || code[0] > '5' || !isDigit(code[1]) || !isDigit(code[2]) {
		return pr, false
	}
	pr.status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	if reason := line[12:]; len(reason) > 0 && (reason[0] != ' ' || !plainValue(reason)) {
		return pr, false
	}
	lengths, chunked, chunkedLines := 0, false, 0
	if pr.fields, ok = plainFields(rest, pr.fields); !ok {
		return pr, false
	}
	for _, f := range pr.fields {
		k, value := f.k, f.value
		if _, slow := responsePlainAction(k); slow {
			return pr, false
		}
		switch k {
		case hdrContentLength:
			lengths++
			if pr.length, ok = plainLength(value); !ok {
				return pr, false
			}
		case hdrTransferEncoding:
			chunkedLines++
			chunked = asciiEqualFold(value, "chunked")
		case hdrConnection:
			closing, ok := plainConnection(value)
			if !ok {
				return pr, false
			}
			pr.close = pr.close || closing
		case hdrDate:
			pr.hasDate = true
		}
	}
	if lengths > 1 || chunkedLines > 1 || chunkedLines == 1 && (!chunked || lengths > 0) {
		return pr, false
	}
	noBody := method == "HEAD" || pr.status == 204 || pr.status == 304
	switch {
	case noBody && chunked:
		return pr, false
	case noBody:
		pr.length = 0
	case chunked:
		pr.length = -1
	case lengths == 0:
		return pr, false // a body up to the close
	}
	return pr, true
}

// plainMethod returns method as one of plainMethods' keys, or "".
func plainMethod(method []byte) string {
	for _, m := range [...]string{"GET", "POST", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		if string(method) == m {
			return m
		}
	}
	return ""
}

// plainTarget reports whether t is an origin-form target of RFC 3986's
// path and query characters, every % starting an escape.
func plainTarget(t []byte) bool {
	if len(t) == 0 || t[0] != '/' {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '%':
			if i+2 >= len(t) || !isHex(t[i+1]) || !isHex(t[i+2]) {
				return false
			}
			i += 2
		case bytes.IndexByte([]byte("-._~!$&'()*+,;=:@/?"), c) >= 0:
		default:
			return false
		}
	}
	return true
}

// plainLength reads a Content-Length in canonical digits (no sign, no
// leading zero), at most 18 of them.
func plainLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 || v[0] == '0' && len(v) > 1 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// plainConnection reads a Connection header of the options close and
// keep-alive only (any other names a header to remove, which the parsed
// path does).
func plainConnection(v []byte) (closing, ok bool) {
	for len(v) > 0 {
		var opt []byte
		opt, v, _ = bytes.Cut(v, []byte(","))
		switch opt = trimOWS(opt); {
		case len(opt) == 0:
		case asciiEqualFold(opt, "close"):
			closing = true
		case asciiEqualFold(opt, "keep-alive"):
		default:
			return false, false
		}
	}
	return closing, true
}

// plainFields appends the header lines of lines (a head's header lines,
// its empty line and nothing after it) to fields; false: a line is not in
// the plain subset.
func plainFields(lines []byte, fields []plainField) ([]plainField, bool) {
	for {
		line, rest, ok := cutLine(lines)
		if !ok {
			return fields, false
		}
		if len(line) == 0 {
			return fields, len(rest) == 0
		}
		name, value, ok := cutHeader(line)
		if !ok {
			return fields, false
		}
		fields = append(fields, plainField{k: knownHeader(name), name: name, value: value})
		lines = rest
	}
}

// cutLine cuts the CRLF-ended line at the start of b.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	return b[:i-1], b[i+1:], true
}

// cutHeader splits a header line into its name, a token, and its value,
// of printable ASCII and tabs, without the whitespace around it.
func cutHeader(line []byte) (name, value []byte, ok bool) {
	colon := bytes.IndexByte(line, ':')
	if colon < 1 {
		return nil, nil, false
	}
	name, value = line[:colon], line[colon+1:]
	for _, c := range name {
		if !httpguts.IsTokenRune(rune(c)) {
			return nil, nil, false
		}
	}
	if !plainValue(value) {
		return nil, nil, false
	}
	return name, trimOWS(value), true
}

// plainValue reports whether v is printable ASCII, spaces and tabs.
func plainValue(v []byte) bool {
	for _, c := range v {
		if (c < ' ' || c > '~') && c != '\t' {
			return false
		}
	}
	return true
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// asciiEqualFold reports whether b and s are equal, ASCII letters
// compared without case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// request makes req the http.Request that stands for pr in the relay:
// what forward, the answer's relay and the refusals look at (no headers
// but an idempotency key's, no URL), its body pr's Content-Length of the
// client's reader, read through body. It returns req.
func (pr *plainRequest) request(req *http.Request, body *lengthReader) *http.Request {
	*req = http.Request{Method: pr.method, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		ContentLength: pr.length, Close: pr.close, Body: http.NoBody}
	if pr.idempotent {
		req.Header = http.Header{"Idempotency-Key": nil}
	}
	if pr.length > 0 {
		req.Body = io.NopCloser(body)
	}
	return req
}

// writePlain writes the plain request in progress to w as forward sends a
// parsed one (prepare): the request line as it came, the headers without
// the hop-by-hop and forwarding ones, the carried credentials' values put
// in, Accept-Encoding: identity, then body.
func (ic *interception) writePlain(w *bufio.Writer, body io.Reader) error {
	line, _, _ := cutLine(ic.plain.head)
	w.Write(line)
	w.WriteString("\r\n")
	for _, f := range ic.plain.fields {
		if drop, _ := requestPlainAction(f.k); drop {
			continue
		}
		w.Write(f.name)
		w.WriteString(": ")
		writeSubstituted(w, f.k, f.value, ic.carried)
		w.WriteString("\r\n")
	}
	w.WriteString(hdrAcceptEncoding + ": ")
	w.WriteString(identityOnly[0])
	w.WriteString("\r\n\r\n")
	if body == http.NoBody {
		return nil
	}
	_, err := io.Copy(w, body)
	return err
}

// readPlainAnswer looks at the answer's head in uc's reader, whole or in
// its first bytes, and returns it if it is in the plain subset.
func (ic *interception) readPlainAnswer(uc *upstreamConn, method string) *plainResponse {
	buffered, _ := uc.br.Peek(uc.br.Buffered())
	end := bytes.Index(buffered, headEnd)
	if end < 0 {
		return nil
	}
	pr, ok := parsePlainResponse(buffered[:end+len(headEnd)], method, ic.plainAnswer.fields)
	if !ok {
		ic.plainAnswer.fields = pr.fields // kept for the next answer
		return nil
	}
	ic.plainAnswer = pr
	return &ic.plainAnswer
}

// relayPlainResponse writes pr, the answer read from uc, to the client as
// relayResponse writes a parsed one, and relays its body. It returns what
// relayResponse returns.
func (ic *interception) relayPlainResponse(x *exchange, pr *plainResponse, uc *upstreamConn, keep bool) (down int64, clientOK, upstreamOK bool) {
	x.status = pr.status
	if ic.mask != nil && pr.length != 0 {
		for _, f := range pr.fields {
			if f.k == hdrContentEncoding && !identityCoding(string(f.value)) {
				down, clientOK = ic.refuseEncoded(x, string(f.value), keep)
				return down, clientOK, false
			}
		}
	}
	chunked := pr.length < 0
	bw := ic.bw
	line, _, _ := cutLine(pr.head)
	// The values masked (answerMask) where the head holds one: in the
	// reason phrase and any header's value but Content-Length's.
	masking := ic.mask.in(pr.head)
	if masking {
		line = ic.mask.masked(line)
	}
	bw.Write(line)
	bw.WriteString("\r\n")
	text, identity := true, true
	for _, f := range pr.fields {
		k, value := f.k, f.value
		switch k {
		case hdrContentType:
			text = text && textBody(string(value))
		case hdrContentEncoding:
			identity = identity && identityCoding(string(value))
		}
		if drop, _ := responsePlainAction(k); !drop {
			if masking && k != hdrContentLength {
				value = ic.mask.masked(value)
			}
			bw.Write(f.name)
			bw.WriteString(": ")
			bw.Write(value)
			bw.WriteString("\r\n")
		}
	}
	if !pr.hasDate {
		var scratch [32]byte
		bw.WriteString("Date: ")
		bw.Write(time.Now().UTC().AppendFormat(scratch[:0], http.TimeFormat))
		bw.WriteString("\r\n")
	}
	if chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if !keep {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
	uc.br.Discard(len(pr.head))
	if pr.length == 0 {
		return 0, bw.Flush() == nil && keep, true
	}
	var body io.Reader
	if chunked {
		ic.answerChunks.reset(uc)
		body = &ic.answerChunks
	} else {
		ic.answerBody = lengthReader{r: uc.br, n: pr.length}
		body = &ic.answerBody
	}
	if ic.mask != nil && text && identity {
		body = ic.mask.body(body)
	}
	var trailer func() http.Header
	if chunked {
		trailer = ic.answerChunks.trailers
	}
	down, clientOK, upstreamOK = ic.relayBody(uc, body, chunked, trailer)
	return down, clientOK && keep, upstreamOK
}

// lengthReader reads a body of n bytes from r: io.EOF after them,
// io.ErrUnexpectedEOF if r ends before, as net/http's body does.
type lengthReader struct {
	r io.Reader
	n int64
}

func (b *lengthReader) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	switch {
	case b.n == 0:
		err = io.EOF
	case err == io.EOF:
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// chunkedBody reads a chunked body from an upstream connection as
// net/http's body does (its chunked reader, then the trailer section,
// kept for the relay to pass on).
type chunkedBody struct {
	uc      *upstreamConn
	chunks  io.Reader
	trailer http.Header
}

func (b *chunkedBody) reset(uc *upstreamConn) {
	*b = chunkedBody{uc: uc, chunks: httputil.NewChunkedReader(uc.br)}
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	n, err := b.chunks.Read(p)
	if err == io.EOF {
		err = b.readTrailer()
	}
	return n, err
}

// readTrailer reads the trailer section after the last chunk as
// net/http's body does: at most a reader's buffer of it; io.EOF when it
// was read.
func (b *chunkedBody) readTrailer() error {
	br := b.uc.br
	end, err := br.Peek(2)
	switch {
	case string(end) == "\r\n":
		br.Discard(2)
		return io.EOF
	case len(end) < 2:
		return io.ErrUnexpectedEOF
	case err != nil:
		return err
	}
	for n := 4; ; n++ {
		more, err := br.Peek(n)
		if bytes.HasSuffix(more, headEnd) {
			break
		}
		if err != nil {
			return errors.New("trailer too long or cut short")
		}
	}
	h, err := textproto.NewReader(br).ReadMIMEHeader()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	b.trailer = http.Header(h)
	return io.EOF
}

func (b *chunkedBody) trailers() http.Header { return b.trailer }
