package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/devaipod/devaipod/internal/cmdline"
)

// forwardedSignals are passed on to the child's process group.
var forwardedSignals = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
}

// defaultGrace bounds how long init waits, after its child exited, for the
// processes the child left behind. It is short because podman stop gives the
// whole container 10 s.
const defaultGrace = 2 * time.Second

type initOptions struct {
	bridges     []*bridge
	dialTimeout time.Duration
	grace       time.Duration
	canary      string
	proxyCA     string // URL of the proxy's CA
	caDir       string // where to write it, with a bundle
	waitFor     string // a file that must exist before CMD starts
	command     []string
}

// bridgeFlag is a repeatable flag that adds one bridge per use.
type bridgeFlag struct {
	parse   func(string) (*bridge, error)
	bridges *[]*bridge
}

func (f bridgeFlag) String() string { return "" }

func (f bridgeFlag) Set(s string) error {
	b, err := f.parse(s)
	if err != nil {
		return err
	}
	*f.bridges = append(*f.bridges, b)
	return nil
}

func newInitFlagSet(o *initOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	fs.Var(bridgeFlag{parseExpose, &o.bridges}, "expose",
		"listen on a unix socket and forward each connection to TCP: `unix:PATH=tcp:HOST:PORT` (repeatable)")
	fs.Var(bridgeFlag{parseForward, &o.bridges}, "forward",
		"listen on TCP and forward each connection to a unix socket: `tcp:HOST:PORT=unix:PATH` (repeatable)")
	fs.DurationVar(&o.dialTimeout, "dial-timeout", defaultDialTimeout,
		"how long a bridge retries its target for one connection before closing it")
	fs.StringVar(&o.canary, "canary", "",
		"also listen on `tcp:HOST:PORT` and answer each connection with a token (see egress-check)")
	fs.StringVar(&o.proxyCA, "proxy-ca", "",
		"before CMD, fetch the proxy's CA from `URL` into --ca-dir (ca.pem, and bundle.pem with this image's roots)")
	fs.StringVar(&o.caDir, "ca-dir", "", "the `DIR` for --proxy-ca's files")
	fs.StringVar(&o.waitFor, "wait-for", "",
		"start CMD only once `FILE` exists (up writes it when the workspace's setup commands are done); the bridges serve meanwhile")
	fs.DurationVar(&o.grace, "grace", defaultGrace,
		"how long to wait, after CMD exits, for the processes it left behind")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper init [flags] [-- CMD ARGS...]

Run as PID 1 of a container. Serve the socket bridges. Run CMD, if given, as a
child in its own process group with stdin, stdout and stderr inherited; forward
SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH to that group;
reap every zombie. When CMD exits, its process group gets SIGTERM and up to
--grace to finish, and init exits with CMD's status (128+N if signal N killed
it). Without CMD, serve the bridges until SIGTERM or SIGINT, then exit 0.

A unix socket's directory is created if missing, a stale socket is replaced,
and the socket is made mode 0666 so that other uids can connect. Every
connection gets a new connection to the target; targets that are not up yet
are retried for --dial-timeout.

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

// parseInitFlags parses init's arguments. The command starts at the first
// argument that is not a flag, or after "--".
func parseInitFlags(args []string, output io.Writer) (*initOptions, error) {
	o := &initOptions{}
	fs := newInitFlagSet(o)
	fs.SetOutput(output)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.command = fs.Args()
	if (o.proxyCA == "") != (o.caDir == "") {
		fmt.Fprintf(output, "%sinit: --proxy-ca and --ca-dir go together\n", logPrefix)
		return nil, errors.New("usage")
	}
	for _, b := range o.bridges {
		b.dialTimeout = o.dialTimeout
	}
	return o, nil
}

func runInit(ctx context.Context, logger *log.Logger, args []string, stderr io.Writer) int {
	o, err := parseInitFlags(args, stderr)
	if err != nil {
		return cmdline.ExitCode(err)
	}
	for _, b := range o.bridges {
		b.log = logger
	}

	// Orphans go to the nearest subreaper, so this makes reaping work when
	// init is not PID 1 (podman --init, tests). As PID 1 it changes nothing.
	if err := setChildSubreaper(); err != nil {
		logger.Printf("init: cannot become a child subreaper: %v", err)
	}

	// Subscribe before anything starts so that no SIGCHLD or SIGTERM is lost.
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, append(forwardedSignals, syscall.SIGCHLD)...)
	defer signal.Stop(sigs)

	stopBridges, err := startBridges(ctx, o.bridges)
	if err != nil {
		logger.Printf("init: %v", err)
		return 1
	}
	// Closing the listeners removes the unix socket files.
	defer stopBridges()
	if o.canary != "" {
		stopCanary, err := startCanary(strings.TrimPrefix(o.canary, "tcp:"))
		if err != nil {
			logger.Printf("init: canary: %v", err)
			return 1
		}
		defer stopCanary()
	}
	if o.proxyCA != "" {
		// Without it the hosts the proxy puts credentials in fail TLS
		// in the agent, and nothing else: no reason not to start.
		if err := fetchProxyCA(ctx, o.proxyCA, o.caDir, proxyCATimeout); err != nil {
			logger.Printf("init: the proxy's CA: %v", err)
		}
	}
	logger.Printf("init: %s", describeStartup(o))

	if o.waitFor != "" && len(o.command) > 0 {
		logger.Printf("init: waiting for %s before starting the command", o.waitFor)
		if !waitForFile(o.waitFor, sigs) {
			return 0
		}
	}
	if len(o.command) == 0 {
		serveUntilStopped(ctx, sigs)
		return 0
	}
	return superviseChild(logger, o, sigs)
}

