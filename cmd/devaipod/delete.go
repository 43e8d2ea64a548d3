package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/spf13/cobra"
)

func newDeleteCommand(g *globalFlags) *cobra.Command {
	var keepVolumes, wait bool
	var markFD int
	cmd := &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Remove a pod and everything labelled for it",
		Long: `Remove a pod: its containers, volumes and secrets, found by the
io.devaipod.pod label, and nothing else. With --keep-volumes the workspace
copy and the agent's HOME stay (and are removed by a later delete or gc).

delete kills the agent's container at once (every process the agent runs
has ended when delete returns), then leaves the rest to a process of its
own: podman takes a few hundred milliseconds more to stop the other
containers and remove them and the volumes. Until that is done, list
shows the pod as "removing", and an up or start of the same name waits
for it. That process writes to ~/.local/state/devaipod/removing/NAME.log;
should it fail, list shows "removal failed", and the next delete, gc, up
or start of the name finishes the removal. With --wait, delete removes
everything itself and returns when all of it is gone.

With --engine kube: the pod's Pods, then (once they are gone, so that the
agent never runs without its deny-all NetworkPolicy) its NetworkPolicies
and ConfigMaps, its PersistentVolumeClaims (the volumes) and Secrets, all
found by the io.devaipod.pod label in the namespace. It always waits, as it
does on a podman service reached over ssh or tcp.`,
		Example: `  devaipod delete my-task          # the agent stops now, the rest goes in the background
  devaipod delete my-task --wait   # returns once every container and volume is gone`,
		Args:              positional("NAME"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if markFD > 0 {
				return withPod(cmd, g, args, func(p pod.Engine, short string) error {
					return finishRemoval(cmd, g, p, short, markFD)
				})
			}
			return withPodEngine(cmd, g, args, func(eng pod.Engine, short string) error {
				if p, ok := eng.(*podman.Podman); ok && p.Local() && !wait {
					removing, err := startRemoval(cmd, g, p, short, keepVolumes)
					if err == nil {
						what := "its containers and volumes are"
						if keepVolumes {
							what = "its containers are"
						}
						return reportObjects(cmd, g, "removing", removing, fmt.Sprintf(
							"Pod %s deleted: its agent is stopped, and %s being removed in the background (list shows it as removing until then)", short, what))
					}
					// Another delete removes it (this one waits for that,
					// then removes what this one asks), an up or start of it
					// runs, or the agent could not be killed: remove it here.
				}
				removed, err := pod.Delete(cmd.Context(), eng, short, keepVolumes)
				if err != nil {
					return err
				}
				return reportObjects(cmd, g, "removed", removed, fmt.Sprintf("Pod %s deleted", short))
			})
		},
	}
	cmd.Flags().BoolVar(&keepVolumes, "keep-volumes", false, "keep the pod's volumes (the repository's copy, the agent's HOME and git directory, the sidecars' state)")
	cmd.Flags().BoolVar(&wait, "wait", false, "remove everything before returning, rather than kill the agent and leave the rest to a background process")
	// The background process's own: the removal mark it takes over.
	cmd.Flags().IntVar(&markFD, "removal-mark-fd", 0, "")
	cmd.Flags().MarkHidden("removal-mark-fd")
	return cmd
}

// startRemoval kills the pod's agent and starts a process that removes
// the rest, and returns what that process is to remove. On an error
// nothing is left to that process, and the caller removes the pod itself.
func startRemoval(cmd *cobra.Command, g *globalFlags, p *podman.Podman, short string, keepVolumes bool) ([]pod.Object, error) {
	r, removing, err := pod.StartRemoval(cmd.Context(), p, short, keepVolumes)
	if err != nil {
		return nil, err
	}
	if err := startRemover(g, short, r.File()); err != nil {
		g.warnf(cmd, "could not start the process that removes pod %s (%v): removing it here", short, err)
		return nil, errors.Join(err, r.Done())
	}
	r.Release()
	return removing, nil
}

// startRemover starts `devaipod delete NAME` in a session of its own,
// handing it the removal mark (which holds the removal's lock) as fd 3.
// Its output goes to the mark's log.
func startRemover(g *globalFlags, short string, mark *os.File) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	log, err := os.OpenFile(pod.RemovalLog(short), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	// What this process got from its caller (a pipe of a script, say)
	// is not for the remover, which outlives it.
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, e := range fds {
			if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 && uintptr(fd) != mark.Fd() {
				syscall.CloseOnExec(fd)
			}
		}
	}
	args := []string{"--quiet"}
	if g.connection != "" {
		args = append(args, "--connection", g.connection)
	}
	args = append(args, "delete", "--removal-mark-fd", "3", "--", short)
	c := exec.Command(self, args...)
	c.Stdout, c.Stderr = log, log
	c.ExtraFiles = []*os.File{mark}
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // Ctrl-C at the terminal is not for it
	if err := c.Start(); err != nil {
		return err
	}
	return c.Process.Release()
}

// finishRemoval is the background process's part: remove the pod whose
// removal mark it was handed as fd.
func finishRemoval(cmd *cobra.Command, g *globalFlags, p pod.Engine, short string, fd int) error {
	syscall.CloseOnExec(fd) // not for a podman service this process may start
	mark := os.NewFile(uintptr(fd), "removal mark")
	r, err := pod.HeldRemoval(short, mark)
	if err != nil {
		mark.Close()
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
	defer cancel()
	removed, err := pod.FinishRemoval(ctx, p, r)
	if err != nil {
		return err
	}
	return reportObjects(cmd, g, "removed", removed, fmt.Sprintf("Pod %s deleted", short))
}
