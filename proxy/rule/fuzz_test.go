package rule

import (
	"strings"
	"testing"
)

// FuzzParseRule checks that Parse never panics and that what it accepts
// has a canonical form that is lower-case ASCII and parses back to the same
// rule.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{
		"api.example.test", "API.EXAMPLE.TEST.:8443", "*.example.test:*", "10.0.2.2", "[::1]:8443",
		"::ffff:10.0.2.2", "[fe80::1%eth0]", "https://x.test/", "a..b", "*", "*.", "x:0", "0x7f.1",
		"xn--bcher-kva.example", "\u212aey.test", "[::1]:", "host:*", "[64:ff9b::1]:*",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			if !strings.Contains(err.Error(), "rule ") {
				t.Fatalf("Parse(%q) error %q does not name the rule", s, err)
			}
			return
		}
		c := r.String()
		for i := 0; i < len(c); i++ {
			if c[i] > 0x7e || c[i] <= ' ' || 'A' <= c[i] && c[i] <= 'Z' {
				t.Fatalf("Parse(%q).String() = %q is not lower-case printable ASCII", s, c)
			}
		}
		again, err := Parse(c)
		if err != nil {
			t.Fatalf("Parse(%q).String() = %q does not parse: %v", s, c, err)
		}
		if again != r {
			t.Fatalf("Parse(%q) = %+v, but its String %q parses as %+v", s, r, c, again)
		}
		if r.IsAddr() && r.Addr.Is4In6() {
			t.Fatalf("Parse(%q) kept a mapped address %v", s, r.Addr)
		}
	})
}

// FuzzMatch checks that Match never panics, ignores case and one trailing
// dot, never matches a non-ASCII host, and agrees with the rule's meaning.
func FuzzMatch(f *testing.F) {
	f.Add("api.example.test", "API.example.test.", 443)
	f.Add("*.example.test:*", "a.b.example.test", 8080)
	f.Add("*.example.test", "example.test", 443)
	f.Add("10.0.2.2:8443", "::ffff:10.0.2.2", 8443)
	f.Add("[::1]:*", "[::1]", 1)
	f.Add("key.test", "\u212aey.test", 443)
	f.Add("api.example.test", "api.example.test..", 443)
	f.Fuzz(func(t *testing.T, ruleText, host string, port int) {
		r, err := Parse(ruleText)
		if err != nil {
			return
		}
		m := NewMatcher(r)
		got, ok := m.Match(host, port)
		if ok && got != r.String() {
			t.Fatalf("Match(%q, %d) = %q; the only rule is %q", host, port, got, r.String())
		}
		if ok && (port < 1 || port > 65535 || r.Port != 0 && r.Port != port) {
			t.Fatalf("rule %q matched %q on port %d", r, host, port)
		}
		for i := 0; i < len(host); i++ {
			if host[i] > 0x7e && ok {
				t.Fatalf("rule %q matched non-ASCII host %q", r, host)
			}
		}
		if _, ok2 := m.Match(asciiUpper(host), port); ok2 != ok {
			t.Fatalf("Match(%q) = %v but Match(%q) = %v", host, ok, asciiUpper(host), ok2)
		}
		h, err := ParseHost(host)
		if err != nil {
			if ok {
				t.Fatalf("rule %q matched %q, which does not normalise: %v", r, host, err)
			}
			return
		}
		if !h.Addr.IsValid() && !strings.HasSuffix(host, ".") {
			if _, ok2 := m.Match(host+".", port); ok2 != ok {
				t.Fatalf("Match(%q) = %v but Match(%q.) = %v", host, ok, host, ok2)
			}
		}
		// What the rule means, spelled out.
		portOK := port >= 1 && port <= 65535 && (r.Port == 0 || r.Port == port)
		var want bool
		switch {
		case r.IsAddr():
			want = h.Addr.IsValid() && h.Addr == r.Addr
		case h.Addr.IsValid():
			want = false
		case r.Wildcard:
			want = strings.HasSuffix(h.Name, "."+r.Name)
		default:
			want = h.Name == r.Name
		}
		if want = want && portOK; want != ok {
			t.Fatalf("Match(%q, %d) with rule %q = %v; want %v", host, port, r, ok, want)
		}
		if h.Addr.IsValid() && h.Addr != h.Addr.Unmap() {
			t.Fatalf("ParseHost(%q) kept a mapped address", host)
		}
	})
}

// asciiUpper upper-cases ASCII letters only (strings.ToUpper would also
// change some non-ASCII letters into ASCII ones).
func asciiUpper(s string) string {
	return strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' {
			return r - 'a' + 'A'
		}
		return r
	}, s)
}
