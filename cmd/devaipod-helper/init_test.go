package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helper is a running devaipod-helper process (this test binary, see
// TestMain).
type helper struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout *bufio.Reader
	stderr fileText
	done   chan struct{}
}

// startHelper runs devaipod-helper with args. Its stdout, which the child of
// init inherits, is read line by line with h.line; its stderr is kept for
// the failure messages.
func startHelper(t *testing.T, args ...string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	// Under -race, a process sleeps 1s before exiting unless told not to.
	cmd.Env = append(os.Environ(), asHelperEnv+"=1", "GORACE=atexit_sleep_ms=0")
	// A plain pipe rather than StdoutPipe: Wait must not close the read
	// end while the test still reads what the child wrote.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	cmd.Stdout = w
	// A file, not a buffer: Wait would wait for every process holding a
	// buffer's pipe, including the leftovers that init leaves behind.
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	h := &helper{t: t, cmd: cmd, stdout: bufio.NewReader(r), stderr: fileText(stderr.Name()), done: make(chan struct{})}
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		if !h.running() {
			return
		}
		// A failed test: SIGTERM first, so that init stops its child's
		// process group instead of leaving it behind.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-h.done
		}
	})
	return h
}

// line reads one line of the helper's stdout.
func (h *helper) line() string {
	h.t.Helper()
	type result struct {
		s   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := h.stdout.ReadString('\n')
		ch <- result{s, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			h.t.Fatalf("reading helper stdout: %v (stderr: %s)", r.err, h.stderr)
		}
		return strings.TrimSuffix(r.s, "\n")
	case <-time.After(5 * time.Second):
		h.t.Fatalf("no line on helper stdout within 5s (stderr: %s)", h.stderr)
		return ""
	}
}

func (h *helper) signal(sig syscall.Signal) {
	h.t.Helper()
	if err := h.cmd.Process.Signal(sig); err != nil {
		h.t.Fatalf("signal %v: %v", sig, err)
	}
}

// wait waits for the helper to exit and returns its exit code and how long
// the wait took.
func (h *helper) wait(timeout time.Duration) (int, time.Duration) {
	h.t.Helper()
	start := time.Now()
	select {
	case <-h.done:
	case <-time.After(timeout):
		h.t.Fatalf("helper did not exit within %v (stderr: %s)", timeout, h.stderr)
	}
	return h.cmd.ProcessState.ExitCode(), time.Since(start)
}

func (h *helper) running() bool {
	select {
	case <-h.done:
		return false
	default:
		return true
	}
}

// fileText prints as the content of the file it names.
type fileText string

func (f fileText) String() string {
	data, err := os.ReadFile(string(f))
	if err != nil {
		return err.Error()
	}
	return string(data)
}

func TestInitExitStatus(t *testing.T) {
	notExecutable := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		command    []string
		wantCode   int
		wantStderr string
	}{
		{name: "success", command: []string{"sh", "-c", "exit 0"}, wantCode: 0,
			wantStderr: "devaipod-helper: init: child exited with status 0"},
		{name: "failure", command: []string{"sh", "-c", "exit 7"}, wantCode: 7,
			wantStderr: "child exited with status 7"},
		{name: "killed by SIGKILL", command: []string{"sh", "-c", "kill -KILL $$"}, wantCode: 128 + 9,
			wantStderr: "child killed by signal 9 (killed), exiting 137"},
		{name: "killed by SIGTERM", command: []string{"sh", "-c", "kill -TERM $$"}, wantCode: 128 + 15},
		{name: "not found", command: []string{"/nonexistent/command"}, wantCode: 127,
			wantStderr: "start command"},
		{name: "not in PATH", command: []string{"devaipod-no-such-command"}, wantCode: 127,
			wantStderr: "executable file not found"},
		{name: "not executable", command: []string{notExecutable}, wantCode: 126,
			wantStderr: "permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := startHelper(t, append([]string{"init", "--"}, tt.command...)...)
			code, _ := h.wait(5 * time.Second)
			if code != tt.wantCode {
				t.Errorf("init -- %q exited %d; want %d (stderr: %s)", tt.command, code, tt.wantCode, h.stderr)
			}
			if !strings.Contains(h.stderr.String(), tt.wantStderr) {
				t.Errorf("stderr = %q; want it to contain %q", h.stderr, tt.wantStderr)
			}
		})
	}
}

