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

// trap is a script a compromised agent plants for the trusted side: when
// it runs where the workspace's secrets are, it leaves its environment in a
// marker file of the shared repository.
const trap = "#!/bin/sh\n[ -d /run/devaipod/secrets ] && env > /workspaces/fixture/PWNED-$$\nexit 0\n"

// TestE2EProtectTrustedSide attacks, from inside the agent, every place
// that makes the trusted workspace run code, and the masked files; then
// does what the trusted side does (git status, add, commit, submodule) and
// checks that nothing the agent planted ran there.
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
[trusted.env.vars]
E2E_PROTECT_TOKEN = "ghp_e2eProtectValue"

[[mounts]]
source = "`+cache+`"
target = "/cache"
containers = ["workspace", "agent"]
`)
	name := uniqueName("e2e-protect")
	cleanup(t, name)
	mustDevaipod(t, nil, "--config", cfg, "up", repo, "--trust", "--name", name)
	dir := "/workspaces/fixture"
	inAgent := func(script string) result {
		return devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", "cd "+dir+" && "+script)
	}
	inWorkspace := func(script string) result {
		return devaipod(t, nil, "exec", name, "--", "sh", "-c", "cd "+dir+" && "+script)
	}

	refused := []struct{ what, script string }{
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
	for _, a := range refused {
		if r := inAgent(a.script); r.code == 0 {
			t.Errorf("agent could %s:\n%s", a.what, r)
		}
	}

	// The agent's .git is its own: it may write anything there. Each of
	// these would run on the trusted side if the workspace's git read it.
	// The programs they name are in the shared tree (the agent's /tmp is
	// its own), where the workspace could run them: see the control at
	// the end of the first subtest.
	traps := dir + "/.traps"
	plant := "mkdir -p .traps/hooks && printf '" + strings.ReplaceAll(trap, "\n", "\\n") + "' > /tmp/trap && chmod +x /tmp/trap && cp /tmp/trap .traps/trap && "
	planted := []struct{ what, script string }{
		{"a pre-commit hook", "cp /tmp/trap .git/hooks/pre-commit"},
		{"core.fsmonitor and core.hooksPath", "git config core.fsmonitor " + traps + "/trap && git config core.hooksPath " + traps + "/hooks && cp /tmp/trap .traps/hooks/post-commit && cp /tmp/trap .traps/hooks/pre-commit"},
		{".git/commondir to a directory of its own", "mkdir -p evil/hooks && printf '[core]\\n\\tfsmonitor = " + dir + "/evil/hooks/fsm\\n\\thooksPath = " + dir + "/evil/hooks\\n' > evil/config && " +
			"cp /tmp/trap evil/hooks/fsm && cp /tmp/trap evil/hooks/pre-commit && echo ../evil > .git/commondir.planted"},
		{"a nested repository with core.fsmonitor, staged as a gitlink", "git init -q sub && git -C sub config core.fsmonitor " + dir + "/sub/fsm && cp /tmp/trap sub/fsm && " +
			"touch sub/f && git -C sub add f && git -C sub -c user.name=a -c user.email=a@a commit -qm s && git add sub"},
		{".git/modules hooks", "mkdir -p .git/modules/sub/hooks && cp /tmp/trap .git/modules/sub/hooks/post-checkout"},
		{"a filter driver named by .gitattributes", "git config filter.evil.clean " + traps + "/trap && echo '* filter=evil' > .gitattributes"},
	}
	for _, p := range planted {
		if r := inAgent(plant + p.script); r.code != 0 {
			t.Errorf("agent could not plant %s in its own repository (the test is broken):\n%s", p.what, r)
		}
	}
	// commondir last: it would break the agent's own git commands above.
	if r := inAgent("mv .git/commondir.planted .git/commondir"); r.code != 0 {
		t.Errorf("agent could not write .git/commondir: %s", r)
	}

	t.Run("nothing planted runs on the trusted side", func(t *testing.T) {
		for _, script := range []string{
			"git status",
			"git diff",
			"echo ws > ws.txt && git add -A && git -c user.name=w -c user.email=w@w commit -qm ws",
			"git status && git log --oneline -1",
			"git submodule status; git submodule update --init; true",
		} {
			if r := inWorkspace(script); r.code != 0 {
				t.Errorf("workspace %q: %s", script, r)
			}
		}
		if r := inWorkspace("ls -a; cat PWNED-* 2>/dev/null"); strings.Contains(r.stdout, "PWNED") || strings.Contains(r.stdout, "ghp_e2eProtectValue") {
			t.Errorf("a planted trap ran on the trusted side:\n%s", r)
		}
		// The workspace's git is the one up made: no commondir, its own
		// config, its hooks untouched.
		if r := inWorkspace("test ! -e .git/commondir && ! git config --file .git/config --get-regexp 'fsmonitor|hookspath|filter|partialclone' && ! ls .git/hooks .git/objects/pack | grep -v 'sample$\\|[.]pack$\\|[.]idx$\\|^$\\|:$'"); r.code != 0 {
			t.Errorf("the workspace's git directory carries the agent's changes:\n%s", r)
		}
		// The control: the planted programs do leave their marker when
		// the workspace runs them, so the checks above could fail.
		if r := inWorkspace(traps + "/trap && " + traps + "/hooks/pre-commit && " + dir + "/evil/hooks/fsm && ls PWNED-* | wc -l && rm -f PWNED-*"); r.code != 0 || strings.TrimSpace(r.stdout) != "3" {
			t.Errorf("the planted programs leave no marker when the workspace runs them, so this test proves nothing: %s", r)
		}
	})

	t.Run("verify sees the workspace's .git, and fails when a trap is planted there", func(t *testing.T) {
		rows := func() (map[string]string, result) {
			r := devaipod(t, nil, "verify", name, "-o", "json")
			var rep struct {
				Rows []struct{ ID, Result, Detail string }
			}
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("verify json: %v\n%s", err, r)
			}
			got := map[string]string{}
			for _, row := range rep.Rows {
				got[row.ID] = row.Result + ": " + row.Detail
			}
			return got, r
		}
		// The workspace's git add -A above made the agent's nested
		// repository a gitlink of its index: verify names it, since its
		// config runs a program (git status does not enter it here, but
		// a git without devaipod's settings would).
		got, r := rows()
		if !strings.HasPrefix(got["trusted-git"], "FAIL") || !strings.Contains(got["trusted-git"], "sub/.git/config (a gitlink of the index) sets core.fsmonitor") {
			t.Errorf("verify row trusted-git = %q; want FAIL naming the staged nested repository\n%s", got["trusted-git"], r.stderr)
		}
		// The agent puts a symlink out of the tree in the gitlink's
		// place: verify (root in the workspace) reads nothing through it
		// and says so.
		if r := inAgent("mv sub sub.real && ln -s /etc sub"); r.code != 0 {
			t.Fatalf("%s", r)
		}
		got, r = rows()
		if !strings.HasPrefix(got["trusted-git"], "FAIL") || !strings.Contains(got["trusted-git"], "sub/.git, a gitlink of the index: ") {
			t.Errorf("verify row trusted-git with the gitlink's folder a symlink out of the tree = %q\n%s", got["trusted-git"], r.stderr)
		}
		if r := inAgent("rm sub && mv sub.real sub"); r.code != 0 {
			t.Fatalf("%s", r)
		}
		if r := inWorkspace("git rm -q --cached sub"); r.code != 0 {
			t.Fatalf("%s", r)
		}
		got, r = rows()
		for _, id := range []string{"trusted-git", "proc-mem", "masked-git"} {
			if !strings.HasPrefix(got[id], "PASS") {
				t.Errorf("verify row %s = %q; want PASS\n%s", id, got[id], r.stderr)
			}
		}
		// Planted by hand on the trusted side: verify must say so.
		if r := inWorkspace("git config core.hooksPath /tmp/hooks && echo ../evil > .git/commondir"); r.code != 0 {
			t.Fatalf("%s", r)
		}
		got, r = rows()
		if r.code != 1 || !strings.HasPrefix(got["trusted-git"], "FAIL") || !strings.Contains(got["trusted-git"], "commondir") || !strings.Contains(got["trusted-git"], "core.hookspath") {
			t.Errorf("verify of a planted workspace .git: exit %d, trusted-git %q; want exit 1 and FAIL naming both", r.code, got["trusted-git"])
		}
		if r := inWorkspace("rm .git/commondir && git config --unset core.hooksPath"); r.code != 0 {
			t.Fatalf("%s", r)
		}
		// Forms git reads that a line-by-line reading missed: a
		// byte-order mark before [core], an ext:: remote with its
		// protocol allowed, a pager, a credential helper for a URL.
		if r := inWorkspace(`cp .git/config /tmp/config.orig && { printf '\357\273\277[core]\n\thooksPath = /tmp/h\n'; cat /tmp/config.orig; ` +
			`printf '[remote "x"]\n\turl = ext::sh -c id\n[protocol "ext"]\n\tallow = always\n[pager]\n\tlog = sh -c id\n[credential "https://git.example.test"]\n\thelper = !id\n'; } > /tmp/config.new && cat /tmp/config.new > .git/config && git config --get core.hookspath`); r.code != 0 || strings.TrimSpace(r.stdout) != "/tmp/h" {
			t.Fatalf("git does not read the planted config: %s", r)
		}
		got, r = rows()
		for _, want := range []string{"core.hookspath", "remote.*.url", "protocol.*.allow", "pager.log", "credential.*.helper"} {
			if r.code != 1 || !strings.Contains(got["trusted-git"], want) {
				t.Errorf("verify of a .git/config in a form git reads: exit %d, trusted-git %q; want %s named", r.code, got["trusted-git"], want)
			}
		}
		if r := inWorkspace("cat /tmp/config.orig > .git/config"); r.code != 0 {
			t.Fatalf("%s", r)
		}
	})
	t.Run("masked files are unreadable to the agent, in the tree and in git", func(t *testing.T) {
		if r := inAgent("cat .env deploy/server.pem | wc -c"); strings.TrimSpace(r.stdout) != "0" {
			t.Errorf("agent reads masked files: %s", r)
		}
		for _, script := range []string{
			"rm -f .git/commondir; git show HEAD:.env",
			"git log -p --all | grep -c hunter2",
			"git cat-file --batch-all-objects --batch | grep -c hunter2",
		} {
			if r := inAgent(script); strings.Contains(r.stdout, "hunter2") || strings.TrimSpace(r.stdout) != "0" && !strings.Contains(script, "show") {
				t.Errorf("agent reads a masked value through git (%q):\n%s", script, r)
			}
		}
		if r := inWorkspace("cat .env"); !strings.Contains(r.stdout, "hunter2") {
			t.Errorf("workspace lost .env: %s", r)
		}
	})
	t.Run("the agent still works in the repository", func(t *testing.T) {
		r := inAgent("rm -f .git/commondir && git config --unset core.hooksPath; git config --unset core.fsmonitor; git config --unset filter.evil.clean; " +
			"echo change >> src/main.go && git add src/main.go && git -c user.name=a -c user.email=a@a commit -qm agent && git log --oneline | head -1")
		if r.code != 0 || !strings.Contains(r.stdout, "agent") {
			t.Errorf("agent cannot edit and commit: %s", r)
		}
		if r := inAgent("cat /cache/entry"); strings.TrimSpace(r.stdout) != "cached" {
			t.Errorf("agent cannot read the extra mount: %s", r)
		}
		// The workspace sees the agent's edit in the shared tree.
		if r := inWorkspace("git status --porcelain src/main.go"); !strings.Contains(r.stdout, "src/main.go") {
			t.Errorf("the workspace does not see the agent's edit: %s", r)
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
	mustDevaipod(t, nil, "--config", cfg, "up", repo, "--trust", "--name", name)

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
	for _, id := range []string{"trusted-env", "canary", "tcp-direct", "proxy-denied-host", "podman-api", "unshare", "persist:.devcontainer", "trusted-git", "proc-mem",
		"ptrace", "processes", "mount", "raw-socket", "other-pods", "host-secrets", "setuid"} {
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
