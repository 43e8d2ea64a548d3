package kubeclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/devaipod/devaipod/internal/helperargs"
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// untarCommand extracts a tar stream from standard input into dir: the
// helper's untar (at plan.HelperMount, where pod/kube's Pods mount it),
// so that nothing is asked of the image. It keeps the archive's owners
// where the container's user may (root).
func untarCommand(dir string) []string { return plan.HelperCommand(helperargs.Untar{Dir: dir}) }

// execURL is the URL of an exec request for container ct of Pod p.
func (c *Client) execURL(p *corev1.Pod, o *corev1.PodExecOptions) *url.URL {
	host := "https://kubernetes.invalid" // no cluster: tests, whose executor is a fake
	if c.config != nil {
		host = c.config.Host
	}
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		u = &url.URL{Scheme: "https", Host: host}
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/v1/namespaces/" + p.Namespace + "/pods/" + p.Name + "/exec"
	q := url.Values{}
	params, _ := scheme.ParameterCodec.EncodeParameters(o, corev1.SchemeGroupVersion)
	for k, v := range params {
		q[k] = v
	}
	u.RawQuery = q.Encode()
	return u
}

// stream runs argv in container of Pod p with the given streams and
// returns its exit code.
func (c *Client) stream(ctx context.Context, p *corev1.Pod, container string, argv []string, so remotecommand.StreamOptions) (int, error) {
	o := &corev1.PodExecOptions{Container: container, Command: argv, Stdin: so.Stdin != nil,
		Stdout: so.Stdout != nil, Stderr: so.Stderr != nil, TTY: so.Tty}
	ex, err := c.newExecutor("POST", c.execURL(p, o))
	if err != nil {
		return 0, err
	}
	err = ex.StreamWithContext(ctx, so)
	var ee utilexec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return ee.ExitStatus(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("exec in %s/%s: %w", p.Name, container, err)
	}
	return 0, nil
}

// command is e's command as a cluster's exec can run it: it takes neither
// a user, nor variables, nor a directory. Variables and a directory go
// through sh -c; a user other than the container's is refused.
func command(p *corev1.Pod, container string, e pod.ExecSpec) ([]string, error) {
	if err := checkUser(p, container, e.User); err != nil {
		return nil, err
	}
	if len(e.Env) == 0 && e.Workdir == "" {
		return e.Cmd, nil
	}
	var script strings.Builder
	if e.Workdir != "" {
		fmt.Fprintf(&script, "cd %s || exit 127; ", shellQuote(e.Workdir))
	}
	env := append([]string(nil), e.Env...)
	sort.Strings(env)
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !validName(k) {
			return nil, fmt.Errorf("exec: variable %q is not NAME=value", kv)
		}
		fmt.Fprintf(&script, "export %s=%s; ", k, shellQuote(v))
	}
	script.WriteString(`exec "$@"`)
	return append([]string{"/bin/sh", "-c", script.String(), "sh"}, e.Cmd...), nil
}

