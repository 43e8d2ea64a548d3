package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devaipod/devaipod/cmd/devaipod/internal/fakellm"
)

// TestE2EPool fills the warm pool and claims its pods: a claim is ready at
// once; a task planted in one claimed pod is invisible to the next claim;
// a claimed pod's agent is set up exactly as a fresh pod's and passes the
// whole verify battery; two ups at once never share a pod; a new commit
// makes up build a pod and pool replace the stale ones, and so does a
// pool pod whose agent stopped; --name and --no-pool never claim; --size 0
// empties the pool and nothing is left.
func TestE2EPool(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	// A commit of this test's own: no other test's up can match its pods.
	commit := func(file, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(repo, file), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"add", "."}, {"commit", "-q", "-m", file}} {
			cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
			cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v %s", args, err, out)
			}
		}
	}
	commit("pool.txt", uniqueName("pool")+"\n")
	cfg := standInConfig(t, "")

	// Every pod the test makes or claims is deleted at the end; the pool
	// is emptied first.
	var mu sync.Mutex
	var pods []string
	keep := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(pods, name) {
			pods = append(pods, name)
			cleanup(t, name)
		}
	}
	t.Cleanup(func() { devaipod(t, nil, "--config", cfg, "pool", repo, "--size", "0") })

	type report struct {
		Key     string   `json:"key"`
		Idle    []string `json:"idle"`
		Made    []string `json:"made"`
		Removed []string `json:"removed"`
	}
	pool := func(size string) report {
		t.Helper()
		r := mustDevaipod(t, nil, "--config", cfg, "-o", "json", "pool", repo, "--size", size)
		var rep report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("pool JSON: %v\n%s", err, r)
		}
		for _, n := range append(rep.Made, rep.Idle...) {
			keep(n)
		}
		return rep
	}
	type upResult struct {
		Name    string `json:"name"`
		Claimed bool   `json:"claimed"`
	}
	up := func(args ...string) upResult {
		t.Helper()
		r := mustDevaipod(t, nil, append([]string{"--config", cfg, "-o", "json", "up", repo}, args...)...)
		var u upResult
		if err := json.Unmarshal([]byte(r.stdout), &u); err != nil {
			t.Fatalf("up JSON: %v\n%s", err, r)
		}
		keep(u.Name)
		return u
	}
	agentSh := func(name, script string) (string, error) {
		out, err := exec.Command("podman", "exec", "devaipod-"+name+"-agent", "sh", "-c", script).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}

	rep := pool("2")
	if len(rep.Made) != 2 || len(rep.Idle) != 2 {
		t.Fatalf("pool --size 2 made %v, idle %v; want 2 and 2", rep.Made, rep.Idle)
	}
	if again := pool("2"); len(again.Made) != 0 || len(again.Removed) != 0 || !slices.Equal(again.Idle, rep.Idle) {
		t.Errorf("a second pool --size 2 changed the pool: %+v (first: %+v)", again, rep)
	}
	var listed []struct {
		Name string `json:"name"`
		Pool string `json:"pool"`
	}
	if err := json.Unmarshal([]byte(mustDevaipod(t, nil, "-o", "json", "list").stdout), &listed); err != nil {
		t.Fatal(err)
	}
	for _, n := range rep.Idle {
		if i := slices.IndexFunc(listed, func(l struct {
			Name string `json:"name"`
			Pool string `json:"pool"`
		}) bool {
			return l.Name == n
		}); i < 0 || listed[i].Pool != "idle" {
			t.Errorf("list does not show pool pod %s as idle: %+v", n, listed)
		}
	}

	if text := mustDevaipod(t, nil, "list").stdout; !strings.Contains(text, rep.Idle[0]) || !strings.Contains(text, "(pool: idle)") {
		t.Errorf("list does not show the pool's idle pods:\n%s", text)
	}

	a := up()
	if !a.Claimed || a.Name != rep.Idle[0] {
		t.Fatalf("up did not claim the oldest idle pod %s: %+v", rep.Idle[0], a)
	}
	// The first task leaves traces everywhere the agent can write.
	if out, err := agentSh(a.Name, `echo task-a > "$HOME/task-a" && echo task-a > /tmp/task-a && echo task-a > task-a.txt && git add task-a.txt && git -c user.name=a -c user.email=a@a commit -qm task-a && git log --oneline | head -1`); err != nil {
		t.Fatalf("plant the first task's traces: %v %s", err, out)
	}
	b := up()
	if !b.Claimed || b.Name == a.Name || b.Name != rep.Idle[1] {
		t.Fatalf("the second up did not claim the other idle pod %s: %+v (first %+v)", rep.Idle[1], b, a)
	}
	t.Run("nothing of one task in the next", func(t *testing.T) {
		out, err := agentSh(b.Name, `for f in "$HOME/task-a" /tmp/task-a task-a.txt; do [ ! -e "$f" ] || echo "found $f"; done; git log --format=%s | grep -x task-a || true; grep -rl task-a "$HOME" /tmp . 2>/dev/null || true`)
		if err != nil || out != "" {
			t.Errorf("the second task's pod sees the first's work: %v\n%s", err, out)
		}
		mounts := func(name string) []string {
			out, err := exec.Command("podman", "inspect", "--format", "{{range .Mounts}}{{.Name}} {{end}}", "devaipod-"+name+"-agent").CombinedOutput()
			if err != nil {
				t.Fatalf("inspect: %v %s", err, out)
			}
			return strings.Fields(string(out))
		}
		for _, v := range mounts(b.Name) {
			if slices.Contains(mounts(a.Name), v) {
				t.Errorf("the two claimed pods share volume %s", v)
			}
		}
	})

	fresh := up()
	if fresh.Claimed {
		t.Fatalf("up claimed a pod from an empty pool: %+v", fresh)
	}
	t.Run("a claimed pod is contained as a fresh one", func(t *testing.T) {
		// The agent's settings that make its containment, names aside.
		settings := func(name string) string {
			out, err := exec.Command("podman", "inspect", "--format",
				`{{.Config.User}} {{.HostConfig.CapAdd}} {{.HostConfig.CapDrop}} {{.HostConfig.SecurityOpt}} {{.HostConfig.ReadonlyRootfs}} {{.HostConfig.NetworkMode}} {{.HostConfig.Privileged}} {{.HostConfig.IpcMode}} {{.HostConfig.PidMode}}|{{range .Mounts}}{{.Destination}}:{{.RW}} {{end}}`,
				"devaipod-"+name+"-agent").CombinedOutput()
			if err != nil {
				t.Fatalf("inspect: %v %s", err, out)
			}
			// Mounts in a stable order: inspect's is not.
			head, mounts, _ := strings.Cut(strings.ReplaceAll(string(out), name, "NAME"), "|")
			sorted := strings.Fields(mounts)
			slices.Sort(sorted)
			return head + " " + strings.Join(sorted, " ")
		}
		if s, f := settings(b.Name), settings(fresh.Name); s != f {
			t.Errorf("the claimed pod's agent differs from a fresh pod's:\nclaimed %s\nfresh   %s", s, f)
		}
		r := devaipod(t, nil, "verify", b.Name)
		if r.code != 0 || strings.Contains(r.stdout, "FAIL") {
			t.Errorf("verify of the claimed pod failed:\n%s", r)
		}
	})

	t.Run("two ups at once share no pod", func(t *testing.T) {
		if rep := pool("1"); len(rep.Idle) != 1 {
			t.Fatalf("pool --size 1: %+v", rep)
		}
		var wg sync.WaitGroup
		got := make([]upResult, 2)
		for i := range got {
			wg.Add(1)
			go func() { defer wg.Done(); got[i] = up() }()
		}
		wg.Wait()
		if got[0].Name == got[1].Name || got[0].Claimed == got[1].Claimed {
			t.Errorf("two ups against a pool of one: %+v; want one claim and one new pod", got)
		}
	})

	t.Run("--name and --no-pool make a pod", func(t *testing.T) {
		if rep := pool("1"); len(rep.Idle) != 1 {
			t.Fatalf("pool --size 1: %+v", rep)
		}
		name := uniqueName("pool-named")
		if u := up("--name", name); u.Claimed || u.Name != name {
			t.Errorf("up --name %s: %+v; want a new pod of that name", name, u)
		}
		if u := up("--no-pool"); u.Claimed {
			t.Errorf("up --no-pool claimed a pod: %+v", u)
		}
	})

	t.Run("a pool pod whose agent stopped is not claimed", func(t *testing.T) {
		dead := pool("1").Idle
		if len(dead) != 1 {
			t.Fatalf("pool --size 1: idle %v", dead)
		}
		if out, err := exec.Command("podman", "stop", "-t", "0", "devaipod-"+dead[0]+"-agent").CombinedOutput(); err != nil {
			t.Fatalf("stop the agent: %v %s", err, out)
		}
		if u := up(); u.Claimed || u.Name == dead[0] {
			t.Errorf("up claimed a pool pod whose agent does not run: %+v", u)
		}
		if rep := pool("1"); !slices.Equal(rep.Removed, dead) || len(rep.Made) != 1 {
			t.Errorf("pool did not replace the broken pod %v: %+v", dead, rep)
		}
	})

	t.Run("a new commit: up makes a pod, pool replaces the stale one", func(t *testing.T) {
		stale := pool("1").Idle
		commit("next.txt", "next\n")
		if u := up(); u.Claimed {
			t.Errorf("up of a new commit claimed a pod made for the old one: %+v", u)
		}
		rep := pool("1")
		if !slices.Equal(rep.Removed, stale) || len(rep.Made) != 1 || len(rep.Idle) != 1 {
			t.Errorf("pool after a new commit: %+v; want %v removed and one made", rep, stale)
		}
	})

	empty := pool("0")
	if len(empty.Idle) != 0 || len(empty.Removed) != 1 {
		t.Errorf("pool --size 0: %+v; want the one idle pod removed", empty)
	}
	for _, n := range empty.Removed {
		if left := labelled(t, n); len(left) > 0 {
			t.Errorf("pool --size 0 left objects of %s: %v", n, left)
		}
	}
}

