package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/spf13/cobra"
)

// check is one row of doctor's report.
type check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok, warn, fail
	Detail string `json:"detail"`
}

// defaultDoctorPods is how many more pods doctor expects room for unless
// --pods says otherwise.
const defaultDoctorPods = 10

func newDoctorCommand(g *globalFlags) *cobra.Command {
	pods := defaultDoctorPods
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check what this host can run and enforce",
		Long: `Check the host: podman and its mode, storage driver, runtime, whether
resource limits are enforced, the images devaipod needs (and whether the
helper image is of this devaipod's version: 'make images' in devaipod's source
tree rebuilds it), host tools, and how many more pods the kernel's key quota
leaves room for (every running container holds a key; --pods says how many
more pods you mean to run at once). It exits non-zero when something would
stop 'devaipod up' from working.`,
		Example: `  devaipod doctor
  devaipod doctor --pods 100    # is there room for 100 more pods at once?`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pods < 1 {
				return fmt.Errorf("--pods must be at least 1, not %d", pods)
			}
			checks := doctor(cmd, g, pods)
			failed := false
			for _, c := range checks {
				failed = failed || c.Status == "fail"
			}
			if g.json() {
				if err := writeJSON(cmd.OutOrStdout(), checks); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL")
				for _, c := range checks {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Status, c.Detail)
				}
				tw.Flush()
			}
			if failed {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&pods, "pods", pods, "how many more pods to expect room for (the kernel's key quota)")
	return cmd
}

func doctor(cmd *cobra.Command, g *globalFlags, pods int) []check {
	ctx := cmd.Context()
	var checks []check
	add := func(name, status, format string, args ...any) {
		checks = append(checks, check{name, status, fmt.Sprintf(format, args...)})
	}
	if _, err := exec.LookPath("git"); err != nil {
		add("git", "fail", "git is not installed on this host; up needs it to clone: install git")
	} else {
		add("git", "ok", "host git clones the repositories")
	}
	p, err := podman.Connect(ctx, g.connection)
	if err != nil {
		var ce *podman.ConnectError
		detail := err.Error()
		if errors.As(err, &ce) && ce.Hint != "" {
			detail += "; " + ce.Hint
		}
		add("podman", "fail", "%s", detail)
		return checks
	}
	defer p.Close()
	h, err := p.Info(ctx)
	if err != nil {
		add("podman", "fail", "podman info: %v", err)
		return checks
	}
	note := ""
	if p.Started {
		note = "; no service was running, doctor started one for itself"
	}
	add("podman", "ok", "podman %s (API %s), %s, at %s%s", h.Version, h.APIVersion, podmanMode(h.Rootless), p.URI, note)
	add("runtime", "ok", "%s, cgroup %s (%s)", h.OCIRuntime, h.CgroupVersion, h.CgroupManager)
	if h.GraphDriver == "vfs" {
		add("storage", "warn", "vfs copies the whole image for every container (seconds per create): set driver = \"overlay\" in ~/.config/containers/storage.conf, then `podman system reset`")
	} else {
		add("storage", "ok", "%s", h.GraphDriver)
	}
	if h.LimitsEnforced() {
		add("limits", "ok", "memory, cpus and pids limits are enforced (%s, cgroup %s)", podmanMode(h.Rootless), h.CgroupVersion)
	} else {
		add("limits", "warn", "memory, cpus and pids limits are NOT enforced: rootless podman on cgroup v1 ignores them (the agent's /tmp size limit still holds); rootful podman or cgroup v2 enforces them")
	}
	if h.Rootless {
		if f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0); err != nil {
			add("slirp4netns", "fail", "cannot open /dev/net/tun (%v): rootless pod networking needs it; as root: chmod 0666 /dev/net/tun", err)
		} else {
			f.Close()
			add("slirp4netns", "ok", "/dev/net/tun is usable")
		}
	}
	if uid, ok := serviceUID(p.URI, h.Rootless); ok {
		if q, err := pod.ReadKeyQuota(uid); err != nil {
			add("keys", "warn", "%v: cannot tell how many containers can run at once", err)
		} else {
			checks = append(checks, keyQuotaCheck(q, pods))
		}
	}
	for _, img := range []string{config.DefaultHelperImage, config.DefaultImage} {
		c, err := p.ImageConfig(ctx, img)
		switch {
		case err != nil:
			status := "fail"
			if img == config.DefaultImage {
				status = "warn" // only needed without --image / [workspace] image
			}
			add("image", status, "%s is missing: run `%s`", img, pod.RebuildImages)
		case img == config.DefaultHelperImage:
			checks = append(checks, helperImageCheck(img, c))
		default:
			add("image", "ok", "%s", img)
		}
	}
	return checks
}

// serviceUID is the user whose key quota the podman service's containers
// are charged to: the owner of its socket, when the service runs on this
// host (for a rootless service, the user; for a rootful one, root). ok is
// false for a service elsewhere (ssh, tcp), whose quota this host cannot see.
func serviceUID(uri string, rootless bool) (uid int, ok bool) {
	path, local := strings.CutPrefix(uri, "unix://")
	if !local {
		return 0, false
	}
	if st, err := os.Stat(path); err == nil {
		if sys, isUnix := st.Sys().(*syscall.Stat_t); isUnix {
			return int(sys.Uid), true
		}
	}
	if rootless {
		return os.Getuid(), true
	}
	return 0, true
}

// keyQuotaCheck says how many more pods the kernel's key quota has room
// for: fail when not one (up would fail to start a container), warn when
// fewer than pods.
func keyQuotaCheck(q pod.KeyQuota, pods int) check {
	use := fmt.Sprintf("%d of %d keys and %d of %d bytes of the kernel's key quota in use by uid %d",
		q.Keys, q.MaxKeys, q.Bytes, q.MaxBytes, q.UID)
	left := q.PodsLeft()
	if left >= pods {
		return check{"keys", "ok", fmt.Sprintf("%s: room for about %d more pods", use, left)}
	}
	why := fmt.Sprintf("each running container holds a key (runc's session keyring), up to %d per pod; "+
		"when they run out, starting a container fails with \"unable to create session key: disk quota exceeded\"; "+
		"to make room for %d more pods, as root: %s", pod.KeysPerPod, pods, q.Fix(pods))
	if left == 0 {
		return check{"keys", "fail", fmt.Sprintf("%s: no room for another pod: %s", use, why)}
	}
	return check{"keys", "warn", fmt.Sprintf("%s: room for only %d more pods, fewer than %d: %s", use, left, pods, why)}
}

// helperImageCheck compares the helper image's version with devaipod's, as
// up does: up refuses an older release (fail) and warns about any other
// mismatch (warn).
func helperImageCheck(img string, c plan.ImageConfig) check {
	e := pod.CheckImageVersion(img, c, plan.Version)
	switch {
	case e == nil:
		return check{"image", "ok", fmt.Sprintf("%s (devaipod %s, as this devaipod)", img, plan.Version)}
	case e.Refuse:
		return check{"image", "fail", fmt.Sprintf("%s: %s (up refuses it)", e.Error(), e.Fix())}
	}
	return check{"image", "warn", fmt.Sprintf("%s: %s", e.Error(), e.Fix())}
}
