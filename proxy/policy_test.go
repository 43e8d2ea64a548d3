package proxy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devaipod/devaipod/proxy/rule"
)

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    Policy
		wantErr string
	}{
		{in: "", want: Policy{Allow: []string{}, Deny: []string{}}},
		{in: " \n", want: Policy{Allow: []string{}, Deny: []string{}}},
		{in: "{}", want: Policy{Allow: []string{}, Deny: []string{}}},
		{in: `{"allow": ["a.test"], "deny": ["*.b.test:*"]}`, want: Policy{Allow: []string{"a.test"}, Deny: []string{"*.b.test:*"}}},
		{in: `{"allow": null}`, want: Policy{Allow: []string{}, Deny: []string{}}},
		{in: `{"allow": ["a.test"]`, wantErr: "parse policy"},
		{in: `{"alow": ["a.test"]}`, wantErr: `unknown field "alow"`},
		{in: `{"allow": "a.test"}`, wantErr: "parse policy"},
		{in: `{"allow": ["https://a.test"]}`, wantErr: `allow: rule "https://a.test"`},
		{in: `{"deny": ["a..test"]}`, wantErr: `deny: rule "a..test"`},
		{in: `{} {}`, wantErr: "after the JSON object"},
		{in: `[]`, wantErr: "parse policy"},
	}
	for _, tt := range tests {
		got, err := ParsePolicy([]byte(tt.in))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParsePolicy(%q) error %v; want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got.Allow, tt.want.Allow) || !slices.Equal(got.Deny, tt.want.Deny) ||
			got.Allow == nil || got.Deny == nil {
			t.Errorf("ParsePolicy(%q) = %#v, %v; want %#v", tt.in, got, err, tt.want)
		}
	}
}

func TestEditPolicyFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sub", "policy.json")
	steps := []struct {
		op, rule  string
		wantAllow []string
		wantDeny  []string
		wantErr   string
	}{
		{op: OpAllow, rule: "API.Example.Test.", wantAllow: []string{"api.example.test"}, wantDeny: []string{}},
		{op: OpAllow, rule: "api.example.test:443", wantAllow: []string{"api.example.test"}, wantDeny: []string{}},
		{op: OpAllow, rule: "*.pkg.test:80", wantAllow: []string{"api.example.test", "*.pkg.test:80"}, wantDeny: []string{}},
		{op: OpDeny, rule: "api.example.test", wantAllow: []string{"*.pkg.test:80"}, wantDeny: []string{"api.example.test"}},
		{op: OpDeny, rule: "evil.test", wantAllow: []string{"*.pkg.test:80"}, wantDeny: []string{"api.example.test", "evil.test"}},
		{op: OpAllow, rule: "api.example.test", wantAllow: []string{"*.pkg.test:80", "api.example.test"}, wantDeny: []string{"evil.test"}},
		{op: OpRemove, rule: "evil.test", wantAllow: []string{"*.pkg.test:80", "api.example.test"}, wantDeny: []string{}},
		{op: OpRemove, rule: "never.test", wantAllow: []string{"*.pkg.test:80", "api.example.test"}, wantDeny: []string{}},
		{op: OpAllow, rule: "https://x.test", wantErr: "looks like a URL"},
		{op: "grant", rule: "x.test", wantErr: `unknown policy operation "grant"`},
	}
	for _, st := range steps {
		got, err := EditPolicyFile(path, st.op, st.rule)
		if st.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), st.wantErr) {
				t.Fatalf("EditPolicyFile(%s %q) error %v; want %q", st.op, st.rule, err, st.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("EditPolicyFile(%s %q): %v", st.op, st.rule, err)
		}
		onDisk, err := ReadPolicyFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []Policy{got, onDisk} {
			if !slices.Equal(p.Allow, st.wantAllow) || !slices.Equal(p.Deny, st.wantDeny) {
				t.Fatalf("after %s %q: policy %+v; want allow %q deny %q", st.op, st.rule, p, st.wantAllow, st.wantDeny)
			}
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("policy file mode %v; want 0644", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries; want only the policy file (no temporary files left)", len(entries))
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := EditPolicyFile(path, OpAllow, "x.test"); err == nil || !strings.Contains(err.Error(), "fix or delete") {
		t.Errorf("editing a malformed file: %v; want an error", err)
	}
}

func TestEditPolicyFileConcurrent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.json")
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, err := EditPolicyFile(path, OpAllow, fmt.Sprintf("h%d.test", i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	p, err := ReadPolicyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Allow) != 20 {
		t.Errorf("after 20 concurrent allows the file has %d: %q", len(p.Allow), p.Allow)
	}
}

func TestPolicySourceReload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.json")
	base, _ := rule.ParseAll([]string{"base.test"})
	var mu sync.Mutex
	var events []error
	changed := func(p *policy, err error) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, err)
	}
	ps, err := newPolicySource(base, path, time.Nanosecond, changed)
	if err != nil {
		t.Fatal(err)
	}
	allowed := func(host string) bool {
		hk, err := rule.ParseHost(host)
		if err != nil {
			t.Fatal(err)
		}
		_, allow, _ := ps.current().decide(hk, 443)
		return allow
	}
	if !allowed("base.test") || allowed("new.test") {
		t.Fatal("initial policy wrong")
	}
	if _, err := EditPolicyFile(path, OpAllow, "new.test"); err != nil {
		t.Fatal(err)
	}
	if !allowed("new.test") {
		t.Error("allow in the file did not take effect")
	}
	if _, err := EditPolicyFile(path, OpDeny, "base.test"); err != nil {
		t.Fatal(err)
	}
	if allowed("base.test") {
		t.Error("deny in the file did not override the base rule")
	}
	// A malformed file keeps the previous policy and is reported once.
	if err := os.WriteFile(path+".tmp", []byte(`{"allow": ["a..b"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	if !allowed("new.test") || allowed("base.test") {
		t.Error("a malformed file changed the policy")
	}
	allowed("new.test")
	mu.Lock()
	var errs int
	for _, e := range events {
		if e != nil {
			errs++
		}
	}
	mu.Unlock()
	if errs != 1 {
		t.Errorf("%d error events for one malformed file; want 1 (events %v)", errs, events)
	}
	// Removing the file drops its rules.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if !allowed("base.test") || allowed("new.test") {
		t.Error("removing the file did not restore the base policy")
	}
}

func TestPolicySourceBadFileAtStart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(path, []byte(`{"deny": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := newPolicySource(nil, path, time.Second, func(*policy, error) {})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("newPolicySource with a malformed file: %v; want an error naming it", err)
	}
	if os.Chmod(path, 0) == nil && os.Getuid() != 0 {
		_, err := newPolicySource(nil, path, time.Second, func(*policy, error) {})
		if err == nil || errors.Is(err, os.ErrNotExist) {
			t.Errorf("unreadable file: %v; want an error", err)
		}
	}
}
