package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"api.example.test":               "api.example.test",
		"evil\x1b]0;pwned\x07.test":      `evil\x1b]0;pwned\x07.test`,
		"a\rb\x7fc\u009bd":               `a\x0db\x7fc\u009bd`,
		"agent/\u202eexe.txt":            `agent/\u202eexe.txt`,
		"main\u200b, \ufeffx":            `main\u200b, \ufeffx`,
		"tab\tok, ünïcödé ok":            "tab\tok, ünïcödé ok",
		"bad \xff utf-8, real \uFFFD ok": `bad \xff utf-8, real ` + "\uFFFD" + ` ok`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestJSONSafe(t *testing.T) {
	raw, _ := json.Marshal(map[string]string{"host": "a\u009b31m\u202eb\x7f"})
	got := jsonSafe(string(raw))
	var back map[string]string
	if err := json.Unmarshal([]byte(got), &back); err != nil || back["host"] != "a\u009b31m\u202eb\x7f" {
		t.Errorf("jsonSafe(%s) = %s: not the same JSON (%v)", raw, got, err)
	}
	if strings.ContainsFunc(got, hidden) {
		t.Errorf("jsonSafe left a hidden rune: %q", got)
	}
}

func TestPrintableWriter(t *testing.T) {
	var b strings.Builder
	w := &printableWriter{w: &b}
	w.Write([]byte("one\x1b[2J\ntw"))
	w.Write([]byte("o\n\x1b]0;x"))
	w.flush()
	if want := "one\\x1b[2J\ntwo\n\\x1b]0;x"; b.String() != want {
		t.Errorf("got %q; want %q", b.String(), want)
	}
}

func TestShownAsPath(t *testing.T) {
	if got := shownAs("path")("/home/me/d\u0430ta\x1b"); got != `/home/me/d\u0430ta\x1b` {
		t.Errorf("a path with a Cyrillic a and ESC shows as %q", got)
	}
	if got := shownAs("gator")("Fix the café"); got != "Fix the café" {
		t.Errorf("a gator title shows as %q", got)
	}
}
