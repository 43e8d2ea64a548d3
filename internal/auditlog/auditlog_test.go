package auditlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRotatesAtTheBoundKeepingOneFileAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "audit.log")
	l, err := Open(path, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 50 {
		rec := fmt.Sprintf("{\"n\":%03d}\n", i) // 10 bytes: 10 to a file
		want = append(want, rec)
		if _, err := l.Write([]byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	for _, p := range []string{path, path + ".1"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 100 {
			t.Errorf("%s is %d bytes, over the bound of 100", p, st.Size())
		}
	}
	if _, err := os.Stat(path + ".2"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a second file aside: %v", err)
	}
	var got bytes.Buffer
	if err := Copy(&got, path); err != nil {
		t.Fatal(err)
	}
	// The last 20 records, in order, and only whole ones.
	if got.String() != strings.Join(want[30:], "") {
		t.Errorf("Copy:\n%s\nwant the last 20 records:\n%s", got.String(), strings.Join(want[30:], ""))
	}
}

// TestKeepsWhatAFloodWouldPushOut: a few records that matter, then a
// flood of routine ones many times the bound: the ones that matter are
// still there, in order, before the latest routine ones; and the kept
// records are bounded too.
func TestKeepsWhatAFloodWouldPushOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	keep := func(line []byte) bool { return bytes.Contains(line, []byte(`"deny"`)) }
	l, err := Open(path, 1000, keep)
	if err != nil {
		t.Fatal(err)
	}
	write := func(rec string) {
		t.Helper()
		if _, err := l.Write([]byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	var denied []string
	for i := range 3 {
		denied = append(denied, fmt.Sprintf("{\"d\":\"deny\",\"n\":%d}\n", i))
		write(denied[i])
		write(fmt.Sprintf("{\"d\":\"allow\",\"n\":%d}\n", i))
	}
	for i := range 1000 { // 25 KiB: 25 times the bound
		write(fmt.Sprintf("{\"d\":\"allow\",\"n\":%04d}\n", i))
	}
	var got bytes.Buffer
	if err := Copy(&got, path); err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(got.String(), "\n")
	if len(lines) < 4 || strings.Join(lines[:3], "") != strings.Join(denied, "") {
		t.Errorf("Copy after the flood begins:\n%s\nwant the denials first:\n%s", strings.Join(lines[:min(5, len(lines))], ""), strings.Join(denied, ""))
	}
	if !strings.HasSuffix(got.String(), "{\"d\":\"allow\",\"n\":0999}\n") || strings.Contains(got.String(), "\"n\":0000}") {
		t.Errorf("Copy after the flood does not end with its latest records only:\n%s", got.String())
	}
	// A flood of kept records moves the recent ones along within their
	// bound, and never the first.
	for i := range 200 {
		write(fmt.Sprintf("{\"d\":\"deny\",\"n\":%04d}\n", i))
	}
	l.Close()
	got.Reset()
	if err := Copy(&got, path); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.String(), strings.Join(denied, "")) {
		t.Errorf("Copy after a flood of kept records does not begin with the first ones:\n%.200s", got.String())
	}
	for _, p := range []string{path + ".kept", path + ".kept.recent", path + ".kept.recent.1"} {
		if st, err := os.Stat(p); err != nil || st.Size() > 1000 {
			t.Errorf("%s: %v, or over the bound of 1000", p, err)
		}
	}
	for _, p := range []string{path + ".kept.1", path + ".kept.recent.2"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v; want none", p, err)
		}
	}
}

// TestAFailureToKeepLosesNoRecord: when the kept records cannot be
// written, the record that made the log rotate still goes in, and the
// write says what failed.
func TestAFailureToKeepLosesNoRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.Mkdir(path+".kept", 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, 30, func([]byte) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var werr error
	for i := range 10 {
		if _, err := l.Write([]byte(fmt.Sprintf("{\"n\":%05d}\n", i))); err != nil { // 12 bytes: 2 to a file
			werr = err
		}
	}
	if werr == nil {
		t.Error("no write said that keeping failed")
	}
	os.Remove(path + ".kept")
	var got bytes.Buffer
	if err := Copy(&got, path); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got.String(), "{\"n\":00009}\n") || strings.Count(got.String(), "\n") != 4 {
		t.Errorf("Copy: %q; want the last 4 records", got.String())
	}
}

func TestReopenAppendsAndCountsWhatIsThere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	os.WriteFile(path, []byte(strings.Repeat("x", 95)+"\n"), 0o644)
	l, err := Open(path, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Write([]byte("next\n"))
	l.Close()
	aside, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	if len(aside) != 96 || string(cur) != "next\n" {
		t.Errorf("after reopening a 96-byte file with a 100-byte bound: aside %d bytes, current %q", len(aside), cur)
	}
}

func TestARecordOverTheBoundGetsAFileOfItsOwn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, _ := Open(path, 10, nil)
	l.Write([]byte("small\n"))
	big := strings.Repeat("b", 30) + "\n"
	if n, err := l.Write([]byte(big)); err != nil || n != len(big) {
		t.Fatalf("Write: %d, %v", n, err)
	}
	l.Close()
	cur, _ := os.ReadFile(path)
	if string(cur) != big {
		t.Errorf("current file %q, want the big record alone", cur)
	}
}

func TestCopyWithoutALog(t *testing.T) {
	err := Copy(&bytes.Buffer{}, filepath.Join(t.TempDir(), "audit.log"))
	if !errors.Is(err, ErrNoLog) {
		t.Errorf("Copy of nothing: %v, want ErrNoLog", err)
	}
}

func TestOpenAll(t *testing.T) {
	dir := t.TempDir()
	var stdout bytes.Buffer
	w, closeAll, err := OpenAll([]string{"-", filepath.Join(dir, "a.log")}, &stdout, DefaultMaxBytes, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("rec\n"))
	closeAll()
	if got, _ := os.ReadFile(filepath.Join(dir, "a.log")); string(got) != "rec\n" || stdout.String() != "rec\n" {
		t.Errorf("file %q, stdout %q", got, stdout.String())
	}
	if _, err := Open(filepath.Join(dir, "b.log"), 0, nil); err == nil {
		t.Error("a zero bound was accepted")
	}
	if _, _, err := OpenAll([]string{filepath.Join(dir, "a.log", "x")}, &stdout, 10, nil); err == nil {
		t.Error("a path under a file was opened")
	}
}

// TestKeptRecordsStayInOrder: once the first kept file turns a piece
// down, a smaller piece kept later does not go in after all, ahead of
// what went to the recent file; nor after a restart.
func TestKeptRecordsStayInOrder(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	open := func() *File {
		l, err := Open(path, 1000, func([]byte) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := open()
	var want strings.Builder
	n := 0
	keepRound := func(l *File, lines int) {
		t.Helper()
		var b strings.Builder
		for range lines {
			fmt.Fprintf(&b, "{\"n\":%012d}\n", n) // 20 bytes
			n++
		}
		want.WriteString(b.String())
		if err := os.WriteFile(path+".1", []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		l.mu.Lock()
		err := l.keepFrom(path + ".1")
		l.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	keepRound(l, 30) // 600 bytes: the first file
	keepRound(l, 30) // 600 more do not fit: recent
	keepRound(l, 10) // 200 would fit in the first
	l.Close()
	l = open()
	keepRound(l, 5) // after a restart
	l.Close()
	os.Remove(path + ".1")
	os.WriteFile(path, nil, 0o644)
	var got bytes.Buffer
	if err := Copy(&got, path); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Errorf("kept records out of order:\n%s\nwant\n%s", got.String(), want.String())
	}
}
