package proxy

import (
	"bytes"
	"encoding/base64"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// maskFor is the mask of one credential whose value is value.
func maskFor(t testing.TB, values ...string) *answerMask {
	t.Helper()
	var cs []Credential
	for i, v := range values {
		cs = append(cs, Credential{Name: "C" + string(rune('A'+i)), Placeholder: "devaipod-placeholder-" + string(rune('a'+i)) + "-0123456789",
			Value: v, Hosts: []string{"api.example.com"}})
	}
	creds, err := compileCredentials(cs)
	if err != nil {
		t.Fatal(err)
	}
	return newAnswerMask(creds.list)
}

func TestRevealingForms(t *testing.T) {
	t.Parallel()
	if forms := revealingForms("short"); forms != nil {
		t.Errorf("a value of 5 bytes is looked for: %v", forms)
	}
	value := "sk-test-\xfb\xff?value~~>>-0123456789"
	forms := revealingForms(value)
	for prefix := range 7 {
		for suffix := range 4 {
			src := strings.Repeat("u", prefix) + ":" + value + strings.Repeat("x", suffix)
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
				encoded := []byte(enc.EncodeToString([]byte(src)))
				if !slices.ContainsFunc(forms, func(f maskForm) bool { return bytes.Contains(encoded, f.text) }) {
					t.Errorf("no form is in %q (%q)", encoded, src)
				}
			}
		}
	}
	for _, f := range forms {
		if len(f.text) < maskMinLen || !bytes.Contains(f.text, []byte{f.text[f.rare]}) {
			t.Errorf("a form shorter than a value may be, or its rare byte is not its own: %q", f.text)
		}
	}
}

func TestMaskTexts(t *testing.T) {
	t.Parallel()
	const value = "real-secret-value-1234"
	m := maskFor(t, value, "other-secret-9876")
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + value))
	for _, text := range []string{
		value,
		"error: the key " + value + " is not valid",
		`{"headers":{"Authorization":"Basic ` + basic + `"}}`,
		value + value + "other-secret-9876",
		base64.URLEncoding.EncodeToString([]byte("ab" + value)),
	} {
		b := []byte(text)
		m.mask(b)
		if len(b) != len(text) {
			t.Fatalf("masking changed the length of %q", text)
		}
		if bytes.Contains(b, []byte(value)) || strings.Contains(decodeAll(b), value) {
			t.Errorf("%q masked is %q", text, b)
		}
		if got := m.take(); !slices.Contains(got, "CA") {
			t.Errorf("%q: masked %v", text, got)
		}
	}
	if got := m.take(); got != nil {
		t.Errorf("take after take: %v", got)
	}
	untouched := []byte("nothing secret here: real-secret-valu")
	m.mask(untouched)
	if string(untouched) != "nothing secret here: real-secret-valu" || m.take() != nil {
		t.Errorf("a text without a value masked: %q", untouched)
	}
	h := http.Header{"X-Echo": {"Bearer " + value}, "Content-Length": {"22"}, "X-Other": {"fine"}}
	m.maskHeader(h)
	if h.Get("X-Echo") != "Bearer "+strings.Repeat("*", len(value)) || h.Get("X-Other") != "fine" {
		t.Errorf("header masked: %v", h)
	}
	var nilMask *answerMask
	nilMask.maskHeader(h)
	if nilMask.in([]byte(value)) || nilMask.take() != nil {
		t.Error("a nil mask masks")
	}
}

// decodeAll is every base64 run of b decoded, at each start.
func decodeAll(b []byte) string {
	var out strings.Builder
	for start := range min(len(b), 4) {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			s := strings.TrimRight(string(b[start:]), "=")
			s = s[:len(s)/4*4]
			if d, err := enc.DecodeString(s); err == nil {
				out.Write(d)
			}
		}
	}
	return out.String()
}

// chunkReader returns its chunks one read at a time.
type chunkReader struct{ chunks [][]byte }

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	r.chunks[0] = r.chunks[0][n:]
	if len(r.chunks[0]) == 0 {
		r.chunks = r.chunks[1:]
	}
	return n, nil
}

