package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// commitFiles adds files (name -> content) to a fixture repository.
func commitFiles(t *testing.T, repo string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(repo, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "more"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
}

// TestE2EProtectTrustedSide attacks, from inside the agent, every place
// that makes the trusted workspace run code, and the masked files; then
// checks that the workspace still has full access and that a hook planted
// any way the agent can find never runs on the workspace's next commit.
func TestE2EProtectTrustedSide(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	commitFiles(t, repo, map[string]string{
		".env":                            "DB_PASSWORD=hunter2\n",
		"deploy/server.pem":               "-----BEGIN PRIVATE KEY-----\n",
		".devcontainer/devcontainer.json": "{}\n",
		"src/main.go":                     "package main\n",
	})
	cache := filepath.Join(t.TempDir(), "cache")
	os.MkdirAll(cache, 0o755)
	os.WriteFile(filepath.Join(cache, "entry"), []byte("cached\n"), 0o644)
	cfg := standInConfig(t, `
[[mounts]]
source = "`+cache+`"
target = "/cache"
containers = ["workspace", "agent"]
`)
	name := uniqueName("e2e-protect")
	cleanup(t, name)
	mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", name)
	dir := "/workspaces/fixture"
	inAgent := func(script string) result {
		return devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", "cd "+dir+" && "+script)
	}
	inWorkspace := func(script string) result {
		return devaipod(t, nil, "exec", name, "--", "sh", "-c", "cd "+dir+" && "+script)
	}

	attacks := []struct{ what, script string }{
		{"plant a pre-commit hook", "printf '#!/bin/sh\\ntouch /workspaces/fixture/PWNED\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit"},
		{"redirect core.hooksPath", "git config core.hooksPath /tmp/hooks"},
		{"append to .git/config", "echo '[core]' >> .git/config"},
		{"replace .git/config", "cp .git/config /tmp/c && mv /tmp/c .git/config"},
		{"move .git/hooks aside", "mv .git/hooks .git/hooks.old"},
		{"move .git aside", "mv .git .git.old"},
		{"move the repository aside", "mv " + dir + " /workspaces/other"},
		{"write .devcontainer", "echo '{\"postStartCommand\":\"touch /PWNED\"}' > .devcontainer/devcontainer.json"},
		{"add to .devcontainer", "touch .devcontainer/evil.json"},
		{"create .envrc", "echo 'touch PWNED' > .envrc"},
		{"create .vscode/tasks.json", "mkdir -p .vscode && echo '{}' > .vscode/tasks.json"},
		{"write .gitmodules", "echo '[submodule]' > .gitmodules"},
		{"write a read-only extra mount", "echo x > /cache/entry"},
		{"create a user namespace (unshare -Ur)", "unshare -Ur true"},
		{"create a network namespace", "unshare -n true"},
	}
	for _, a := range attacks {
		if r := inAgent(a.script); r.code == 0 {
			t.Errorf("agent could %s:\n%s", a.what, r)
		}
	}

	t.Run("masked files are empty to the agent and intact in the workspace", func(t *testing.T) {
		if r := inAgent("cat .env deploy/server.pem | wc -c"); strings.TrimSpace(r.stdout) != "0" {
			t.Errorf("agent reads masked files: %s", r)
		}
		if r := inWorkspace("cat .env"); !strings.Contains(r.stdout, "hunter2") {
			t.Errorf("workspace lost .env: %s", r)
		}
	})
	t.Run("the agent still works in the repository", func(t *testing.T) {
		r := inAgent("echo change >> src/main.go && git add src/main.go && git -c user.name=a -c user.email=a@a commit -qm agent && git log --oneline | head -1")
		if r.code != 0 || !strings.Contains(r.stdout, "agent") {
			t.Errorf("agent cannot edit and commit: %s", r)
		}
		if r := inAgent("cat /cache/entry"); strings.TrimSpace(r.stdout) != "cached" {
			t.Errorf("agent cannot read the extra mount: %s", r)
		}
	})
	t.Run("the workspace keeps full access and no planted hook runs", func(t *testing.T) {
		r := inWorkspace("echo ws > ws.txt && git add ws.txt && git -c user.name=w -c user.email=w@w commit -qm ws && " +
			"touch .git/hooks/ws-ok .devcontainer/ws-ok && rm .git/hooks/ws-ok .devcontainer/ws-ok && " +
			"test ! -e PWNED && test ! -e /PWNED && git config --get core.hooksPath; echo rc=$?")
		if r.code != 0 || !strings.Contains(r.stdout, "rc=1") {
			t.Errorf("workspace commit or writes failed, or a hook ran / hooksPath is set:\n%s", r)
		}
	})
}

// TestE2EMountsAndReadOnlyWorkspace checks that a credential store is
// refused as a mount (with the rule, and nothing created), and that
// --workspace-access ro leaves the agent nothing to write in the workspace.
func TestE2EMountsAndReadOnlyWorkspace(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	home := t.TempDir()
	ssh := filepath.Join(home, ".ssh")
	os.MkdirAll(ssh, 0o700)
	os.Symlink(ssh, filepath.Join(home, "harmless"))
	cfg := standInConfig(t, `
[[mounts]]
source = "`+filepath.Join(home, "harmless")+`"
target = "/keys"
`)
	name := uniqueName("e2e-mount")
	cleanup(t, name)
	r := devaipod(t, nil, "--config", cfg, "up", repo, "--name", name)
	if r.code == 0 || !strings.Contains(r.stderr, `".ssh"`) || !strings.Contains(r.stderr, "resolved to") {
		t.Errorf("a symlink to ~/.ssh was not refused with its rule:\n%s", r)
	}
	if left := labelled(t, name); len(left) > 0 {
		t.Errorf("refused up left %v", left)
	}

	ro := uniqueName("e2e-ro")
	cleanup(t, ro)
	mustDevaipod(t, nil, "--config", standInConfig(t, ""), "up", repo, "--name", ro, "--workspace-access", "ro")
	if r := devaipod(t, nil, "exec", ro, "-c", "agent", "--", "sh", "-c", "touch /workspaces/fixture/x || touch /workspaces/x"); r.code == 0 {
		t.Errorf("agent wrote a read-only workspace: %s", r)
	}
	if r := devaipod(t, nil, "exec", ro, "--", "sh", "-c", "touch /workspaces/fixture/x"); r.code != 0 {
		t.Errorf("workspace lost write access: %s", r)
	}
}

// TestE2EVerify runs the verify battery in a contained pod (every row PASS
// or N-A, and the trusted value's hash checked) and in an open-network pod,
// where the network rows must FAIL: verify can tell the difference.
func TestE2EVerify(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	cfg := standInConfig(t, "[trusted.env.vars]\nE2E_VERIFY_TOKEN = \"ghp_e2eVerifyValue777\"\n")
	name := uniqueName("e2e-verify")
	cleanup(t, name)
	mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", name)

	type report struct {
		Rows           []struct{ ID, Attack, Expected, Result, Detail string }
		Pass, Fail, NA int
	}
	verify := func(name string) (report, result) {
		r := devaipod(t, nil, "verify", name, "-o", "json")
		var rep report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("verify json: %v\n%s", err, r)
		}
		return rep, r
	}
	rep, r := verify(name)
	results := map[string]string{}
	for _, row := range rep.Rows {
		results[row.ID] = row.Result
		if row.Result == "FAIL" {
			t.Errorf("verify FAILs %s (%s): %s", row.ID, row.Attack, row.Detail)
		}
	}
	if r.code != 0 || rep.Fail != 0 || rep.Pass < 25 {
		t.Errorf("verify: exit %d, %d pass %d fail %d n/a\n%s", r.code, rep.Pass, rep.Fail, rep.NA, r.stderr)
	}
	for _, id := range []string{"trusted-env", "canary", "tcp-direct", "proxy-denied-host", "podman-api", "unshare", "persist:.git/hooks", "persist:.git/config"} {
		if results[id] != "PASS" {
			t.Errorf("row %s = %q, want PASS", id, results[id])
		}
	}

	open := uniqueName("e2e-verify-open")
	cleanup(t, open)
	mustDevaipod(t, nil, "--config", standInConfig(t, "[network]\nmode = \"open\"\n"), "up", repo, "--name", open)
	rep, r = verify(open)
	failed := map[string]bool{}
	for _, row := range rep.Rows {
		failed[row.ID] = row.Result == "FAIL"
	}
	if r.code != 1 || !failed["net-interfaces"] || !failed["net-routes"] || !failed["canary"] {
		t.Errorf("verify of an open-network pod: exit %d, FAILs %v; want exit 1 and the network rows FAILing", r.code, failed)
	}
}
