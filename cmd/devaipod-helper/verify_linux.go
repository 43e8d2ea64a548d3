package main

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

// hostSyscalls are the verify probes that ask the kernel directly.
func hostSyscalls() verifySyscalls {
	return verifySyscalls{
		mountTmpfs: mountTmpfs,
		rawSockets: openRawSockets,
		readMemory: readProcessMemory,
		openMemory: func(pid int) error {
			f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
			if err == nil {
				f.Close()
			}
			return err
		},
		run:    runSelf,
		statfs: statfsInfo,
		signal: func(pid int) error { return syscall.Kill(pid, 0) },
	}
}

func mountTmpfs(dir string) error {
	err := syscall.Mount("devaipod-verify", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "size=4k")
	if err == nil {
		syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	return err
}

func openRawSockets() []namedErr {
	var out []namedErr
	for _, s := range []struct {
		what          string
		family, proto int
	}{
		{"AF_INET SOCK_RAW", syscall.AF_INET, syscall.IPPROTO_ICMP},
		{"AF_INET6 SOCK_RAW", syscall.AF_INET6, syscall.IPPROTO_ICMPV6},
		// Protocol 0: a packet socket that receives nothing until bound;
		// creating it needs CAP_NET_RAW all the same.
		{"AF_PACKET SOCK_RAW", syscall.AF_PACKET, 0},
	} {
		fd, err := syscall.Socket(s.family, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, s.proto)
		if err == nil {
			syscall.Close(fd)
		}
		out = append(out, namedErr{s.what, err})
	}
	return out
}

// sysProcessVMReadv is process_vm_readv's number; package syscall does
// not define it for amd64.
var sysProcessVMReadv = map[string]uintptr{"amd64": 310, "arm64": 270}[runtime.GOARCH]

// readProcessMemory asks for one byte at address 0 of pid. The kernel
// checks ptrace access (PTRACE_MODE_ATTACH, Yama included) before it looks
// at the address, so EPERM means denied, while EFAULT means access was
// granted and only the address was bad. Nothing is read, and unlike
// PTRACE_ATTACH the target is never stopped.
func readProcessMemory(pid int) error {
	if sysProcessVMReadv == 0 {
		return errVerifyUnsupported
	}
	var b [1]byte
	local := syscall.Iovec{Base: &b[0]}
	local.SetLen(1)
	var remote syscall.Iovec
	remote.SetLen(1)
	_, _, errno := syscall.Syscall6(sysProcessVMReadv, uintptr(pid),
		uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
	switch errno {
	case 0, syscall.EFAULT:
		return nil
	}
	return errno
}

// runSelf runs argv, in a new user namespace when newUserNS. The clone
// happens in the child (a Go process has threads, so unshare(2) of a user
// namespace would fail with EINVAL in this process whatever the policy),
// and this process is left as it was.
func runSelf(ctx context.Context, argv []string, newUserNS bool) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if newUserNS {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	}
	return cmd.Run()
}

// tmpfsMagic is TMPFS_MAGIC from <linux/magic.h>.
const tmpfsMagic = 0x01021994

func statfsInfo(path string) (fsInfo, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return fsInfo{}, err
	}
	return fsInfo{tmpfs: int64(st.Type) == tmpfsMagic, bytes: uint64(st.Blocks) * uint64(st.Bsize)}, nil
}