// maskStream reads body through m in the chunks cuts make.
func maskStream(t testing.TB, m *answerMask, body []byte, cuts ...int) []byte {
	t.Helper()
	var chunks [][]byte
	last := 0
	for _, c := range cuts {
		chunks = append(chunks, bytes.Clone(body[last:c]))
		last = c
	}
	chunks = append(chunks, bytes.Clone(body[last:]))
	r := m.body(&chunkReader{chunks: chunks})
	var out []byte
	buf := make([]byte, 4096)
	for range 10000 {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the masked body never ends")
	return nil
}

func TestAnswerMaskStream(t *testing.T) {
	t.Parallel()
	const value = "real-secret-value-1234"
	m := maskFor(t, value)
	body := []byte("data: {\"echo\":\"" + value + "\"}\n\ndata: " + base64.StdEncoding.EncodeToString([]byte("u:"+value)) + "\n\nreal-secret-valu")
	whole := bytes.Clone(body)
	m.mask(whole)
	m.take()
	for cut := range len(body) + 1 {
		got := maskStream(t, m, body, cut)
		if !bytes.Equal(got, whole) {
			t.Fatalf("cut at %d:\n got %q\nwant %q", cut, got, whole)
		}
		if names := m.take(); !slices.Equal(names, []string{"CA"}) {
			t.Fatalf("cut at %d: masked %v", cut, names)
		}
	}
	// An event that ends in no beginning of a value is not held back.
	r := m.body(&chunkReader{chunks: [][]byte{[]byte("data: one\n\n"), nil}})
	buf := make([]byte, 100)
	if n, err := r.Read(buf); n != len("data: one\n\n") || err != nil {
		t.Errorf("the first event: %d bytes, %v", n, err)
	}
	// One that does waits for what follows.
	r = m.body(&chunkReader{chunks: [][]byte{[]byte("data: real-"), []byte("world\n\n")}})
	if n, _ := r.Read(buf); string(buf[:n]) != "data: " {
		t.Errorf("the first read gave %q", buf[:n])
	}
	if n, _ := r.Read(buf); string(buf[:n]) != "real-world\n\n" {
		t.Errorf("the second read gave %q", buf[:n])
	}
}

func TestTextBody(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]bool{
		"": true, "text/plain": true, "text/event-stream": true, "application/json; charset=utf-8": true,
		"application/problem+json": true, "Application/JSON": true, "application/x-www-form-urlencoded": true,
		"application/xml": true, "application/yaml": true, "application/x-ndjson": true, "no type at all": true,
		"application/octet-stream": false, "image/png": false, "application/zip": false, "application/grpc": false,
		" TEXT/HTML ;charset=x": true, "application/vnd.api+JSON": true, "/": false, "text": true,
	} {
		if got := textBody(ct); got != want {
			t.Errorf("textBody(%q) = %v", ct, got)
		}
	}
	for ce, want := range map[string]bool{"": true, "identity": true, " Identity ": true, "gzip": false, "br": false} {
		if got := identityCoding(ce); got != want {
			t.Errorf("identityCoding(%q) = %v", ce, got)
		}
	}
	if maskedHeaderBody(http.Header{"Content-Type": {"text/plain"}, "Content-Encoding": {"identity", "gzip"}}) {
		t.Error("a gzipped answer is searched")
	}
}

// FuzzAnswerMask: a body read through the mask in any chunks comes out as
// the body masked whole, and no value is left in it.
func FuzzAnswerMask(f *testing.F) {
	f.Add([]byte("abc real-secret-value-1234 def"), uint64(1))
	f.Add([]byte("real-secret-valreal-secret-value-1234al-secret-value-1234"), uint64(7))
	f.Add([]byte(base64.StdEncoding.EncodeToString([]byte("ab:real-secret-value-1234"))), uint64(3))
	f.Add([]byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), uint64(11))
	m := maskFor(f, "real-secret-value-1234", "aaaaaaaaaaaa")
	f.Fuzz(func(t *testing.T, body []byte, seed uint64) {
		whole := bytes.Clone(body)
		m.mask(whole)
		m.take()
		rng := rand.New(rand.NewPCG(seed, seed))
		var cuts []int
		for at := 0; len(body) > 0 && at < len(body); {
			at += rng.IntN(len(body)/2 + 2)
			if at < len(body) {
				cuts = append(cuts, at)
			}
		}
		got := maskStream(t, m, body, cuts...)
		if !bytes.Equal(got, whole) {
			t.Fatalf("cut at %v:\n got %q\nwant %q", cuts, got, whole)
		}
		for _, c := range m.creds {
			for _, form := range c.forms {
				if bytes.Contains(got, form.text) {
					t.Fatalf("%q is left in %q", form.text, got)
				}
			}
		}
	})
}

func BenchmarkAnswerMask(b *testing.B) {
	m := maskFor(b, "sk-ant-api03-"+strings.Repeat("Xy7_", 24))
	json := bytes.Repeat([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello, world! "}}`+"\n"), 12000)[:1<<20]
	random := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	for name, body := range map[string][]byte{"json": json, "random": random} {
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, len(body))
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				copy(buf, body)
				m.mask(buf)
			}
		})
	}
}

