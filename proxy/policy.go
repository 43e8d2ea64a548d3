package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devaipod/devaipod/proxy/rule"
)

// Policy is the content of a policy file, the part of a pod's policy that
// changes while the proxy runs (devaipod allow and deny):
//
//	{"allow": ["api.example.test", "*.pkg.example.test:80"], "deny": ["api.example.test"]}
//
// Allow adds to the proxy's base rules (its command line). A request that a
// deny rule covers is refused even if a base or allow rule covers it too. A
// missing or empty file is an empty policy.
type Policy struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
}

// The operations of EditPolicyFile.
const (
	OpAllow  = "allow"  // add to allow, drop the same rule from deny
	OpDeny   = "deny"   // add to deny, drop the same rule from allow
	OpRemove = "remove" // drop the rule from both lists
)

// ParsePolicy parses and checks a policy file's content. Unknown keys and bad
// rules are errors. Blank content is an empty policy.
func ParsePolicy(data []byte) (Policy, error) {
	p := Policy{Allow: []string{}, Deny: []string{}}
	if len(bytes.TrimSpace(data)) == 0 {
		return p, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Policy{}, fmt.Errorf("parse policy: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Policy{}, errors.New("parse policy: unexpected data after the JSON object")
	}
	if p.Allow == nil {
		p.Allow = []string{}
	}
	if p.Deny == nil {
		p.Deny = []string{}
	}
	if _, err := rule.ParseAll(p.Allow); err != nil {
		return Policy{}, fmt.Errorf("allow: %w", err)
	}
	if _, err := rule.ParseAll(p.Deny); err != nil {
		return Policy{}, fmt.Errorf("deny: %w", err)
	}
	return p, nil
}

// JSON returns p as indented JSON with a final newline, empty lists as [].
func (p Policy) JSON() []byte {
	if p.Allow == nil {
		p.Allow = []string{}
	}
	if p.Deny == nil {
		p.Deny = []string{}
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		panic(err) // two string slices always marshal
	}
	return append(b, '\n')
}

// ReadPolicyFile reads and checks the policy file at path; a missing file is
// an empty policy.
func ReadPolicyFile(path string) (Policy, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Policy{Allow: []string{}, Deny: []string{}}, nil
	}
	if err != nil {
		return Policy{}, err
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return Policy{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// EditPolicyFile applies op (OpAllow, OpDeny or OpRemove) with rule to the
// policy file at path and returns the new policy. The rule is checked and
// stored in its canonical form; entries equal to it (in any spelling) are
// replaced. The file is replaced atomically (a temporary file in the same
// directory, then rename), so a running proxy never reads half of it, and
// concurrent edits are serialised with a lock on the directory where the
// platform has flock(2). The directory is created if missing.
//
// A running proxy applies the change to every request that arrives one
// Options.PolicyCheckInterval or more after EditPolicyFile returns.
func EditPolicyFile(path, op, ruleText string) (Policy, error) {
	switch op {
	case OpAllow, OpDeny, OpRemove:
	default:
		return Policy{}, fmt.Errorf("unknown policy operation %q (want %s, %s or %s)", op, OpAllow, OpDeny, OpRemove)
	}
	r, err := rule.Parse(ruleText)
	if err != nil {
		return Policy{}, err
	}
	canon := r.String()

	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Policy{}, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return Policy{}, fmt.Errorf("lock %s: %w", dir, err)
	}
	defer unlock()

	p, err := ReadPolicyFile(path)
	if err != nil {
		return Policy{}, fmt.Errorf("%w (fix or delete the file)", err)
	}
	p.Allow = withoutRule(p.Allow, canon)
	p.Deny = withoutRule(p.Deny, canon)
	switch op {
	case OpAllow:
		p.Allow = append(p.Allow, canon)
	case OpDeny:
		p.Deny = append(p.Deny, canon)
	}
	if err := writeFileAtomic(path, p.JSON()); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// withoutRule returns rules without the entries whose canonical form is
// canon. The rules have been checked already.
func withoutRule(rules []string, canon string) []string {
	return slices.DeleteFunc(slices.Clone(rules), func(s string) bool {
		r, err := rule.Parse(s)
		return err == nil && r.String() == canon
	})
}

// writeFileAtomic replaces path with data through a temporary file in the
// same directory.
func writeFileAtomic(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	// The proxy may run as another uid than whoever edits the file.
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// policy is the compiled policy in force: the base rules plus the file's
// allow rules, and the file's deny rules.
type policy struct {
	allow, deny *rule.Matcher
	// allowText and denyText are the canonical rules, for the audit.
	allowText, denyText []string
}

func compilePolicy(base []rule.Rule, file Policy) (*policy, error) {
	allow, err := rule.ParseAll(file.Allow)
	if err != nil {
		return nil, err
	}
	deny, err := rule.ParseAll(file.Deny)
	if err != nil {
		return nil, err
	}
	allow = append(slices.Clone(base), allow...)
	p := &policy{allow: rule.NewMatcher(allow...), deny: rule.NewMatcher(deny...)}
	p.allowText = canonicalTexts(allow)
	p.denyText = canonicalTexts(deny)
	return p, nil
}

func canonicalTexts(rules []rule.Rule) []string {
	texts := make([]string, 0, len(rules))
	for _, r := range rules {
		if s := r.String(); !slices.Contains(texts, s) {
			texts = append(texts, s)
		}
	}
	return texts
}

// decide returns the rule that settles a request and whether it allows it.
// ok is false when no rule covers the request.
func (p *policy) decide(h rule.Host, port int) (ruleText string, allow, ok bool) {
	if ruleText, ok := p.deny.MatchHost(h, port); ok {
		return ruleText, false, true
	}
	if ruleText, ok := p.allow.MatchHost(h, port); ok {
		return ruleText, true, true
	}
	return "", false, false
}

// allowsAddr reports whether an address rule allows addr:port, which exempts
// that address from the address guard.
func (p *policy) allowsAddr(addr netip.Addr, port int) bool {
	_, allow, _ := p.decide(rule.Host{Addr: addr.Unmap().WithZone("")}, port)
	return allow
}

// policySource holds the policy in force and reloads the policy file when it
// changes. It checks on the request path, at most once per interval: one
// stat(2) at most every interval, and no goroutine to stop.
type policySource struct {
	base     []rule.Rule
	path     string // "" when there is no policy file
	interval time.Duration
	// changed is called, under mu, after each load: with the new policy, or
	// with the previous one, still in force, and the error that kept it.
	changed func(p *policy, err error)

	cur       atomic.Pointer[policy]
	nextCheck atomic.Int64 // UnixNano

	mu      sync.Mutex
	stamp   os.FileInfo // of the file last read; nil if it was missing
	lastErr string      // the last error reported, not to repeat it
}

func newPolicySource(base []rule.Rule, path string, interval time.Duration, changed func(*policy, error)) (*policySource, error) {
	ps := &policySource{base: base, path: path, interval: interval, changed: changed}
	if path == "" {
		p, err := compilePolicy(base, Policy{})
		if err != nil {
			return nil, err
		}
		ps.cur.Store(p)
		changed(p, nil)
		return ps, nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	// At start a bad file is fatal: starting without its deny rules would
	// let through what the user has denied.
	if err := ps.loadLocked(true); err != nil {
		return nil, err
	}
	ps.nextCheck.Store(time.Now().Add(interval).UnixNano())
	return ps, nil
}

// current returns the policy in force, reloading the file first if it has
// changed and the last check is more than an interval ago.
func (ps *policySource) current() *policy {
	if ps.path == "" || time.Now().UnixNano() < ps.nextCheck.Load() {
		return ps.cur.Load()
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	now := time.Now()
	if now.UnixNano() < ps.nextCheck.Load() {
		return ps.cur.Load() // another request has just checked
	}
	ps.nextCheck.Store(now.Add(ps.interval).UnixNano())
	// An error keeps the previous policy; changed has reported it.
	_ = ps.loadLocked(false)
	return ps.cur.Load()
}

// refresh rereads the file now if it changed, whatever the interval, and
// returns the policy in force: after the proxy's own edit (an approval for
// the pod), which the next request must see.
func (ps *policySource) refresh() *policy {
	if ps.path == "" {
		return ps.cur.Load()
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.nextCheck.Store(time.Now().Add(ps.interval).UnixNano())
	_ = ps.loadLocked(false)
	return ps.cur.Load()
}

// loadLocked reads the file if it changed since the last read (or always if
// force) and installs the policy.
func (ps *policySource) loadLocked(force bool) error {
	var data []byte
	var fi os.FileInfo
	f, err := os.Open(ps.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No file: an empty policy.
	case err != nil:
		return ps.fail(err, force)
	default:
		defer f.Close()
		if fi, err = f.Stat(); err != nil {
			return ps.fail(err, force)
		}
		if !force && sameFile(fi, ps.stamp) {
			return nil
		}
		if data, err = io.ReadAll(io.LimitReader(f, 1<<20+1)); err != nil {
			return ps.fail(err, force)
		}
		if len(data) > 1<<20 {
			ps.stamp = fi
			return ps.fail(errors.New("larger than 1 MiB"), force)
		}
	}
	if !force && fi == nil && ps.stamp == nil {
		return nil // still missing
	}
	ps.stamp = fi
	file, err := ParsePolicy(data)
	if err != nil {
		return ps.fail(err, force)
	}
	p, err := compilePolicy(ps.base, file)
	if err != nil {
		return ps.fail(err, force)
	}
	ps.cur.Store(p)
	ps.lastErr = ""
	ps.changed(p, nil)
	return nil
}

// fail reports err once (not again while it stays the same) and returns it.
func (ps *policySource) fail(err error, atStart bool) error {
	err = fmt.Errorf("policy file %s: %w", ps.path, err)
	if !atStart && err.Error() != ps.lastErr {
		ps.lastErr = err.Error()
		ps.changed(ps.cur.Load(), err)
	}
	return err
}

// sameFile reports whether a and b (either may be nil, for a missing file)
// describe the same unchanged file. A rename over the file changes its
// identity even when size and time stay the same.
func sameFile(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