// TestE2EPoolTask claims a pool pod of opencode with a task: the claimed
// agent gets the task as a fresh pod's does (the model sees it), status
// shows the task and the claim, and the placeholder and the real key stay
// where they belong.
func TestE2EPoolTask(t *testing.T) {
	e2e(t)
	const (
		llmHost = "llm.test"
		task    = "say hello from the pool"
		llmKey  = "sk-e2e-pool-llm-key-0a7c"
	)
	llm := fakellm.New(fakellm.Turn{Name: "done", Text: "hello from the pool"})
	ca := newTestCA(t)
	llmPort := serveHTTPS(t, ca, llmHost, llm)
	cfg := opencodeConfig(t, fmt.Sprintf(`[network]
host_loopback = true
no_default_allow = true
allow = ["%[1]s:%[2]d", "10.0.2.2:%[2]d"]
extra_hosts = ["%[1]s:10.0.2.2"]
upstream_ca = [%[3]q]
[credentials.OPENAI_API_KEY]
hosts = ["%[1]s:%[2]d"]
`, llmHost, llmPort, ca.file(t)))
	env := []string{"DEVAIPOD_AGENT_OPENCODE_CONFIG_CONTENT=" + fakellm.OpencodeConfig(fmt.Sprintf("https://%s:%d/v1", llmHost, llmPort), "", "{env:OPENAI_API_KEY}"),
		"OPENAI_API_KEY=" + llmKey}
	repo := fixtureRepo(t)
	// A commit of this test's own: no other test's up can match its pods.
	if err := os.WriteFile(filepath.Join(repo, "pool-task.txt"), []byte(uniqueName("pool-task")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "."}, {"commit", "-q", "-m", "pool task"}} {
		cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	t.Cleanup(func() { devaipod(t, env, "--config", cfg, "pool", repo, "--size", "0") })

	var rep struct {
		Idle []string `json:"idle"`
	}
	r := mustDevaipod(t, env, "--config", cfg, "-o", "json", "pool", repo, "--size", "1", "--timeout", "150s")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Idle) != 1 {
		t.Fatalf("pool --size 1: %v\n%s", err, r)
	}
	cleanup(t, rep.Idle[0])
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", devaipod(t, nil, "logs", rep.Idle[0], "-c", "agent", "--tail", "100"))
			t.Logf("audit:\n%s", devaipod(t, nil, "audit", rep.Idle[0]))
			t.Logf("opencode's log:\n%s", devaipod(t, nil, "exec", rep.Idle[0], "-c", "agent", "--", "sh", "-c",
				"tail -n 60 $HOME/.local/share/opencode/log/*.log"))
		}
	})
	if n := len(llm.RequestsOf(fakellm.KindScript)); n != 0 {
		t.Fatalf("the idle pool pod's agent asked the model %d time(s) before it had a task", n)
	}

	up := mustDevaipod(t, env, "--config", cfg, "up", repo, task)
	if !strings.Contains(up.stdout, "Pod "+rep.Idle[0]+" is ready") || !strings.Contains(up.stdout, "taken from the pool") ||
		!strings.Contains(up.stderr, "handing the task to the agent") {
		t.Fatalf("up did not take the pool's pod %s and hand it the task:\n%s", rep.Idle[0], up)
	}
	select {
	case <-llm.Finished():
	case <-time.After(3 * time.Minute):
		t.Fatalf("the claimed agent did not ask the model: %v", llm.Check())
	}
	steps := llm.RequestsOf(fakellm.KindScript)
	if !strings.Contains(steps[0].LastUser(), task) {
		t.Errorf("the model's first user message is %q; want the task %q", steps[0].LastUser(), task)
	}
	if got := steps[0].Header.Get("Authorization"); got != "Bearer "+llmKey {
		t.Errorf("the model got Authorization %q; want the real key, put in by the proxy", got)
	}
	var st struct {
		Task string `json:"task"`
		Pool string `json:"pool"`
	}
	if err := json.Unmarshal([]byte(mustDevaipod(t, nil, "-o", "json", "status", rep.Idle[0]).stdout), &st); err != nil {
		t.Fatal(err)
	}
	if st.Task != task || st.Pool != "claimed" {
		t.Errorf("status of the claimed pod: task %q, pool %q; want %q, claimed", st.Task, st.Pool, task)
	}
}
