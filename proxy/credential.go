package proxy

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/devaipod/devaipod/proxy/rule"

	"golang.org/x/net/http/httpguts"
)

// Credential is a secret that the agent holds only as a placeholder. The
// proxy intercepts the HTTPS requests to the credential's hosts (see
// Options.Credentials) and puts the value in place of the placeholder in
// their headers; a request that carries the placeholder anywhere else is
// refused. The audit and the refusals name a credential, never show its
// value.
type Credential struct {
	// Name names the credential in the audit and in refusals, e.g. the
	// variable that holds it (ANTHROPIC_API_KEY).
	Name string
	// Placeholder is what the agent holds instead of the value: at least
	// MinPlaceholderLen characters from A-Z, a-z, 0-9, "_" and "-". No
	// placeholder may contain another's.
	Placeholder string
	// Value is the real value.
	Value string
	// Hosts are the hosts that get the value, as allow rules (see Rule):
	// host, host:port, *.suffix[:port], an address; port 443 unless one is
	// given. A request still needs an allow rule to get through.
	Hosts []string
}

// MinPlaceholderLen is the shortest placeholder: long enough that no
// header carries it by chance.
const MinPlaceholderLen = 16

// credential is a checked Credential.
type credential struct {
	name, placeholder, value string
	// placeholderBytes is placeholder, to look for in a head's bytes:
	// []byte(placeholder) would be made anew each time (a placeholder is
	// longer than a conversion's buffer on the stack).
	placeholderBytes []byte
	rules            []rule.Rule
	hosts            *rule.Matcher
	hostText         string // the canonical rules, for refusals
	// replacer puts the value in for the placeholder, made once.
	replacer *strings.Replacer
	// forms are what shows the value in an answer (revealingForms).
	forms []maskForm
}

// credentials are the proxy's credentials, in Options order; a nil
// *credentials has none.
type credentials struct {
	list []*credential
	// scrubber replaces each value by its credential's name in brackets.
	scrubber *strings.Replacer
}

// compileCredentials checks cs; the errors name a credential by its name
// (or position), never by its placeholder or value. It returns nil for no
// credentials.
func compileCredentials(cs []Credential) (*credentials, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	out := &credentials{}
	var scrub []string
	for i, c := range cs {
		if c.Name == "" {
			return nil, fmt.Errorf("credential %d: empty name", i+1)
		}
		if strings.ContainsFunc(c.Name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return nil, fmt.Errorf("credential %d: name with control characters", i+1)
		}
		if err := checkPlaceholder(c.Placeholder); err != nil {
			return nil, fmt.Errorf("credential %q: %w", c.Name, err)
		}
		switch {
		case c.Value == "":
			return nil, fmt.Errorf("credential %q: empty value", c.Name)
		case !httpguts.ValidHeaderFieldValue(c.Value):
			return nil, fmt.Errorf("credential %q: the value has characters that a header value may not have", c.Name)
		case len(c.Hosts) == 0:
			return nil, fmt.Errorf("credential %q: no hosts", c.Name)
		}
		rules, err := rule.ParseAll(c.Hosts)
		if err != nil {
			return nil, fmt.Errorf("credential %q: %w", c.Name, err)
		}
		for _, prev := range out.list {
			if strings.Contains(c.Placeholder, prev.placeholder) || strings.Contains(prev.placeholder, c.Placeholder) {
				return nil, fmt.Errorf("credentials %q and %q: one placeholder contains the other", prev.name, c.Name)
			}
		}
		out.list = append(out.list, &credential{
			name: c.Name, placeholder: c.Placeholder, placeholderBytes: []byte(c.Placeholder), value: c.Value,
			rules: rules, hosts: rule.NewMatcher(rules...), hostText: strings.Join(canonicalTexts(rules), ", "),
			replacer: strings.NewReplacer(c.Placeholder, c.Value),
			forms:    revealingForms(c.Value),
		})
		scrub = append(scrub, c.Value, "["+c.Name+"]")
	}
	out.scrubber = strings.NewReplacer(scrub...)
	return out, nil
}

func checkPlaceholder(p string) error {
	if len(p) < MinPlaceholderLen {
		return fmt.Errorf("the placeholder is %d characters long, the minimum is %d", len(p), MinPlaceholderLen)
	}
	for _, c := range []byte(p) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return errors.New(`the placeholder may have only A-Z, a-z, 0-9, "_" and "-"`)
		}
	}
	return nil
}

// rules returns every credential's host rules.
func (cs *credentials) rules() []rule.Rule {
	var rules []rule.Rule
	for _, c := range cs.list {
		rules = append(rules, c.rules...)
	}
	return rules
}

// boundTo returns the credentials that go to host h, port port.
func (cs *credentials) boundTo(h rule.Host, port int) []*credential {
	if cs == nil {
		return nil
	}
	var bound []*credential
	for _, c := range cs.list {
		if _, ok := c.hosts.MatchHost(h, port); ok {
			bound = append(bound, c)
		}
	}
	return bound
}

