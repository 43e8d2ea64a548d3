package podman

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/devaipod/devaipod/pod/plan"
	"go.podman.io/common/pkg/seccomp"
	"golang.org/x/sys/unix"
)

// namespaceFlags are the clone/unshare flags that create namespaces.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

// AgentSeccompProfile is the JSON of the agent's profile: podman's default
// without namespace creation, ptrace and process_vm_*. A cluster's nodes
// need it as a Localhost profile (devaipod kube seccomp-profile).
func AgentSeccompProfile() ([]byte, error) {
	p := seccomp.DefaultProfile()
	// (setns is refused by the default profile without CAP_SYS_ADMIN.)
	restricted := []string{"clone", "clone3", "unshare", "ptrace", "process_vm_readv", "process_vm_writev"}
	for _, sc := range p.Syscalls {
		if sc.Action == seccomp.ActAllow {
			sc.Names = slices.DeleteFunc(sc.Names, func(n string) bool { return slices.Contains(restricted, n) })
		}
	}
	p.Syscalls = slices.DeleteFunc(p.Syscalls, func(sc *seccomp.Syscall) bool { return len(sc.Names) == 0 })
	noNamespace := []*seccomp.Arg{{Index: 0, Value: namespaceFlags, ValueTwo: 0, Op: seccomp.OpMaskedEqual}}
	eperm, enosys := uint(unix.EPERM), uint(unix.ENOSYS)
	p.Syscalls = append(p.Syscalls,
		// Flags are clone's first argument on x86-64 and arm64 (the
		// second on s390x, which this profile does not cover: there
		// clone is refused outright by the default action).
		&seccomp.Syscall{Names: []string{"clone"}, Action: seccomp.ActAllow, Args: noNamespace,
			Includes: seccomp.Filter{Arches: []string{"amd64", "arm64"}}},
		&seccomp.Syscall{Names: []string{"unshare"}, Action: seccomp.ActAllow, Args: noNamespace},
		// clone3 passes its flags in memory, out of seccomp's sight: make
		// it look absent, so that libc falls back to clone.
		&seccomp.Syscall{Names: []string{"clone3"}, Action: seccomp.ActErrno, ErrnoRet: &enosys},
		// No reading or steering of other processes of the container,
		// where yama's ptrace_scope is 0: its init and bridges, or the
		// verify battery itself (whose report the agent could falsify).
		&seccomp.Syscall{Names: []string{"ptrace", "process_vm_readv", "process_vm_writev"}, Action: seccomp.ActErrno, ErrnoRet: &eperm},
	)
	return json.MarshalIndent(p, "", " ")
}

// seccompProfileFile writes the named profile where podman can read it and
// returns its path. Podman reads the file when it creates the container
// (and again when it starts it after a reboot), so it lives in the user's
// cache, named by its content.
func seccompProfileFile(name string) (string, error) {
	if name != plan.SeccompAgent {
		return "", fmt.Errorf("unknown seccomp profile %q", name)
	}
	data, err := AgentSeccompProfile()
	if err != nil {
		return "", err
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("seccomp profile: %w", err)
	}
	sum := sha256.Sum256(data)
	file := filepath.Join(dir, "devaipod", "seccomp-"+name+"-"+hex.EncodeToString(sum[:6])+".json")
	if _, err := os.Stat(file); err == nil {
		return file, nil
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return "", fmt.Errorf("seccomp profile: %w", err)
	}
	tmp := file + fmt.Sprintf(".%d", os.Getpid())
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return "", fmt.Errorf("seccomp profile: %w", err)
	}
	return file, os.Rename(tmp, file)
}
