package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestNoHeavyDependencies keeps the helper small and static. It is mounted
// into every container of every pod, the agent's included, and it is the
// egress proxy's process: its mapped pages are most of the proxy's memory,
// so every library it links is paid for by every pod. It must never link
// the podman bindings (nor cobra, the CLI's framework), nor the gator's MCP
// SDK, GitHub client and go-git, which belong to cmd/devaipod-gator.
// Libraries made for its jobs (the proxy's goproxy) are fine.
func TestNoHeavyDependencies(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info in the test binary")
	}
	banned := []string{
		"github.com/containers/", "go.podman.io/", "github.com/spf13/cobra",
		"github.com/modelcontextprotocol/", "github.com/google/go-github", "github.com/go-git/",
	}
	for _, d := range bi.Deps {
		for _, b := range banned {
			if strings.HasPrefix(d.Path, b) {
				t.Errorf("devaipod-helper links %s %s", d.Path, d.Version)
			}
		}
	}
}
