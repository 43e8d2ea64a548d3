package pod

import (
	"fmt"
	"os"
	"testing"
)

// TestMain keeps devaipod's state folder (grants, the marks of unfinished
// ups) of every test out of the home directory of whoever runs them.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "devaipod-pod-test-state-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_STATE_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
