package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ---- processes ----

// listPIDs lists the processes in /proc.
func (v *verifier) listPIDs() ([]int, error) {
	entries, err := os.ReadDir(v.path("/proc"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// procStat is what /proc/PID/stat tells about a process.
type procStat struct {
	comm    string
	ppid    int
	kthread bool
}

// pfKthread is PF_KTHREAD, the flag of kernel threads in /proc/PID/stat.
const pfKthread = 0x00200000

func (v *verifier) procStat(pid int) (procStat, error) {
	data, err := v.readFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// "PID (COMM) STATE PPID PGRP SESSION TTY TPGID FLAGS ...": COMM may
	// hold spaces and parentheses, so split after its last ")".
	s := string(data)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStat{}, fmt.Errorf("unreadable stat %q", s)
	}
	st := procStat{comm: s[open+1 : closing]}
	fields := strings.Fields(s[closing+1:])
	if len(fields) < 7 {
		return procStat{}, fmt.Errorf("short stat %q", s)
	}
	st.ppid, _ = strconv.Atoi(fields[1])
	flags, _ := strconv.ParseUint(fields[6], 10, 64)
	st.kthread = flags&pfKthread != 0
	return st, nil
}

func (v *verifier) comm(pid int) string {
	st, err := v.procStat(pid)
	if err != nil {
		return "?"
	}
	return st.comm
}

// statusField returns a field of /proc/PID/status ("Uid", "NoNewPrivs").
func (v *verifier) statusField(pid, field string) (string, error) {
	data, err := v.readFile("/proc/" + pid + "/status")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, val, ok := strings.Cut(line, ":"); ok && k == field {
			return strings.TrimSpace(val), nil
		}
	}
	return "", fmt.Errorf("no %s in /proc/%s/status", field, pid)
}

// foreignProcess says why a visible process is not this container's, or
// "" if it is. This container's processes share its mount namespace; one
// whose namespace cannot be read (another uid, or not dumpable) counts as
// this container's only when it is in the same cgroup.
func (v *verifier) foreignProcess(pid int, ownMnt, ownCgroup string) (why string, gone bool) {
	st, err := v.procStat(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return "", true
	}
	if err != nil {
		return "unreadable stat: " + errText(err), false
	}
	if st.kthread {
		return "a kernel thread: this is the host's process table", false
	}
	if st.ppid == v.pid {
		// The battery's own child (the unshare probe runs
		// devaipod-helper version): this container's, and non-dumpable
		// once its main has run, so its namespaces cannot be read.
		return "", false
	}
	dir := "/proc/" + strconv.Itoa(pid)
	mnt, err := os.Readlink(v.path(dir + "/ns/mnt"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", true
	case err == nil && mnt != ownMnt:
		return "another mount namespace", false
	case err == nil:
		return "", false
	}
	cg, cgErr := v.readFile(dir + "/cgroup")
	if cgErr == nil && string(cg) == ownCgroup {
		return "", false
	}
	return "cannot be inspected (" + errText(err) + ") and is in another cgroup", false
}

func (v *verifier) processes(_ context.Context) (verifyResult, string) {
	ownMnt, err := os.Readlink(v.path("/proc/self/ns/mnt"))
	if err != nil {
		return verifyNA, "cannot read this process's mount namespace: " + errText(err)
	}
	ownCgroup, _ := v.readFile("/proc/self/cgroup")
	pids, err := v.listPIDs()
	if err != nil {
		return verifyFail, "cannot list /proc: " + errText(err)
	}
	var foreign []string
	visible, signalled := 0, 0
	for _, pid := range pids {
		why, gone := v.foreignProcess(pid, ownMnt, string(ownCgroup))
		if gone {
			continue
		}
		visible++
		if why == "" {
			continue
		}
		uid, _ := v.statusField(strconv.Itoa(pid), "Uid")
		uid, _, _ = strings.Cut(uid, "\t")
		desc := fmt.Sprintf("PID %d %s (uid %s): %s", pid, v.comm(pid), uid, why)
		if v.sys.signal(pid) == nil {
			signalled++
			desc += ", can be signalled"
		}
		foreign = append(foreign, desc)
	}
	if len(foreign) > 0 {
		return verifyFail, fmt.Sprintf("%d of %d visible processes are not this container's (%d can be signalled): %s",
			len(foreign), visible, signalled, listSome(foreign, 4))
	}
	return verifyPass, fmt.Sprintf("%d processes visible, all in this container's mount namespace", visible)
}

func (v *verifier) ptrace(_ context.Context) (verifyResult, string) {
	pids, err := v.listPIDs()
	if err != nil {
		return verifyFail, "cannot list /proc: " + errText(err)
	}
	// Not this process nor its children (a debugger may always trace
	// those; the unshare probe's child may be running); PID 1 first.
	var targets []int
	for _, pid := range pids {
		if pid == v.pid {
			continue
		}
		if st, err := v.procStat(pid); err != nil || st.ppid == v.pid || st.kthread {
			continue
		}
		targets = append(targets, pid)
	}
	if len(targets) > 10 {
		targets = targets[:10]
	}
	scope := ""
	if s, err := v.readFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil {
		scope = "; kernel.yama.ptrace_scope=" + strings.TrimSpace(string(s))
	}
	if s, err := v.statusField("self", "Seccomp"); err == nil {
		scope += "; seccomp mode " + s
	}
	// No kernel setting (yama's ptrace_scope included) refuses a process
	// its own memory; devaipod's seccomp profile does. So this tells that
	// the profile is in force, and that it, not a setting another host
	// may lack, is what refuses the others.
	self := v.sys.readMemory(v.pid)
	switch {
	case errors.Is(self, errVerifyUnsupported):
		return verifyNA, "process_vm_readv: " + self.Error()
	case self == nil:
		return verifyFail, "process_vm_readv of this process succeeded: devaipod's seccomp profile is not in force" + scope
	}
	if len(targets) == 0 {
		return verifyNA, "no other process visible to attach to"
	}
	var granted []string
	denied := []namedErr{{"itself", self}}
	for _, pid := range targets {
		err := v.sys.readMemory(pid)
		switch {
		case errors.Is(err, errVerifyUnsupported):
			return verifyNA, "process_vm_readv: " + err.Error()
		case errors.Is(err, syscall.ESRCH):
		case err == nil:
			granted = append(granted, fmt.Sprintf("PID %d (%s)", pid, v.comm(pid)))
		default:
			denied = append(denied, namedErr{fmt.Sprintf("PID %d", pid), err})
		}
	}
	if len(granted) > 0 {
		return verifyFail, "memory access granted to " + listSome(granted, 4) + scope
	}
	if len(denied) == 1 { // itself only
		return verifyNA, "every process to attach to exited first"
	}
	return verifyPass, groupErrors(denied) + scope
}

// untrustedWorkspace reports what devaipod verify found in the workspace
// of an untrusted repository's pod, which the agent cannot see: it passes
// the findings in.
func (v *verifier) untrustedWorkspace(_ context.Context) (verifyResult, string) {
	switch {
	case v.opts.withheldChecked == "":
		return verifyNA, "checked by devaipod verify, from the workspace, when the repository is not trusted (a trusted one's workspace holds your trusted values by design)"
	case len(v.opts.withheldProblems) > 0:
		return verifyFail, listSome(v.opts.withheldProblems, 5)
	}
	return verifyPass, v.opts.withheldChecked
}

// trustedGit reports what devaipod verify found in the workspace's .git,
// which the agent cannot see: it passes the findings in.
func (v *verifier) trustedGit(_ context.Context) (verifyResult, string) {
	switch {
	case !v.opts.trustedChecked:
		return verifyNA, "the workspace's .git is inspected by devaipod verify, from the workspace"
	case len(v.opts.trustedProblems) > 0:
		return verifyFail, listSome(v.opts.trustedProblems, 5)
	}
	return verifyPass, "no commondir, gitfile, alternates, hook or program-running configuration"
}

// procMem opens /proc/PID/mem of devaipod's own processes here (the
// helper: the container's init and what devaipod runs in it), which the
// seccomp profile does not cover: only their being non-dumpable keeps a
// process of the same uid out.
func (v *verifier) procMem(_ context.Context) (verifyResult, string) {
	pids, err := v.listPIDs()
	if err != nil {
		return verifyFail, "cannot list /proc: " + errText(err)
	}
	var granted, tried []string
	var denied []namedErr
	for _, pid := range pids {
		// Not this battery, nor the children it runs at the same time
		// (the unshare probe runs devaipod-helper version), which are
		// dumpable for the moment before their main makes them not.
		if st, err := v.procStat(pid); pid == v.pid || err != nil || st.ppid == v.pid || !strings.HasPrefix(st.comm, "devaipod-") {
			continue
		}
		name := fmt.Sprintf("PID %d (%s)", pid, v.comm(pid))
		tried = append(tried, name)
		switch err := v.sys.openMemory(pid); {
		case errors.Is(err, errVerifyUnsupported):
			return verifyNA, "/proc/PID/mem: " + err.Error()
		case errors.Is(err, fs.ErrNotExist):
		case err == nil:
			granted = append(granted, name)
		default:
			denied = append(denied, namedErr{name, err})
		}
	}
	switch {
	case len(granted) > 0:
		return verifyFail, "opened /proc/PID/mem of " + listSome(granted, 4)
	case len(tried) == 0:
		return verifyNA, "no other process of devaipod here"
	case len(denied) == 0:
		return verifyNA, "every process to open exited first"
	}
	return verifyPass, groupErrors(denied)
}

// ---- privileges ----

func (v *verifier) noNewPrivs(_ context.Context) (verifyResult, string) {
	nnp, err := v.statusField("self", "NoNewPrivs")
	if err != nil {
		return verifyFail, "cannot read NoNewPrivs: " + errText(err)
	}
	if nnp != "1" {
		return verifyFail, "NoNewPrivs: " + nnp + ": a setuid program or file capabilities raise privileges"
	}
	return verifyPass, "NoNewPrivs: 1"
}

func (v *verifier) capabilities(_ context.Context) (verifyResult, string) {
	var held []string
	for _, f := range []string{"CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"} {
		val, err := v.statusField("self", f)
		if err != nil {
			if f == "CapAmb" {
				continue // older kernels have no ambient set
			}
			return verifyFail, "cannot read " + f + ": " + errText(err)
		}
		if n, err := strconv.ParseUint(val, 16, 64); err != nil || n != 0 {
			held = append(held, f+"="+val)
		}
	}
	if len(held) > 0 {
		return verifyFail, strings.Join(held, " ")
	}
	return verifyPass, "every capability set is 0"
}

func (v *verifier) setuid(ctx context.Context) (verifyResult, string) {
	var found []string
	entries := 0
	for _, dir := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/local/sbin", "/usr/libexec", "/usr/lib"} {
		root := v.path(dir)
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			entries++
			switch {
			case err != nil:
				return nil
			case entries > 100000 || ctx.Err() != nil:
				return filepath.SkipAll
			case d.IsDir():
				if strings.Count(strings.TrimPrefix(p, root), string(filepath.Separator)) >= 3 {
					return filepath.SkipDir
				}
				return nil
			case !d.Type().IsRegular():
				return nil
			}
			if fi, err := d.Info(); err == nil && fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				found = append(found, dir+strings.TrimPrefix(filepath.ToSlash(p), filepath.ToSlash(root)))
			}
			return nil
		})
	}
	nnp, _ := v.statusField("self", "NoNewPrivs")
	switch {
	case len(found) == 0:
		return verifyPass, "no setuid or setgid program in the image's bin folders"
	case nnp == "1":
		return verifyPass, fmt.Sprintf("%d setuid/setgid programs (%s), inert: no-new-privileges is set", len(found), listSome(found, 3))
	}
	return verifyFail, fmt.Sprintf("no-new-privileges is not set, and %d setuid/setgid programs are there: %s", len(found), listSome(found, 5))
}

