package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestDependencies keeps the gator's binary to its job: it runs in a FROM
// scratch sidecar and needs the MCP SDK, a GitHub client and go-git, never
// the podman bindings nor cobra (the CLI's). It must also link the
// fallback CA roots: the image has no certificates of its own.
func TestDependencies(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info in the test binary")
	}
	linked := map[string]bool{}
	for _, d := range bi.Deps {
		for _, banned := range []string{"github.com/containers/", "go.podman.io/", "github.com/spf13/cobra"} {
			if strings.HasPrefix(d.Path, banned) {
				t.Errorf("devaipod-gator links %s %s", d.Path, d.Version)
			}
		}
		linked[d.Path] = true
	}
	if !linked["golang.org/x/crypto/x509roots/fallback"] {
		t.Error("devaipod-gator does not link golang.org/x/crypto/x509roots/fallback: HTTPS to GitHub would fail in the FROM scratch image")
	}
}
