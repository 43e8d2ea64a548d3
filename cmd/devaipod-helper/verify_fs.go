package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ---- writes ----

func (v *verifier) rootfsWrite(_ context.Context) (verifyResult, string) {
	return v.writeProbe([]string{"/", "/usr", "/usr/bin", "/etc", "/opt/devaipod"},
		[]string{"/etc/passwd", "/etc/hosts", "/etc/resolv.conf", "/opt/devaipod/devaipod-helper"})
}

func (v *verifier) outsideWrite(_ context.Context) (verifyResult, string) {
	var dirs []string
	for _, d := range []string{"/var", "/var/tmp", "/var/lib", "/run", "/run/devaipod", "/run/devaipod/proxy", "/srv",
		"/mnt", "/media", "/opt", "/home", "/root", "/usr/local", "/usr/local/bin"} {
		if !v.mayWrite(d) {
			dirs = append(dirs, d)
		}
	}
	return v.writeProbe(dirs, nil)
}

// mayWrite tells the places the agent writes by design: the workspace,
// HOME, /tmp and what lies below them.
func (v *verifier) mayWrite(p string) bool {
	for _, ok := range []string{v.opts.workspace, v.home, "/tmp"} {
		if ok != "" && ok != "/" && (p == ok || strings.HasPrefix(p, ok+"/")) {
			return true
		}
	}
	return false
}

// writeProbe creates a file in each folder and opens each existing
// regular file for writing.
func (v *verifier) writeProbe(dirs, files []string) (verifyResult, string) {
	var wrote []string
	var denied []namedErr
	for _, d := range dirs {
		if err := v.createIn(d); err == nil {
			wrote = append(wrote, "created a file in "+d)
		} else {
			denied = append(denied, namedErr{d, err})
		}
	}
	for _, f := range files {
		if !v.isRegular(f) {
			continue
		}
		if err := v.openForWrite(f); err == nil {
			wrote = append(wrote, "opened "+f+" for writing")
		} else {
			denied = append(denied, namedErr{f, err})
		}
	}
	if len(wrote) > 0 {
		return verifyFail, strings.Join(wrote, "; ")
	}
	return verifyPass, groupErrors(denied)
}

// ---- persistence points ----

// mountPoints reads /proc/self/mountinfo.
func (v *verifier) mountInfo() ([]mountEntry, error) {
	data, err := v.readFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountInfo(string(data)), nil
}

type mountEntry struct {
	root, point, fstype, source string
}

// parseMountInfo reads mountinfo lines: "ID PARENT MAJ:MIN ROOT POINT
// OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS".
func parseMountInfo(s string) []mountEntry {
	var out []mountEntry
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		m := mountEntry{root: unescapeMountInfo(f[3]), point: unescapeMountInfo(f[4])}
		if i := slices.Index(f, "-"); i > 0 && len(f) > i+2 {
			m.fstype, m.source = f[i+1], unescapeMountInfo(f[i+2])
		}
		out = append(out, m)
	}
	return out
}

// unescapeMountInfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountInfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// persistencePoint checks one protected path: it must be neither writable
// nor replaceable. A path can be replaced (renamed away, then created
// anew) when it, or a folder on the way to it from the workspace, is not a
// mount point and lies in a writable folder: a read-only file in a
// writable .git is as good as writable.
func (v *verifier) persistencePoint(rel string) (verifyResult, string) {
	ws := v.opts.workspace
	if ws == "" {
		return verifyNA, "no --workspace given"
	}
	target := path.Join(ws, rel)
	mountPoints := map[string]bool{}
	mounts, mountErr := v.mountInfo()
	for _, m := range mounts {
		mountPoints[m.point] = true
	}
	note := ""
	if mountErr != nil {
		note = "; mount points unknown (" + errText(mountErr) + "), none assumed"
	}
	chain := []string{ws}
	for p := target; p != ws; p = path.Dir(p) {
		chain = slices.Insert(chain, 1, p)
	}
	for _, p := range chain {
		_, err := os.Lstat(v.path(p))
		if errors.Is(err, fs.ErrNotExist) {
			err := v.createIn(path.Dir(p))
			if err == nil {
				return verifyFail, fmt.Sprintf("%s does not exist and can be created (%s is writable)", p, path.Dir(p)) + note
			}
			return verifyPass, fmt.Sprintf("%s does not exist and cannot be created (%s)", p, errText(err)) + note
		}
		if err != nil {
			return verifyPass, "cannot reach " + p + ": " + errText(err) + note
		}
		if !mountPoints[p] {
			if err := v.createIn(path.Dir(p)); err == nil {
				what := "it"
				if p != target {
					what = p
				}
				return verifyFail, fmt.Sprintf("can replace %s: not a mount point, and %s is writable", what, path.Dir(p)) + note
			}
		}
	}
	fi, _ := os.Stat(v.path(target))
	var err error
	var action string
	switch {
	case fi != nil && fi.IsDir():
		action, err = "created a file in it", v.createIn(target)
	case v.isRegular(target):
		action, err = "opened it for writing", v.openForWrite(target)
	default:
		return verifyPass, "not a regular file or folder; cannot be replaced" + note
	}
	if err == nil {
		return verifyFail, action + note
	}
	how := "a mount point"
	if !mountPoints[target] {
		how = "its folder is read-only"
	}
	return verifyPass, errText(err) + "; cannot be replaced: " + how + note
}

