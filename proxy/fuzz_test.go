package proxy

import (
	"strings"
	"testing"
	"time"
)

// FuzzKeepRecord: whatever text the agent puts in a request record (its
// method, host, detail), KeepRecord's look at the bytes decides as the
// record's fields do: kept unless an allowed request that ended normally
// and that no person decided.
func FuzzKeepRecord(f *testing.F) {
	f.Add("GET", "api.example.test", "", "api.example.test", "", uint8(0), uint8(0))
	f.Add("GET", `x","reason":"denied`, `"decided_by":"me"`, `ask:x","rule":"ask:`, "", uint8(0), uint8(0))
	f.Add("CONNECT", "evil.test", "no rule", "", "u@h", uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, method, host, detail, rule, decidedBy string, decision, reason uint8) {
		r := Record{Event: EventRequest, Method: method, Host: host, Port: 443, Detail: detail, Rule: rule, DecidedBy: decidedBy,
			Decision: []string{DecisionAllow, DecisionDeny, DecisionAsk}[decision%3],
			Reason:   []string{"", ReasonNotAllowed, ReasonUpstreamError}[reason%3]}
		want := r.Decision != DecisionAllow || r.Reason != "" || r.DecidedBy != "" || strings.HasPrefix(r.Rule, "ask:")
		line := appendRequestLine(nil, time.Now(), "pod", &r)
		if got := KeepRecord(line); got != want {
			t.Errorf("KeepRecord(%s) = %v, want %v", line, got, want)
		}
	})
}
