package podman

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	buildahDefine "github.com/containers/buildah/define"
	"github.com/containers/podman/v5/pkg/api/handlers"
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
	nettypes "go.podman.io/common/libnetwork/types"
)

var _ pod.Engine = (*Podman)(nil)

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
func (p *Podman) ImageConfig(ctx context.Context, image string) (plan.ImageConfig, error) {
	img, err := images.GetImage(p.withConn(ctx), image, nil)
	if err != nil {
		return plan.ImageConfig{}, mapErr(err)
	}
	c := plan.ImageConfig{ID: img.ID, Labels: img.Labels}
	if img.Config != nil {
		c.Env, c.User = img.Config.Env, img.Config.User
		if c.Labels == nil {
			c.Labels = img.Config.Labels
		}
	}
	return c, nil
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

// CopyOut writes the regular file at path in a container, running or
// stopped, to w: podman's archive of it (a tar of that one file),
// unpacked; an error, before anything is written, when it is over max
// bytes. pod.ErrNotFound when the container or the file does not exist.
func (p *Podman) CopyOut(ctx context.Context, container, path string, max int64, w io.Writer) error {
	pr, pw := io.Pipe()
	copyFn, err := containers.CopyToArchive(p.withConn(ctx), container, path, pw)
	if err != nil {
		return mapErr(err)
	}
	go func() { pw.CloseWithError(copyFn()) }()
	defer pr.Close()
	tr := tar.NewReader(pr)
	h, err := tr.Next()
	if err != nil {
		return fmt.Errorf("copy %s out of %s: %w", path, container, err)
	}
	if h.Typeflag != tar.TypeReg {
		return fmt.Errorf("copy %s out of %s: not a regular file", path, container)
	}
	if h.Size > max {
		return fmt.Errorf("copy %s out of %s: %d bytes, more than the %d it takes", path, container, h.Size, max)
	}
	if _, err := io.Copy(w, tr); err != nil {
		return fmt.Errorf("copy %s out of %s: %w", path, container, err)
	}
	return nil
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
		Cmd: e.Cmd, User: e.User, Env: e.Env, WorkingDir: e.Workdir, AttachStdout: true, AttachStderr: true,
		AttachStdin: e.Stdin != nil}}
	id, err := containers.ExecCreate(cctx, container, cfg)
	if err != nil {
		return 0, "", mapErr(err)
	}
	defer containers.ExecRemove(context.WithoutCancel(cctx), id, nil)
	var out pod.SyncBuffer
	var w io.Writer = &out
	if e.Output != nil {
		out.Max = pod.ExecTail
		w = io.MultiWriter(&out, e.Output)
	}
	errw := w
	if e.Stderr != nil {
		errw = e.Stderr
	}
	// Once the attach is upgraded, the bindings read its socket without
	// looking at ctx: a command that runs on (a lifecycle command, a hung
	// exec) would hold Ctrl-C and every timeout until it ends. So the
	// attach runs on its own, and a cancelled ctx leaves it: its writes
	// are dropped from then on, and the command runs to its end in the
	// container (podman 4.3 cannot stop an exec session), or until the
	// caller's rollback removes the pod.
	gate := &gate{}
	defer gate.close() // the bindings' copy of stdin may still read after the attach ends
	w, errw = gate.writer(w), gate.writer(errw)
	attach := true
	opts := &containers.ExecStartAndAttachOptions{OutputStream: &w, ErrorStream: &errw,
		AttachOutput: &attach, AttachError: &attach}
	if e.Stdin != nil {
		opts.InputStream = bufio.NewReader(gate.reader(e.Stdin))
		opts.AttachInput = &attach
	}
	done := make(chan error, 1)
	go func() { done <- containers.ExecStartAndAttach(cctx, id, opts) }()
	select {
	case err := <-done:
		if err != nil {
			return 0, out.String(), mapErr(err)
		}
	case <-ctx.Done():
		gate.close()
		return 0, out.String(), ctx.Err()
	}
	insp, err := containers.ExecInspect(cctx, id, nil)
	if err != nil {
		return 0, out.String(), mapErr(err)
	}
	return insp.ExitCode, out.String(), nil
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
	// Podman 4.3 answers a taken volume name with a 500 whose cause says
	// so.
	if errors.As(err, &em) && (em.ResponseCode == http.StatusConflict || strings.HasSuffix(em.Because, "already exists")) {
		return fmt.Errorf("%s: %w", em.Error(), pod.ErrExists)
	}
	return mapErr(err)
}

