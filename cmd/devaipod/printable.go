package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// What the agent writes (hosts it asked for, gator arguments, its log
// lines) is shown to a person; it must not drive their terminal (escape
// sequences can rewrite the screen, set the title, even answer back) nor
// reorder what they read (Unicode's bidirectional controls).

// hidden tells the runes that printable escapes: C0 controls but tab, DEL,
// C1 controls, the bidirectional embeddings, overrides and isolates, and
// the zero-width characters.
func hidden(r rune) bool {
	return (r < 0x20 && r != '\t') || (r >= 0x7f && r < 0xa0) ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f || r == 0x061c ||
		(r >= 0x200b && r <= 0x200d) || r == 0x2060 || r == 0xfeff // zero-width: "main\u200b" looks like main
}

// printable returns s with the hidden runes and invalid UTF-8 shown as Go
// escapes (\x1b, \u202e), so that a person sees them instead of obeying.
func printable(s string) string {
	if !strings.ContainsFunc(s, hidden) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && hidden(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case hidden(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// jsonSafe escapes the hidden runes that JSON allows raw in strings (DEL,
// C1, the bidirectional controls) as \uXXXX: the line means the same to a
// JSON reader and shows nothing hidden on a terminal. C0 controls are
// escaped by every JSON encoder already.
func jsonSafe(line string) string {
	if !strings.ContainsFunc(line, hidden) {
		return line
	}
	var b strings.Builder
	for _, r := range line {
		if hidden(r) && r >= 0x20 {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// printableWriter passes its input on line by line, each made printable
// (newlines kept).
type printableWriter struct {
	w   io.Writer
	buf []byte
}

func (p *printableWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		if _, err := io.WriteString(p.w, printable(string(p.buf[:i]))+"\n"); err != nil {
			return len(b), err
		}
		p.buf = p.buf[i+1:]
	}
}

// flush writes what is left of a last line without a newline.
func (p *printableWriter) flush() error {
	if len(p.buf) == 0 {
		return nil
	}
	_, err := io.WriteString(p.w, printable(string(p.buf)))
	p.buf = nil
	return err
}
