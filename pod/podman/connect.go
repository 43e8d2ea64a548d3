package podman

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/devaipod/devaipod/pod"
	"go.podman.io/common/pkg/config"
)

// MinPodmanVersion is the oldest podman service devaipod is tested with.
const MinPodmanVersion = "4.3.0"

// Podman is the real engine: podman's REST API through its Go bindings.
type Podman struct {
	// conn is the bindings' connection context. The bindings force a
	// context to carry the client; each call derives from the caller's ctx
	// and only borrows the client from conn (see withConn).
	conn context.Context
	// URI is the service in use; Identity the ssh key that reaches it
	// ("" for none, or when the connection is not over ssh).
	URI      string
	Identity string
	// Started says devaipod started a podman service for this run.
	Started bool
	service *exec.Cmd
	// serviceDone is closed once service has exited (and been waited for).
	serviceDone chan struct{}
	// removeServiceDir removes the service's folder and lets its lock go
	// (see pod.MakeTempDir).
	removeServiceDir func() error
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

// Connect reaches a podman service, chosen as podman chooses it: conn
// (--connection: a service URI such as unix:///run/user/1000/podman/podman.sock,
// tcp://HOST:PORT or ssh://USER@HOST/PATH, or the name of one of podman's
// connections), else $CONTAINER_CONNECTION (a connection's name), else
// $CONTAINER_HOST (a URI, with $CONTAINER_SSHKEY for ssh), else the default
// sockets; if none of those answers, it starts `podman system service` for
// this run (Close stops it). podman's connections are those `podman system
// connection list` shows: podman-connections.json
// ($PODMAN_CONNECTIONS_CONF, else next to the user's containers.conf) and
// containers.conf's [engine.service_destinations]. As with podman, a
// default connection does not replace the local service.
func Connect(ctx context.Context, conn string) (*Podman, error) {
	dst, err := destination(conn)
	if err != nil {
		return nil, err
	}
	if dst != nil {
		p, err := dial(ctx, dst.Options)
		if err != nil {
			return nil, &ConnectError{Msg: "cannot reach the podman service at " + dst.URI + dst.via, Err: err,
				Hint: "check that the service runs (podman system service) or fix " + dst.fix}
		}
		return p, nil
	}
	var lastErr error
	for _, u := range DefaultURIs() {
		path := strings.TrimPrefix(u, "unix://")
		if _, err := os.Stat(path); err != nil {
			continue
		}
		p, err := dial(ctx, bindings.Options{URI: u})
		if err == nil {
			return p, nil
		}
		lastErr = err
	}
	return startService(ctx, lastErr)
}

// chosen is a service that the user named, with how it was named: via
// is for messages (" (connection NAME)"), fix the setting to correct.
type chosen struct {
	bindings.Options
	via, fix string
}

// destination is the service conn, $CONTAINER_CONNECTION or
// $CONTAINER_HOST names, in that order (see Connect); nil when none does.
func destination(conn string) (*chosen, error) {
	switch {
	case strings.Contains(conn, "://"):
		return &chosen{Options: bindings.Options{URI: conn}, fix: "--connection"}, nil
	case conn != "":
		return namedConnection(conn, "--connection")
	}
	if name := os.Getenv("CONTAINER_CONNECTION"); name != "" {
		return namedConnection(name, "CONTAINER_CONNECTION")
	}
	if uri := os.Getenv("CONTAINER_HOST"); uri != "" {
		return &chosen{Options: bindings.Options{URI: uri, Identity: os.Getenv("CONTAINER_SSHKEY")}, fix: "--connection / CONTAINER_HOST"}, nil
	}
	return nil, nil
}

// namedConnection looks name up among podman's connections (setting says
// where the name came from); an unknown name is an error that lists the
// names known.
func namedConnection(name, setting string) (*chosen, error) {
	cfg, err := config.Default()
	if err != nil {
		return nil, &ConnectError{Msg: fmt.Sprintf("cannot read podman's connections to find %q (%s)", name, setting), Err: err,
			Hint: "fix the containers.conf that the error names, or give --connection a service URI"}
	}
	con, err := cfg.GetConnection(name, false)
	if err != nil {
		hint := "podman has no named connections: add one with `podman system connection add " + name + " URI`, or unset " + setting
		if setting == "--connection" {
			hint = "podman has no named connections: add one with `podman system connection add " + name + " URI`, or give --connection a service URI (unix:///PATH, tcp://HOST:PORT, ssh://USER@HOST/PATH)"
		}
		if names := connectionNames(cfg); len(names) > 0 {
			hint = "podman's connections are " + strings.Join(names, ", ") + " (podman system connection list)"
		}
		return nil, &ConnectError{Msg: fmt.Sprintf("no podman connection named %q (%s)", name, setting), Hint: hint}
	}
	return &chosen{
		Options: bindings.Options{URI: con.URI, Identity: con.Identity, TLSCertFile: con.TLSCert,
			TLSKeyFile: con.TLSKey, TLSCAFile: con.TLSCA, Machine: con.IsMachine},
		via: fmt.Sprintf(" (connection %s, from %s)", name, setting),
		fix: "the connection (podman system connection list) or " + setting,
	}, nil
}

// connectionNames are the names of podman's connections, sorted.
func connectionNames(cfg *config.Config) []string {
	all, err := cfg.GetAllConnections()
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(all))
	for _, c := range all {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	return names
}

func dial(ctx context.Context, opts bindings.Options) (*Podman, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := bindings.NewConnectionWithOptions(dctx, opts)
	if err != nil {
		return nil, err
	}
	// NewConnection's ctx carries the client; detach it from the dial
	// timeout, which would otherwise cancel every later call.
	p := &Podman{conn: context.WithoutCancel(conn), URI: opts.URI, Identity: opts.Identity}
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
	dir, removeDir, err := pod.MakeTempDir(pod.ServiceDirPrefix)
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
		removeDir()
		return nil, err
	}
	defer logFile.Close()
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		removeDir()
		return nil, &ConnectError{Msg: "cannot start podman system service", Err: err}
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	deadline := time.After(15 * time.Second)
wait:
	for {
		if _, err := os.Stat(sock); err == nil {
			p, err := dial(ctx, bindings.Options{URI: "unix://" + sock})
			if err == nil {
				p.Started, p.service, p.serviceDone, p.removeServiceDir = true, cmd, done, removeDir
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
	killService(cmd, syscall.SIGKILL)
	<-done
	out, _ := os.ReadFile(logPath)
	removeDir()
	msg := "no podman service answers and starting one failed"
	if cause != nil {
		msg += " (" + cause.Error() + ")"
	}
	log := strings.TrimSpace(string(out))
	return nil, &ConnectError{Msg: msg, Err: errors.New(log[strings.LastIndexByte(log, '\n')+1:]), Hint: serviceHint(log)}
}

// killService signals the podman service that startService started, and
// the processes of its group: a rootless podman runs the service in a
// child of its own, in the user namespace, which a SIGKILL of the parent
// alone leaves running for ever (--time=0). The group is the service's
// own (Setpgid); podman's pause process is in a session of its own.
func killService(cmd *exec.Cmd, sig syscall.Signal) {
	if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
		cmd.Process.Signal(sig)
	}
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
	killService(p.service, syscall.SIGTERM)
	select {
	case <-p.serviceDone:
	case <-time.After(5 * time.Second):
		killService(p.service, syscall.SIGKILL)
		<-p.serviceDone
	}
	return p.removeServiceDir()
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
