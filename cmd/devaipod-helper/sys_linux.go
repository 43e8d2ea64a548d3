package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>, which
// package syscall does not define.
const prSetChildSubreaper = 36

// setChildSubreaper makes orphaned descendants this process's children, so
// that it can reap them even when it is not PID 1.
func setChildSubreaper() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return errno
	}
	return nil
}

// prSetDumpable is PR_SET_DUMPABLE from <linux/prctl.h>.
const prSetDumpable = 4

// setNotDumpable keeps other processes of the same user out of this one:
// the kernel then wants CAP_SYS_PTRACE to open its /proc/PID/mem, environ
// or fd, or to attach to it. In the agent's container the helper (its
// init, its bridges, the probes devaipod runs there) shares the agent's
// uid, and its seccomp profile does not cover /proc/PID/mem. A program the
// helper starts is dumpable again after its execve.
func setNotDumpable() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// isTerminal reports whether fd is a terminal.
func isTerminal(fd int) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}

// oPath is O_PATH from <fcntl.h> (the same on the architectures devaipod
// runs on), which package syscall does not define.
const oPath = 0x200000

// dialUnixNoFollow connects to the unix socket at path only if path itself
// is a socket, not a symlink: the socket's directory may be writable by a
// less trusted container (the agent owns the directory of agent.sock), which
// could otherwise point the trusted side's connections at any socket it can
// name. The path is opened with O_PATH|O_NOFOLLOW and connected through
// /proc/self/fd, so there is no window between the check and the connect.
func dialUnixNoFollow(ctx context.Context, d *net.Dialer, path string) (net.Conn, error) {
	fd, err := syscall.Open(path, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("open", err)}
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return nil, fmt.Errorf("dial unix %s: not a socket (a symlink or a file put in its place)", path)
	}
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
}

// madeToChanged is how long after a file's birth a change still counts as
// part of its making: an install writes a file, then sets its mode and its
// times, within milliseconds.
const madeToChanged = time.Second

// changedAfterMade tells whether the file at p (not followed) changed past
// madeToChanged after its birth; known is false where the filesystem does
// not keep birth times.
func changedAfterMade(p string) (changed, known bool) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME|unix.STATX_CTIME, &st); err != nil ||
		st.Mask&unix.STATX_BTIME == 0 {
		return false, false
	}
	born := time.Unix(st.Btime.Sec, int64(st.Btime.Nsec))
	changedAt := time.Unix(st.Ctime.Sec, int64(st.Ctime.Nsec))
	return changedAt.Sub(born) > madeToChanged, true
}
