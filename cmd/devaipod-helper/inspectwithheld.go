package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/devaipod/devaipod/internal/cmdline"
)

// inspect-withheld runs in the workspace of an untrusted repository's pod,
// where the repository's code runs as root, and looks for what of the
// person's must not be there: a trusted value (by hash, as verify's rows do)
// in the environment or command line of any process or in a file, a podman
// secret other than the allowed ones, a host path bound in. It prints
// "checked: WHAT" and one "problem: WHAT" a line; devaipod verify hands
// them to the agent's battery as its untrusted-workspace row.

func runInspectWithheld(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var allowed []string
	o := &verifyOptions{}
	fs := newInspectWithheldFlagSet(o, &allowed)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	if o.hashesFile != "" {
		hashes, err := readHashes(o.hashesFile)
		if err != nil {
			fmt.Fprintf(stderr, "%sinspect-withheld: --secret-hashes-file: %v\n", logPrefix, err)
			return 2
		}
		o.secretHashes = hashes
	}
	checked, problems := newVerifier(o).withheld(ctx, allowed)
	fmt.Fprintln(stdout, "checked: "+checked)
	for _, p := range problems {
		fmt.Fprintln(stdout, "problem: "+p)
	}
	return 0
}

func newInspectWithheldFlagSet(o *verifyOptions, allowed *[]string) *flag.FlagSet {
	fs := flag.NewFlagSet("inspect-withheld", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper inspect-withheld [flags]

Look, in an untrusted repository's workspace, for the person's trusted
values (given as SHA-256 hashes) in every process's environment and command
line and in files, for podman secrets other than the allowed ones, and for
host paths bound in. Prints "checked: ..." and one "problem: ..." a line.
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.workspace, "workspace", "", "the repository's folder, searched with the others")
	fs.StringVar(&o.hashesFile, "secret-hashes-file", "", "a `FILE` of SHA-256 hashes of the values to look for, one a line (- for standard input)")
	fs.Func("allow-secret", "a secret `NAME` that may be mounted (repeatable)", func(s string) error {
		*allowed = append(*allowed, s)
		return nil
	})
	return fs
}

// secretMountDirs are where podman secrets are mounted in devaipod's
// containers.
var secretMountDirs = []string{"/run/devaipod/secrets", "/run/secrets"}

// withheld looks for what an untrusted repository's workspace must not
// hold (see runInspectWithheld); allowed are the secrets it may.
func (v *verifier) withheld(ctx context.Context, allowed []string) (checked string, problems []string) {
	var done []string
	if res, detail := v.trustedEnv(ctx); res == verifyFail {
		problems = append(problems, detail)
	} else {
		done = append(done, detail)
	}
	if res, detail := v.trustedEnvFiles(ctx); res == verifyFail {
		problems = append(problems, detail)
	} else {
		done = append(done, detail)
	}
	for _, dir := range secretMountDirs {
		entries, _ := os.ReadDir(v.path(dir))
		for _, e := range entries {
			if !slices.Contains(allowed, e.Name()) {
				problems = append(problems, fmt.Sprintf("%s holds a secret: %s", dir, e.Name()))
			}
		}
	}
	mounts, err := hostMounts(v.path("/proc/self/mountinfo"))
	if err != nil {
		return strings.Join(done, "; "), append(problems, "cannot read the mounts: "+errText(err))
	}
	problems = append(problems, mounts...)
	return strings.Join(append(done, "no secret but "+strings.Join(allowed, ", ")+" mounted, no host path bound"), "; "), problems
}

// virtualFS are filesystems that hold nothing of the host's files.
var virtualFS = map[string]bool{"proc": true, "sysfs": true, "tmpfs": true, "devpts": true, "mqueue": true,
	"cgroup": true, "cgroup2": true, "overlay": true, "devtmpfs": true, "fuse.fuse-overlayfs": true,
	"shm": true, "securityfs": true, "bpf": true, "debugfs": true, "tracefs": true, "hugetlbfs": true}

// hostMounts reads a mountinfo file and names each host path bound into
// the container: a mount of a disk's filesystem whose root is not the
// container storage's (named volumes, podman's secret copies) and not the
// filesystem's root.
func hostMounts(mountinfo string) ([]string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		root, point, fstype := unescapeMount(fields[3]), unescapeMount(fields[4]), fields[sep+1]
		if virtualFS[fstype] || root == "/" || strings.Contains(root, "/containers/storage/") {
			continue
		}
		found = append(found, fmt.Sprintf("the host's %s is mounted at %s", root, path.Clean(point)))
	}
	return found, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var n int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &n); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