func validName(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for _, r := range k {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// checkUser refuses a user that is not the one the container runs as (a
// cluster's exec runs as the container's user). A user the Pod's spec does
// not pin (the image's) cannot be checked, and passes: the command runs
// as the container's user.
func checkUser(p *corev1.Pod, container, user string) error {
	if user == "" {
		return nil
	}
	uid := runAsUser(p, container)
	if uid == nil {
		return nil
	}
	name, _, _ := strings.Cut(user, ":")
	switch {
	case name == strconv.FormatInt(*uid, 10), name == "root" && *uid == 0:
		return nil
	}
	return &NotSupportedError{Op: fmt.Sprintf("exec as user %s in %s (which runs as uid %d)", user, container, *uid),
		Hint: "a cluster runs exec as the container's user; leave --user out"}
}

func runAsUser(p *corev1.Pod, container string) *int64 {
	for _, ct := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		if ct.Name == container && ct.SecurityContext != nil && ct.SecurityContext.RunAsUser != nil {
			return ct.SecurityContext.RunAsUser
		}
	}
	if p.Spec.SecurityContext != nil {
		return p.Spec.SecurityContext.RunAsUser
	}
	return nil
}

// Exec implements pod.Engine through the exec subresource. The verify
// battery in an agent that has a Pod of its own (pod.Verify's, a check's)
// gets the workspace Pod's canary addresses (--cluster-canary, see
// clusterCanaries) for its cluster-egress row: what a cluster adds to the
// pod's own arguments, since only the cluster knows the Pod's address.
func (c *Client) Exec(ctx context.Context, container string, e pod.ExecSpec) (int, string, error) {
	p, ct, err := c.locate(ctx, container)
	if err != nil {
		return 0, "", err
	}
	if short, ok := batteryInAgent(container, e.Cmd); ok && p.Labels[plan.LabelRole] == plan.RoleAgent {
		// Without an address, the row says it was not given one.
		canaries, err := c.clusterCanaries(ctx, short)
		if err != nil && !errors.Is(err, errNoAddress) {
			return 0, "", fmt.Errorf("verify's %s row: %w", clusterEgressRow, err)
		}
		e.Cmd = slices.Clone(e.Cmd)
		for _, a := range canaries {
			e.Cmd = append(e.Cmd, "--cluster-canary", a)
		}
	}
	argv, err := command(p, ct, e)
	if err != nil {
		return 0, "", err
	}
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
	code, err := c.stream(ctx, p, ct, argv, remotecommand.StreamOptions{Stdin: e.Stdin, Stdout: w, Stderr: errw})
	return code, out.String(), err
}

// Attach implements pod.Engine: e's streams, and with tty a terminal (in
// raw mode when e.Stdin is one) that follows the size of the caller's.
func (c *Client) Attach(ctx context.Context, container string, e pod.ExecSpec, tty bool) (int, error) {
	p, ct, err := c.locate(ctx, container)
	if err != nil {
		return 0, err
	}
	argv, err := command(p, ct, e)
	if err != nil {
		return 0, err
	}
	so := remotecommand.StreamOptions{Stdin: e.Stdin, Stdout: e.Output, Stderr: e.Stderr, Tty: tty}
	if tty {
		so.Stderr = nil // a terminal has one output
		if f, ok := e.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			state, err := term.MakeRaw(int(f.Fd()))
			if err != nil {
				return 0, err
			}
			defer term.Restore(int(f.Fd()), state)
			sizes := &terminalSizes{fd: int(f.Fd()), done: make(chan struct{})}
			defer close(sizes.done)
			so.TerminalSizeQueue = sizes
		}
	}
	return c.stream(ctx, p, ct, argv, so)
}

// terminalSizes tells the cluster the terminal's size, and each change
// of it (looked at twice a second: SIGWINCH is not portable).
type terminalSizes struct {
	fd   int
	last remotecommand.TerminalSize
	done chan struct{}
}

func (t *terminalSizes) Next() *remotecommand.TerminalSize {
	for {
		w, h, err := term.GetSize(t.fd)
		if err == nil {
			s := remotecommand.TerminalSize{Width: uint16(w), Height: uint16(h)}
			if s != t.last {
				t.last = s
				return &s
			}
		}
		select {
		case <-t.done:
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// CopyInto implements pod.Engine: the tar stream goes to the helper's
// untar through exec, in a container that runs, as the container's user
// (on a cluster a container cannot be written to before it starts: up's
// copy goes through pod/kube's handshake instead, see Up).
func (c *Client) CopyInto(ctx context.Context, container, dir string, tar io.Reader) error {
	p, ct, err := c.locate(ctx, container)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	argv := untarCommand(dir)
	code, err := c.stream(ctx, p, ct, argv, remotecommand.StreamOptions{Stdin: tar, Stdout: &out, Stderr: &out})
	if err == nil && code != 0 {
		err = fmt.Errorf("%s exited %d: %s", strings.Join(argv, " "), code, strings.TrimSpace(out.String()))
	}
	return err
}

// Logs implements pod.Engine: the container's log, as kubectl logs.
func (c *Client) Logs(ctx context.Context, container string, tail int, follow bool, w io.Writer) error {
	p, ct, err := c.locate(ctx, container)
	if err != nil {
		return err
	}
	o := &corev1.PodLogOptions{Container: ct, Follow: follow}
	if tail >= 0 {
		n := int64(tail)
		o.TailLines = &n
	}
	rc, err := c.cs.CoreV1().Pods(c.Namespace).GetLogs(p.Name, o).Stream(ctx)
	if err != nil {
		return notFound(err)
	}
	defer rc.Close()
	_, err = io.Copy(w, rc)
	if ctx.Err() != nil {
		return nil // Ctrl-C ends a follow
	}
	return err
}
