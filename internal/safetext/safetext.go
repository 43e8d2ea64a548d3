// Package safetext makes text that the agent wrote safe to show a person.
package safetext

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// What the agent writes (hosts it asked for, gator arguments, its log
// lines) is shown to a person; it must not drive their terminal (escape
// sequences can rewrite the screen, set the title, even answer back) nor
// reorder what they read (Unicode's bidirectional controls).

// Hidden tells the runes that Printable escapes: C0 controls but tab, DEL,
// C1 controls, the line and paragraph separators, and, by Unicode's own
// tables rather than a list, every format character (Cf: the
// bidirectional embeddings, overrides and isolates, zero-width ones, the
// soft hyphen, invisible operators, tags), every space but the ASCII one
// (Zs), every variation selector and default-ignorable code point
// (fillers), and the blank braille pattern: what drives a terminal,
// reorders text, or shows as nothing or as a plain space ("main\u200b",
// "main\u00ad" and "main\u3000" read as main; the supplementary variation
// selectors alone can carry a byte each of text that shows as nothing).
func Hidden(r rune) bool {
	switch {
	case (r < 0x20 && r != '\t') || (r >= 0x7f && r < 0xa0):
		return true
	case r == 0x2028, r == 0x2029, r == 0x2800:
		return true
	case r >= 0x80 && unicode.In(r, unicode.Cf, unicode.Zs, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point):
		return true
	}
	return false
}

// Printable returns s with the hidden runes and invalid UTF-8 shown as Go
// escapes (\x1b, \u202e), so that a person sees them instead of obeying.
func Printable(s string) string {
	if !strings.ContainsFunc(s, Hidden) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && Hidden(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case Hidden(r) && r > 0xffff:
			fmt.Fprintf(&b, `\U%08x`, r)
		case Hidden(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Cell is Printable for a cell of a table that a tabwriter lays out: a tab
// too is escaped (\t), since there it would start a column of the agent's
// making.
func Cell(s string) string {
	return strings.ReplaceAll(Printable(s), "\t", `\t`)
}

// JSONSafe escapes the hidden runes in JSON text as \uXXXX (a surrogate
// pair past U+FFFF), newlines and tabs aside, and invalid UTF-8 as
// \ufffd: the text means the same to a JSON reader (a JSON encoder
// escapes controls in strings, and leaves none outside them) and shows
// nothing hidden on a terminal, even when what made it was not a JSON
// encoder.
func JSONSafe(text string) string {
	if !strings.ContainsFunc(text, hiddenBesideNewline) && utf8.ValidString(text) {
		return text
	}
	var b strings.Builder
	for i, r := range text {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(text[i:], "\uFFFD"):
			b.WriteString(`\ufffd`)
		case hiddenBesideNewline(r) && r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		case hiddenBesideNewline(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// hiddenBesideNewline is Hidden for text of several lines.
func hiddenBesideNewline(r rune) bool { return r != '\n' && Hidden(r) }

// Lines makes each line of s printable, keeping the newlines: for a
// message of several lines (an error with a command's output).
func Lines(s string) string {
	if !strings.ContainsFunc(s, hiddenBesideNewline) && utf8.ValidString(s) {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = Printable(l)
	}
	return strings.Join(lines, "\n")
}

// MaxLine is the most of a line a Writer holds back waiting for its end:
// a longer one goes out in pieces of MaxLine bytes, so that a line
// without end cannot fill the memory.
const MaxLine = 64 << 10

// Writer passes what is written to it on to W line by line, each line
// made printable (newlines kept) and then, if Decorate is set, given to
// it (to colour it). Flush writes the last line if it has no newline.
// Goroutines may write at once (the steps of a lifecycle command run in
// parallel).
type Writer struct {
	W        io.Writer
	Decorate func(line string) string
	// JSON: the lines are JSON, escaped with JSONSafe (so that they stay
	// the same JSON) rather than Printable.
	JSON bool

	mu   sync.Mutex
	buf  []byte
	cont bool // buf continues a line of which a piece went out
}

func (w *Writer) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		if err := w.emit(w.buf[:i], "\n"); err != nil {
			return len(b), err
		}
		w.buf = w.buf[i+1:]
		w.cont = false
	}
	for len(w.buf) > MaxLine {
		// Cut at the start of a rune, so that a piece holds whole ones.
		cut := MaxLine
		for k := 0; k < utf8.UTFMax && cut > 0 && !utf8.RuneStart(w.buf[cut]); k++ {
			cut--
		}
		if err := w.emit(w.buf[:cut], ""); err != nil {
			return len(b), err
		}
		w.buf = w.buf[cut:]
		w.cont = true
	}
	if len(w.buf) == 0 {
		w.buf = nil // let a large buffer go
	}
	return len(b), nil
}

func (w *Writer) emit(line []byte, end string) error {
	var s string
	if w.JSON {
		s = JSONSafe(string(line))
	} else {
		s = Printable(string(line))
	}
	if w.Decorate != nil && !w.cont {
		s = w.Decorate(s)
	}
	_, err := io.WriteString(w.W, s+end)
	return err
}

// Flush writes what is left of a last line without a newline.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) == 0 {
		return nil
	}
	err := w.emit(w.buf, "")
	w.buf, w.cont = nil, false
	return err
}
