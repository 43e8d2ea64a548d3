package proxy

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"
)

// marshalLine is what auditor.write makes of r: the reference that
// appendRequestLine must match byte for byte.
func marshalLine(t testing.TB, when time.Time, pod string, r Record) []byte {
	t.Helper()
	r.Time = when.UTC().Format(time.RFC3339Nano)
	r.Pod = pod
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// oddStrings need escaping in JSON, or are invalid UTF-8.
var oddStrings = []string{
	"", "plain", `quote " and \ backslash`, "<script>&amp;</script>", "tab\tnew\nline\rcr\bbs\fff",
	"\x00\x01\x1f\x7f", "b\xc3\xbccher", "\u2028line\u2029para", "bad \xff\xfe utf8", "cut \xe2\x82",
	"emoji \U0001F600", "\xed\xa0\x80 surrogate", "é\u00a0\ufeff", strings.Repeat("ab<", 300),
}

func TestAppendRequestLine(t *testing.T) {
	t.Parallel()
	when := time.Date(2026, 11, 22, 4, 3, 2, 123456789, time.FixedZone("x", 3600))
	records := []Record{
		{Event: EventRequest},
		{Event: EventRequest, Method: "CONNECT", Host: "api.example.test", Port: 443, Decision: DecisionAllow,
			Rule: "api.example.test", Status: 200, BytesUp: 1234, BytesDown: 1 << 40, DurationMS: 98765},
		{Event: EventRequest, Method: "GET", Host: "x.test", Port: 80, Decision: DecisionDeny,
			Reason: ReasonNotAllowed, Detail: "no rule allows it", Status: 403, DurationMS: 0},
		{Event: EventRequest, Method: "PUT", Host: "10.0.0.1", Port: 65535, Decision: DecisionDeny, Rule: "r",
			Reason: ReasonDenied, Detail: "denied by rule r", Status: 403, BytesUp: -1, BytesDown: -2, DurationMS: -3},
	}
	for _, s := range oddStrings {
		records = append(records, Record{Event: EventRequest, Method: s, Host: s, Decision: s, Rule: s, Reason: s, Detail: s, Port: 1, Status: 599})
		records = append(records, Record{Event: EventRequest, Method: "GET", Credentials: []string{s, "ANTHROPIC_API_KEY", s}})
		records = append(records, Record{Event: EventRequest, Method: "GET", Masked: []string{s}, DecidedBy: s})
		records = append(records, Record{Event: EventRequest, Method: "CONNECT", Decision: DecisionDeny, Rule: "ask:" + s, DecidedBy: s,
			Credentials: []string{s}})
	}
	records = append(records,
		Record{Event: EventRequest, Method: "POST", Host: "api.example.test", Port: 443, Decision: DecisionAllow,
			Rule: "api.example.test", Status: 200, BytesUp: 1, BytesDown: 2, DurationMS: 3, Credentials: []string{"ANTHROPIC_API_KEY"}},
		Record{Event: EventRequest, Method: "GET", Host: "api.example.test", Port: 443, Decision: DecisionAllow, Status: 200,
			Credentials: []string{"A", "B"}, Masked: []string{"B", "A"}},
		Record{Event: EventRequest, Credentials: []string{}},
		Record{Event: EventRequest, Method: "CONNECT", Host: "a.pkg.example.test", Port: 443, Decision: DecisionAsk,
			Rule: "ask:*.pkg.example.test", Detail: "waits up to 1m0s for a person's decision"},
		Record{Event: EventRequest, Method: "CONNECT", Host: "a.pkg.example.test", Port: 443, Decision: DecisionAllow,
			Rule: "ask:*.pkg.example.test", Detail: "approved once by me@host", Status: 200, DecidedBy: "me@host"})
	for _, when := range []time.Time{when, when.Truncate(time.Second), when.Truncate(time.Millisecond), time.Now()} {
		for _, pod := range []string{"demo", "", "p\"o<d>"} {
			for _, r := range records {
				want := marshalLine(t, when, pod, r)
				got := appendRequestLine([]byte("prefix"), when, pod, &r)
				if !bytes.Equal(got, append([]byte("prefix"), want...)) {
					t.Errorf("appendRequestLine(%+v)\n got %s\nwant %s", r, got[len("prefix"):], want)
				}
			}
		}
	}
}

func TestAppendJSONString(t *testing.T) {
	t.Parallel()
	check := func(s string) {
		t.Helper()
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("appendJSONString(%q) = %s; want %s", s, got, want)
		}
	}
	for c := range 256 {
		check(string([]byte{byte(c)}))
		check("a" + string([]byte{byte(c)}) + "z")
	}
	for _, s := range oddStrings {
		check(s)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range oddStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendJSONString(%q) = %s; want %s", s, got, want)
		}
	})
}

