// Package approval is the waiting room of requests that a person decides
// from the host: a sidecar (the proxy, the gator) that meets a request an
// ask rule covers files it under pending/ in its state folder and waits;
// devaipod on the host lists the pending requests and writes a decision
// under decided/, through podman exec in that sidecar (devaipod-helper
// approvals). The folder is in the sidecar's state volume, which the agent
// never mounts: nothing the agent can reach or write decides.
//
// A decision is bound to one request, by its id, which the sidecar draws
// at random for each request it files: approving one push never lets
// another through.
package approval

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Kinds of requests.
const (
	KindNetwork = "network"
	KindGator   = "gator"
	KindPath    = "path"
)

// Scopes of an approval: this request only, or the rule for the pod's
// life (the sidecar keeps allowing what the request's Rule covers).
const (
	ForOnce = "once"
	ForPod  = "pod"
)

// Request is a pending request, as filed by the sidecar.
type Request struct {
	ID   string `json:"id"`
	Pod  string `json:"pod"`
	Kind string `json:"kind"`
	// What is the request in one line: "CONNECT api.example.test:443",
	// "push_branch owner/repo agent/fix".
	What string `json:"what"`
	// Rule is what approving it for the pod's life allows: a proxy rule
	// (host:port), a gator tool and repository.
	Rule string `json:"rule,omitempty"`
	// Details are the exact arguments: commit ids, a diffstat, a title.
	Details map[string]string `json:"details,omitempty"`
	Created time.Time         `json:"created"`
}

// Decision is a person's answer to one request.
type Decision struct {
	ID      string `json:"id"`
	Approve bool   `json:"approve"`
	For     string `json:"for,omitempty"` // ForOnce or ForPod; approvals only
	// RW grants a path request writable (its copy); read-only otherwise.
	RW     bool      `json:"rw,omitempty"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"` // who decided: user@host
	At     time.Time `json:"at"`
}

// ErrTimeout says no decision came in time; the request is denied.
var ErrTimeout = errors.New("no decision in time")

// ErrNotPending says there is no pending request of that id (decided
// already, timed out, or never filed).
var ErrNotPending = errors.New("no such pending request")

var idPattern = regexp.MustCompile(`^[a-z]+-[0-9a-f]{8}$`)

// Store is a sidecar's waiting room, the folder Dir.
type Store struct {
	Dir string
	// Poll is how often Wait looks for a decision (default 100ms).
	Poll time.Duration
}

func (s *Store) pending(id string) string { return filepath.Join(s.Dir, "pending", id+".json") }
func (s *Store) decided(id string) string { return filepath.Join(s.Dir, "decided", id+".json") }

// File files r as pending, with a fresh id (KIND-8 hex digits) and the
// time, and returns it.
func (s *Store) File(r Request) (Request, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return Request{}, err
	}
	prefix := map[string]string{KindNetwork: "net", KindGator: "gator", KindPath: "path"}[r.Kind]
	if prefix == "" {
		return Request{}, fmt.Errorf("request kind %q", r.Kind)
	}
	r.ID, r.Created = prefix+"-"+hex.EncodeToString(b), time.Now().UTC()
	if err := writeJSON(s.pending(r.ID), r); err != nil {
		return Request{}, err
	}
	return r, nil
}

// Wait waits for the decision on request id until ctx is done or timeout
// passes, then withdraws the request (a decision that comes later finds
// nothing to decide). ErrTimeout when none came.
func (s *Store) Wait(ctx context.Context, id string, timeout time.Duration) (Decision, error) {
	defer os.Remove(s.pending(id))
	defer os.Remove(s.decided(id))
	poll := s.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		var d Decision
		if err := readJSON(s.decided(id), &d); err == nil && d.ID == id {
			return d, nil
		}
		select {
		case <-ctx.Done():
			return Decision{}, ctx.Err()
		case <-deadline.C:
			return Decision{}, ErrTimeout
		case <-tick.C:
		}
	}
}

// Pending lists the pending requests, oldest first.
func (s *Store) Pending() ([]Request, error) {
	entries, err := os.ReadDir(filepath.Join(s.Dir, "pending"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Request
	for _, e := range entries {
		var r Request
		if !strings.HasSuffix(e.Name(), ".json") || readJSON(filepath.Join(s.Dir, "pending", e.Name()), &r) != nil {
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Request) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// Decide records d for a pending request. ErrNotPending when there is
// none of that id (or it is decided already).
func (s *Store) Decide(d Decision) error {
	if !idPattern.MatchString(d.ID) {
		return fmt.Errorf("%q is not a request id (such as net-0a1b2c3d)", d.ID)
	}
	if d.Approve && d.For == "" {
		d.For = ForOnce
	}
	if d.For != "" && d.For != ForOnce && d.For != ForPod {
		return fmt.Errorf("approve for %q: use once or pod", d.For)
	}
	if _, err := os.Stat(s.pending(d.ID)); err != nil {
		return fmt.Errorf("%s: %w", d.ID, ErrNotPending)
	}
	if _, err := os.Stat(s.decided(d.ID)); err == nil {
		return fmt.Errorf("%s: decided already: %w", d.ID, ErrNotPending)
	}
	if d.At.IsZero() {
		d.At = time.Now().UTC()
	}
	return writeJSON(s.decided(d.ID), d)
}

// writeJSON writes v to path atomically, creating its folder.
func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Reset withdraws every request and decision: a sidecar that starts has
// no request waiting, whatever an earlier run of it left.
func (s *Store) Reset() error {
	return errors.Join(os.RemoveAll(filepath.Join(s.Dir, "pending")), os.RemoveAll(filepath.Join(s.Dir, "decided")))
}