// PullImage pulls ref from its registry (with the client's registry
// credentials, as podman --remote does), streaming podman's progress to out.
// Its errors do not name ref: the caller's (pod.PullError) do.
func (p *Podman) PullImage(ctx context.Context, ref string, o pod.PullOptions, out io.Writer) error {
	if o.Anonymous {
		return p.pullAnonymous(ctx, ref, o.PrivateRegistries, out)
	}
	opts := new(images.PullOptions).WithPolicy(pod.PullAlways).WithProgressWriter(out)
	if _, err := images.Pull(p.withConn(ctx), ref, opts); err != nil {
		return mapErr(err)
	}
	return nil
}

// BuildImage builds an image through podman's API, streaming the build's
// output to out, and returns the image's id. The build never pulls a base
// image that is already present.
func (p *Podman) BuildImage(ctx context.Context, b pod.BuildSpec, out io.Writer) (string, error) {
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
	if b.NoPull {
		opts.PullPolicy = buildahDefine.PullNever
	}
	report, err := images.Build(p.withConn(ctx), []string{b.Dockerfile}, opts)
	if err != nil {
		return "", fmt.Errorf("build %s: %w", b.Tag, mapErr(err))
	}
	return report.ID, nil
}

// Attach implements Engine with podman's CLI against the same service: the
// bindings' attach code is not made for interactive terminals, podman's
// CLI is.
func (p *Podman) Attach(ctx context.Context, container string, e pod.ExecSpec, tty bool) (int, error) {
	bin, err := exec.LookPath("podman")
	if err != nil {
		return 0, errors.New("exec needs the podman command on this host: install podman")
	}
	args := []string{"--remote", "--url", p.URI}
	if p.Identity != "" {
		args = append(args, "--identity", p.Identity)
	}
	args = append(args, "exec", "-i")
	if tty {
		args = append(args, "-t")
	}
	if e.User != "" {
		args = append(args, "--user", e.User)
	}
	if e.Workdir != "" {
		args = append(args, "--workdir", e.Workdir)
	}
	for _, kv := range e.Env {
		args = append(args, "--env", kv)
	}
	c := exec.CommandContext(ctx, bin, append(append(args, container), e.Cmd...)...)
	// On Ctrl-C podman exec passes the interrupt on; SIGKILL would leave
	// the command running in the container.
	c.Cancel = func() error { return c.Process.Signal(os.Interrupt) }
	c.WaitDelay = 10 * time.Second // then killed: Attach returns
	c.Stdin, c.Stdout, c.Stderr = e.Stdin, e.Output, e.Stderr
	err = c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), pod.ErrAttachKilled
		}
		return ee.ExitCode(), nil
	}
	return 0, err
}

// gate passes writes and reads through until it is closed, and fails them
// after: an abandoned exec attach cannot touch its caller's buffers once
// Exec has returned.
type gate struct {
	mu     sync.Mutex
	closed bool
}

var errAbandoned = errors.New("exec abandoned: its context ended")

func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

func (g *gate) writer(w io.Writer) io.Writer { return gatedWriter{g, w} }
func (g *gate) reader(r io.Reader) io.Reader { return gatedReader{g, r} }

type gatedWriter struct {
	g *gate
	w io.Writer
}

func (gw gatedWriter) Write(p []byte) (int, error) {
	gw.g.mu.Lock()
	defer gw.g.mu.Unlock()
	if gw.g.closed {
		return 0, errAbandoned
	}
	return gw.w.Write(p)
}

type gatedReader struct {
	g *gate
	r io.Reader
}

// Read holds the gate only to look at it, so that close never waits for a
// read (a read already under way may end after Exec returned: the readers
// given to Exec are files and strings, which the caller drops).
func (gr gatedReader) Read(p []byte) (int, error) {
	gr.g.mu.Lock()
	closed := gr.g.closed
	gr.g.mu.Unlock()
	if closed {
		return 0, errAbandoned
	}
	return gr.r.Read(p)
}
