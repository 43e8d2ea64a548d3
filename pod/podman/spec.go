package podman

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devaipod/devaipod/internal/size"

	"github.com/containers/podman/v5/pkg/specgen"
	"github.com/devaipod/devaipod/pod/plan"
	spec "github.com/opencontainers/runtime-spec/specs-go"
)

// hostSide is what a container spec needs from the podman host: the
// volumes' paths, for binds of paths inside them, and the seccomp profile.
type hostSide struct {
	mountpoints    map[string]string
	seccompProfile string
}

// bindSource is the host path a bind mounts. A path inside a volume must
// not pass through a symlink: the kernel would follow it on the host, so
// the repository's content would choose what gets mounted. (ScanTree keeps
// such paths out of plans; this holds the line where the path is local.)
func (h hostSide) bindSource(b plan.Bind) (string, error) {
	if b.Volume == "" {
		return b.HostPath, nil
	}
	mp := h.mountpoints[b.Volume]
	if mp == "" {
		return "", fmt.Errorf("volume %s has no mountpoint", b.Volume)
	}
	src := filepath.Join(mp, filepath.FromSlash(b.SubPath))
	if real, err := filepath.EvalSymlinks(src); err == nil {
		if realMP, err := filepath.EvalSymlinks(mp); err == nil && real != filepath.Join(realMP, filepath.FromSlash(b.SubPath)) {
			return "", fmt.Errorf("refusing to mount %s into the container: it passes through a symlink", b.SubPath)
		}
	}
	return src, nil
}

// containerSpec translates a planned container into podman's spec.
//
// Every container it describes holds a kernel key while it runs: runc
// gives it a session keyring of its own, charged to the rootless user's
// key quota (pod.KeysPerPod; doctor's "keys" row). The spec cannot turn
// that off for one container: specgen has no such field, and podman passes
// runc --no-new-keyring only when the service's containers.conf says
// [containers] keyring = false, for every container it runs. That setting
// is left to the user: with it, each container shares the session keyring
// of the rootless user namespace's root with every other container,
// every pod's agent included. Room for many pods is the key quota's
// sysctls (kernel.keys.maxkeys, maxbytes).
func containerSpec(pod string, c plan.ContainerSpec, host hostSide) (*specgen.SpecGenerator, error) {
	s := specgen.NewSpecGenerator(c.Image, false)
	s.Name = c.Name
	s.Pod = pod
	s.Entrypoint = c.Entrypoint
	s.Command = c.Command
	if c.Command == nil {
		s.Command = []string{} // don't inherit the image's CMD as arguments
	}
	s.User = c.User
	s.WorkDir = c.Workdir
	s.Env = c.Env
	// Not EnvSecrets: podman 4.3's inspect shows their values. Root-only
	// files instead, which `devaipod exec` turns into environment.
	for _, v := range slices.Sorted(maps.Keys(c.SecretEnv)) {
		s.Secrets = append(s.Secrets, specgen.Secret{Source: c.SecretEnv[v], Target: plan.SecretDir + "/" + v, Mode: 0o400,
			UID: uint32(c.SecretUID), GID: uint32(c.SecretUID)})
	}
	s.Labels = c.Labels
	s.CapDrop = c.CapDrop
	s.CapAdd = c.CapAdd
	s.NoNewPrivileges = &c.NoNewPrivileges
	s.ReadOnlyFilesystem = &c.ReadOnlyRoot
	if err := devcontainerSettings(s, c); err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	noExtraTmpfs := false
	s.ReadWriteTmpfs = &noExtraTmpfs
	stop := c.StopTimeout
	s.StopTimeout = &stop
	s.Umask = c.Umask
	if c.Network == plan.NetworkNone {
		s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	}
	if c.PrivateIPC {
		s.IpcNS = specgen.Namespace{NSMode: specgen.Private}
	}
	// A PID namespace of its own, whatever containers.conf says (pidns =
	// "host"), unless the devcontainer asked for another: delete kills the
	// agent by its init, which takes every process of its namespace along.
	if s.PidNS.NSMode == "" {
		s.PidNS = specgen.Namespace{NSMode: specgen.Private}
	}
	for _, m := range c.Mounts {
		var opts []string
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		s.Volumes = append(s.Volumes, &specgen.NamedVolume{Name: m.Volume, Dest: m.Dest, Options: opts})
	}
	for _, b := range c.Binds {
		src, err := host.bindSource(b)
		if err != nil {
			return nil, err
		}
		opts := []string{"rbind", "rw"}
		if b.ReadOnly {
			opts = []string{"rbind", "ro"}
		}
		s.Mounts = append(s.Mounts, spec.Mount{Type: "bind", Source: src, Destination: b.Dest, Options: opts})
	}
	for _, m := range c.ImageMounts {
		s.ImageVolumes = append(s.ImageVolumes, &specgen.ImageVolume{Source: m.Image, Destination: m.Dest})
	}
	if c.Seccomp != "" {
		if host.seccompProfile == "" {
			return nil, fmt.Errorf("container %s: seccomp profile %s was not written", c.Name, c.Seccomp)
		}
		s.SeccompProfilePath = host.seccompProfile
	}
	for _, t := range c.Tmpfs {
		opts := []string{"size=" + t.Size}
		if t.Options != "" {
			opts = append(opts, strings.Split(t.Options, ",")...)
		}
		s.Mounts = append(s.Mounts, spec.Mount{Type: "tmpfs", Source: "tmpfs", Destination: t.Dest, Options: opts})
	}
	if c.LogSizeMax > 0 {
		s.LogConfiguration = &specgen.LogConfig{Size: c.LogSizeMax}
	}
	if l := c.Limits; l != nil && (l.Memory != "" || l.CPUs > 0 || l.Pids > 0) {
		r := &spec.LinuxResources{}
		if l.Memory != "" {
			n, err := size.Parse(l.Memory)
			if err != nil {
				return nil, err
			}
			r.Memory = &spec.LinuxMemory{Limit: &n}
		}
		if l.CPUs > 0 {
			period := uint64(100000)
			quota := int64(l.CPUs * float64(period))
			r.CPU = &spec.LinuxCPU{Period: &period, Quota: &quota}
		}
		if l.Pids > 0 {
			r.Pids = &spec.LinuxPids{Limit: l.Pids}
		}
		s.ResourceLimits = r
	}
	if l := c.Limits; l != nil && l.Timeout != "" {
		d, err := time.ParseDuration(l.Timeout)
		if err != nil {
			return nil, fmt.Errorf("invalid timeout %q: %w", l.Timeout, err)
		}
		s.Timeout = uint(d.Seconds())
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("invalid container spec %s: %w", c.Name, err)
	}
	return s, nil
}

