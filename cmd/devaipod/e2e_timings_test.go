package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestE2EUpTimings: up --timings says where the time went, step by step,
// in text and in JSON, and the steps add up to the whole.
func TestE2EUpTimings(t *testing.T) {
	e2e(t)
	name := uniqueName("e2e-time")
	cleanup(t, name)
	r := mustDevaipod(t, nil, "--config", standInConfig(t, ""), "up", fixtureRepo(t), "--name", name, "--timings", "-o", "json")
	var res struct {
		Seconds float64
		Timings []struct {
			Step string
			MS   int64
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("up -o json: %v\n%s", err, r)
	}
	var sum int64
	var steps []string
	for _, s := range res.Timings {
		sum += s.MS
		steps = append(steps, s.Step)
	}
	joined := strings.Join(steps, "\n")
	for _, want := range []string{"cloning", "creating pod", "starting pod", "waiting for the agent's server"} {
		if !strings.Contains(joined, want) {
			t.Errorf("timings lack %q: %v", want, steps)
		}
	}
	if total := int64(res.Seconds * 1000); sum > total || sum < total*8/10 {
		t.Errorf("the steps add up to %d ms of %d", sum, total)
	}
	mustDevaipod(t, nil, "delete", name)
	text := mustDevaipod(t, nil, "--config", standInConfig(t, ""), "up", fixtureRepo(t), "--name", name, "--timings")
	if !strings.Contains(text.stdout, "ms  step") && !strings.Contains(text.stdout, "step") || !strings.Contains(text.stdout, "starting pod") {
		t.Errorf("up --timings text:\n%s", text.stdout)
	}
}
