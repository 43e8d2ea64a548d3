package pod

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/devaipod/devaipod/internal/helperargs"
	"github.com/devaipod/devaipod/pod/plan"
)

// WorkspaceExecAs reads who a running pod's workspace commands run as from
// the label up put on it.
func WorkspaceExecAs(ctx context.Context, eng Engine, short string) (plan.ExecAs, error) {
	o, err := RunningPod(ctx, eng, short, plan.RoleWorkspace)
	if err != nil {
		return plan.ExecAs{}, err
	}
	var as plan.ExecAs
	_, err = decodePodLabel(o, plan.LabelExec, &as)
	return as, err
}

// Attach runs argv in one of a running pod's containers with the caller's
// standard streams (in, out and errOut; a terminal when tty) and returns
// its exit code. In the workspace it runs as as says (see
// WorkspaceExecAs; as.User may be overridden by the caller) with the
// trusted variables; in the agent as user ("" for the agent's own).
//
// When ctx ends (the caller's terminal closed: SIGHUP; or SIGTERM, Ctrl-C)
// the command's processes in the container are hung up as a terminal's
// end would (see hangUp): podman keeps an exec's processes running after
// its client has gone.
func Attach(ctx context.Context, eng Engine, short, role string, as plan.ExecAs, argv []string, in io.Reader, out, errOut io.Writer, tty bool) (int, error) {
	session := SessionVar + "=" + rand.Text()
	e := ExecSpec{Cmd: argv, User: as.User, Stdin: in, Output: out, Stderr: errOut, Env: []string{session}}
	// Who reads the session's environments: its user (root cannot,
	// without CAP_SYS_PTRACE, another user's).
	hangUpAs := e.User
	if role == plan.RoleWorkspace {
		e.User, e.Cmd = as.Command(argv, true)
		hangUpAs = cmp.Or(as.User, "0")
	} else if _, err := RunningPod(ctx, eng, short, role); err != nil {
		return 0, err
	}
	ctr := plan.ContainerName(short, role)
	code, err := eng.Attach(ctx, ctr, e, tty)
	// The client may die of the terminal's SIGHUP before ctx ends.
	if ctx.Err() != nil || errors.Is(err, ErrAttachKilled) {
		hangUp(eng, ctr, hangUpAs, session, errOut)
	}
	return code, err
}

// ErrAttachKilled: the client of an Attach was killed by a signal (a
// closed terminal's SIGHUP reaches it too); the exit code that goes with
// it is 128 and the signal's number, as a shell says.
var ErrAttachKilled = errors.New("the exec's client was killed by a signal")

// SessionVar marks the processes of a command Attach runs: its value is
// the session's own.
const SessionVar = "DEVAIPOD_SESSION"

// hangUp sends SIGHUP to the processes of the session in container ctr,
// those whose environment holds session, as user (the session's), with a
// context of its own (the caller's has ended), bounded: what is left of a
// session when it fails is no reason to keep the person waiting. A failure
// is said on errOut, which may be gone with the terminal.
func hangUp(eng Engine, ctr, user, session string, errOut io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, out, err := eng.Exec(ctx, ctr, ExecSpec{Cmd: plan.HelperCommand(helperargs.Hangup{Env: session}), User: user})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(out))
	}
	if err != nil {
		fmt.Fprintf(errOut, "devaipod: the command's processes in %s may still run (their hangup failed: %v)\n", ctr, err)
	}
}

// SyncBuffer is a bytes.Buffer that more than one goroutine may write at
// once: an exec's stdout and stderr, copied by their own goroutines. With
// Max set it keeps only the last Max bytes written (to show the end of a
// command's output without holding all of it).
type SyncBuffer struct {
	Max int

	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if b.Max > 0 {
		if len(p) > b.Max {
			p = p[len(p)-b.Max:]
		}
		if drop := b.buf.Len() + len(p) - b.Max; drop > 0 {
			b.buf.Next(drop)
		}
	}
	b.buf.Write(p)
	return n, nil
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ExecTail is how much of an exec's output Exec returns when the caller
// takes the output itself (ExecSpec.Output, which gets all of it): the
// end, for an error message. A command on the agent's side may print
// without end; the CLI must not hold it all.
const ExecTail = 64 << 10
