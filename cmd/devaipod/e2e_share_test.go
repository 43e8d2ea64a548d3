package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2EShare: devaipod share copies a host folder into a running pod,
// where the agent reads it at /host/PATH and cannot write it, nor see its
// parent's other files, nor follow a symlink out of it to the host; --rw
// gives the agent a copy of its own; a credential store is refused.
func TestE2EShare(t *testing.T) {
	e2e(t)
	name := uniqueName("e2e-share")
	cleanup(t, name)
	repo := fixtureRepo(t)
	mustDevaipod(t, nil, "--config", standInConfig(t, ""), "up", repo, "--name", name)
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
	// What the pod masks, and a git directory: left out of a share.
	os.WriteFile(filepath.Join(data, ".env"), []byte("SHARED_SECRET=masked-in-the-pod\n"), 0o644)
	os.MkdirAll(filepath.Join(data, ".git"), 0o755)
	os.WriteFile(filepath.Join(data, ".git", "config"), []byte("[remote \"origin\"]\n\turl = https://user:token-in-git@git.example.test/r\n"), 0o644)

	t.Run("shared read-only: readable, not writable, nothing around it", func(t *testing.T) {
		r := mustDevaipod(t, nil, "share", name, data)
		if !strings.Contains(r.stdout, "/host"+data) || !strings.Contains(r.stdout, "left out: 1 masked file, 1 git directory") {
			t.Errorf("share output: %s", r.stdout)
		}
		if got := agent("cat /host" + data + "/.env /host" + data + "/.git/config 2>&1; ls -A /host" + data); strings.Contains(got.stdout, "masked-in-the-pod") ||
			strings.Contains(got.stdout, "token-in-git") || strings.Contains(got.stdout, ".git\n") {
			t.Errorf("the share holds what the pod masks, or a git directory: %s", got)
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
		// Asked for, the git directory comes; the masked file never.
		mustDevaipod(t, nil, "share", name, data, "--with-git")
		if got := agent("cat /host" + data + "/.git/config; cat /host" + data + "/.env 2>&1"); !strings.Contains(got.stdout, "token-in-git") || strings.Contains(got.stdout, "masked-in-the-pod") {
			t.Errorf("share --with-git: %s", got)
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
	t.Run("the agent asks for its own checkout: approvals says so, the share keeps its masks and leaves .git out", func(t *testing.T) {
		os.WriteFile(filepath.Join(repo, ".env"), []byte("CHECKOUT_SECRET=never-shared\n"), 0o644)
		if r := agent("(/opt/devaipod/devaipod-helper request-path --reason 'compare line endings' --json " + repo + " > /tmp/own.part 2>&1; mv /tmp/own.part /tmp/own.json) >/dev/null 2>&1 &"); r.code != 0 {
			t.Fatalf("%s", r)
		}
		var id string
		for deadline := time.Now().Add(20 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			var list []struct{ ID, Kind, Rule string }
			json.Unmarshal([]byte(mustDevaipod(t, nil, "approvals", name, "-o", "json").stdout), &list)
			for _, p := range list {
				if p.Kind == "path" && p.Rule == repo {
					id = p.ID
				}
			}
		}
		if id == "" {
			t.Fatal("the path request never waited for a decision")
		}
		if out := mustDevaipod(t, nil, "approvals", name).stdout; !strings.Contains(out, "it is this pod's own source checkout") ||
			!strings.Contains(out, "left out when shared: 1 masked file, 1 git directory") {
			t.Errorf("approvals does not say what the path is and holds:\n%s", out)
		}
		mustDevaipod(t, nil, "approve", id)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if r := agent("cat /tmp/own.json 2>/dev/null"); r.stdout != "" {
				break
			}
		}
		if r := agent("cat /host" + repo + "/README.md; cat /host" + repo + "/.env 2>&1; ls -A /host" + repo); !strings.Contains(r.stdout, "fixture") ||
			strings.Contains(r.stdout, "never-shared") || strings.Contains(r.stdout, ".git") {
			t.Errorf("the agent's copy of its own checkout: %s", r)
		}
	})
	t.Run("the agent asks for a path; a person approves it read-only", func(t *testing.T) {
		asked := filepath.Join(root, "asked")
		os.MkdirAll(asked, 0o755)
		os.WriteFile(filepath.Join(asked, "report.csv"), []byte("a,b\n1,2\n"), 0o644)
		if r := agent("(/opt/devaipod/devaipod-helper request-path --reason \"$(printf 'need the report\\033]0;pwned\\007\\342\\200\\256')\" --json " + asked + " > /tmp/req.part 2>&1; mv /tmp/req.part /tmp/req.json) >/dev/null 2>&1 &"); r.code != 0 {
			t.Fatalf("%s", r)
		}
		var id string
		for deadline := time.Now().Add(20 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			var list []struct{ ID, Kind, What, Rule string }
			json.Unmarshal([]byte(mustDevaipod(t, nil, "approvals", name, "-o", "json").stdout), &list)
			for _, p := range list {
				if p.Kind == "path" && p.Rule == asked && p.What == "read "+asked {
					id = p.ID
				}
			}
		}
		if id == "" {
			t.Fatal("the path request never waited for a decision")
		}
		if r := agent("cat /host" + asked + "/report.csv 2>&1"); strings.Contains(r.stdout, "1,2") {
			t.Fatal("the path was there before the approval")
		}
		// The agent's reason, with a terminal title escape and a bidi
		// override in it, reaches the person as text.
		for _, args := range [][]string{{"approvals", name}, {"approvals", name, "-o", "json"}} {
			if out := mustDevaipod(t, nil, args...).stdout; !strings.Contains(out, "need the report") || strings.ContainsAny(out, "\x1b\x07\u202e") {
				t.Errorf("devaipod %s shows the agent's reason as %q", strings.Join(args, " "), out)
			}
		}
		mustDevaipod(t, nil, "approve", id)
		var answer struct {
			Granted bool
			At      string
		}
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if r := agent("cat /tmp/req.json 2>/dev/null"); r.stdout != "" {
				json.Unmarshal([]byte(r.stdout), &answer)
				break
			}
		}
		if !answer.Granted || answer.At != "/host"+asked {
			t.Fatalf("the agent's answer: %+v", answer)
		}
		if r := agent("cat /host" + asked + "/report.csv; echo x > /host" + asked + "/report.csv"); r.stdout != "a,b\n1,2\n" || !strings.Contains(r.stderr, "ermission denied") {
			t.Errorf("the approved path in the agent: %s", r)
		}
	})
	t.Run("a forbidden path is refused without asking", func(t *testing.T) {
		home, _ := os.UserHomeDir()
		r := agent("/opt/devaipod/devaipod-helper request-path --json " + filepath.Join(home, ".ssh"))
		if r.code == 0 || !strings.Contains(r.stdout, "path-forbidden") {
			t.Errorf("request for ~/.ssh: %s", r)
		}
		if list := mustDevaipod(t, nil, "approvals", name, "-o", "json"); strings.Contains(list.stdout, ".ssh") {
			t.Errorf("it was asked about: %s", list.stdout)
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
