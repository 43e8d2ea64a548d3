package podman

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	buildahDefine "github.com/containers/buildah/define"
	"github.com/containers/podman/v5/pkg/api/handlers"
	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/bindings/pods"
	"github.com/containers/podman/v5/pkg/bindings/secrets"
	"github.com/containers/podman/v5/pkg/bindings/system"
	"github.com/containers/podman/v5/pkg/bindings/volumes"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/errorhandling"
	"github.com/containers/podman/v5/pkg/specgen"
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
	dockerContainer "github.com/docker/docker/api/types/container"
	spec "github.com/opencontainers/runtime-spec/specs-go"
	nettypes "go.podman.io/common/libnetwork/types"
)

// MinPodmanVersion is the oldest podman service devaipod is tested with.
const MinPodmanVersion = "4.3.0"

// Podman is the real engine: podman's REST API through its Go bindings.
type Podman struct {
	// conn is the bindings' connection context. The bindings force a
	// context to carry the client; each call derives from the caller's ctx
	// and only borrows the client from conn (see withConn).
	conn context.Context
	// URI is the service in use.
	URI string
	// Started says devaipod started a podman service for this run.
	Started bool
	service *exec.Cmd
	// serviceDone is closed once service has exited (and been waited for).
	serviceDone chan struct{}
}

var _ pod.Engine = (*Podman)(nil)

// ConnectError says no podman service could be reached; Hint says what to do.
type ConnectError struct {
	Msg  string
	Hint string
	Err  error
}

func (e *ConnectError) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}
func (e *ConnectError) Unwrap() error { return e.Err }

// DefaultURIs lists the sockets tried when no connection is given: the
// user's rootless socket, then, as root, the rootful one.
func DefaultURIs() []string {
	runtimeDir := os.Getenv("XDG_RUNTIME_DIR")
	if runtimeDir == "" {
		runtimeDir = fmt.Sprintf("/run/user/%d", os.Getuid())
	}
	uris := []string{"unix://" + filepath.Join(runtimeDir, "podman", "podman.sock")}
	if os.Getuid() == 0 {
		uris = append(uris, "unix:///run/podman/podman.sock")
	}
	return uris
}

// Connect reaches a podman service: uri if given, else $CONTAINER_HOST,
// else the default sockets; if none answers, it starts `podman system
// service` for this run (Close stops it).
func Connect(ctx context.Context, uri string) (*Podman, error) {
	if uri == "" {
		uri = os.Getenv("CONTAINER_HOST")
	}
	if uri != "" {
		p, err := dial(ctx, uri)
		if err != nil {
			return nil, &ConnectError{Msg: "cannot reach the podman service at " + uri, Err: err,
				Hint: "check that the service runs (podman system service) or fix --connection / CONTAINER_HOST"}
		}
		return p, nil
	}
	var lastErr error
	for _, u := range DefaultURIs() {
		path := strings.TrimPrefix(u, "unix://")
		if _, err := os.Stat(path); err != nil {
			continue
		}
		p, err := dial(ctx, u)
		if err == nil {
			return p, nil
		}
		lastErr = err
	}
	return startService(ctx, lastErr)
}

func dial(ctx context.Context, uri string) (*Podman, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := bindings.NewConnection(dctx, uri)
	if err != nil {
		return nil, err
	}
	// NewConnection's ctx carries the client; detach it from the dial
	// timeout, which would otherwise cancel every later call.
	p := &Podman{conn: context.WithoutCancel(conn), URI: uri}
	// The ping of NewConnection told the API version; asking /version
	// costs podman 4.3 about 0.4 s (it runs conmon and the runtime).
	if v := bindings.ServiceVersion(conn).String(); versionLess(v, MinPodmanVersion) {
		return nil, &ConnectError{Msg: fmt.Sprintf("podman API %s is too old", v),
			Hint: "devaipod needs podman " + MinPodmanVersion + " or newer"}
	}
	return p, nil
}

