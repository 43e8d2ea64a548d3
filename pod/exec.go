package pod

import (
	"bytes"
	"context"
	"io"
	"sync"

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
func Attach(ctx context.Context, eng Engine, short, role string, as plan.ExecAs, argv []string, in io.Reader, out, errOut io.Writer, tty bool) (int, error) {
	e := ExecSpec{Cmd: argv, User: as.User, Stdin: in, Output: out, Stderr: errOut}
	if role == plan.RoleWorkspace {
		e.User, e.Cmd = as.Command(argv, true)
	} else if _, err := RunningPod(ctx, eng, short, role); err != nil {
		return 0, err
	}
	return eng.Attach(ctx, plan.ContainerName(short, role), e, tty)
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
