package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSessionPids(t *testing.T) {
	proc := t.TempDir()
	for pid, files := range map[string]map[string]string{
		"10":   {"environ": "A=1\x00DEVAIPOD_SESSION=abc\x00", "status": "Name:\tsh\nSigIgn:\t0000000000000001\n"},
		"11":   {"environ": "DEVAIPOD_SESSION=abcd\x00", "status": "SigIgn:\t0000000000000000\n"},
		"12":   {"environ": "X=DEVAIPOD_SESSION=abc\x00", "status": "SigIgn:\t0000000000000000\n"},
		"13":   {"environ": "DEVAIPOD_SESSION=abc", "status": "SigIgn:\t0000000000000004\n"},
		"self": {"environ": "DEVAIPOD_SESSION=abc\x00"},
	} {
		for name, content := range files {
			os.MkdirAll(filepath.Join(proc, pid), 0o755)
			os.WriteFile(filepath.Join(proc, pid, name), []byte(content), 0o644)
		}
	}
	if got := sessionPids(proc, "DEVAIPOD_SESSION=abc"); !slices.Equal(got, []int{10, 13}) {
		t.Errorf("sessionPids = %v; want [10 13]", got)
	}
	if !ignoresHangup(proc, 10) || ignoresHangup(proc, 13) || ignoresHangup(proc, 99) {
		t.Error("ignoresHangup reads SigIgn's bit 0")
	}
}