func startService(ctx context.Context, cause error) (*Podman, error) {
	bin, err := exec.LookPath("podman")
	if err != nil {
		return nil, &ConnectError{Msg: "podman is not installed",
			Hint: "install podman (Debian/Ubuntu: apt-get install podman), then run devaipod again"}
	}
	dir, err := os.MkdirTemp("", "devaipod-podman-")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "podman.sock")
	cmd := exec.Command(bin, "system", "service", "--time=0", "unix://"+sock)
	// Its own process group: Ctrl-C is ours to handle. Pdeathsig: a killed
	// devaipod must not leave the service running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// Even an empty CONTAINER_HOST makes podman a remote client, which has
	// no `system service`.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONTAINER_HOST=") && !strings.HasPrefix(kv, "CONTAINER_CONNECTION=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// A file, not a pipe: the service's children (podman's rootless pause
	// process) inherit it and would keep Wait waiting for the pipe's end.
	logPath := filepath.Join(dir, "service.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logFile.Close()
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, &ConnectError{Msg: "cannot start podman system service", Err: err}
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	deadline := time.After(15 * time.Second)
wait:
	for {
		if _, err := os.Stat(sock); err == nil {
			p, err := dial(ctx, "unix://"+sock)
			if err == nil {
				p.Started, p.service, p.serviceDone = true, cmd, done
				return p, nil
			}
		}
		select {
		case <-done: // it failed: its log says why
			break wait
		case <-ctx.Done():
			break wait
		case <-deadline:
			break wait
		case <-time.After(100 * time.Millisecond):
		}
	}
	cmd.Process.Kill()
	<-done
	out, _ := os.ReadFile(logPath)
	os.RemoveAll(dir)
	msg := "no podman service answers and starting one failed"
	if cause != nil {
		msg += " (" + cause.Error() + ")"
	}
	log := strings.TrimSpace(string(out))
	return nil, &ConnectError{Msg: msg, Err: errors.New(log[strings.LastIndexByte(log, '\n')+1:]), Hint: serviceHint(log)}
}

// serviceHint is the advice for a podman service that would not start,
// from what it logged.
func serviceHint(log string) string {
	if strings.Contains(log, "system migrate") {
		// Its pause process or containers are gone (a reboot that kept
		// XDG_RUNTIME_DIR, or they were killed); podman's own remedy.
		return "podman kept state from processes that are gone (a reboot, or they were killed): run `podman system migrate`, then try again"
	}
	return "run `podman info` to see what is wrong with podman on this host"
}

// Rootless tells, without asking the service (its /info takes 0.3 to 1 s),
// whether it runs rootless: a unix socket that a user other than root owns
// is that user's rootless podman's. known is false for other connections.
func (p *Podman) Rootless() (rootless, known bool) {
	path, ok := strings.CutPrefix(p.URI, "unix://")
	if !ok {
		return false, false
	}
	st, err := os.Stat(path)
	if err != nil {
		return false, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return false, false
	}
	return sys.Uid != 0, true
}

// Close stops the podman service devaipod started, if any.
func (p *Podman) Close() error {
	if p.service == nil {
		return nil
	}
	p.service.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.serviceDone:
	case <-time.After(5 * time.Second):
		p.service.Process.Kill()
		<-p.serviceDone
	}
	sock := strings.TrimPrefix(p.URI, "unix://")
	return os.RemoveAll(filepath.Dir(sock))
}

// withConn returns a context that cancels with ctx but also carries the
// bindings' values (the client, the API version), so that cancelling ctx
// cancels the request.
func (p *Podman) withConn(ctx context.Context) context.Context {
	return connContext{Context: ctx, conn: p.conn}
}

// connContext adds the connection's values to a caller's context; the
// bindings keep their keys unexported, so they cannot be copied one by one.
type connContext struct {
	context.Context
	conn context.Context
}

func (c connContext) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.conn.Value(key)
}

