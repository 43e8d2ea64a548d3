package rule

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultPort is the port a rule allows when it names none: HTTPS. Plain
// HTTP to port 80 needs a rule that says so ("host:80").
const DefaultPort = 443

// maxNameLen is the longest DNS name, in its dotted text form without the
// trailing dot.
const maxNameLen = 253

// Rule is one parsed allow or deny entry. The forms are:
//
//	api.example.test        that name, port 443
//	api.example.test:8443   that name, that port
//	api.example.test:*      that name, any port
//	*.example.test          any name below example.test (not example.test itself), port 443
//	*.example.test:80       the same on port 80 (":*" for any port)
//	10.0.2.2, 10.0.2.2:8443, [::1], [::1]:8443, 10.0.2.2:*
//	                        that address (see below)
//
// Names are case-insensitive, lose one trailing dot and must be ASCII (use
// the xn-- form of an internationalised name). An address rule is the only
// way to reach an IP literal, and the only way to reach a loopback, private,
// link-local or otherwise special address (whichever name resolves to it).
type Rule struct {
	// Name is the lower-case host name without a trailing dot or, for a
	// wildcard, the suffix without "*.". Empty for an address rule.
	Name string
	// Wildcard is true for "*.suffix" rules.
	Wildcard bool
	// Addr is the address of an address rule (IPv4-mapped IPv6 addresses are
	// unmapped); the zero Addr otherwise.
	Addr netip.Addr
	// Port is the port the rule allows, or 0 for any port.
	Port int
}

// IsAddr reports whether r names an IP address rather than a host name.
func (r Rule) IsAddr() bool { return r.Addr.IsValid() }

// String returns the canonical text of r, which Parse accepts and maps
// back to r. Port 443 is left implicit.
func (r Rule) String() string {
	var host string
	switch {
	case r.IsAddr() && r.Addr.Is6():
		host = "[" + r.Addr.String() + "]"
	case r.IsAddr():
		host = r.Addr.String()
	case r.Wildcard:
		host = "*." + r.Name
	default:
		host = r.Name
	}
	switch r.Port {
	case DefaultPort:
		return host
	case 0:
		return host + ":*"
	default:
		return host + ":" + strconv.Itoa(r.Port)
	}
}

// matchHost reports whether r covers the normalised host h (a name, or an
// address in netip's canonical text, see ParseHost) and port.
func (r Rule) matchHost(h Host, port int) bool {
	if r.Port != 0 && r.Port != port {
		return false
	}
	switch {
	case r.IsAddr():
		return h.Addr.IsValid() && h.Addr == r.Addr
	case h.Addr.IsValid():
		return false
	case r.Wildcard:
		return len(h.Name) > len(r.Name)+1 && strings.HasSuffix(h.Name, r.Name) &&
			h.Name[len(h.Name)-len(r.Name)-1] == '.'
	default:
		return h.Name == r.Name
	}
}

// Parse parses one allow or deny rule; see Rule for the forms. The error
// names the rule and says what is wrong with it.
func Parse(s string) (Rule, error) {
	r, err := parseRule(s)
	if err != nil {
		return Rule{}, fmt.Errorf("rule %q: %w", s, err)
	}
	return r, nil
}

// ParseAll parses every rule in ss and stops at the first bad one.
func ParseAll(ss []string) ([]Rule, error) {
	rules := make([]Rule, 0, len(ss))
	for _, s := range ss {
		r, err := Parse(s)
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func parseRule(s string) (Rule, error) {
	if s == "" {
		return Rule{}, errors.New("empty")
	}
	if err := checkRuleChars(s); err != nil {
		return Rule{}, err
	}
	host, port, err := splitRule(s)
	if err != nil {
		return Rule{}, err
	}
	if a, ok, err := parseAddr(host); err != nil {
		return Rule{}, err
	} else if ok {
		return Rule{Addr: a, Port: port}, nil
	}
	if strings.HasPrefix(host, "[") {
		return Rule{}, fmt.Errorf("%q is not an IPv6 address", host)
	}
	r := Rule{Port: port}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.Wildcard = true
		host = rest
	}
	if strings.Contains(host, "*") {
		return Rule{}, errors.New(`"*" is only allowed as a whole first label, as in "*.example.test"`)
	}
	name, err := normaliseName(host)
	if err != nil {
		return Rule{}, err
	}
	r.Name = name
	return r, nil
}

// checkRuleChars refuses what people paste by mistake: URLs, paths,
// credentials, whitespace and non-ASCII names, each with its own message.
func checkRuleChars(s string) error {
	switch {
	case strings.Contains(s, "://"):
		return errors.New("looks like a URL; give the host name only, as in api.example.test or api.example.test:8443")
	case strings.ContainsAny(s, "/?#"):
		return errors.New("contains a path or query; give the host name only")
	case strings.Contains(s, "@"):
		return errors.New("contains user information (@); give the host name only")
	}
	for _, c := range s {
		switch {
		case c > 0x7e:
			return errors.New("contains non-ASCII characters; write an internationalised name in its ASCII (xn--) form")
		case c <= ' ':
			return errors.New("contains whitespace or control characters")
		}
	}
	return nil
}

// splitRule splits a rule into its host part and port (0 for ":*",
// DefaultPort when absent).
func splitRule(s string) (host string, port int, err error) {
	// A bare IPv6 address has colons but no port.
	if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
		return s, DefaultPort, nil
	}
	host, portText := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "", 0, errors.New(`missing "]"`)
		}
		host, portText = s[:end+1], s[end+1:]
		if portText != "" {
			var ok bool
			if portText, ok = strings.CutPrefix(portText, ":"); !ok {
				return "", 0, fmt.Errorf(`unexpected %q after "]"`, portText)
			}
			if portText == "" {
				return "", 0, errors.New(`empty port after ":"`)
			}
		}
	} else if i := strings.LastIndex(s, ":"); i >= 0 {
		host, portText = s[:i], s[i+1:]
		if portText == "" {
			return "", 0, errors.New(`empty port after ":"`)
		}
	}
	if host == "" {
		return "", 0, errors.New("missing host")
	}
	switch portText {
	case "":
		return host, DefaultPort, nil
	case "*":
		return host, 0, nil
	}
	port, ok := ParsePort(portText)
	if !ok {
		return "", 0, fmt.Errorf("bad port %q: want 1-65535 or *", portText)
	}
	return host, port, nil
}

