package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
)

func runCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, streams{in: strings.NewReader(""), out: &out, err: &errb})
	return out.String() + errb.String(), code
}

// TestVersionFlag: devaipod --version (and -v) prints what devaipod version
// prints.
func TestVersionFlag(t *testing.T) {
	want, code := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(want, "devaipod "+plan.Version+" (go") {
		t.Fatalf("version: %d %q", code, want)
	}
	for _, flag := range []string{"--version", "-v"} {
		if got, code := runCLI(t, flag); code != 0 || got != want {
			t.Errorf("%s: %d %q, want %q", flag, code, got, want)
		}
	}
	out, code := runCLI(t, "version", "-o", "json")
	var v map[string]string
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v["version"] != plan.Version {
		t.Errorf("version -o json: %d %v %q", code, err, out)
	}
}

func TestModuleVersion(t *testing.T) {
	if got := moduleVersion("v1.2.3"); got != "v1.2.3" {
		t.Errorf("a version set with -X: %q", got)
	}
	// A test binary's main module has no version ("(devel)"): "dev".
	if got := moduleVersion("dev"); got != "dev" && !strings.HasPrefix(got, "v") {
		t.Errorf("moduleVersion(dev) = %q", got)
	}
}

// TestStaleImageHint: up's refusal of an older helper image ends with the
// command that rebuilds it.
func TestStaleImageHint(t *testing.T) {
	var b bytes.Buffer
	printError(&b, fmt.Errorf("up: %w", &pod.StaleImageError{Image: "localhost/devaipod-helper:latest",
		ImageVersion: "v1.0.0", Version: "v1.1.0", Refuse: true}))
	want := "Error: up: the helper image localhost/devaipod-helper:latest is from devaipod v1.0.0 (older), this devaipod is v1.1.0\n" +
		"Hint: rebuild it with `make images` in devaipod's source tree at version v1.1.0, as the user who runs devaipod; `devaipod doctor` checks the images\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
