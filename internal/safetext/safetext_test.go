package safetext

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"api.example.test":                        "api.example.test",
		"evil\x1b]0;pwned\x07.test":               `evil\x1b]0;pwned\x07.test`,
		"a\rb\x7fc\u009bd":                        `a\x0db\x7fc\u009bd`,
		"agent/\u202eexe.txt":                     `agent/\u202eexe.txt`,
		"main\u200b, \ufeffx":                     `main\u200b, \ufeffx`,
		"tab\tok, ünïcödé ok":                     "tab\tok, ünïcödé ok",
		"bad \xff utf-8, real \uFFFD ok":          `bad \xff utf-8, real ` + "\uFFFD" + ` ok`,
		"main\u00ad\u034f\u3164\ufe0f\u2028":      `main\u00ad\u034f\u3164\ufe0f\u2028`,
		"tag\U000e0041":                           `tag\U000e0041`,
		"vs\U000e0100\U000e01ef\u180b\u180f":      `vs\U000e0100\U000e01ef\u180b\u180f`,
		"fmt\u206a\u206f\ufff9\ufffb\u17b4\u17b5": `fmt\u206a\u206f\ufff9\ufffb\u17b4\u17b5`,
		"music\U0001d173\U0001d17a\U0001bca0":     `music\U0001d173\U0001d17a\U0001bca0`,
		"main\u3000\u00a0\u2800\u202f":            `main\u3000\u00a0\u2800\u202f`,
		"emoji 🚀 ok, ĳ ok, ＡＢ ok":                 "emoji 🚀 ok, ĳ ok, ＡＢ ok",
	} {
		if got := Printable(in); got != want {
			t.Errorf("printable(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestCell(t *testing.T) {
	if got, want := Cell("tool\tallow\x1b"), `tool\tallow\x1b`; got != want {
		t.Errorf("Cell = %q; want %q", got, want)
	}
}

func TestJSONSafe(t *testing.T) {
	raw, _ := json.MarshalIndent(map[string]string{"host": "a\u009b31m\u202eb\x7f\U000e0041"}, "", "\t")
	got := JSONSafe(string(raw))
	var back map[string]string
	if err := json.Unmarshal([]byte(got), &back); err != nil || back["host"] != "a\u009b31m\u202eb\x7f\U000e0041" {
		t.Errorf("jsonSafe(%s) = %s: not the same JSON (%v)", raw, got, err)
	}
	if strings.ContainsFunc(got, hiddenBesideNewline) {
		t.Errorf("jsonSafe left a hidden rune: %q", got)
	}
}

func TestWriter(t *testing.T) {
	var b strings.Builder
	w := &Writer{W: &b}
	w.Write([]byte("one\x1b[2J\ntw"))
	w.Write([]byte("o\n\x1b]0;x"))
	w.Flush()
	if want := "one\\x1b[2J\ntwo\n\\x1b]0;x"; b.String() != want {
		t.Errorf("got %q; want %q", b.String(), want)
	}
}

func TestLines(t *testing.T) {
	if got, want := Lines("exit 1:\nred \x1b[31m\r\n\u202eok"), "exit 1:\nred \\x1b[31m\\x0d\n\\u202eok"; got != want {
		t.Errorf("Lines = %q; want %q", got, want)
	}
}

// TestWriterLongLine: a line without end goes out in pieces of at most
// MaxLine bytes, cut between runes, decorated once.
func TestWriterLongLine(t *testing.T) {
	var b strings.Builder
	marks := 0
	w := &Writer{W: &b, Decorate: func(s string) string { marks++; return "[" + s }}
	long := "+" + strings.Repeat("é", MaxLine) // two bytes a rune
	for i := 0; i < len(long); i += 1000 {
		w.Write([]byte(long[i:min(i+1000, len(long))]))
		if len(w.buf) > MaxLine {
			t.Fatalf("holds %d bytes", len(w.buf))
		}
	}
	w.Write([]byte("\nnext\n"))
	if want := "[" + long + "\n[next\n"; b.String() != want || marks != 2 {
		t.Errorf("got %d bytes, decorated %d times; want %d bytes, 2 times", b.Len(), marks, len(want))
	}
}

// TestWriterConcurrent: writers at once (run with -race) lose no line.
func TestWriterConcurrent(t *testing.T) {
	var b strings.Builder
	w := &Writer{W: &b}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				w.Write([]byte("line\n"))
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "line\n"); n != 800 {
		t.Errorf("%d lines of 800", n)
	}
}

// TestJSONSafeNotFromAnEncoder: controls and invalid UTF-8 that no JSON
// encoder would have left raw are escaped too.
func TestJSONSafeNotFromAnEncoder(t *testing.T) {
	got := JSONSafe("{\"a\": \"\x1b]0;t\x07 \xff\"}\n")
	if want := `{"a": "\u001b]0;t\u0007 \ufffd"}` + "\n"; got != want {
		t.Errorf("got %q; want %q", got, want)
	}
}