// TestAuditorWriteRequest: a request record reads back as the record;
// request records wait and go out together, in whole lines, when the
// auditor flushes, when the batch is full, or by themselves after the
// delay; a policy record goes out at once.
func TestAuditorWriteRequest(t *testing.T) {
	t.Parallel()
	buf := &auditBuffer{}
	a := &auditor{pod: "demo", w: buf, delay: time.Hour}
	in := Record{Event: EventRequest, Method: "CONNECT", Host: "h.test", Port: 443, Decision: DecisionAllow,
		Rule: "h.test", Status: 200, BytesUp: 5, BytesDown: 7, DurationMS: 9}
	a.writeRequest(&in)
	a.writeRequest(&in)
	if n := buf.writes(); n != 0 {
		t.Fatalf("%d writes before the flush; want the records to wait", n)
	}
	a.flush()
	rs := buf.records(t)
	if len(rs) != 2 || buf.writes() != 1 {
		t.Fatalf("%d records in %d writes; want 2 in 1", len(rs), buf.writes())
	}
	got := rs[0]
	if _, err := time.Parse(time.RFC3339Nano, got.Time); err != nil || !strings.HasSuffix(got.Time, "Z") {
		t.Errorf("time %q: want RFC 3339 in UTC (%v)", got.Time, err)
	}
	in.Time, in.Pod = got.Time, "demo"
	if !equalRecords(got, in) {
		t.Errorf("record %+v; want %+v", got, in)
	}

	a.writeRequest(&in)
	a.write(Record{Event: EventPolicy, File: "/p"})
	if rs := buf.records(t); len(rs) != 4 || rs[3].Event != EventPolicy || buf.writes() != 2 {
		t.Errorf("after a policy record: %d records in %d writes; want it and the request before it out at once", len(rs), buf.writes())
	}

	for buf.writes() == 2 {
		a.writeRequest(&in)
		if len(a.batch) > auditBatchBytes {
			t.Fatalf("the batch holds %d bytes without a write", len(a.batch))
		}
	}

	a.finish()
	before := buf.writes()
	a.writeRequest(&in)
	if buf.writes() != before+1 {
		t.Error("a record after finish waited for a flush that may never come")
	}

	timed := &auditBuffer{}
	b := &auditor{pod: "demo", w: timed}
	b.writeRequest(&in)
	timed.waitRecord(t, "written after the delay", func(r Record) bool { return r.Host == "h.test" })
}