func TestInitForwardsSignals(t *testing.T) {
	t.Parallel()
	// The shell runs a trap only once its foreground command is done, but
	// the wait builtin returns as soon as a trapped signal arrives.
	h := startHelper(t, "init", "--", "sh", "-c", `
		trap 'echo got USR1' USR1
		trap 'echo got HUP' HUP
		trap 'exit 3' TERM
		echo ready
		while :; do sleep 1 & wait $!; done`)
	if got := h.line(); got != "ready" {
		t.Fatalf("first line = %q; want %q", got, "ready")
	}
	for _, sig := range []struct {
		sig  syscall.Signal
		want string
	}{{syscall.SIGUSR1, "got USR1"}, {syscall.SIGHUP, "got HUP"}} {
		h.signal(sig.sig)
		if got := h.line(); got != sig.want {
			t.Errorf("after %v, line = %q; want %q", sig.sig, got, sig.want)
		}
	}
	h.signal(syscall.SIGTERM)
	if code, d := h.wait(3 * time.Second); code != 3 {
		t.Errorf("init exited %d after SIGTERM (in %v); want the child's 3 (stderr: %s)", code, d, h.stderr)
	}
}

func TestInitSignalsReachTheProcessGroup(t *testing.T) {
	t.Parallel()
	// A background job of the child (same process group, as always in a
	// non-interactive shell) gets the forwarded signal too.
	h := startHelper(t, "init", "--", "sh", "-c", `
		trap 'echo child got USR2' USR2
		sh -c 'trap "echo grandchild got USR2; exit 0" USR2; echo ready; while :; do sleep 0.05; done' &
		wait # returns at the trapped signal
		wait # for the grandchild`)
	if got := h.line(); got != "ready" {
		t.Fatalf("first line = %q; want %q", got, "ready")
	}
	h.signal(syscall.SIGUSR2)
	got := []string{h.line(), h.line()}
	slices.Sort(got)
	if want := []string{"child got USR2", "grandchild got USR2"}; !slices.Equal(got, want) {
		t.Errorf("lines = %q; want %q", got, want)
	}
	if code, _ := h.wait(3 * time.Second); code != 0 {
		t.Errorf("init exited %d; want 0 (stderr: %s)", code, h.stderr)
	}
}

// procState returns the state letter and parent pid of pid from
// /proc/PID/stat, or ok=false if there is no such process.
func procState(t *testing.T, pid int) (state string, ppid int, ok bool) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return "", 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	// "PID (COMM) STATE PPID ...", where COMM may hold spaces and parens.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	ppid, err = strconv.Atoi(fields[1])
	if err != nil {
		t.Fatalf("parse /proc/%d/stat %q: %v", pid, data, err)
	}
	return fields[0], ppid, true
}

func TestInitReapsOrphans(t *testing.T) {
	t.Parallel()
	// The subshell starts a short sleep and exits at once: the sleep is
	// orphaned, reparented to init (a child subreaper) and must be reaped
	// by init when it exits, while init's own child is still running.
	pidFile := filepath.Join(t.TempDir(), "orphan.pid")
	h := startHelper(t, "init", "--", "sh", "-c",
		`(sleep 0.3 & echo $! > "$1"); echo ready; exec sleep 30`, "sh", pidFile)
	if got := h.line(); got != "ready" {
		t.Fatalf("first line = %q; want %q", got, "ready")
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(3 * time.Second)
	for {
		state, ppid, ok := procState(t, orphan)
		if !ok {
			break // reaped
		}
		if ppid != h.cmd.Process.Pid {
			t.Fatalf("orphan %d has parent %d (state %s); want init, %d", orphan, ppid, state, h.cmd.Process.Pid)
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d still there after 3s in state %s; want it reaped (stderr: %s)", orphan, state, h.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !h.running() {
		t.Fatal("init exited early")
	}
	h.signal(syscall.SIGTERM)
	if code, _ := h.wait(3 * time.Second); code != 128+15 {
		t.Errorf("init exited %d after SIGTERM to a plain sleep; want 143 (stderr: %s)", code, h.stderr)
	}
}

func TestInitLeftovers(t *testing.T) {
	t.Run("stopped with the child's process group", func(t *testing.T) {
		t.Parallel()
		// The background sleep dies of the SIGTERM that init sends to
		// the group when the child exits, so init need not wait for it.
		h := startHelper(t, "init", "--grace", "5s", "--", "sh", "-c", "sleep 30 & exit 0")
		if code, d := h.wait(3 * time.Second); code != 0 || d > 2*time.Second {
			t.Errorf("init exited %d after %v; want 0 well within --grace 5s (stderr: %s)", code, d, h.stderr)
		}
	})

	t.Run("waited for at most --grace", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(t.TempDir(), "straggler.pid")
		// SIG_IGN survives exec: this sleep ignores the SIGTERM.
		h := startHelper(t, "init", "--grace", "300ms", "--", "sh", "-c",
			`trap "" TERM; sleep 5 & echo $! > "$1"`, "sh", pidFile)
		code, d := h.wait(3 * time.Second)
		if data, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if code != 0 || d < 250*time.Millisecond || d > 2*time.Second {
			t.Errorf("init exited %d after %v; want 0 after about 300ms (stderr: %s)", code, d, h.stderr)
		}
	})
}

func TestInitWithoutCommand(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			sock := filepath.Join(t.TempDir(), "run", "x.sock")
			h := startHelper(t, "init", "--expose", "unix:"+sock+"=tcp:127.0.0.1:1")
			waitFor(t, "the socket", func() bool {
				_, err := os.Stat(sock)
				return err == nil
			})
			// Signals other than SIGTERM and SIGINT do not stop it.
			h.signal(syscall.SIGHUP)
			time.Sleep(100 * time.Millisecond)
			if !h.running() {
				t.Fatalf("init exited on SIGHUP (stderr: %s)", h.stderr)
			}
			h.signal(sig)
			if code, d := h.wait(2 * time.Second); code != 0 || d > time.Second {
				t.Errorf("init exited %d %v after %v; want 0 within 1s (stderr: %s)", code, d, sig, h.stderr)
			}
			if _, err := os.Lstat(sock); !os.IsNotExist(err) {
				t.Errorf("Lstat(%s) error = %v; want the socket removed on exit", sock, err)
			}
		})
	}
}

