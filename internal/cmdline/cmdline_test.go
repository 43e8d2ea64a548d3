package cmdline

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		problem  string // what check says
		wantErr  string // substring; empty means success
		wantOut  string // substring of the output
		wantCode int
	}{
		{name: "fine", args: []string{"-n", "3"}},
		{name: "help", args: []string{"-h"}, wantErr: flag.ErrHelp.Error(), wantOut: "-n int", wantCode: 0},
		{name: "bad flag", args: []string{"-x"}, wantErr: "not defined: -x", wantOut: "-x", wantCode: 2},
		{name: "argument", args: []string{"-n", "3", "extra"}, problem: "not asked",
			wantErr: `unexpected argument "extra"`, wantOut: `prog: cmd: unexpected argument "extra"` + "\n", wantCode: 2},
		{name: "check", args: nil, problem: "missing -n", wantErr: "missing -n", wantOut: "prog: cmd: missing -n\n", wantCode: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
			n := fs.Int("n", 0, "a number")
			var out bytes.Buffer
			err := ParseFlags(fs, tt.args, &out, "prog: cmd: ", func() string { return tt.problem })
			if tt.wantErr == "" {
				if err != nil || *n != 3 || out.Len() != 0 {
					t.Fatalf("ParseFlags(%q) = %v, n %d, output %q; want nil, 3 and no output", tt.args, err, *n, out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(out.String(), tt.wantOut) {
				t.Fatalf("ParseFlags(%q) = %v, output %q; want %q and %q", tt.args, err, out.String(), tt.wantErr, tt.wantOut)
			}
			if got := ExitCode(err); got != tt.wantCode {
				t.Errorf("ExitCode(%v) = %d; want %d", err, got, tt.wantCode)
			}
		})
	}
	fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
	if err := ParseFlags(fs, nil, new(bytes.Buffer), "p: ", nil); err != nil {
		t.Errorf("ParseFlags without a check: %v", err)
	}
}

func TestExitCode(t *testing.T) {
	if got := ExitCode(flag.ErrHelp); got != 0 {
		t.Errorf("ExitCode(ErrHelp) = %d; want 0", got)
	}
	if got := ExitCode(errors.New("flag provided but not defined: -x")); got != 2 {
		t.Errorf("ExitCode(usage error) = %d; want 2", got)
	}
}

func TestLineHandler(t *testing.T) {
	var out bytes.Buffer
	logger := slog.New(NewLineHandler(&out, "prog: sub: ", slog.LevelInfo))
	logger.Debug("hidden")
	logger.Info("listening on unix:/run/x.sock", "pod", "demo", "scopes", "a b", "empty", "")
	logger.With("conn", 7).Warn("slow", "q", `say "hi"`, "eq", "a=b")
	logger.WithGroup("g").Error("failed", "n", 1)
	want := `prog: sub: listening on unix:/run/x.sock pod=demo scopes="a b" empty=""
prog: sub: warning: slow conn=7 q="say \"hi\"" eq="a=b"
prog: sub: error: failed n=1
`
	if out.String() != want {
		t.Errorf("lines:\n%s\nwant:\n%s", out.String(), want)
	}

	out.Reset()
	slog.New(NewLineHandler(&out, "p: ", slog.LevelDebug)).Debug("shown", "k", "v")
	if out.String() != "p: debug: shown k=v\n" {
		t.Errorf("debug line %q", out.String())
	}
}

func TestListFlag(t *testing.T) {
	var anyValues, even []string
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(ListFlag(&anyValues, nil), "any", "")
	fs.Var(ListFlag(&even, func(s string) error {
		if len(s)%2 != 0 {
			return errors.New("odd")
		}
		return nil
	}), "even", "")
	if err := fs.Parse([]string{"--any", "a", "--even", "bb", "--any", "c", "--even", ""}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(anyValues, []string{"a", "c"}) || !slices.Equal(even, []string{"bb", ""}) {
		t.Errorf("any %q, even %q", anyValues, even)
	}
	for _, args := range [][]string{{"--any", ""}, {"--even", "odd"}} {
		if err := fs.Parse(args); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