// devcontainerSettings maps the settings only a devcontainer asks for
// (workspace only): privileged, --security-opt, devices, shm size, ulimits.
func devcontainerSettings(s *specgen.SpecGenerator, c plan.ContainerSpec) error {
	if c.Privileged {
		s.Privileged = &c.Privileged
	}
	for _, opt := range c.SecurityOpt {
		key, val, _ := strings.Cut(opt, "=")
		switch key {
		case "label":
			s.SelinuxOpts = append(s.SelinuxOpts, val)
		case "apparmor":
			s.ApparmorProfile = val
		case "seccomp":
			s.SeccompProfilePath = val
		case "no-new-privileges":
			nnp := val == "" || val == "true"
			s.NoNewPrivileges = &nnp
		case "unmask":
			s.Unmask = append(s.Unmask, strings.Split(val, ":")...)
		case "mask":
			s.Mask = append(s.Mask, strings.Split(val, ":")...)
		default:
			return fmt.Errorf("security option %q is not supported", opt)
		}
	}
	for _, d := range c.Devices {
		s.Devices = append(s.Devices, spec.LinuxDevice{Path: d})
	}
	if c.ShmSize != "" {
		n, err := size.Parse(c.ShmSize)
		if err != nil {
			return fmt.Errorf("shm size: %w", err)
		}
		s.ShmSize = &n
	}
	for _, u := range c.Ulimits {
		name, limits, ok := strings.Cut(u, "=")
		soft, hard, two := strings.Cut(limits, ":")
		if !two {
			hard = soft
		}
		sn, err1 := strconv.ParseInt(soft, 10, 64)
		hn, err2 := strconv.ParseInt(hard, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("ulimit %q: want NAME=SOFT[:HARD]", u)
		}
		s.Rlimits = append(s.Rlimits, spec.POSIXRlimit{Type: "RLIMIT_" + strings.ToUpper(name), Soft: uint64(sn), Hard: uint64(hn)})
	}
	return nil
}