// waitForFile waits until path is a regular file, or false when a signal to stop
// (SIGTERM, SIGINT, SIGHUP) comes first. The agent's command waits so for
// the workspace's setup commands: they run on the trusted side, and must
// not run what the agent wrote meanwhile.
func waitForFile(path string, sigs <-chan os.Signal) bool {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() {
			return true
		}
		select {
		case sig := <-sigs:
			if sig == syscall.SIGTERM || sig == syscall.SIGINT || sig == syscall.SIGHUP {
				return false
			}
		case <-tick.C:
		}
	}
}

func describeStartup(o *initOptions) string {
	var parts []string
	for _, b := range o.bridges {
		parts = append(parts, b.String())
	}
	bridges := "no bridges"
	if len(parts) > 0 {
		bridges = "bridges " + strings.Join(parts, ", ")
	}
	if len(o.command) == 0 {
		return bridges + "; no command, serving until SIGTERM"
	}
	return fmt.Sprintf("%s; running %q", bridges, o.command)
}

// startBridges listens on every bridge before serving any, so that one bad
// bridge fails the whole start. The returned function stops them all and
// waits until their connections are closed.
func startBridges(ctx context.Context, bridges []*bridge) (stop func(), err error) {
	lns := make([]net.Listener, 0, len(bridges))
	for _, b := range bridges {
		ln, err := b.listen.Listen(ctx, net.ListenConfig{})
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			return nil, fmt.Errorf("bridge %s: %w", b, err)
		}
		lns = append(lns, ln)
		// With port 0 the kernel picked a port; the log should show it.
		b.listen.Address = ln.Addr().String()
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, b := range bridges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.serve(ctx, lns[i])
		}()
	}
	return func() {
		cancel()
		wg.Wait()
	}, nil
}

func serveUntilStopped(ctx context.Context, sigs <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-sigs:
			switch sig {
			case syscall.SIGCHLD:
				// Processes orphaned inside the container land here.
				reapChildren(0)
			case syscall.SIGTERM, syscall.SIGINT:
				return
			}
		}
	}
}

// superviseChild runs the command, forwards signals to it and returns the
// exit code init should exit with.
func superviseChild(logger *log.Logger, o *initOptions, sigs <-chan os.Signal) int {
	cmd, err := startChild(o.command)
	if err != nil {
		logger.Printf("init: %v", err)
		// The shell's codes for "not found" and "not executable".
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return 127
		}
		return 126
	}
	pid := cmd.Process.Pid

	var status syscall.WaitStatus
	for exited := false; !exited; {
		sig := <-sigs
		if sig == syscall.SIGCHLD {
			status, exited, _ = reapChildren(pid)
			continue
		}
		forwardSignal(pid, sig.(syscall.Signal))
	}
	// The child was reaped by wait4(-1) above, never by cmd.Wait; only
	// the handle (a pidfd on current kernels) is left to free.
	cmd.Process.Release()

	code := exitCode(status)
	if status.Signaled() {
		logger.Printf("init: child killed by signal %d (%v), exiting %d", status.Signal(), status.Signal(), code)
	} else {
		logger.Printf("init: child exited with status %d", code)
	}
	waitForLeftovers(pid, o.grace, sigs)
	return code
}

// startChild starts argv in its own process group, so that a forwarded signal
// reaches every process of the job (sh -c "a | b") as a terminal's would.
func startChild(argv []string) (*exec.Cmd, error) {
	if isTerminal(0) {
		// An interactive child must own the terminal, or reading from it
		// would stop it with SIGTTIN. That only works if the terminal is
		// ours (podman run -t); otherwise start it in the background.
		cmd := childCommand(argv, true)
		if err := cmd.Start(); err == nil {
			return cmd, nil
		}
	}
	cmd := childCommand(argv, false)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start command: %w", err)
	}
	return cmd, nil
}

func childCommand(argv []string, foreground bool) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if foreground {
		cmd.SysProcAttr.Foreground = true
		cmd.SysProcAttr.Ctty = 0
	}
	return cmd
}

func forwardSignal(pid int, sig syscall.Signal) {
	if err := syscall.Kill(-pid, sig); errors.Is(err, syscall.ESRCH) {
		// The child left its group: it should still get the signal.
		syscall.Kill(pid, sig)
	}
}

// reapChildren collects every child that has exited, so none stays a zombie,
// and reports the status of child if it was one of them. none reports that
// no children are left at all.
func reapChildren(child int) (status syscall.WaitStatus, exited, none bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil: // ECHILD
			return status, exited, true
		case pid <= 0: // children remain, none has exited
			return status, exited, false
		case pid == child:
			status, exited = ws, true
		}
	}
}

// waitForLeftovers gives the processes the child left behind a chance to
// finish cleanly: as PID 1, init's exit makes the kernel SIGKILL them. The
// child's process group is asked to stop; processes that left it are only
// waited for.
func waitForLeftovers(pgid int, grace time.Duration, sigs <-chan os.Signal) {
	// The kernel does not reuse a process group id while the group has
	// members, so this reaches only the child's leftovers.
	syscall.Kill(-pgid, syscall.SIGTERM)
	if _, _, none := reapChildren(0); none {
		return
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	for {
		select {
		case sig := <-sigs:
			if sig != syscall.SIGCHLD {
				continue
			}
			if _, _, none := reapChildren(0); none {
				return
			}
		case <-timer.C:
			return
		}
	}
}

// exitCode is the shell's convention: the exit status, or 128+N if signal N
// killed the process.
func exitCode(ws syscall.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return 1
}
