package kubeclient

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition is what Wait waits for in each Pod: done when it holds,
// with an error when the Pod can never get there.
type Condition func(p *corev1.Pod) (bool, error)

// Ready holds when every container of the Pod runs and is ready.
func Ready(p *corev1.Pod) (bool, error) {
	if err := failed(p); err != nil {
		return false, err
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue, nil
		}
	}
	return false, nil
}

// InitRunning holds when the Pod's init container name runs (the
// handshake's: it waits for the copy), or has already finished.
func InitRunning(name string) Condition {
	return func(p *corev1.Pod) (bool, error) {
		if err := failed(p); err != nil {
			return false, err
		}
		if !slices.ContainsFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == name }) {
			return true, nil // this Pod has no part in the handshake
		}
		for _, st := range p.Status.InitContainerStatuses {
			if st.Name == name {
				return st.State.Running != nil || (st.State.Terminated != nil && st.State.Terminated.ExitCode == 0), nil
			}
		}
		return false, nil
	}
}

// WaitError says Pods did not get where Wait waited for them: Pending
// says, Pod by Pod, what held each back (unschedulable, an image pull,
// an init container); Fatal is set when a Pod can never get there.
type WaitError struct {
	What      string // what was waited for
	Timeout   time.Duration
	Pending   []string
	Fatal     bool
	Namespace string
}

func (e *WaitError) Error() string {
	why := "after " + e.Timeout.String()
	if e.Fatal {
		why = "and never will"
	}
	return fmt.Sprintf("pods not %s %s: %s", e.What, why, strings.Join(e.Pending, "; "))
}

// unrecoverable are the reasons a container waits that time does not
// cure.
var unrecoverable = []string{"InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "ErrImageNeverPull"}

type fatalError struct{ msg string }

func (e *fatalError) Error() string { return e.msg }

// failed says why a Pod will never be ready: it ended, or a container
// waits for what time does not cure.
func failed(p *corev1.Pod) error {
	if p.DeletionTimestamp != nil {
		return &fatalError{p.Name + " is being deleted"}
	}
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		msg := p.Name + " ended (" + string(p.Status.Phase) + ")"
		if p.Status.Message != "" {
			msg += ": " + p.Status.Message
		}
		return &fatalError{msg}
	}
	for _, st := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if w := st.State.Waiting; w != nil && slices.Contains(unrecoverable, w.Reason) {
			return &fatalError{fmt.Sprintf("%s: container %s: %s: %s", p.Name, st.Name, w.Reason, w.Message)}
		}
		if t := st.State.Terminated; t != nil && t.ExitCode != 0 && p.Spec.RestartPolicy == corev1.RestartPolicyNever {
			return &fatalError{fmt.Sprintf("%s: container %s exited %d (%s)", p.Name, st.Name, t.ExitCode, t.Reason)}
		}
	}
	return nil
}

// Describe says in a line what holds a Pod back: scheduling, image
// pulls, init containers, containers that wait or restart.
func Describe(p *corev1.Pod) string {
	var parts []string
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			parts = append(parts, "not scheduled: "+strings.TrimSpace(c.Reason+" "+c.Message))
		}
	}
	describe := func(init bool, sts []corev1.ContainerStatus) {
		kind := "container"
		if init {
			kind = "init container"
		}
		for _, st := range sts {
			switch s := st.State; {
			case s.Waiting != nil && s.Waiting.Reason != "" && s.Waiting.Reason != "PodInitializing":
				msg := fmt.Sprintf("%s %s: %s", kind, st.Name, s.Waiting.Reason)
				if s.Waiting.Message != "" {
					msg += " (" + s.Waiting.Message + ")"
				}
				if strings.Contains(s.Waiting.Reason, "ImagePull") || s.Waiting.Reason == "ErrImagePull" {
					msg += " [image " + st.Image + "]"
				}
				parts = append(parts, msg)
			case init && s.Running != nil:
				parts = append(parts, kind+" "+st.Name+" running")
			case !init && s.Running != nil && !st.Ready:
				parts = append(parts, kind+" "+st.Name+" running, not ready")
			case s.Terminated != nil && s.Terminated.ExitCode != 0:
				parts = append(parts, fmt.Sprintf("%s %s exited %d (%s), %d restarts", kind, st.Name, s.Terminated.ExitCode, s.Terminated.Reason, st.RestartCount))
			}
		}
	}
	describe(true, p.Status.InitContainerStatuses)
	describe(false, p.Status.ContainerStatuses)
	if len(parts) == 0 {
		parts = append(parts, strings.ToLower(string(p.Status.Phase)))
		if p.Status.Phase == "" {
			parts[0] = "not yet seen by the scheduler"
		}
	}
	return p.Name + ": " + strings.Join(parts, ", ")
}

// Wait waits until cond holds for every Pod of pod short (want is how
// many there must be), telling progress (when set) what holds them back
// each time that changes. It gives up after timeout, or at once when a
// Pod can never get there, with a *WaitError.
func (c *Client) Wait(ctx context.Context, short string, want int, what string, cond Condition, timeout time.Duration, progress func(string)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	var pending []string
	for {
		list, err := c.cs.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector(short)})
		if err != nil && ctx.Err() == nil {
			return c.unreachable(fmt.Errorf("wait for pod %s: %w", short, err))
		}
		if err == nil {
			pending = pending[:0]
			done := 0
			for i := range list.Items {
				p := &list.Items[i]
				ok, err := cond(p)
				if err != nil {
					return &WaitError{What: what, Timeout: timeout, Pending: []string{err.Error()}, Fatal: true, Namespace: c.Namespace}
				}
				if ok {
					done++
				} else {
					pending = append(pending, Describe(p))
				}
			}
			if n := len(list.Items); n < want {
				pending = append(pending, fmt.Sprintf("%d of %d Pods exist", n, want))
			} else if done == n {
				return nil
			}
			if line := strings.Join(pending, "; "); line != last && progress != nil {
				progress(line)
				last = line
			}
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return &WaitError{What: what, Timeout: timeout, Pending: slices.Clone(pending), Namespace: c.Namespace}
			}
			return ctx.Err()
		case <-time.After(c.poll):
		}
	}
}
