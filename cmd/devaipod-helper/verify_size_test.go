package main

import (
	"strings"
	"testing"
)

// TestVerifyLimitSizes: the verify battery reads the pod's limits with the
// one size parser (internal/size), as the config and runArgs do: what
// podman takes is taken; zero, negatives and overflow are not.
func TestVerifyLimitSizes(t *testing.T) {
	f := verifyLimitFlag{limits: map[string]uint64{}}
	for in, want := range map[string]uint64{"memory=1.5g": 3 << 29, "tmp=1GiB": 1 << 30, "memory=1t": 1 << 40, "pids=64": 64} {
		if err := f.Set(in); err != nil {
			t.Errorf("--limit %s: %v", in, err)
			continue
		}
		kind, _, _ := strings.Cut(in, "=")
		if got := f.limits[kind]; got != want {
			t.Errorf("--limit %s = %d; want %d", in, got, want)
		}
	}
	for _, in := range []string{"memory=0", "tmp=-1g", "memory=99999999999g", "memory=lots", "pids=0"} {
		if err := f.Set(in); err == nil {
			t.Errorf("--limit %s accepted", in)
		}
	}
}
