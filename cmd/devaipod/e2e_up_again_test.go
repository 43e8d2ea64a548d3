package main

import (
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestE2EUpAgain runs up twice on one name: the same source finds the pod
// and changes nothing, another source is refused, a stopped pod is
// started; and code prints the URI that attaches VS Code to it.
func TestE2EUpAgain(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	cfg := standInConfig(t, "")
	name := uniqueName("again")
	cleanup(t, name)
	podman := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("podman", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("podman %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// snapshot is every object of the pod and when each container last
	// started: a new object, or a restart, changes it.
	snapshot := func() string {
		t.Helper()
		objs := labelled(t, name)
		slices.Sort(objs)
		started := podman("ps", "-a", "--filter", "label=io.devaipod.pod="+name, "--format", "{{.Names}} {{.StartedAt}}")
		lines := strings.Split(started, "\n")
		slices.Sort(lines)
		return strings.Join(objs, " ") + "\n" + strings.Join(lines, "\n")
	}
	podState := func() string { return podman("pod", "inspect", "--format", "{{.State}}", "devaipod-"+name) }
	decode := func(r result) map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, r)
		}
		return m
	}

	made := mustDevaipod(t, nil, "--config", cfg, "-o", "json", "up", repo, "--name", name)
	first := decode(made)
	// The default limits too: up says where the host ignores them.
	unenforced, _ := limitsUnenforced(t)
	if warned := strings.Contains(made.stderr, "this host does not enforce the pod's resource limits (agent memory 8g, pids 4096; proxy memory 256m, pids 256)"); warned != unenforced {
		t.Errorf("up with the default limits warned: %v; want %v\n%s", warned, unenforced, made.stderr)
	}
	if first["existing"] != false {
		t.Errorf("a new pod's JSON says existing %v; want false", first["existing"])
	}
	before := snapshot()
	if !strings.Contains(before, "devaipod-"+name+"-workspace") {
		t.Fatalf("snapshot lacks the workspace container:\n%s", before)
	}

	t.Run("same source: already running, nothing changes", func(t *testing.T) {
		r := mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", name)
		want := "Pod " + name + " is already running (from https://git.example.test/org/fixture.git at "
		if !strings.Contains(r.stdout, want) || strings.Contains(r.stdout, "is ready") {
			t.Errorf("second up does not say the pod is already running (%q):\n%s", want, r)
		}
		for _, line := range []string{"devaipod exec " + name, "devaipod attach " + name, "devaipod code " + name} {
			if !strings.Contains(r.stdout, line) {
				t.Errorf("second up does not say how to get in (%q):\n%s", line, r)
			}
		}
		if strings.Contains(r.stderr, "cloning") {
			t.Errorf("second up cloned the repository:\n%s", r)
		}
		again := decode(mustDevaipod(t, nil, "--config", cfg, "-o", "json", "up", repo, "--name", name))
		for k := range maps.Keys(first) {
			if _, ok := again[k]; !ok {
				t.Errorf("JSON of an existing pod lacks %q: %v", k, again)
			}
		}
		if again["existing"] != true || again["name"] != name || again["workdir"] != "/workspaces/fixture" ||
			again["commit"] != first["commit"] || again["agent_url"] != first["agent_url"] || again["action"] != "none" {
			t.Errorf("JSON of the existing pod = %v; want existing, its name, workdir, commit %v and agent URL", again, first["commit"])
		}
		// A task is not dropped with exit 0: refused, with the way to
		// give it.
		task := devaipod(t, nil, "--config", cfg, "up", repo, "add a README", "--name", name)
		if task.code == 0 || !strings.Contains(task.stderr, "up gives a task only to a new pod's agent") || !strings.Contains(task.stderr, "Hint: `devaipod attach "+name+"` gives its agent the task") {
			t.Errorf("up of an existing pod with a task:\n%s", task)
		}
		if after := snapshot(); after != before {
			t.Errorf("up of the same source changed podman:\nbefore\n%s\nafter\n%s", before, after)
		}
	})

	t.Run("a closed terminal leaves nothing of exec running", func(t *testing.T) { testHangUp(t, name) })

	t.Run("the default image has npm beside node", func(t *testing.T) {
		if r := devaipod(t, nil, "exec", name, "--", "npm", "--version"); r.code != 0 {
			t.Errorf("npm in the default image: %s", r)
		}
	})

	t.Run("another source: refused, pod untouched", func(t *testing.T) {
		other := fixtureRepo(t)
		remote := exec.Command("git", "-C", other, "remote", "set-url", "origin", "https://git.example.test/org/other.git")
		if out, err := remote.CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		r := devaipod(t, nil, "--config", cfg, "up", other, "--name", name)
		if r.code == 0 {
			t.Fatalf("up of another source under the same name succeeded:\n%s", r)
		}
		for _, want := range []string{"pod " + name + " exists", "https://git.example.test/org/fixture.git", "https://git.example.test/org/other.git", "Hint: pick another name with --name"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("refusal does not say %q:\n%s", want, r)
			}
		}
		if after := snapshot(); after != before {
			t.Errorf("refused up changed podman:\nbefore\n%s\nafter\n%s", before, after)
		}
		if s := podState(); s != "Running" {
			t.Errorf("pod is %s after the refused up; want Running", s)
		}
	})

	t.Run("dry run of the existing name", func(t *testing.T) {
		r := mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", name, "--dry-run")
		if !strings.Contains(r.stdout, "Pod "+name+" exists already (running") || !strings.Contains(r.stdout, "up would change nothing") || strings.Contains(r.stdout, "Plan for pod") {
			t.Errorf("dry run does not say what up would do with the existing pod:\n%s", r)
		}
	})

	folder := "/workspaces/fixture"
	authority := hex.EncodeToString([]byte(`{"containerName":"/devaipod-` + name + `-workspace"}`))
	wantURI := "vscode-remote://attached-container+" + authority + folder
	t.Run("code", func(t *testing.T) {
		r := mustDevaipod(t, nil, "code", name, "--print")
		if strings.TrimSpace(r.stdout) != wantURI {
			t.Errorf("code --print = %q; want %q", r.stdout, wantURI)
		}
		j := decode(mustDevaipod(t, nil, "-o", "json", "code", name, "--print"))
		if j["uri"] != wantURI || j["container"] != "devaipod-"+name+"-workspace" || j["folder"] != folder {
			t.Errorf("code -o json = %v", j)
		}
		// Without --print it runs code (a stand-in that records its
		// arguments).
		bin := t.TempDir()
		args := filepath.Join(bin, "args")
		if err := os.WriteFile(filepath.Join(bin, "code"), []byte("#!/bin/sh\nprintf '%s\\n' \"$@\" > "+args+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		mustDevaipod(t, []string{"PATH=" + bin + ":" + os.Getenv("PATH")}, "code", name)
		if got, _ := os.ReadFile(args); string(got) != "--folder-uri\n"+wantURI+"\n" {
			t.Errorf("code ran with %q; want --folder-uri %s", got, wantURI)
		}
	})

	t.Run("stopped: up starts it", func(t *testing.T) {
		mustDevaipod(t, nil, "stop", name)
		if s := podState(); s == "Running" {
			t.Fatalf("pod still running after stop")
		}
		if r := devaipod(t, nil, "code", name, "--print"); r.code == 0 || !strings.Contains(r.stderr, "not running") || !strings.Contains(r.stderr, "devaipod start") {
			t.Errorf("code of a stopped pod: %s; want not running, with the hint to start it", r)
		}
		dry := mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", name, "--dry-run")
		if !strings.Contains(dry.stdout, "up would start it") {
			t.Errorf("dry run of a stopped pod does not say up would start it:\n%s", dry)
		}
		if s := podState(); s == "Running" {
			t.Errorf("the dry run started the pod")
		}
		stopped := snapshot()
		r := mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", name)
		if !strings.Contains(r.stdout, "Pod "+name+" was not running (") || !strings.Contains(r.stdout, "started it") || !strings.Contains(r.stdout, "devaipod exec "+name) {
			t.Errorf("up of a stopped pod does not say it started it:\n%s", r)
		}
		if s := podState(); s != "Running" {
			t.Errorf("pod is %s after up; want Running", s)
		}
		st := decode(mustDevaipod(t, nil, "-o", "json", "status", name))
		if st["agent_ready"] != true {
			t.Errorf("the agent does not answer after up started the pod: %v", st)
		}
		objs := func(s string) string { return strings.SplitN(s, "\n", 2)[0] }
		if after := snapshot(); objs(after) != objs(before) || after == stopped {
			t.Errorf("up of a stopped pod made objects, or started nothing:\nbefore\n%s\nstopped\n%s\nafter\n%s", before, stopped, after)
		}
	})

	t.Run("make demo replaces a pod whose agent did nothing", func(t *testing.T) {
		if r := demoReplace(t, name); r.code != 0 {
			t.Fatalf("%s", r)
		}
		if left := labelled(t, name); len(left) > 0 {
			t.Errorf("the pod is left: %v", left)
		}
	})
}