func TestInitBridgeFailureIsFatal(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	marker := filepath.Join(t.TempDir(), "ran")
	h := startHelper(t, "init", "--forward", "tcp:"+busy.Addr().String()+"=unix:/nonexistent.sock",
		"--", "touch", marker)
	if code, _ := h.wait(3 * time.Second); code != 1 {
		t.Errorf("init exited %d; want 1", code)
	}
	want := fmt.Sprintf("devaipod-helper: init: bridge tcp:%s -> unix:/nonexistent.sock: listen tcp %[1]s: bind: address already in use\n", busy.Addr())
	if got := h.stderr.String(); got != want {
		t.Errorf("stderr = %q; want %q", got, want)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran although a bridge failed")
	}
}

func TestInitBridgesEndToEnd(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "agent here")
	}))
	t.Cleanup(srv.Close)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	port := closedPort(t)
	h := startHelper(t, "init",
		"--expose", "unix:"+sock+"=tcp:"+srv.Listener.Addr().String(),
		"--forward", "tcp:"+port+"=unix:"+sock,
		"--", "sleep", "30")

	var body []byte
	waitFor(t, "an answer through the bridges", func() bool {
		resp, err := directClient().Get("http://" + port + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, err = io.ReadAll(resp.Body)
		return err == nil
	})
	if string(body) != "agent here" {
		t.Errorf("body = %q; want %q", body, "agent here")
	}
	h.signal(syscall.SIGTERM)
	h.wait(3 * time.Second)
	want := fmt.Sprintf("devaipod-helper: init: bridges unix:%s -> tcp:%s, tcp:%s -> unix:%s; running [\"sleep\" \"30\"]\n",
		sock, srv.Listener.Addr(), port, sock)
	if !strings.Contains(h.stderr.String(), want) {
		t.Errorf("stderr = %q; want the startup line %q", h.stderr, want)
	}
}

// TestWaitForFile: init's --wait-for returns once the file is there, and
// gives up on SIGTERM (the pod stopped while up's setup commands ran).
func TestWaitForFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "setup-done")
	sigs := make(chan os.Signal, 1)
	// A folder of that name (a repository's) is not the file.
	dir := filepath.Join(t.TempDir(), "setup-done")
	os.Mkdir(dir, 0o755)
	go func() {
		time.Sleep(150 * time.Millisecond)
		sigs <- syscall.SIGTERM
	}()
	if waitForFile(dir, sigs) {
		t.Error("init took a folder for the file")
	}
	go func() {
		time.Sleep(150 * time.Millisecond)
		os.WriteFile(file, nil, 0o644)
	}()
	if !waitForFile(file, sigs) {
		t.Error("the file appeared, yet init did not go on")
	}
	sigs <- syscall.SIGCHLD // not a reason to stop
	go func() {
		time.Sleep(150 * time.Millisecond)
		sigs <- syscall.SIGTERM
	}()
	if waitForFile(filepath.Join(t.TempDir(), "never"), sigs) {
		t.Error("init went on without the file")
	}
}
