package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// asHelperEnv makes the test binary behave as devaipod-helper. The init
// tests need a separate process: init owns its signals, reaps every child
// and exits.
const asHelperEnv = "DEVAIPOD_HELPER_TEST_AS_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(asHelperEnv) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestRun(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string // substring
		wantStderr string // substring
	}{
		{name: "version", args: []string{"version"}, wantCode: 0, wantStdout: "dev\n"},
		{name: "version with argument", args: []string{"version", "x"}, wantCode: 2, wantStderr: "no arguments"},
		{name: "no command", args: nil, wantCode: 2, wantStderr: "Usage: devaipod-helper COMMAND"},
		{name: "unknown command", args: []string{"frob"}, wantCode: 2, wantStderr: `unknown command "frob"`},
		// The gator is devaipod-gator's now: the helper must not link it.
		{name: "gator moved out", args: []string{"gator", "-h"}, wantCode: 2, wantStderr: `unknown command "gator"`},
		{name: "help gator", args: []string{"help", "gator"}, wantCode: 2, wantStderr: `unknown command "gator"`},
		{name: "help", args: []string{"help"}, wantCode: 0, wantStdout: "wait-http"},
		{name: "-h", args: []string{"-h"}, wantCode: 0, wantStdout: "Usage: devaipod-helper COMMAND"},
		{name: "help init", args: []string{"help", "init"}, wantCode: 0, wantStdout: "-expose unix:PATH=tcp:HOST:PORT"},
		{name: "help wait-http", args: []string{"help", "wait-http"}, wantCode: 0, wantStdout: "-timeout"},
		{name: "help version", args: []string{"help", "version"}, wantCode: 0, wantStdout: "Usage: devaipod-helper version"},
		{name: "help unknown", args: []string{"help", "frob"}, wantCode: 2, wantStderr: `unknown command "frob"`},
		{name: "init -h", args: []string{"init", "-h"}, wantCode: 0, wantStderr: "-forward tcp:HOST:PORT=unix:PATH"},
		{name: "wait-http -h", args: []string{"wait-http", "-h"}, wantCode: 0, wantStderr: "-status any"},
		{name: "version -h", args: []string{"version", "-h"}, wantCode: 0, wantStderr: "Usage: devaipod-helper version"},
		{name: "init bad flag", args: []string{"init", "--expose", "nonsense"}, wantCode: 2,
			wantStderr: `invalid value "nonsense" for flag -expose: missing "=", want unix:PATH=tcp:HOST:PORT`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("run(%q) = %d; want %d (stderr: %s)", tt.args, code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("run(%q) stdout = %q; want it to contain %q", tt.args, stdout.String(), tt.wantStdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("run(%q) stderr = %q; want it to contain %q", tt.args, stderr.String(), tt.wantStderr)
			}
		})
	}
}
