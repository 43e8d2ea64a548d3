package pod

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRefusedSince(t *testing.T) {
	since := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	log := strings.Join([]string{
		`{"time":"2026-12-07T09:59:59Z","event":"request","decision":"deny","host":"before.test"}`,
		`{"time":"2026-12-07T10:00:01Z","event":"request","decision":"deny","host":"opencode.ai"}`,
		`{"time":"2026-12-07T10:00:02Z","event":"request","decision":"deny","host":"opencode.ai"}`,
		`{"time":"2026-12-07T10:00:02Z","event":"request","decision":"allow","host":"api.openai.com"}`,
		`{"time":"2026-12-07T10:00:03Z","event":"request","decision":"deny","host":"verify.devaipod.invalid"}`,
		`{"time":"2026-12-07T10:00:04Z","event":"dropped","decision":"deny","count":40}`,
		`{"time":"2026-12-07T10:00:05Z","kind":"gator","decision":"deny"}`,
		`devaipod proxy: listening`,
		`{"time":"2026-12-07T10:00:06Z","event":"request","decision":"deny","host":"evil.test"}`,
	}, "\n")
	got := refusedSince(strings.NewReader(log), since)
	if got.Count != 43 || got.Hosts["opencode.ai"] != 2 || got.Hosts["evil.test"] != 1 || len(got.Hosts) != 2 {
		t.Errorf("refusedSince = %+v", got)
	}
	if top := got.TopHosts(1); !slices.Equal(top, []string{"opencode.ai"}) {
		t.Errorf("TopHosts(1) = %v", top)
	}
}
