package podman

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containers/podman/v5/pkg/bindings"
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