// TestAnswersMasked: an upstream that hands a bound credential's value
// back (in the reason phrase, a header, a body of known length, one split
// over chunks, the trailer, Basic auth's base64) gets it to the client
// masked, through the plain subset and through net/http alike, and the
// audit says so; a binary body passes as it is; a compressed one (the
// host ignored Accept-Encoding: identity) is refused, 502, and audited.
func TestAnswersMasked(t *testing.T) {
	t.Parallel()
	stars := strings.Repeat("*", len(apiKeyValue))
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + apiKeyValue))
	half := len(apiKeyValue) / 2
	cases := []struct {
		name, answer string
		masked       bool   // the client gets no value
		body         string // the body the client gets, if masked
		refused      bool   // the answer is refused
	}{
		{"reason, header and body", "HTTP/1.1 200 OK " + apiKeyValue + "\r\nX-Echo: Bearer " + apiKeyValue +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(apiKeyValue)+10) + "\r\n\r\n{\"key\":\"" + apiKeyValue + "\"}",
			true, "{\"key\":\"" + stars + "\"}", false},
		{"split over chunks, and in the trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n" +
			strconv.FormatInt(int64(half+4), 16) + "\r\nkey " + apiKeyValue[:half] + "\r\n" +
			strconv.FormatInt(int64(len(apiKeyValue)-half), 16) + "\r\n" + apiKeyValue[half:] + "\r\n0\r\nX-Sum: " + apiKeyValue + "\r\n\r\n",
			true, "key " + stars, false},
		{"Basic auth's base64, chunked", "HTTP/1.1 401 Unauthorized\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n" +
			strconv.FormatInt(int64(len(basic)+6), 16) + "\r\nBasic " + basic + "\r\n0\r\n\r\n",
			true, "", false},
		{"a binary body", "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: " + strconv.Itoa(len(apiKeyValue)) + "\r\n\r\n" + apiKeyValue,
			false, "", false},
		{"a compressed body", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\nContent-Length: " + strconv.Itoa(len(apiKeyValue)) + "\r\n\r\n" + apiKeyValue,
			true, "", true},
		{"a compressed binary body, chunked", "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Encoding: br\r\nTransfer-Encoding: chunked\r\n\r\n" +
			strconv.FormatInt(int64(len(apiKeyValue)), 16) + "\r\n" + apiKeyValue + "\r\n0\r\n\r\n",
			true, "", true},
	}
	for _, parsedOnly := range []bool{false, true} {
		st := startIntercepting(t, Options{parsedHeadsOnly: parsedOnly})
		// The upstream closes each connection after its answer.
		st.p.s.upstreams.closeIdle()
		for i, tc := range cases {
			tcConn, br := st.rawIntercepted(t, "api.example.com")
			path := "/raw?case=" + strconv.Itoa(i)
			io.WriteString(tcConn, "GET "+path+" HTTP/1.1\r\nHost: api.example.com:"+st.ps+"\r\nX-Api-Key: "+apiKeyPlaceholder+
				"\r\nAccept-Encoding: gzip, br\r\nX-Answer: "+base64.StdEncoding.EncodeToString([]byte(tc.answer))+"\r\n\r\n")
			resp, body := readAnswer(t, br, http.MethodGet)
			tcConn.Close()
			var all strings.Builder
			all.WriteString(resp.Status)
			resp.Header.Write(&all)
			resp.Trailer.Write(&all)
			all.WriteString(body)
			shown := strings.Contains(all.String(), apiKeyValue) || strings.Contains(decodeAll([]byte(all.String())), apiKeyValue)
			if shown == tc.masked {
				t.Errorf("parsed only %v, %s: the client got %q", parsedOnly, tc.name, all.String())
			}
			if tc.body != "" && body != tc.body {
				t.Errorf("parsed only %v, %s: body %q, want %q", parsedOnly, tc.name, body, tc.body)
			}
			if refused := resp.StatusCode == http.StatusBadGateway && strings.Contains(body, "was refused") && resp.Header.Get("X-Devaipod-Proxy") == ReasonEncodedAnswer; refused != tc.refused {
				t.Errorf("parsed only %v, %s: %s %q; refused %v, want %v", parsedOnly, tc.name, resp.Status, body, refused, tc.refused)
			}
			seen := st.seen.all()
			if got := seen[len(seen)-1].Header.Get("Accept-Encoding"); got != "identity" {
				t.Errorf("parsed only %v: the upstream was asked for Accept-Encoding %q", parsedOnly, got)
			}
			rec := st.p.audit.waitRecord(t, "for "+path, func(r Record) bool {
				// The proxy's own answer counts no byte from upstream.
				return r.Method == http.MethodGet && r.Status == resp.StatusCode && (r.BytesDown == int64(len(body)) || tc.refused && r.BytesDown == 0)
			})
			if tc.refused {
				if rec.Reason != ReasonEncodedAnswer || rec.Decision != DecisionAllow {
					t.Errorf("parsed only %v, %s: audited %s %q", parsedOnly, tc.name, rec.Decision, rec.Reason)
				}
			} else if want := []string(nil); tc.masked {
				want = []string{apiKeyName}
				if !slices.Equal(rec.Masked, want) {
					t.Errorf("parsed only %v, %s: the audit says masked %v", parsedOnly, tc.name, rec.Masked)
				}
			} else if rec.Masked != nil {
				t.Errorf("parsed only %v, %s: the audit says masked %v", parsedOnly, tc.name, rec.Masked)
			}
		}
		if !strings.Contains(st.log.String(), "masked before the client got it") {
			t.Errorf("parsed only %v: the proxy's log does not say that it masked:\n%s", parsedOnly, st.log.String())
		}
	}
}
