package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnsetupUndoesWhatSetupRecorded: hack/unsetup-host.sh --dry-run says
// how it undoes each kind of change hack/setup-host.sh records (the test
// user, the packages it installed, the files and config keys it wrote, the
// modes, mounts and sysctls it changed), newest first; and on a machine
// setup-host set up as root, for every change in its record. (Undoing for
// real would take podman away from the rest of the suite.)
func TestUnsetupUndoesWhatSetupRecorded(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"package":     "would undo: apt-get remove runc podman (the packages setup-host installed)",
		"user":        "would undo: remove the user devaipod-test, its home, pods, images and podman service",
		"subid":       "would undo: remove devaipod-test's ids from /etc/subuid",
		"file":        "would undo: remove /etc/containers/containers.conf",
		"tomlkey":     "would undo: remove [engine] runtime from /etc/containers/containers.conf",
		"mode":        "would undo: chmod 600 /dev/net/tun",
		"propagation": "would undo: mount --make-private /",
		"sysctl":      "would undo: sysctl kernel.keys.maxkeys=200",
		"mount":       "would undo: unmount /run/user/1001",
	}
	record := filepath.Join(t.TempDir(), "setup-changes")
	os.WriteFile(record, []byte(`package podman
package runc
mode /dev/net/tun 600
file /etc/containers/containers.conf
tomlkey /etc/containers/containers.conf engine runtime
sysctl kernel.keys.maxkeys 200
propagation / private
user devaipod-test
subid /etc/subuid devaipod-test
mount /run/user/1001
`), 0o644)
	dryRun := func(record string) string {
		cmd := exec.Command(filepath.Join(root, "hack/unsetup-host.sh"), "--dry-run")
		cmd.Env = append(os.Environ(), "DEVAIPOD_SETUP_CHANGES="+record)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("unsetup-host.sh --dry-run: %v\n%s", err, out)
		}
		return string(out)
	}
	out := dryRun(record)
	for kind, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s: the dry run lacks %q:\n%s", kind, w, out)
		}
	}
	// Newest first, but the runtime dir's mount once the user (whose
	// podman service holds it) is gone, and the packages last.
	if i, j, k := strings.Index(out, "remove the user"), strings.Index(out, "unmount"), strings.Index(out, "apt-get remove"); !(i < j && j < k) {
		t.Errorf("not undone newest first:\n%s", out)
	}
	if _, err := os.Stat(record); err != nil {
		t.Errorf("a dry run removed the record: %v", err)
	}

	// This machine's own record, when root set it up.
	real, err := os.ReadFile("/var/lib/devaipod/setup-changes")
	if err != nil {
		return
	}
	out = dryRun("/var/lib/devaipod/setup-changes")
	for _, line := range strings.Split(strings.TrimSpace(string(real)), "\n") {
		kind, _, _ := strings.Cut(line, " ")
		if _, ok := want[kind]; !ok || strings.Contains(out, "does not know") {
			t.Errorf("recorded %q, which unsetup does not know:\n%s", line, out)
		}
	}
}
