package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/devaipod/devaipod/internal/cmdline"
)

// hangup is what a terminal's end does to the processes of its session,
// for a command devaipod attach or exec ran in a container: podman keeps
// an exec's processes running when its client goes, so devaipod, whose
// terminal closed, runs this in the same container. The session's
// processes are those whose environment holds the entry --env (devaipod
// puts a token of its own there); each gets SIGHUP, as from a closed
// terminal, and one that neither ignores it (nohup) nor ends within
// hangupGrace is killed.

// hangupGrace is how long a process has to end after its SIGHUP.
const hangupGrace = time.Second

func newHangupFlagSet(entry *string) *flag.FlagSet {
	fs := flag.NewFlagSet("hangup", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper hangup --env NAME=VALUE

Send SIGHUP to every process whose environment holds NAME=VALUE (of those
whose environment this user can read), as a closed terminal does; kill those
that neither ignore it nor end within a second.
`)
		fs.PrintDefaults()
	}
	fs.StringVar(entry, "env", "", "the `NAME=VALUE` entry that marks the session's processes")
	return fs
}

func runHangup(args []string, stdout, stderr io.Writer) int {
	var entry string
	fs := newHangupFlagSet(&entry)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	if !strings.Contains(entry, "=") {
		fmt.Fprintf(stderr, "%shangup needs --env NAME=VALUE\n", logPrefix)
		return 2
	}
	pids := sessionPids("/proc", entry)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGHUP)
	}
	deadline := time.Now().Add(hangupGrace)
	for _, pid := range pids {
		for time.Now().Before(deadline) && alive("/proc", pid) && !ignoresHangup("/proc", pid) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive("/proc", pid) && !ignoresHangup("/proc", pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return 0
}

// sessionPids are the processes under proc whose environment holds entry,
// this one left out.
func sessionPids(proc, entry string) []int {
	dirs, _ := filepath.Glob(filepath.Join(proc, "[0-9]*"))
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if string(kv) == entry {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// ignoresHangup reads SigIgn of /proc/PID/status: bit 0 is SIGHUP.
func ignoresHangup(proc string, pid int) bool {
	status, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(status)) {
		if mask, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			bits, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
			return err == nil && bits&1 != 0
		}
	}
	return false
}

// alive: pid exists and is no zombie.
func alive(proc string, pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	status, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "status"))
	return err == nil && !strings.Contains(string(status), "\nState:\tZ")
}
