package devcontainer

import (
	"fmt"
	"strings"
)

// Error is one problem in a devcontainer.json, with its position:
//
//	FILE:LINE: key "build.dockerfile": must be a string, not a number
//	FILE:LINE:COLUMN: syntax error: invalid character 'x' at start of value
type Error struct {
	File   string
	Line   int    // 0 when unknown
	Column int    // set for syntax errors only
	Key    string // dotted key with [index] for arrays; "" for syntax errors
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.File == "" {
		b.WriteString("devcontainer.json")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": key %q", e.Key)
	}
	fmt.Fprintf(&b, ": %s", e.Msg)
	return b.String()
}

// Errors is every problem found in one file, in the order of the file.
// Parse reports them all at once so that one run shows everything to fix.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find the *Error values.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// asError returns nil, the single *Error, or the list.
func (es Errors) asError() error {
	switch len(es) {
	case 0:
		return nil
	case 1:
		return es[0]
	}
	return es
}
