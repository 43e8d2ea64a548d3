package pod

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/devaipod/devaipod/internal/helperargs"
	"github.com/devaipod/devaipod/proxy/record"
)

// Refused sums up the requests a pod's proxy refused its agent since the
// person last looked (status), up's and verify's own probes aside: an
// agent that keeps being refused is stuck, or trying.
type Refused struct {
	Since time.Time      `json:"since"`
	Count int            `json:"count"`
	Hosts map[string]int `json:"hosts,omitempty"`
}

// refusedSince counts the refusals in the audit records r (AuditLog's
// lines) after since: by host, a flood's dropped records by their count.
func refusedSince(r io.Reader, since time.Time) Refused {
	sum := Refused{Since: since, Hosts: map[string]int{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec struct {
			Kind string // the gator's records have one
			record.Record
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Kind != "" {
			continue // a diagnostic, or the gator's
		}
		t, err := time.Parse(time.RFC3339Nano, rec.Time)
		if err != nil || !t.After(since) || rec.Decision != record.DecisionDeny {
			continue
		}
		switch rec.Event {
		case record.EventRequest:
			if !helperargs.IsProbeHost(rec.Host) {
				sum.Count++
				sum.Hosts[rec.Host]++
			}
		case record.EventDropped:
			sum.Count += int(rec.Count)
		}
	}
	return sum
}

// lookedMark is where devaipod keeps when the person last looked at pod
// short's refusals (or when up made it ready: its checks' own refusals
// come before).
func lookedMark(short string) string { return filepath.Join(stateDir(), "looked", short) }

// markLooked records now as the last look at pod short's refusals.
func markLooked(short string, now time.Time) {
	mark := lookedMark(short)
	if err := os.MkdirAll(filepath.Dir(mark), 0o700); err == nil {
		os.WriteFile(mark, []byte(now.UTC().Format(time.RFC3339Nano)+"\n"), 0o600)
	}
}

// Refusals reads pod short's audit for what its proxy refused since the
// last look (or since the pod was made, created, when up recorded none),
// and records this look in devaipod's state folder.
func Refusals(ctx context.Context, eng Engine, short string, created time.Time) (Refused, error) {
	mark := lookedMark(short)
	since := created
	if data, err := os.ReadFile(mark); err == nil {
		if t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(data))); err == nil && t.After(since) {
			since = t
		}
	}
	now := time.Now()
	var records bytes.Buffer // AuditLog holds them all anyway
	if err := AuditLog(ctx, eng, short, false, &records); err != nil {
		return Refused{}, err
	}
	markLooked(short, now)
	return refusedSince(&records, since), nil
}

// TopHosts are the hosts of s, most refused first, at most n.
func (s Refused) TopHosts(n int) []string {
	hosts := slices.Collect(maps.Keys(s.Hosts))
	slices.SortFunc(hosts, func(a, b string) int {
		if d := s.Hosts[b] - s.Hosts[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return hosts[:min(n, len(hosts))]
}