// ParsePort accepts 1 to 65535 in plain decimal digits (no sign, no spaces).
func ParsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = 10*n + int(c-'0')
	}
	return n, n >= 1 && n <= 65535
}

// parseAddr recognises an IP literal (IPv6 with or without brackets). ok is
// false, with no error, when host is not one. Zones are refused.
func parseAddr(host string) (a netip.Addr, ok bool, err error) {
	inner, bracketed := strings.CutPrefix(host, "[")
	if bracketed {
		var closed bool
		if inner, closed = strings.CutSuffix(inner, "]"); !closed {
			return netip.Addr{}, false, nil
		}
	}
	a, perr := netip.ParseAddr(inner)
	if perr != nil {
		return netip.Addr{}, false, nil
	}
	if a.Zone() != "" {
		return netip.Addr{}, false, errors.New("IPv6 zones (%) are not allowed")
	}
	if bracketed && !a.Is6() {
		return netip.Addr{}, false, errors.New("brackets are for IPv6 addresses")
	}
	return a.Unmap(), true, nil
}

// normaliseName lower-cases an ASCII host name, strips one trailing dot and
// checks its labels.
func normaliseName(s string) (string, error) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", errors.New("missing host")
	}
	if len(s) > maxNameLen {
		return "", fmt.Errorf("name is %d characters long, the limit is %d", len(s), maxNameLen)
	}
	b := []byte(s)
	labelStart := 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == '.' {
			switch n := i - labelStart; {
			case n == 0:
				return "", errors.New("empty label (\"..\", or a leading or trailing \".\")")
			case n > 63:
				return "", fmt.Errorf("label %q is longer than 63 characters", b[labelStart:i])
			}
			labelStart = i + 1
			continue
		}
		switch c := b[i]; {
		case 'A' <= c && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		case c > 0x7e:
			return "", errors.New("non-ASCII name; write an internationalised name in its ASCII (xn--) form")
		default:
			return "", fmt.Errorf("character %q is not allowed in a host name", c)
		}
	}
	name := string(b)
	if looksNumeric(name[strings.LastIndexByte(name, '.')+1:]) {
		// Resolvers and URL parsers read "10.1", "2130706433" or "0x7f.1"
		// as addresses; such a name could reach anything.
		return "", ErrNumericName
	}
	return name, nil
}

// looksNumeric reports whether a last label makes a name read as an IPv4
// address to inet_aton-style parsers: all decimal digits, or 0x and hex.
func looksNumeric(label string) bool {
	if rest, ok := strings.CutPrefix(label, "0x"); ok {
		for _, c := range rest {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
		return true
	}
	for _, c := range label {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Host is a request's host after normalisation (ParseHost): exactly one of
// Name and Addr is set.
type Host struct {
	Name string
	Addr netip.Addr
}

// String is the host as the audit log and messages show it.
func (h Host) String() string {
	if h.Addr.IsValid() {
		return h.Addr.String()
	}
	return h.Name
}

// ErrNumericName is the error for a name whose last label is a number, which
// address parsers may read as an IPv4 address.
var ErrNumericName = errors.New("looks like an IP address but is not a valid one")

// ParseHost normalises a request's host the way rules are: ASCII only,
// lower case, one trailing dot stripped, IP literals (bracketed or not)
// parsed and unmapped.
func ParseHost(host string) (Host, error) {
	if a, ok, err := parseAddr(host); err != nil {
		return Host{}, err
	} else if ok {
		return Host{Addr: a}, nil
	}
	for i := 0; i < len(host); i++ {
		if host[i] > 0x7e {
			return Host{}, errors.New("non-ASCII host name (use its xn-- form)")
		}
	}
	name, err := normaliseName(host)
	if err != nil {
		return Host{}, err
	}
	return Host{Name: name}, nil
}

// Matcher finds the rule that covers a host and port.
type Matcher struct {
	rules []Rule
	texts []string
}

// NewMatcher returns a matcher over rules. Match reports the first rule that
// covers a request, with exact names before wildcards.
func NewMatcher(rules ...Rule) *Matcher {
	m := &Matcher{}
	// Exact and address rules first, so that the audit names the most
	// specific rule.
	for _, wild := range []bool{false, true} {
		for _, r := range rules {
			if r.Wildcard == wild {
				m.rules = append(m.rules, r)
				m.texts = append(m.texts, r.String())
			}
		}
	}
	return m
}

// Len returns the number of rules.
func (m *Matcher) Len() int { return len(m.rules) }

// Match reports whether a rule covers host and port, and which (in its
// canonical text). host may be a name (any case, with or without one
// trailing dot) or an IP literal, bracketed or not; names that are not
// valid ASCII host names match nothing.
func (m *Matcher) Match(host string, port int) (ruleText string, ok bool) {
	h, err := ParseHost(host)
	if err != nil {
		return "", false
	}
	return m.MatchHost(h, port)
}

func (m *Matcher) MatchHost(h Host, port int) (string, bool) {
	if port < 1 || port > 65535 {
		return "", false
	}
	for i, r := range m.rules {
		if r.matchHost(h, port) {
			return m.texts[i], true
		}
	}
	return "", false
}