// ---- other pods ----

// podVolumeSuffixes are the parts after devaipod-NAME- of a pod's volumes;
// they tell pod "a" from pod "a-b" (whose volumes start devaipod-a- too).
// They are pod/plan's Volume* names (the helper links no pod package).
var podVolumeSuffixes = []string{"workspace", "agent-git", "agent-home", "agent-sock", "proxy-sock", "proxy-state", "gator-sock", "gator-state"}

var volumeInRoot = regexp.MustCompile(`/volumes/([^/]+)/_data(/|$)`)

// ownVolume tells whether volume belongs to pod.
func ownVolume(volume, pod string) bool {
	rest, ok := strings.CutPrefix(volume, "devaipod-"+pod+"-")
	if !ok {
		return false
	}
	for _, s := range podVolumeSuffixes {
		if strings.HasSuffix(rest, "-"+s) {
			return false // devaipod-POD-X-SUFFIX: pod POD-X's
		}
	}
	return true
}

// expectedMount tells the mount points a devaipod agent has on purpose.
func (v *verifier) expectedMount(point string) bool {
	switch point {
	case "/", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/etc/passwd", "/etc/group",
		"/etc/localtime", "/etc/timezone", "/run/.containerenv", "/run/podman-init":
		return true
	}
	under := []string{"/proc", "/sys", "/dev", "/tmp", "/opt/devaipod", "/run/devaipod", "/workspaces"}
	if v.home != "" && v.home != "/" {
		under = append(under, v.home)
	}
	under = append(under, v.opts.expectMounts...)
	if ws := v.opts.workspace; ws != "" {
		under = append(under, ws)
		// The folders above the workspace, such as the volume at /workspaces.
		if point != "/" && strings.HasPrefix(ws, point+"/") {
			return true
		}
	}
	for _, u := range under {
		if u != "" && (point == u || strings.HasPrefix(point, strings.TrimSuffix(u, "/")+"/")) {
			return true
		}
	}
	return false
}

func (v *verifier) otherPods(_ context.Context) (verifyResult, string) {
	mounts, err := v.mountInfo()
	if err != nil {
		return verifyNA, "cannot read /proc/self/mountinfo: " + errText(err)
	}
	pod := v.opts.pod
	if pod == "" {
		pods := map[string]bool{}
		for _, m := range mounts {
			if vm := volumeInRoot.FindStringSubmatch(m.root); vm != nil {
				if name, ok := strings.CutSuffix(strings.TrimPrefix(vm[1], "devaipod-"), "-workspace"); ok && strings.HasPrefix(vm[1], "devaipod-") {
					pods[name] = true
				}
			}
		}
		switch names := slices.Sorted(maps.Keys(pods)); len(names) {
		case 0:
		case 1:
			pod = names[0]
		default:
			return verifyFail, "workspace volumes of several pods are mounted: " + strings.Join(names, ", ")
		}
	}
	var problems []string
	ownVolumes := 0
	for _, m := range mounts {
		if vm := volumeInRoot.FindStringSubmatch(m.root); vm != nil && strings.HasPrefix(vm[1], "devaipod-") {
			switch {
			case pod != "" && ownVolume(vm[1], pod):
				ownVolumes++
				continue
			case pod != "":
				problems = append(problems, fmt.Sprintf("volume %s of another pod at %s", vm[1], m.point))
				continue
			}
		}
		if !v.expectedMount(m.point) {
			problems = append(problems, fmt.Sprintf("unexpected mount %s (%s %s)", m.point, m.fstype, m.root))
		}
	}
	if entries, err := os.ReadDir(v.path("/run/devaipod")); err == nil {
		for _, e := range entries {
			// The sockets' folders, and "git": the agent's own git
			// directory a second time (up copies it in there).
			if !slices.Contains([]string{"agent", "proxy", "gator", "git"}, e.Name()) {
				problems = append(problems, "/run/devaipod/"+e.Name()+" is not this agent's")
			}
		}
	}
	if len(problems) > 0 {
		return verifyFail, listSome(problems, 5)
	}
	who := "pod " + pod
	if pod == "" {
		who = "no devaipod volume, so no pod name"
	}
	return verifyPass, fmt.Sprintf("%d mounts, all expected; %s, %d of its volumes", len(mounts), who, ownVolumes)
}
