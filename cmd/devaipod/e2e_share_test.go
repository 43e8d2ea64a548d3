package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestE2EShare: devaipod share copies a host folder into a running pod,
// where the agent reads it at /host/PATH and cannot write it, nor see its
// parent's other files, nor follow a symlink out of it to the host; --rw
// gives the agent a copy of its own; a credential store is refused.
func TestE2EShare(t *testing.T) {
	e2e(t)
	name := uniqueName("e2e-share")
	cleanup(t, name)
	mustDevaipod(t, nil, "--config", standInConfig(t, ""), "up", fixtureRepo(t), "--name", name)
	agent := func(script string) result {
		return devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", script)
	}
	root := t.TempDir()
	data := filepath.Join(root, "data")
	os.MkdirAll(filepath.Join(data, "sub"), 0o755)
	os.WriteFile(filepath.Join(data, "sub", "notes.txt"), []byte("shared notes\n"), 0o644)
	os.WriteFile(filepath.Join(root, "sibling.txt"), []byte("not shared\n"), 0o644)
	outside := filepath.Join(root, "outside-secret.txt")
	os.WriteFile(outside, []byte("outside secret\n"), 0o644)
	os.Symlink(outside, filepath.Join(data, "escape"))

	t.Run("shared read-only: readable, not writable, nothing around it", func(t *testing.T) {
		r := mustDevaipod(t, nil, "share", name, data)
		if !strings.Contains(r.stdout, "/host"+data) {
			t.Errorf("share output: %s", r.stdout)
		}
		if got := agent("cat /host" + data + "/sub/notes.txt"); got.stdout != "shared notes\n" {
			t.Errorf("the agent reads: %s", got)
		}
		if got := agent("echo x >> /host" + data + "/sub/notes.txt; touch /host" + data + "/new; touch /host/new; mkdir /host" + root + "/x; echo done"); !strings.HasSuffix(got.stdout, "done\n") || strings.Count(got.stderr, "ermission denied") < 4 {
			t.Errorf("the agent could write: %s", got)
		}
		if got := agent("ls -A /host" + root); strings.TrimSpace(got.stdout) != "data" {
			t.Errorf("the parent shows more than the share: %s", got)
		}
		if got := agent("cat /host" + data + "/escape 2>&1; cat /host" + root + "/outside-secret.txt 2>&1"); strings.Contains(got.stdout, "outside secret") {
			t.Errorf("a symlink led out of the share to the host: %s", got)
		}
		if b, _ := os.ReadFile(filepath.Join(data, "sub", "notes.txt")); string(b) != "shared notes\n" {
			t.Errorf("the host file changed: %q", b)
		}
	})
	t.Run("shared --rw: the agent changes its copy, not the host's", func(t *testing.T) {
		rwDir := filepath.Join(root, "rw")
		os.MkdirAll(rwDir, 0o755)
		os.WriteFile(filepath.Join(rwDir, "f"), []byte("v1\n"), 0o644)
		mustDevaipod(t, nil, "share", name, rwDir, "--rw")
		if got := agent("echo v2 > /host" + rwDir + "/f && cat /host" + rwDir + "/f"); got.stdout != "v2\n" {
			t.Errorf("the agent's rw copy: %s", got)
		}
		if b, _ := os.ReadFile(filepath.Join(rwDir, "f")); string(b) != "v1\n" {
			t.Errorf("the host file changed: %q", b)
		}
	})
	t.Run("a credential store is refused, through a symlink too", func(t *testing.T) {
		ssh := filepath.Join(root, "home", ".ssh")
		os.MkdirAll(ssh, 0o700)
		os.WriteFile(filepath.Join(ssh, "id_ed25519"), []byte("PRIVATE KEY\n"), 0o600)
		os.Symlink(ssh, filepath.Join(root, "innocent"))
		for _, p := range []string{ssh, filepath.Join(root, "innocent")} {
			if r := devaipod(t, nil, "share", name, p); r.code == 0 || !strings.Contains(r.stderr, ".ssh") {
				t.Errorf("share %s: %s", p, r)
			}
		}
		if got := agent("grep -rs 'PRIVATE KEY' /host; ls /host" + root); strings.Contains(got.stdout, "PRIVATE KEY") || strings.Contains(got.stdout, "home") {
			t.Errorf("the refused path reached the agent: %s", got)
		}
	})
}