func (v *verifier) mountProbe(_ context.Context) (verifyResult, string) {
	var dir string
	for _, parent := range []string{"/tmp", v.home} {
		if parent == "" {
			continue
		}
		if d, err := os.MkdirTemp(v.path(parent), ".devaipod-verify-mount-"); err == nil {
			dir = d
			break
		}
	}
	if dir == "" {
		return verifyNA, "no writable folder (/tmp, HOME) to mount on"
	}
	defer os.Remove(dir)
	err := v.sys.mountTmpfs(dir)
	switch {
	case errors.Is(err, errVerifyUnsupported):
		return verifyNA, "mount: " + err.Error()
	case err == nil:
		return verifyFail, "mounted a tmpfs (and unmounted it)"
	}
	return verifyPass, errText(err)
}

func (v *verifier) unshareProbe(ctx context.Context) (verifyResult, string) {
	if len(v.selfCommand) == 0 {
		return verifyNA, "cannot find this program to run it again"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The control run tells a refused namespace from a program that does
	// not start at all.
	if err := v.sys.run(ctx, v.selfCommand, false); err != nil {
		if errors.Is(err, errVerifyUnsupported) {
			return verifyNA, "unshare: " + err.Error()
		}
		return verifyNA, "cannot run this program again, even without a new namespace: " + errText(err)
	}
	err := v.sys.run(ctx, v.selfCommand, true)
	if err == nil {
		return verifyFail, "created a user namespace (in it the process is root with every capability, the start of most kernel exploits)"
	}
	return verifyPass, errText(err)
}

func (v *verifier) rawSocket(_ context.Context) (verifyResult, string) {
	var opened []string
	var denied []namedErr
	for _, a := range v.sys.rawSockets() {
		switch {
		case errors.Is(a.err, errVerifyUnsupported):
			return verifyNA, "raw sockets: " + a.err.Error()
		case a.err == nil:
			opened = append(opened, a.what)
		default:
			denied = append(denied, a)
		}
	}
	if len(opened) > 0 {
		return verifyFail, "opened " + strings.Join(opened, ", ")
	}
	return verifyPass, groupErrors(denied)
}
