package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testHangUp: when the terminal of a devaipod exec (or attach) closes, its
// command's processes in the container end as a terminal's would (SIGHUP:
// one under nohup lives on); podman alone keeps them running. Pod name
// must run.
func testHangUp(t *testing.T, name string) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ps := func(container string) string {
		r := devaipod(t, nil, "exec", name, "-c", container, "--", "sh", "-c",
			`for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done`)
		return r.stdout
	}
	for _, c := range []struct{ container, user, script, gone, kept string }{
		{"workspace", "", "nohup sleep 989 >/dev/null 2>&1 & echo started; exec sleep 987", "sleep 987", "sleep 989"},
		// Another user than root: root cannot read its environment.
		{"workspace", "nobody", "echo started; exec sleep 986", "sleep 986", ""},
		{"agent", "", "echo started; exec sleep 988", "sleep 988", ""},
	} {
		// Started as from a terminal: SIGHUP at its default.
		args := []string{"exec", name, "-c", c.container}
		if c.user != "" {
			args = append(args, "-u", c.user)
		}
		cmd := exec.Command(self, append(args, "--", "sh", "-c", c.script)...)
		cmd.Env = append(os.Environ(), execHangableEnv+"="+os.Getenv("DEVAIPOD_BIN"))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "started\n" {
			t.Fatalf("exec in the %s said %q", c.container, line)
		}
		if !strings.Contains(ps(c.container), c.gone) {
			t.Fatalf("%q does not run in the %s", c.gone, c.container)
		}
		cmd.Process.Signal(syscall.SIGHUP)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("exec in the %s did not end on SIGHUP", c.container)
		}
		left := ps(c.container)
		if strings.Contains(left, c.gone) {
			t.Errorf("%q runs on in the %s after its terminal closed:\n%s", c.gone, c.container, left)
		}
		if c.kept != "" && !strings.Contains(left, c.kept) {
			t.Errorf("%q, under nohup, did not live on in the %s:\n%s", c.kept, c.container, left)
		}
	}
}

// demoReplace runs hack/demo-replace.sh on pod name: make demo's way with
// the pod of an earlier run.
func demoReplace(t *testing.T, name string) result {
	t.Helper()
	cmd := exec.Command("../../hack/demo-replace.sh", name, "/tmp/demo-repo")
	cmd.Env = append(os.Environ(), "DEVAIPOD="+os.Getenv("DEVAIPOD_BIN"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{stderr: out.String(), code: code}
}
