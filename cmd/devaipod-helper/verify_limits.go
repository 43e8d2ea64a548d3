package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
)

// ---- limits ----

// cgroupLimit is what the cgroup files say about one limit.
type cgroupLimit struct {
	value   uint64
	limited bool
	// enforceable: the controller's file is there, so the host could cap
	// this and no limit is a choice, not a host limitation.
	enforceable bool
	// why no limit is visible, when !limited.
	why string
}

// unlimitedV1 is where cgroup v1's "no limit" values start (the largest
// page-aligned int64).
const unlimitedV1 = 1 << 62

func (v *verifier) cgroupLimit(controller, v2file, v1file string) cgroupLimit {
	data, err := v.readFile("/proc/self/cgroup")
	if err != nil {
		return cgroupLimit{why: "/proc/self/cgroup is unreadable: " + errText(err)}
	}
	parse := func(s string) (uint64, bool) {
		s = strings.TrimSpace(s)
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseUint(s, 10, 64)
		return n, err == nil && n < unlimitedV1
	}
	// readUp reads file in dir and every visible ancestor up to base and
	// keeps the lowest limit: a parent's limit holds for its children.
	readUp := func(base, rel, file string) cgroupLimit {
		dir := path.Join(base, rel)
		if _, err := os.Stat(v.path(dir)); err != nil || !strings.HasPrefix(dir+"/", base+"/") {
			dir = base // the cgroup namespace hides the path: its root is this cgroup
		}
		var l cgroupLimit
		for {
			if b, err := v.readFile(path.Join(dir, file)); err == nil {
				l.enforceable = true
				if n, ok := parse(string(b)); ok && (!l.limited || n < l.value) {
					l.value, l.limited = n, true
				}
			}
			if dir == base {
				return l
			}
			dir = path.Dir(dir)
		}
	}
	rootless := v.inUserNamespace()
	if _, err := os.Stat(v.path("/sys/fs/cgroup/cgroup.controllers")); err == nil {
		var rel string
		for _, line := range strings.Split(string(data), "\n") {
			if r, ok := strings.CutPrefix(line, "0::"); ok {
				rel = r
			}
		}
		l := readUp("/sys/fs/cgroup", rel, v2file)
		switch {
		case l.limited:
		case !l.enforceable && rootless:
			l.why = "not enforced: the " + controller + " controller is not delegated to this container's cgroup (rootless podman needs systemd to delegate it)"
		case !l.enforceable:
			l.why = "not enforced: the " + controller + " controller is not enabled for this container's cgroup"
		default:
			l.why = "no limit set (cgroup v2, " + v2file + " is max)"
		}
		return l
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), controller) {
			l := readUp(path.Join("/sys/fs/cgroup", controller), f[2], v1file)
			switch {
			case l.limited:
			case rootless:
				l.enforceable = false
				l.why = "not enforced: no cgroup limit visible (rootless podman on cgroup v1 ignores limits)"
			case !l.enforceable:
				l.why = "not enforced: no " + v1file + " visible (cgroup v1)"
			default:
				l.why = "no limit set (cgroup v1)"
			}
			return l
		}
	}
	return cgroupLimit{why: "not enforced: no " + controller + " cgroup visible under /sys/fs/cgroup"}
}

// inUserNamespace tells whether this process runs in a user namespace
// (rootless podman) rather than the host's.
func (v *verifier) inUserNamespace() bool {
	data, err := v.readFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return strings.Join(strings.Fields(string(data)), " ") != "0 0 4294967295"
}

// judgeLimit: PASS when capped at or below the expectation (or capped at
// all, without one), FAIL when the cap is above it or missing where the
// host could set it, WARN when it was asked for and the host cannot enforce
// it, N-A when none was asked for and there is none.
func judgeLimit(l cgroupLimit, want uint64, hasWant bool, format func(uint64) string) (verifyResult, string) {
	switch {
	case l.limited && hasWant && l.value > want:
		return verifyFail, fmt.Sprintf("capped at %s, above the %s asked for", format(l.value), format(want))
	case l.limited && hasWant:
		return verifyPass, fmt.Sprintf("capped at %s (asked for %s)", format(l.value), format(want))
	case l.limited:
		return verifyPass, "capped at " + format(l.value)
	case l.enforceable && hasWant:
		return verifyFail, fmt.Sprintf("%s, though %s was asked for and this host can enforce it", l.why, format(want))
	case hasWant:
		return verifyWarn, fmt.Sprintf("%s asked for, %s", format(want), l.why)
	}
	return verifyNA, l.why
}

func (v *verifier) limitMemory(_ context.Context) (verifyResult, string) {
	want, ok := v.opts.limits["memory"]
	return judgeLimit(v.cgroupLimit("memory", "memory.max", "memory.limit_in_bytes"), want, ok, formatBytes)
}

func (v *verifier) limitPids(_ context.Context) (verifyResult, string) {
	want, ok := v.opts.limits["pids"]
	return judgeLimit(v.cgroupLimit("pids", "pids.max", "pids.max"), want, ok,
		func(n uint64) string { return strconv.FormatUint(n, 10) + " processes" })
}

func (v *verifier) limitTmp(_ context.Context) (verifyResult, string) {
	want, hasWant := v.opts.limits["tmp"]
	if err := v.createIn("/tmp"); err != nil {
		return verifyPass, "/tmp is not writable: " + errText(err)
	}
	info, err := v.sys.statfs(v.path("/tmp"))
	switch {
	case errors.Is(err, errVerifyUnsupported):
		return verifyNA, "statfs: " + err.Error()
	case err != nil:
		return verifyFail, "cannot statfs /tmp: " + errText(err)
	}
	kind := "a tmpfs"
	if !info.tmpfs {
		kind = "not a tmpfs, on a filesystem"
	}
	// tmpfs rounds its size up to whole pages.
	if hasWant && info.bytes > (want+4095)&^4095 {
		return verifyFail, fmt.Sprintf("/tmp is %s of %s, above the %s asked for", kind, formatBytes(info.bytes), formatBytes(want))
	}
	if !hasWant && !info.tmpfs {
		return verifyNA, fmt.Sprintf("not capped: /tmp is %s of %s", kind, formatBytes(info.bytes))
	}
	return verifyPass, fmt.Sprintf("/tmp is %s of %s", kind, formatBytes(info.bytes))
}

func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