// Info describes the host podman runs on.
func (p *Podman) Info(ctx context.Context) (plan.HostInfo, error) {
	info, err := system.Info(p.withConn(ctx), nil)
	if err != nil {
		return plan.HostInfo{}, err
	}
	h := plan.HostInfo{Version: info.Version.Version, APIVersion: info.Version.APIVersion,
		Rootless: info.Host.Security.Rootless, CgroupVersion: info.Host.CgroupsVersion,
		CgroupManager: info.Host.CgroupManager, GraphDriver: info.Store.GraphDriverName,
		NetworkBackend: info.Host.NetworkBackend, Kernel: info.Host.Kernel}
	if info.Host.OCIRuntime != nil {
		h.OCIRuntime = info.Host.OCIRuntime.Name
	}
	return h, nil
}

// ImageConfig implements Engine.
func (p *Podman) ImageConfig(ctx context.Context, image string) (pod.ImageConfig, error) {
	img, err := images.GetImage(p.withConn(ctx), image, nil)
	if err != nil {
		return pod.ImageConfig{}, mapErr(err)
	}
	if img.Config == nil {
		return pod.ImageConfig{}, nil
	}
	return pod.ImageConfig{Env: img.Config.Env, User: img.Config.User}, nil
}

// PodExists implements Engine.
func (p *Podman) PodExists(ctx context.Context, name string) (bool, error) {
	return pods.Exists(p.withConn(ctx), name, nil)
}

// CreatePod implements Engine.
func (p *Podman) CreatePod(ctx context.Context, ps plan.PodSpec) error {
	s := specgen.NewPodSpecGenerator()
	s.Name = ps.Name
	s.Labels = ps.Labels
	// The agent opts out of the network namespace; ipc and uts are shared
	// by the trusted containers (the agent gets a private ipc).
	s.SharedNamespaces = []string{"net", "uts", "ipc"}
	s.HostAdd = ps.ExtraHosts
	for _, port := range ps.Ports {
		s.PortMappings = append(s.PortMappings, nettypes.PortMapping{HostIP: "127.0.0.1",
			HostPort: uint16(port), ContainerPort: uint16(port), Protocol: "tcp"})
	}
	if ps.HostLoopback {
		s.NetNS = specgen.Namespace{NSMode: specgen.Slirp}
		s.NetworkOptions = map[string][]string{"slirp4netns": {"allow_host_loopback=true"}}
	}
	_, err := pods.CreatePodFromSpec(p.withConn(ctx), &types.PodSpec{PodSpecGen: *s})
	return mapCreateErr(err)
}

// CreateVolume implements Engine.
func (p *Podman) CreateVolume(ctx context.Context, v plan.VolumeSpec) error {
	_, err := volumes.Create(p.withConn(ctx), types.VolumeCreateOptions{
		Name:    v.Name,
		Labels:  v.Labels,
		Options: map[string]string{"o": fmt.Sprintf("uid=%d,gid=%d", v.UID, v.GID)},
	}, nil)
	return mapCreateErr(err)
}

// CreateSecret implements Engine.
func (p *Podman) CreateSecret(ctx context.Context, s plan.SecretSpec) error {
	_, err := secrets.Create(p.withConn(ctx), strings.NewReader(s.Value),
		new(secrets.CreateOptions).WithName(s.Name).WithLabels(s.Labels))
	return mapCreateErr(err)
}

