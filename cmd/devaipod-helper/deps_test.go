package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestNoPodmanDependency keeps the helper small and static: it runs inside
// every container and must never link the podman bindings (nor cobra, the
// CLI's framework). Libraries made for its jobs (the proxy's goproxy) are
// fine.
func TestNoPodmanDependency(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info in the test binary")
	}
	for _, d := range bi.Deps {
		for _, banned := range []string{"github.com/containers/", "go.podman.io/", "github.com/spf13/cobra"} {
			if strings.HasPrefix(d.Path, banned) {
				t.Errorf("devaipod-helper links %s %s", d.Path, d.Version)
			}
		}
	}
}
