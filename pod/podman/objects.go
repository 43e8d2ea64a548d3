package podman

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/pods"
	"github.com/containers/podman/v5/pkg/bindings/secrets"
	"github.com/containers/podman/v5/pkg/bindings/volumes"
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
)

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

// Kill implements pod.Killer: SIGKILL to the container's init, which
// takes every process of its PID namespace with it, and once it returns
// they are all gone. On a local service it signals the init itself
// (killInit); else, or when that cannot be done, it asks podman, then
// waits (at most 10 s, checking every 10 ms) until podman sees the
// container exit, which podman 4.3's kill does not wait for.
func (p *Podman) Kill(ctx context.Context, container string) error {
	cctx := p.withConn(ctx)
	if p.Local() {
		if err := killInit(cctx, container); err == nil {
			return nil
		}
	}
	if err := containers.Kill(cctx, container, new(containers.KillOptions).WithSignal("SIGKILL")); err != nil {
		return mapErr(err)
	}
	wctx, cancel := context.WithTimeout(cctx, 10*time.Second)
	defer cancel()
	_, err := containers.Wait(wctx, container, new(containers.WaitOptions).
		WithConditions([]string{"exited", "stopped"}).WithInterval("10ms"))
	if err != nil {
		return fmt.Errorf("wait for %s to exit: %w", container, mapErr(err))
	}
	return nil
}

// Local implements pod.Killer: a service reached through a socket of this
// machine.
func (p *Podman) Local() bool { return strings.HasPrefix(p.URI, "unix:") }

// killInit sends SIGKILL to a container's init process itself, through a
// pidfd, and waits until it has exited. Podman's kill takes 40-90 ms here
// (it runs the OCI runtime and records the event); this takes a few. The
// user who runs rootless podman owns its user namespace, so may signal
// every process of its containers; root may signal any. The init is
// known for the container's by the pidfd (which holds that very process,
// whatever happens to its pid) and its parent, the container's conmon,
// whose command line names the container's ID. Anything not so (a service
// in another PID namespace, a container that exited) is an error, and the
// caller asks podman instead.
func killInit(ctx context.Context, container string) error {
	data, err := containers.Inspect(ctx, container, nil)
	if err != nil {
		return err
	}
	if data.State == nil || data.State.Pid <= 0 || data.State.ConmonPid <= 0 {
		return errors.New("not running")
	}
	// The pids are the service's: they name these processes only if the
	// service is in this process's PID namespace (not a podman in a
	// container whose socket is shared).
	self, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return err
	}
	if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", data.State.ConmonPid)); err != nil || ns != self {
		return errors.New("the service is in another PID namespace")
	}
	fd, err := unix.PidfdOpen(data.State.Pid, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if !initOfItsNamespace(data.State.Pid) {
		return errors.New("not the init of a PID namespace")
	}
	if parent, err := parentPid(data.State.Pid); err != nil || parent != data.State.ConmonPid {
		return errors.New("not the container's init")
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", data.State.ConmonPid))
	if err != nil || !slices.Contains(strings.Split(string(cmdline), "\x00"), data.ID) {
		return errors.New("not the container's conmon")
	}
	// Still its child: that conmon was alive when its command line was read.
	if parent, err := parentPid(data.State.Pid); err != nil || parent != data.State.ConmonPid {
		return errors.New("not the container's init")
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		return err
	}
	// A pidfd reads as ready once its process has exited; an init exits
	// only after every other process of its PID namespace has.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 100)
		if n > 0 {
			return nil
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return errors.New("the container's init did not exit")
		}
	}
}

// initOfItsNamespace tells whether a process is pid 1 of its innermost PID
// namespace (the last of /proc/PID/status's NSpid), so that its end is
// the end of every process of that namespace.
func initOfItsNamespace(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			return len(f) > 1 && f[len(f)-1] == "1"
		}
	}
	return false
}

// parentPid reads a process's parent from /proc/PID/stat.
func parentPid(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, errors.New("malformed stat")
	}
	return strconv.Atoi(f[1])
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