// CreateContainer implements Engine.
func (p *Podman) CreateContainer(ctx context.Context, pod string, c plan.ContainerSpec) error {
	host := hostSide{mountpoints: map[string]string{}}
	for _, b := range c.Binds {
		if b.Volume == "" || host.mountpoints[b.Volume] != "" {
			continue
		}
		v, err := volumes.Inspect(p.withConn(ctx), b.Volume, nil)
		if err != nil {
			return fmt.Errorf("inspect volume %s: %w", b.Volume, mapErr(err))
		}
		host.mountpoints[b.Volume] = v.Mountpoint
	}
	if c.Seccomp != "" {
		var err error
		if host.seccompProfile, err = seccompProfileFile(c.Seccomp); err != nil {
			return err
		}
	}
	s, err := containerSpec(pod, c, host)
	if err != nil {
		return err
	}
	_, err = containers.CreateWithSpec(p.withConn(ctx), s, nil)
	return mapCreateErr(err)
}

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
	if l := c.Limits; l != nil && (l.Memory != "" || l.CPUs > 0 || l.Pids > 0) {
		r := &spec.LinuxResources{}
		if l.Memory != "" {
			n, err := plan.ParseSize(l.Memory)
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
		n, err := plan.ParseSize(c.ShmSize)
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

// CopyInto implements Engine.
func (p *Podman) CopyInto(ctx context.Context, container, dir string, tar io.Reader) error {
	// Keep the archive's owners (the agent user), not the container's.
	copyFn, err := containers.CopyFromArchiveWithOptions(p.withConn(ctx), container, dir, tar,
		new(containers.CopyOptions).WithChown(false))
	if err != nil {
		return mapErr(err)
	}
	return mapErr(copyFn())
}

// StartPod implements Engine.
func (p *Podman) StartPod(ctx context.Context, name string) error {
	_, err := pods.Start(p.withConn(ctx), name, nil)
	return mapErr(err)
}

// StopPod implements Engine.
func (p *Podman) StopPod(ctx context.Context, name string, timeout uint) error {
	t := int(timeout)
	_, err := pods.Stop(p.withConn(ctx), name, new(pods.StopOptions).WithTimeout(t))
	return mapErr(err)
}

// Exec implements Engine.
func (p *Podman) Exec(ctx context.Context, container string, e pod.ExecSpec) (int, string, error) {
	cctx := p.withConn(ctx)
	cfg := &handlers.ExecCreateConfig{ExecOptions: dockerContainer.ExecOptions{
		Cmd: e.Cmd, User: e.User, Env: e.Env, WorkingDir: e.Workdir, AttachStdout: true, AttachStderr: true}}
	id, err := containers.ExecCreate(cctx, container, cfg)
	if err != nil {
		return 0, "", mapErr(err)
	}
	defer containers.ExecRemove(context.WithoutCancel(cctx), id, nil)
	var out syncBuffer
	var w io.Writer = &out
	if e.Output != nil {
		w = io.MultiWriter(&out, e.Output)
	}
	attach := true
	opts := &containers.ExecStartAndAttachOptions{OutputStream: &w, ErrorStream: &w,
		AttachOutput: &attach, AttachError: &attach}
	if err := containers.ExecStartAndAttach(cctx, id, opts); err != nil {
		return 0, out.String(), mapErr(err)
	}
	insp, err := containers.ExecInspect(cctx, id, nil)
	if err != nil {
		return 0, out.String(), mapErr(err)
	}
	return insp.ExitCode, out.String(), nil
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logs implements Engine.
func (p *Podman) Logs(ctx context.Context, container string, tail int, follow bool, w io.Writer) error {
	yes := true
	opts := new(containers.LogOptions).WithStdout(yes).WithStderr(yes).WithFollow(follow)
	if tail >= 0 {
		opts = opts.WithTail(strconv.Itoa(tail))
	}
	stdout, stderr := make(chan string, 64), make(chan string, 64)
	errc := make(chan error, 1)
	go func() {
		errc <- containers.Logs(p.withConn(ctx), container, opts, stdout, stderr)
	}()
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	for {
		select {
		case line := <-stdout:
			bw.WriteString(line)
			if follow {
				bw.Flush()
			}
		case line := <-stderr:
			bw.WriteString(line)
			if follow {
				bw.Flush()
			}
		case err := <-errc:
			// Drain what was sent before the call returned.
			for {
				select {
				case line := <-stdout:
					bw.WriteString(line)
				case line := <-stderr:
					bw.WriteString(line)
				default:
					if ctx.Err() != nil {
						return nil
					}
					return mapErr(err)
				}
			}
		}
	}
}

// Objects implements Engine. The four kinds are listed at once.
func (p *Podman) Objects(ctx context.Context, short string) ([]pod.Object, error) {
	cctx := p.withConn(ctx)
	label := plan.LabelPod
	if short != "" {
		label += "=" + short
	}
	filters := map[string][]string{"label": {label}}
	listers := []func() ([]pod.Object, error){
		func() ([]pod.Object, error) { return p.listPods(cctx, filters) },
		func() ([]pod.Object, error) { return p.listContainers(cctx, filters) },
		func() ([]pod.Object, error) { return p.listVolumes(cctx, filters) },
		func() ([]pod.Object, error) { return p.listSecrets(cctx, short) },
	}
	results := make([][]pod.Object, len(listers))
	errs := make([]error, len(listers))
	var wg sync.WaitGroup
	for i, list := range listers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = list()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, mapErr(err)
	}
	var objs []pod.Object
	for _, r := range results {
		objs = append(objs, r...)
	}
	return objs, nil
}

func (p *Podman) listPods(ctx context.Context, filters map[string][]string) ([]pod.Object, error) {
	list, err := pods.List(ctx, new(pods.ListOptions).WithFilters(filters))
	var objs []pod.Object
	for _, pd := range list {
		objs = append(objs, pod.Object{Kind: pod.KindPod, Name: pd.Name, Pod: pd.Labels[plan.LabelPod],
			State: strings.ToLower(pd.Status), Labels: pd.Labels, Created: pd.Created})
	}
	return objs, err
}

func (p *Podman) listContainers(ctx context.Context, filters map[string][]string) ([]pod.Object, error) {
	all := true
	list, err := containers.List(ctx, new(containers.ListOptions).WithAll(all).WithFilters(filters))
	var objs []pod.Object
	for _, c := range list {
		if c.IsInfra {
			continue // removed with its pod
		}
		name := ""
		if len(c.Names) > 0 {
			name = c.Names[0]
		}
		// A container never started has the zero time (a negative Unix
		// time) as StartedAt.
		objs = append(objs, pod.Object{Kind: pod.KindContainer, Name: name, Pod: c.Labels[plan.LabelPod],
			State: c.State, Started: c.StartedAt > 0, Labels: c.Labels, Created: c.Created})
	}
	return objs, err
}

func (p *Podman) listVolumes(ctx context.Context, filters map[string][]string) ([]pod.Object, error) {
	list, err := volumes.List(ctx, new(volumes.ListOptions).WithFilters(filters))
	var objs []pod.Object
	for _, v := range list {
		objs = append(objs, pod.Object{Kind: pod.KindVolume, Name: v.Name, Pod: v.Labels[plan.LabelPod],
			Labels: v.Labels, Created: v.CreatedAt})
	}
	return objs, err
}

// listSecrets matches secrets on their labels: label filters for secrets
// are newer than podman 4.3, whose list does not return labels either, so
// devaipod's (all named devaipod-NAME-...) are inspected one by one.
func (p *Podman) listSecrets(ctx context.Context, short string) ([]pod.Object, error) {
	list, err := secrets.List(ctx, nil)
	if err != nil {
		return nil, err
	}
	prefix := plan.Prefix
	if short != "" {
		prefix = plan.PodName(short) + "-"
	}
	var objs []pod.Object
	for _, s := range list {
		if !strings.HasPrefix(s.Spec.Name, prefix) {
			continue
		}
		labels := s.Spec.Labels
		if labels == nil {
			full, err := secrets.Inspect(ctx, s.ID, nil)
			if errors.Is(mapErr(err), pod.ErrNotFound) {
				continue // removed meanwhile
			} else if err != nil {
				return nil, err
			}
			labels = full.Spec.Labels
		}
		owner := labels[plan.LabelPod]
		if owner == "" || (short != "" && owner != short) {
			continue
		}
		objs = append(objs, pod.Object{Kind: pod.KindSecret, Name: s.Spec.Name, Pod: owner,
			Labels: labels, Created: s.CreatedAt})
	}
	return objs, nil
}

// Remove implements Engine.
func (p *Podman) Remove(ctx context.Context, o pod.Object) error {
	cctx := p.withConn(ctx)
	force, zero := true, uint(0)
	var err error
	switch o.Kind {
	case pod.KindPod:
		_, err = pods.Remove(cctx, o.Name, new(pods.RemoveOptions).WithForce(force).WithTimeout(0))
	case pod.KindContainer:
		_, err = containers.Remove(cctx, o.Name, new(containers.RemoveOptions).WithForce(force).WithTimeout(zero))
	case pod.KindVolume:
		err = volumes.Remove(cctx, o.Name, new(volumes.RemoveOptions).WithForce(force))
	case pod.KindSecret:
		err = secrets.Remove(cctx, o.Name)
	default:
		return fmt.Errorf("unknown object kind %q", o.Kind)
	}
	return mapErr(err)
}

// mapErr turns the API's 404s into ErrNotFound, keeping podman's message.
func mapErr(err error) error {
	var em *errorhandling.ErrorModel
	if errors.As(err, &em) && em.ResponseCode == http.StatusNotFound {
		return fmt.Errorf("%s: %w", em.Error(), pod.ErrNotFound)
	}
	return err
}

// mapCreateErr is mapErr for creations, where a 409 means the name is
// taken (another up won the race).
func mapCreateErr(err error) error {
	var em *errorhandling.ErrorModel
	if errors.As(err, &em) && em.ResponseCode == http.StatusConflict {
		return fmt.Errorf("%s: %w", em.Error(), pod.ErrExists)
	}
	return mapErr(err)
}

// versionLess compares dotted versions numerically ("4.3.1" < "4.10").
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) || i < len(pb); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(strings.TrimFunc(pa[i], func(r rune) bool { return r < '0' || r > '9' }))
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(strings.TrimFunc(pb[i], func(r rune) bool { return r < '0' || r > '9' }))
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// BuildSpec is an image build from a Dockerfile (a devcontainer's build).
type BuildSpec struct {
	Dockerfile string
	Context    string
	Args       map[string]string
	Target     string
	Tag        string
}

// Pull policies of up --pull, as podman's --pull names them.
const (
	PullMissing = "missing"
	PullAlways  = "always"
	PullNever   = "never"
)

// Pullable tells whether ref can come from a registry: not an image id, and
// not under localhost/, podman's name for images built on this machine.
func Pullable(ref string) bool {
	id := strings.TrimPrefix(ref, "sha256:")
	isID := len(id) >= 12 && strings.Trim(id, "0123456789abcdef") == ""
	return !isID && !strings.HasPrefix(ref, "localhost/")
}

// PullImage pulls ref from its registry (with the client's registry
// credentials, as podman --remote does), streaming podman's progress to out.
func (p *Podman) PullImage(ctx context.Context, ref string, out io.Writer) error {
	opts := new(images.PullOptions).WithPolicy(PullAlways).WithProgressWriter(out)
	if _, err := images.Pull(p.withConn(ctx), ref, opts); err != nil {
		return fmt.Errorf("pull %s: %w", ref, mapErr(err))
	}
	return nil
}

// BuildImage builds an image through podman's API, streaming the build's
// output to out, and returns the image's id. The build never pulls a base
// image that is already present.
func (p *Podman) BuildImage(ctx context.Context, b BuildSpec, out io.Writer) (string, error) {
	opts := types.BuildOptions{BuildOptions: buildahDefine.BuildOptions{
		ContextDirectory: b.Context,
		Output:           b.Tag,
		Args:             b.Args,
		Target:           b.Target,
		Out:              out,
		Err:              out,
		ReportWriter:     out,
		Layers:           true,
		PullPolicy:       buildahDefine.PullIfMissing,
		Labels:           []string{plan.LabelVersion + "=" + plan.Version},
	}}
	report, err := images.Build(p.withConn(ctx), []string{b.Dockerfile}, opts)
	if err != nil {
		return "", fmt.Errorf("build %s: %w", b.Tag, mapErr(err))
	}
	return report.ID, nil
}