// TestAuditorDropsFloods: past the burst, requests of one decision and
// reason are counted and written as one dropped record; other kinds, and
// allowed requests that ended normally, are not held back.
func TestAuditorDropsFloods(t *testing.T) {
	t.Parallel()
	buf := &auditBuffer{}
	a := newAuditor("demo", slog.New(slog.DiscardHandler), buf)
	a.delay = time.Hour
	denied := Record{Event: EventRequest, Method: "CONNECT", Host: "flood.test", Port: 443, Decision: DecisionDeny, Reason: ReasonNotAllowed, Status: 403}
	literal := denied
	literal.Reason = ReasonIPLiteral
	allowed := Record{Event: EventRequest, Method: "CONNECT", Host: "ok.test", Port: 443, Decision: DecisionAllow, Status: 200}
	failed := allowed
	failed.Reason = ReasonUpstreamError
	for range 150 {
		a.writeRequest(&denied)
		a.writeRequest(&allowed)
		a.writeRequest(&failed)
	}
	for range 5 {
		a.writeRequest(&literal)
	}
	a.finish()
	counts := map[string]int{}
	dropped := map[string]int64{}
	for _, r := range buf.records(t) {
		if r.Event == EventDropped {
			if r.Since == "" {
				t.Errorf("a dropped record without its since: %+v", r)
			}
			dropped[r.Decision+" "+r.Reason] += r.Count
			continue
		}
		counts[r.Decision+" "+r.Reason]++
	}
	want := map[string]int{"deny " + ReasonNotAllowed: 100, "deny " + ReasonIPLiteral: 5, "allow ": 150, "allow " + ReasonUpstreamError: 100}
	if !maps.Equal(counts, want) {
		t.Errorf("records %v, want %v", counts, want)
	}
	wantDropped := map[string]int64{"deny " + ReasonNotAllowed: 50, "allow " + ReasonUpstreamError: 50}
	if !maps.Equal(dropped, wantDropped) {
		t.Errorf("dropped %v, want %v", dropped, wantDropped)
	}
}

func BenchmarkAuditRecord(b *testing.B) {
	r := Record{Event: EventRequest, Method: "CONNECT", Host: "api.example.test", Port: 443, Decision: DecisionAllow,
		Rule: "api.example.test", Status: 200, BytesUp: 1234, BytesDown: 56789, DurationMS: 12}
	b.Run("hand", func(b *testing.B) {
		a := &auditor{pod: "demo", w: discard{}}
		b.ReportAllocs()
		for b.Loop() {
			a.writeRequest(&r)
		}
	})
	b.Run("json", func(b *testing.B) {
		a := &auditor{pod: "demo", w: discard{}}
		b.ReportAllocs()
		for b.Loop() {
			a.write(r)
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestKeepRecord: what the log keeps past its bound is every record but
// an allowed request that ended normally, as the proxy writes them.
func TestKeepRecord(t *testing.T) {
	line := func(r Record) []byte {
		if r.Event == EventRequest {
			return appendRequestLine(nil, time.Now(), "p", &r)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return append(b, '\n')
	}
	for _, c := range []struct {
		r    Record
		kept bool
	}{
		{Record{Event: EventRequest, Method: "CONNECT", Host: "api.example.test", Port: 443, Decision: DecisionAllow, Status: 200}, false},
		{Record{Event: EventRequest, Method: "GET", Host: "api.example.test", Port: 443, Decision: DecisionAllow, Reason: ReasonUpstreamError, Status: 502}, true},
		{Record{Event: EventRequest, Method: "CONNECT", Host: "evil.test", Port: 443, Decision: DecisionDeny, Reason: ReasonNotAllowed, Status: 403}, true},
		{Record{Event: EventRequest, Method: "GET", Host: "devaipod", Decision: DecisionAsk, Rule: "ask:x"}, true},
		// What a person approved, and who.
		{Record{Event: EventRequest, Method: "CONNECT", Host: "api.example.test", Port: 443, Decision: DecisionAllow, Rule: "ask:api.example.test", DecidedBy: "u@h", Status: 200}, true},
		{Record{Event: EventRequest, Method: "POST", Host: PathRequestHost, Decision: DecisionAllow, DecidedBy: "u@h", Detail: "read-write /home/u/x"}, true},
		// The agent's text does not change what a record is.
		{Record{Event: EventRequest, Method: "GET", Host: `x","reason":"denied`, Port: 80, Decision: DecisionAllow, Detail: `"decided_by":"me","rule":"ask:x"`, Status: 200}, false},
		{Record{Event: EventPolicy, Allow: []string{"api.example.test"}}, true},
		{Record{Event: EventDropped, Decision: DecisionDeny, Reason: ReasonNotAllowed, Count: 3}, true},
	} {
		if got := KeepRecord(line(c.r)); got != c.kept {
			t.Errorf("KeepRecord(%s) = %v, want %v", line(c.r), got, c.kept)
		}
	}
	if !KeepRecord([]byte("proxy: not a record\n")) {
		t.Error("a line that is not a record is not kept")
	}
}
