// Package cmdline is the command-line plumbing of devaipod's in-container
// binaries, devaipod-helper and devaipod-gator: how a command's flags are
// parsed and checked, how a parse error becomes an exit code, and how log
// lines look. It exists so that both binaries talk to their users (and to
// devaipod, which reads their stderr into its errors) in the same way
// without one linking the other's dependencies.
package cmdline

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
)

// ParseFlags parses args with fs, refuses arguments left after the flags
// and asks check (if not nil) what else is wrong ("" when nothing). The
// flag package's messages, and -h's usage, go to output; a problem found
// here is printed there as PREFIX PROBLEM (prefix is e.g.
// "devaipod-helper: proxy: ") and returned. Pass the error to ExitCode.
func ParseFlags(fs *flag.FlagSet, args []string, output io.Writer, prefix string, check func() string) error {
	fs.SetOutput(output)
	if err := fs.Parse(args); err != nil {
		return err
	}
	problem := ""
	if fs.NArg() > 0 {
		problem = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	} else if check != nil {
		problem = check()
	}
	if problem != "" {
		fmt.Fprintf(output, "%s%s\n", prefix, problem)
		return errors.New(problem)
	}
	return nil
}

// ExitCode maps a FlagSet.Parse (or ParseFlags) error to an exit code: -h
// is a successful request for help (0), anything else a usage error (2, as
// with the flag package); the message and the usage are already printed.
func ExitCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// Valid turns a parser into a ListFlag check: a value is accepted when it
// parses.
func Valid[T any](parse func(string) (T, error)) func(string) error {
	return func(s string) error {
		_, err := parse(s)
		return err
	}
}

// ListFlag is a repeatable flag: each value is appended to *values once
// check accepts it (nil: any value but the empty one), so that a bad value
// is reported as the flag's, at parse time.
func ListFlag(values *[]string, check func(string) error) flag.Value {
	return listFlag{values, check}
}

type listFlag struct {
	values *[]string
	check  func(string) error
}

func (f listFlag) String() string { return "" }

func (f listFlag) Set(s string) error {
	switch {
	case f.check != nil:
		if err := f.check(s); err != nil {
			return err
		}
	case s == "":
		return errors.New("empty value")
	}
	*f.values = append(*f.values, s)
	return nil
}

// LineHandler is a slog.Handler that writes one "PREFIX[level: ]message
// k=v..." line per record, in the style of the binaries' other messages
// (no time: podman's log adds one). Values with spaces, quotes or "=" are
// quoted.
type LineHandler struct {
	mu     *sync.Mutex // shared with the handlers WithAttrs makes
	w      io.Writer
	prefix string
	level  slog.Level
	attrs  []slog.Attr
}

// NewLineHandler returns a handler that writes records at level or above
// to w, each line starting with prefix.
func NewLineHandler(w io.Writer, prefix string, level slog.Level) *LineHandler {
	return &LineHandler{mu: &sync.Mutex{}, w: w, prefix: prefix, level: level}
}

// Enabled reports whether l is at the handler's level or above.
func (h *LineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

// Handle writes r as one line.
func (h *LineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(h.prefix)
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	case r.Level < slog.LevelInfo:
		b.WriteString("debug: ")
	}
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		v := a.Value.Resolve().String()
		if v == "" || strings.ContainsAny(v, " \t\n\"=") {
			v = strconv.Quote(v)
		}
		b.WriteString(" " + a.Key + "=" + v)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteString("\n")
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

// WithAttrs returns a handler that adds attrs to every line.
func (h *LineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
	h2.attrs = append(h.attrs[:len(h.attrs):len(h.attrs)], attrs...)
	return &h2
}

// WithGroup returns h: the lines have no groups, a group's attributes are
// written by their own keys.
func (h *LineHandler) WithGroup(string) slog.Handler { return h }
