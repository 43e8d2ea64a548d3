package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
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

func newDoctorCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check what this host can run and enforce",
		Long: `Check the host: podman and its mode, storage driver, runtime, whether
resource limits are enforced, the images devaipod needs (and whether the
helper image is of this devaipod's version: 'make images' in devaipod's source
tree rebuilds it), and host tools. It exits non-zero when something would stop
'devaipod up' from working.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			checks := doctor(cmd, g)
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
}

func doctor(cmd *cobra.Command, g *globalFlags) []check {
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
