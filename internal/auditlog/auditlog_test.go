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
	l, err := Open(path, 100)
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

func TestReopenAppendsAndCountsWhatIsThere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	os.WriteFile(path, []byte(strings.Repeat("x", 95)+"\n"), 0o644)
	l, err := Open(path, 100)
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
	l, _ := Open(path, 10)
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
	w, closeAll, err := OpenAll([]string{"-", filepath.Join(dir, "a.log")}, &stdout, DefaultMaxBytes)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("rec\n"))
	closeAll()
	if got, _ := os.ReadFile(filepath.Join(dir, "a.log")); string(got) != "rec\n" || stdout.String() != "rec\n" {
		t.Errorf("file %q, stdout %q", got, stdout.String())
	}
	if _, err := Open(filepath.Join(dir, "b.log"), 0); err == nil {
		t.Error("a zero bound was accepted")
	}
	if _, _, err := OpenAll([]string{filepath.Join(dir, "a.log", "x")}, &stdout, 10); err == nil {
		t.Error("a path under a file was opened")
	}
}
