package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestProgress: hack/progress.sh says what runs, that it still runs, how
// long it took, and keeps the command's exit status and output (in the log
// with --log).
func TestProgress(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log")
	cmd := exec.Command("../../hack/progress.sh", "--log", log, "a long step", "sh", "-c", "echo its output; sleep 6; exit 3")
	cmd.Env = append(os.Environ(), "PROGRESS_EVERY=2")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("exit: %v; want the command's, 3", err)
	}
	if !strings.HasPrefix(string(out), "a long step...\n") || !strings.Contains(string(out), "a long step: still running (2s)\n") || strings.Contains(string(out), "its output") {
		t.Errorf("progress:\n%s", out)
	}
	if data, _ := os.ReadFile(log); string(data) != "its output\n" {
		t.Errorf("log: %q", data)
	}
	out, err = exec.Command("../../hack/progress.sh", "quick", "echo", "hi").CombinedOutput()
	if err != nil || string(out) != "quick...\nhi\n" {
		t.Errorf("a quick command: %v %q", err, out)
	}
}