// carried returns the credentials whose placeholder is in one of h's
// values, or in the decoded user and password of a Basic authorization, in
// Options order.
func (cs *credentials) carried(h http.Header) []*credential {
	if cs == nil {
		return nil
	}
	found := make([]bool, len(cs.list))
	look := func(s string) {
		for i, c := range cs.list {
			if !found[i] && strings.Contains(s, c.placeholder) {
				found[i] = true
			}
		}
	}
	for k, vv := range h {
		for _, v := range vv {
			look(v)
			if userPass, ok := basicAuth(k, v); ok {
				look(userPass)
			}
		}
	}
	var carried []*credential
	for i, c := range cs.list {
		if found[i] {
			carried = append(carried, c)
		}
	}
	return carried
}

// scrub replaces every credential's value in s by the credential's name, for
// error texts and logs.
func (cs *credentials) scrub(s string) string {
	if cs == nil {
		return s
	}
	return cs.scrubber.Replace(s)
}

// substitute puts the values of creds in place of their placeholders in
// h's values; in a Basic authorization, in its decoded user and password
// (git over HTTPS sends its token as the password).
func substitute(h http.Header, creds []*credential) {
	r := replacerFor(creds)
	if r == nil {
		return
	}
	for k, vv := range h {
		for i, v := range vv {
			vv[i] = substituteValue(k, v, r)
		}
	}
}

// replacerFor puts the values of creds in for their placeholders; nil for
// none.
func replacerFor(creds []*credential) *strings.Replacer {
	switch len(creds) {
	case 0:
		return nil
	case 1:
		return creds[0].replacer
	}
	// rare: a request carrying two credentials
	pairs := make([]string, 0, 2*len(creds))
	for _, c := range creds {
		pairs = append(pairs, c.placeholder, c.value)
	}
	return strings.NewReplacer(pairs...)
}

// substituteValue is the value v of header key (canonical) with r's
// replacements made, in a Basic authorization in its decoded user and
// password.
func substituteValue(key, v string, r *strings.Replacer) string {
	if userPass, ok := basicAuth(key, v); ok {
		if replaced := r.Replace(userPass); replaced != userPass {
			return "Basic " + base64.StdEncoding.EncodeToString([]byte(replaced))
		}
	}
	return r.Replace(v)
}

// carriedIn is carried for the header lines of a request head in the
// plain subset (parsePlainRequest read them): every header but Host, which
// net/http takes out of the header map. false: more credentials than it
// counts (the parsed path then looks).
func (cs *credentials) carriedIn(fields []plainField) ([]*credential, bool) {
	if cs == nil {
		return nil, true
	}
	if len(cs.list) > 64 {
		return nil, false
	}
	var found uint64
	look := func(v []byte) {
		for i, c := range cs.list {
			if found&(1<<i) == 0 && bytes.Contains(v, c.placeholderBytes) {
				found |= 1 << i
			}
		}
	}
	for _, f := range fields {
		if f.k == hdrHost {
			continue
		}
		look(f.value)
		if f.k == hdrAuthorization && basicScheme(f.value) {
			if userPass, ok := basicAuth(f.k, string(f.value)); ok {
				look([]byte(userPass))
			}
		}
	}
	if found == 0 {
		return nil, true
	}
	var carried []*credential
	for i, c := range cs.list {
		if found&(1<<i) != 0 {
			carried = append(carried, c)
		}
	}
	return carried, true
}

// writeSubstituted writes value, the value of header k (as knownHeader
// knows it), to w with substituteValue's replacements of carried made.
func writeSubstituted(w *bufio.Writer, k string, value []byte, carried []*credential) {
	switch {
	case len(carried) == 0:
		w.Write(value)
	case len(carried) > 1 || k == hdrAuthorization && basicScheme(value):
		w.WriteString(substituteValue(k, string(value), replacerFor(carried)))
	default:
		// One credential, in place: the replacements that its
		// strings.Replacer makes, left to right, without a string made
		// for the value and another for the result.
		c := carried[0]
		for {
			i := bytes.Index(value, c.placeholderBytes)
			if i < 0 {
				w.Write(value)
				return
			}
			w.Write(value[:i])
			w.WriteString(c.value)
			value = value[i+len(c.placeholderBytes):]
		}
	}
}

// basicScheme reports whether an Authorization value names the Basic
// scheme (basicAuth then decodes it, if it can).
func basicScheme(value []byte) bool {
	scheme, _, ok := bytes.Cut(value, []byte(" "))
	return ok && asciiEqualFold(scheme, "Basic")
}

// basicAuth returns the decoded user:password of an Authorization header
// value of the Basic scheme.
func basicAuth(key, value string) (string, bool) {
	if key != "Authorization" {
		return "", false
	}
	scheme, encoded, ok := strings.Cut(value, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return "", false
	}
	return string(b), true
}

// names returns the names of creds.
func names(creds []*credential) []string {
	if len(creds) == 0 {
		return nil
	}
	ns := make([]string, len(creds))
	for i, c := range creds {
		ns[i] = c.name
	}
	return ns
}

// misplaced is the detail of a refusal of a request that carries c's
// placeholder to a host that c is not bound to.
func (c *credential) misplaced() string {
	return fmt.Sprintf("the request carries the placeholder of %s, which the proxy fills in only on HTTPS to %s", c.name, c.hostText)
}
