package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestE2EDeleteInBackground: delete kills the agent before it returns and
// leaves the rest to a process of its own; an up of the same name right
// after waits for that and makes a new pod (nothing of the old one in it);
// a removal whose process died is finished by the next start, which does
// not start the pod again.
func TestE2EDeleteInBackground(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	cfg := standInConfig(t, "")
	state := t.TempDir()
	env := []string{"XDG_STATE_HOME=" + state}
	name := uniqueName("del")
	t.Cleanup(func() {
		devaipod(t, env, "delete", "--wait", name)
		if left := labelled(t, name); len(left) > 0 {
			t.Errorf("objects left for %s after the test: %v", name, left)
		}
	})
	mustDevaipod(t, env, "--config", cfg, "up", repo, "--name", name)
	mustDevaipod(t, env, "exec", name, "-c", "workspace", "--", "sh", "-c", "echo old > /workspaces/old-pod.txt")
	// A process the agent left running in the background.
	mustDevaipod(t, env, "exec", name, "-c", "agent", "--", "sh", "-c", "nohup sleep 4242 >/dev/null 2>&1 &")
	out, err := exec.Command("podman", "inspect", "--format", "{{.State.Pid}}", "devaipod-"+name+"-agent").Output()
	if err != nil {
		t.Fatal(err)
	}
	agentPids := []string{strings.TrimSpace(string(out))}
	waitFor(t, 10*time.Second, "the agent's sleep", func() bool {
		pid := findProcess("sleep\x004242\x00")
		if pid != "" {
			agentPids = append(agentPids, pid)
		}
		return pid != ""
	})

	del := mustDevaipod(t, env, "delete", name, "-o", "json")
	for _, pid := range agentPids {
		if st := processState(pid); st != "" && st != "Z" && st != "X" {
			t.Errorf("agent process %s is still alive (state %s) when delete returned", pid, st)
		}
	}
	var removing struct {
		Removing []struct{ Kind, Name string }
	}
	if err := json.Unmarshal([]byte(del.stdout), &removing); err != nil || len(removing.Removing) == 0 {
		t.Errorf("delete -o json: %v\n%s", err, del)
	}

	// At once, an up of the same name: it waits for the removal and makes
	// a pod afresh.
	mustDevaipod(t, env, "--config", cfg, "up", repo, "--name", name)
	if r := devaipod(t, env, "exec", name, "-c", "workspace", "--", "cat", "/workspaces/old-pod.txt"); r.code == 0 {
		t.Errorf("the new pod has the old pod's file: %s", r)
	}
	if _, err := os.Stat(filepath.Join(state, "devaipod", "removing", name)); err == nil {
		t.Error("the removal mark is still there after the removal")
	}

	// A removal whose process died right after the kill: the mark is
	// there and nobody holds it.
	mark := filepath.Join(state, "devaipod", "removing", name)
	if err := os.WriteFile(mark, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var pods []struct{ Name, State string }
	json.Unmarshal([]byte(mustDevaipod(t, env, "list", "-o", "json").stdout), &pods)
	found := false
	for _, p := range pods {
		if p.Name == name {
			found = true
			if p.State != "removal failed" {
				t.Errorf("list shows the pod as %q, want \"removal failed\"", p.State)
			}
		}
	}
	if !found {
		t.Errorf("list lacks the pod: %v", pods)
	}
	if r := devaipod(t, env, "start", name); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("start of a pod whose removal failed: want it finished and the pod not found: %s", r)
	}
	if left := labelled(t, name); len(left) > 0 {
		t.Errorf("left after start finished the removal: %v", left)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the removal mark is still there after start finished the removal")
	}

	// --keep-volumes in the background: the volumes are not in what it
	// says it removes, and stay; a delete --wait then takes them.
	mustDevaipod(t, env, "--config", cfg, "up", repo, "--name", name)
	kept := mustDevaipod(t, env, "delete", name, "--keep-volumes", "-o", "json")
	var keeping struct {
		Removing []struct{ Kind, Name string }
	}
	json.Unmarshal([]byte(kept.stdout), &keeping)
	for _, o := range keeping.Removing {
		if o.Kind == "volume" {
			t.Errorf("delete --keep-volumes says it removes volume %s", o.Name)
		}
	}
	if len(keeping.Removing) == 0 {
		t.Errorf("delete --keep-volumes -o json: %s", kept)
	}
	waitFor(t, 30*time.Second, "the background removal", func() bool {
		_, err := os.Stat(mark)
		return err != nil
	})
	left := labelled(t, name)
	if len(left) == 0 {
		t.Fatal("delete --keep-volumes removed the volumes")
	}
	for _, o := range left {
		if !strings.HasPrefix(o, "devaipod-"+name+"-") {
			t.Errorf("delete --keep-volumes left %s, not a volume", o)
		}
	}
	mustDevaipod(t, env, "delete", "--wait", name)
	if left := labelled(t, name); len(left) > 0 {
		t.Errorf("delete --wait left %v", left)
	}
}

// findProcess returns the pid of a process whose command line is cmdline
// (NUL-separated), or "".
func findProcess(cmdline string) string {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && string(b) == cmdline {
			return e.Name()
		}
	}
	return ""
}

// processState is the state letter of /proc/PID/stat, "" when there is no
// such process.
func processState(pid string) string {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return "?"
}
