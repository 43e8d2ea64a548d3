package pod

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestStaleTempDirs: a command's folder is a leftover once its command is
// gone (its lock free), never while it runs; a folder without a lock (a
// devaipod's from before the locks, or one made this instant) only once
// it is old; another name, or a file, never.
func TestStaleTempDirs(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	running, removeRunning, err := MakeTempDir(CloneDirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	killed, err := os.MkdirTemp("", ServiceDirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	// As a killed command's: the lock file there, its lock gone.
	if f, err := lockedFileIn(killed); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	unlockedNew := filepath.Join(os.TempDir(), CloneDirPrefix+"new")
	unlockedOld := filepath.Join(os.TempDir(), CloneDirPrefix+"old")
	other := filepath.Join(os.TempDir(), "devaipod-other-1")
	for _, dir := range []string{unlockedNew, unlockedOld, other} {
		os.Mkdir(dir, 0o700)
	}
	old := time.Now().Add(-2 * unlockedTempAge)
	os.Chtimes(unlockedOld, old, old)
	os.Chtimes(other, old, old)
	os.WriteFile(filepath.Join(os.TempDir(), CloneDirPrefix+"file"), nil, 0o600)

	stale := StaleTempDirs()
	slices.Sort(stale)
	want := []string{killed, unlockedOld}
	slices.Sort(want)
	if !slices.Equal(stale, want) {
		t.Errorf("StaleTempDirs = %v; want %v", stale, want)
	}
	if gone, err := RemoveTempDirs(stale); err != nil || !slices.Equal(gone, stale) {
		t.Errorf("RemoveTempDirs = %v, %v", gone, err)
	}
	for _, dir := range want {
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(running, tempLockName)); err != nil {
		t.Errorf("the running command's folder lost its lock: %v", err)
	}
	if err := removeRunning(); err != nil {
		t.Error(err)
	}
	if _, err := os.Lstat(running); !os.IsNotExist(err) {
		t.Errorf("remove left %s: %v", running, err)
	}
}
