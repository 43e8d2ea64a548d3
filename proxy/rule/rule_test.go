package rule

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string // canonical form; "" when an error is expected
		wantErr string // substring of the error
	}{
		{in: "api.example.test", want: "api.example.test"},
		{in: "API.Example.TEST.", want: "api.example.test"},
		{in: "api.example.test:443", want: "api.example.test"},
		{in: "api.example.test:8443", want: "api.example.test:8443"},
		{in: "api.example.test:*", want: "api.example.test:*"},
		{in: "*.example.test", want: "*.example.test"},
		{in: "*.Example.Test.:80", want: "*.example.test:80"},
		{in: "*.example.test:*", want: "*.example.test:*"},
		{in: "xn--bcher-kva.example", want: "xn--bcher-kva.example"},
		{in: "_acme.example.test", want: "_acme.example.test"},
		{in: "localhost", want: "localhost"},
		{in: "10.0.2.2", want: "10.0.2.2"},
		{in: "10.0.2.2:8443", want: "10.0.2.2:8443"},
		{in: "10.0.2.2:*", want: "10.0.2.2:*"},
		{in: "[::1]:8443", want: "[::1]:8443"},
		{in: "[::1]", want: "[::1]"},
		{in: "::1", want: "[::1]"},
		{in: "[2001:DB8::1]:443", want: "[2001:db8::1]"},
		{in: "[::ffff:10.0.2.2]:80", want: "10.0.2.2:80"},

		{in: "", wantErr: "empty"},
		{in: "https://api.example.test", wantErr: "looks like a URL"},
		{in: "api.example.test/v1", wantErr: "path"},
		{in: "user@api.example.test", wantErr: "user information"},
		{in: "api .example.test", wantErr: "whitespace"},
		{in: " api.example.test", wantErr: "whitespace"},
		{in: "api.example.test\n", wantErr: "whitespace"},
		{in: "bücher.example", wantErr: "non-ASCII"},
		{in: "\u212aey.example", wantErr: "non-ASCII"}, // Kelvin sign, lower-cases to "k"
		{in: "api..example.test", wantErr: "empty label"},
		{in: ".example.test", wantErr: "empty label"},
		{in: "api.example.test..", wantErr: "empty label"},
		{in: ".", wantErr: "missing host"},
		{in: "*", wantErr: `"*"`},
		{in: "*.", wantErr: "missing host"},
		{in: "*.*.example.test", wantErr: `"*"`},
		{in: "a*.example.test", wantErr: `"*"`},
		{in: "api.*.test", wantErr: `"*"`},
		{in: "*:443", wantErr: `"*"`},
		{in: "api.example.test:", wantErr: "empty port"},
		{in: ":443", wantErr: "missing host"},
		{in: "api.example.test:0", wantErr: "bad port"},
		{in: "api.example.test:65536", wantErr: "bad port"},
		{in: "api.example.test:+443", wantErr: "bad port"},
		{in: "api.example.test:http", wantErr: "bad port"},
		{in: "api.example.test:443:1", wantErr: "not allowed in a host name"},
		{in: "[::1", wantErr: `missing "]"`},
		{in: "[::1]x", wantErr: "after"},
		{in: "[::1]:", wantErr: "empty port"},
		{in: "[10.0.2.2]", wantErr: "brackets"},
		{in: "[api.example.test]", wantErr: "not an IPv6 address"},
		{in: "[fe80::1%eth0]", wantErr: "zone"},
		{in: "10.1", wantErr: "looks like an IP address"},
		{in: "2130706433", wantErr: "looks like an IP address"},
		{in: "0x7f.1", wantErr: "looks like an IP address"},
		{in: "1.2.3.4.", wantErr: "looks like an IP address"},
		{in: "api!.example.test", wantErr: "not allowed in a host name"},
		{in: strings.Repeat("a", 64) + ".test", wantErr: "longer than 63"},
		{in: strings.Repeat("abcdefghi.", 26) + "test", wantErr: "limit is 253"},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.want != "" {
			if err != nil {
				t.Errorf("Parse(%q) error %v; want %q", tt.in, err, tt.want)
			} else if got.String() != tt.want {
				t.Errorf("Parse(%q) = %q; want %q", tt.in, got.String(), tt.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("Parse(%q) = %q; want an error containing %q", tt.in, got.String(), tt.wantErr)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "rule "+strconv.Quote(tt.in)) {
			t.Errorf("Parse(%q) error %q; want it to name the rule and contain %q", tt.in, err, tt.wantErr)
		}
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	rules, err := ParseAll([]string{
		"api.example.test",
		"plain.example.test:80",
		"any.example.test:*",
		"*.pkg.example.test",
		"*.web.example.test:80",
		"10.0.2.2:8443",
		"[::1]:*",
		"git.example.test:22",
	})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMatcher(rules...)
	tests := []struct {
		host     string
		port     int
		wantRule string // "" means no match
	}{
		{"api.example.test", 443, "api.example.test"},
		{"API.EXAMPLE.TEST.", 443, "api.example.test"},
		{"Api.Example.Test", 443, "api.example.test"},
		{"api.example.test", 80, ""},
		{"api.example.test", 8443, ""},
		{"api.example.test..", 443, ""},
		{"api.example.test.evil.test", 443, ""},
		{"evilapi.example.test", 443, ""},
		{"xapi.example.test", 443, ""},
		{"sub.api.example.test", 443, ""},
		{"\u212aapi.example.test", 443, ""},
		{"api.example.test\x00", 443, ""},
		{"plain.example.test", 80, "plain.example.test:80"},
		{"plain.example.test", 443, ""},
		{"any.example.test", 1, "any.example.test:*"},
		{"any.example.test", 65535, "any.example.test:*"},
		{"any.example.test", 0, ""},
		{"any.example.test", 65536, ""},
		{"a.pkg.example.test", 443, "*.pkg.example.test"},
		{"a.b.pkg.example.test", 443, "*.pkg.example.test"},
		{"A.PKG.EXAMPLE.TEST.", 443, "*.pkg.example.test"},
		{"pkg.example.test", 443, ""},
		{"xpkg.example.test", 443, ""},
		{".pkg.example.test", 443, ""},
		{"a.pkg.example.test", 80, ""},
		{"a.web.example.test", 80, "*.web.example.test:80"},
		{"a.web.example.test", 443, ""},
		{"10.0.2.2", 8443, "10.0.2.2:8443"},
		{"10.0.2.2", 443, ""},
		{"[::ffff:10.0.2.2]", 8443, "10.0.2.2:8443"},
		{"::ffff:a00:202", 8443, "10.0.2.2:8443"},
		{"10.0.2.2.", 8443, ""},
		{"010.0.2.2", 8443, ""},
		{"::1", 80, "[::1]:*"},
		{"[::1]", 80, "[::1]:*"},
		{"[0:0::1]", 80, "[::1]:*"},
		{"127.0.0.1", 80, ""},
		{"git.example.test", 22, "git.example.test:22"},
		{"", 443, ""},
		{".", 443, ""},
	}
	for _, tt := range tests {
		got, ok := m.Match(tt.host, tt.port)
		if ok != (tt.wantRule != "") || got != tt.wantRule {
			t.Errorf("Match(%q, %d) = %q, %v; want %q", tt.host, tt.port, got, ok, tt.wantRule)
		}
	}
}

func TestMatchPrefersExactRules(t *testing.T) {
	t.Parallel()
	rules, err := ParseAll([]string{"*.example.test", "api.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := NewMatcher(rules...).Match("api.example.test", 443); got != "api.example.test" {
		t.Errorf("Match = %q; want the exact rule", got)
	}
}
