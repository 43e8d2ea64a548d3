package main

import (
	"runtime/debug"
	"testing"
)

// TestNoDependencies keeps the helper free of modules outside the standard
// library: it runs inside every container, must stay small and static, and
// must never link the podman bindings.
func TestNoDependencies(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info in the test binary")
	}
	for _, d := range bi.Deps {
		t.Errorf("devaipod-helper links module %s %s; it must use only the standard library", d.Path, d.Version)
	}
}
