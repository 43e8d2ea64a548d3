package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestDependencies keeps the sidecars' server libraries out of the CLI: it
// needs only the gator's policy (package gator/policy: scopes to check at
// up, audit records to print) and the proxy's records (proxy/record), while
// the MCP SDK, go-github and go-git belong to devaipod-gator and goproxy to
// the helper, each in its own container. Importing package gator or proxy
// from here would link them again.
//
// go test gives the test binary the build info of the package under test
// without its test files (a module only a _test.go file imports is not
// listed), so this is the list of modules bin/devaipod links.
func TestDependencies(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info in the test binary")
	}
	if len(bi.Deps) == 0 {
		t.Fatal("the build info lists no modules; this test would check nothing")
	}
	for _, d := range bi.Deps {
		for banned, owner := range map[string]string{"github.com/modelcontextprotocol/": "devaipod-gator", "github.com/google/go-github": "devaipod-gator",
			"github.com/go-git/": "devaipod-gator", "github.com/elazarl/goproxy": "devaipod-helper"} {
			if strings.HasPrefix(d.Path, banned) {
				t.Errorf("devaipod links %s %s; only %s should", d.Path, d.Version, owner)
			}
		}
	}
}
