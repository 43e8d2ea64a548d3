package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/devaipod/devaipod/internal/cmdline"
)

// The commands of a pod rendered for Kubernetes (pod/kube). There, the
// helper image cannot be mounted into a container (image volumes are new
// in Kubernetes and absent from podman 4.3's kube play), nothing copies the
// repository into a volume before the containers exist, and a secret file
// cannot be given to one uid: an init container of the helper image does
// each, and the engine streams the repository in through it.

// installRoot is where kube-init finds the helper image's files; tests
// point it elsewhere.
var installRoot = "/"

// installFiles are the helper image's files that the containers use at
// /opt/devaipod (the gator's binary stays out: only the gator runs it, from
// its own image).
var installFiles = []string{"devaipod-helper", "bin", "opencode-gator.json"}

type kubeInitOptions struct {
	install string
	chowns  []string
	secrets []string
	wait    string
	timeout time.Duration
	// subPathProbe and subPathCheck: see helperargs.KubeInit.
	subPathProbe, subPathCheck string
}

func newKubeInitFlagSet(o *kubeInitOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("kube-init", flag.ContinueOnError)
	fs.StringVar(&o.install, "install", "", "copy the helper's files (devaipod-helper, bin/, opencode-gator.json) into `DIR`")
	fs.Var(cmdline.ListFlag(&o.chowns, cmdline.Valid(parseChown)), "chown", "give the directory PATH the owner UID:GID (`PATH=UID:GID`, repeatable)")
	fs.Var(cmdline.ListFlag(&o.secrets, cmdline.Valid(parseSecretCopy)), "secrets",
		"copy the files of SRC into DEST, owned by UID and readable by it alone (`SRC=DEST:UID`, repeatable)")
	fs.StringVar(&o.wait, "wait", "", "then wait until `FILE` exists (the engine creates it once the repository is copied in)")
	fs.DurationVar(&o.timeout, "timeout", 0, "give up waiting after this long (0: wait for ever)")
	fs.StringVar(&o.subPathProbe, "subpath-probe", "", "create `DIR` with a file ok in it (for --subpath-check)")
	fs.StringVar(&o.subPathCheck, "subpath-check", "", "after the wait, require DIR/ok: `DIR` is the probe mounted by subPath, which a runtime that ignores subPath (podman before 4.4) mounts as the whole volume")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper kube-init [--install DIR] [--chown PATH=UID:GID]...
         [--secrets SRC=DEST:UID]... [--subpath-probe DIR]
         [--wait FILE [--timeout D]] [--subpath-check DIR]

The init container of a pod rendered by devaipod kube render: copy the
helper's files out of this image into DIR (an emptyDir the containers mount
at /opt/devaipod), give the volumes' roots their owners, copy secrets where
only their user can read them, then wait for the engine's marker. Each step
can be repeated: a restarted pod runs it again.

`)
		fs.PrintDefaults()
	}
	return fs
}

func parseChown(s string) (chownSpec, error) {
	p, ids, ok := strings.Cut(s, "=")
	u, g, ok2 := strings.Cut(ids, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || !ok2 || p == "" || err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return chownSpec{}, fmt.Errorf("%q: want PATH=UID:GID", s)
	}
	return chownSpec{p, uid, gid}, nil
}

type chownSpec struct {
	path     string
	uid, gid int
}

func parseSecretCopy(s string) (secretCopy, error) {
	src, rest, ok := strings.Cut(s, "=")
	i := strings.LastIndexByte(rest, ':')
	if !ok || src == "" || i <= 0 {
		return secretCopy{}, fmt.Errorf("%q: want SRC=DEST:UID", s)
	}
	uid, err := strconv.Atoi(rest[i+1:])
	if err != nil || uid < 0 {
		return secretCopy{}, fmt.Errorf("%q: want SRC=DEST:UID", s)
	}
	return secretCopy{src, rest[:i], uid}, nil
}

type secretCopy struct {
	src, dest string
	uid       int
}

func runKubeInit(ctx context.Context, args []string, _, stderr io.Writer) int {
	var o kubeInitOptions
	fs := newKubeInitFlagSet(&o)
	if err := cmdline.ParseFlags(fs, args, stderr, logPrefix+"kube-init: ", nil); err != nil {
		return cmdline.ExitCode(err)
	}
	if err := kubeInit(ctx, o, stderr); err != nil {
		fmt.Fprintf(stderr, "%skube-init: %v\n", logPrefix, err)
		return 1
	}
	return 0
}

func kubeInit(ctx context.Context, o kubeInitOptions, log io.Writer) error {
	if o.install != "" {
		for _, name := range installFiles {
			if err := copyTree(filepath.Join(installRoot, name), filepath.Join(o.install, name)); err != nil {
				return fmt.Errorf("install the helper: %w", err)
			}
		}
	}
	for _, s := range o.chowns {
		c, _ := parseChown(s)
		if err := os.Lchown(c.path, c.uid, c.gid); err != nil {
			return err
		}
		// A provisioner may make a volume's root writable by all
		// (local-path's are 0777); podman makes it 0755. Only the owner
		// writes there: the agent must not plant entries in a root it
		// does not own, such as host-share's markers.
		st, err := os.Lstat(c.path)
		if err != nil {
			return err
		}
		if perm := st.Mode().Perm(); perm&0o022 != 0 {
			if err := os.Chmod(c.path, perm&^0o022); err != nil {
				return err
			}
		}
	}
	for _, s := range o.secrets {
		c, _ := parseSecretCopy(s)
		if err := copySecrets(c); err != nil {
			return fmt.Errorf("copy the secrets of %s: %w", c.src, err)
		}
	}
	if o.subPathProbe != "" {
		if err := makeSubPathProbe(o.subPathProbe); err != nil {
			return err
		}
	}
	if err := waitMarker(ctx, o, log); err != nil {
		return err
	}
	if o.subPathCheck != "" {
		if _, err := os.Stat(filepath.Join(o.subPathCheck, "ok")); err != nil {
			return fmt.Errorf("%s is not the subPath mount it should be (%v): this runtime ignores subPath (podman before 4.4 does), so the agent's protected paths and its folder would not be mounted as planned; render with --workspace-access ro, or use podman 4.4 or later", o.subPathCheck, err)
		}
	}
	return nil
}

// makeSubPathProbe makes dir afresh with an empty file ok in it. It lies
// in a volume the agent mounts, so whatever is there (from an earlier run)
// is removed, not followed: a symlink there would lead this root process
// to write elsewhere.
func makeSubPathProbe(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, "ok"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// waitMarker waits for o.wait, if set.
func waitMarker(ctx context.Context, o kubeInitOptions, log io.Writer) error {
	if o.wait == "" {
		return nil
	}
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	fmt.Fprintf(log, "%skube-init: waiting for %s (the engine creates it once it has copied the repository in)\n", logPrefix, o.wait)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(o.wait); err == nil {
			return nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not appear: %w", o.wait, ctx.Err())
		case <-tick.C:
		}
	}
}

// copyTree copies a file, or a directory of files, keeping their modes. A
// file is written aside and renamed into place, so a rerun never leaves a
// half-written program.
func copyTree(src, dest string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if st.IsDir() {
		if err := os.MkdirAll(dest, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := copyTree(filepath.Join(src, e.Name()), filepath.Join(dest, e.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	// The same file in place is left alone: a rerun, or under podman
	// 4.3's kube play, where the agent's Pod's emptyDir is the named
	// volume the workspace's Pod filled (it names the volume after the
	// Pod's volume), which the agent's uid cannot write.
	if st2, err := os.Stat(dest); err == nil && st2.Mode().Perm() == st.Mode().Perm() && st2.Size() == st.Size() {
		if have, err := os.ReadFile(dest); err == nil && bytes.Equal(have, data) {
			return nil
		}
	}
	tmp := dest + ".tmp"
	if err := os.WriteFile(tmp, data, st.Mode().Perm()); err != nil {
		return err
	}
	if err := os.Chmod(tmp, st.Mode().Perm()); err != nil { // the umask may have taken bits
		return err
	}
	return os.Rename(tmp, dest)
}

// copySecrets copies the files of a Secret volume (its keys; the
// ..data links Kubernetes adds are left out) into dest, owned by uid and
// readable by it alone, as podman gives a secret to one uid.
func copySecrets(c secretCopy) error {
	entries, err := os.ReadDir(c.src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.dest, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(c.dest, 0o700); err != nil { // a rerun: 0500 from the last
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(c.src, e.Name()))
		if err != nil {
			return err
		}
		dest := filepath.Join(c.dest, e.Name())
		_ = os.Remove(dest) // a rerun: the old copy is 0400
		if err := os.WriteFile(dest, data, 0o400); err != nil {
			return err
		}
		if err := os.Chown(dest, c.uid, c.uid); err != nil {
			return err
		}
	}
	if err := os.Chown(c.dest, c.uid, c.uid); err != nil {
		return err
	}
	return os.Chmod(c.dest, 0o500)
}

type untarOptions struct{ dir, done string }

func newUntarFlagSet(o *untarOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("untar", flag.ContinueOnError)
	fs.StringVar(&o.dir, "dir", "", "extract into `DIR` (required)")
	fs.StringVar(&o.done, "done", "", "then create `FILE` (the marker kube-init --wait waits for)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper untar --dir DIR [--done FILE] < TAR

Extract a tar stream from standard input into DIR, with the owners (when run
as root), modes and times of its headers; no entry can land outside DIR,
through ".." or a symlink. Then create FILE, if given. The engine of a pod
rendered by devaipod kube render copies the repository in this way.

`)
		fs.PrintDefaults()
	}
	return fs
}

func runUntar(args []string, stdin io.Reader, stderr io.Writer) int {
	var o untarOptions
	fs := newUntarFlagSet(&o)
	check := func() string {
		if o.dir == "" {
			return "--dir is required"
		}
		return ""
	}
	if err := cmdline.ParseFlags(fs, args, stderr, logPrefix+"untar: ", check); err != nil {
		return cmdline.ExitCode(err)
	}
	if err := untar(stdin, o.dir, os.Getuid() == 0); err != nil {
		fmt.Fprintf(stderr, "%suntar: %v\n", logPrefix, err)
		return 1
	}
	if o.done != "" {
		if err := os.WriteFile(o.done, nil, 0o644); err != nil {
			fmt.Fprintf(stderr, "%suntar: %v\n", logPrefix, err)
			return 1
		}
	}
	return 0
}

// untar extracts r into dir, through an os.Root: a name with "..", or one
// that passes through a symlink out of dir, is refused by the kernel's
// view of dir, not by string checks. Directories get their modes last, so
// a read-only one can still be filled.
func untar(r io.Reader, dir string, chown bool) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	type dirMode struct {
		name  string
		mode  os.FileMode
		mtime time.Time
	}
	var dirs []dirMode
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "/"))
		mode := os.FileMode(hdr.Mode).Perm() | tarSpecialBits(hdr.Mode)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name != "." {
				if err := root.MkdirAll(name, 0o700); err != nil {
					return err
				}
			}
			dirs = append(dirs, dirMode{name, mode, hdr.ModTime})
		case tar.TypeReg:
			_ = root.Remove(name)
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		case tar.TypeSymlink:
			_ = root.Remove(name)
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		case tar.TypeLink:
			_ = root.Remove(name)
			if err := root.Link(path.Clean(strings.TrimPrefix(hdr.Linkname, "/")), name); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("%s: unsupported tar entry type %q", name, hdr.Typeflag)
		}
		if chown {
			if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
				return err
			}
		}
		if hdr.Typeflag == tar.TypeReg {
			// After the chown, which clears set-id bits.
			if err := root.Chmod(name, mode); err != nil {
				return err
			}
			if err := root.Chtimes(name, hdr.ModTime, hdr.ModTime); err != nil {
				return err
			}
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := root.Chmod(d.name, d.mode); err != nil {
			return err
		}
		if err := root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
			return err
		}
	}
	return nil
}

// tarSpecialBits are the setuid, setgid and sticky bits of a tar mode as
// an os.FileMode.
func tarSpecialBits(m int64) os.FileMode {
	var bits os.FileMode
	if m&0o4000 != 0 {
		bits |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		bits |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		bits |= os.ModeSticky
	}
	return bits
}

func newUmaskFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("umask", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper umask MASK -- CMD [ARGS...]

Set the umask to MASK (octal) and become CMD (looked up in PATH). A pod
rendered for Kubernetes starts its workspace and agent this way: Kubernetes
has no umask setting, and what either creates in the shared copy of the
repository must stay writable by the other (umask 0002).
`)
	}
	return fs
}

func runUmask(args []string, _, stderr io.Writer) int {
	fs := newUmaskFlagSet()
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	rest := fs.Args()
	if len(rest) < 3 || rest[1] != "--" {
		fmt.Fprintf(stderr, "%sumask: want MASK -- CMD [ARGS...]\n", logPrefix)
		return 2
	}
	mask, err := strconv.ParseUint(rest[0], 8, 32)
	if err != nil || mask > 0o777 {
		fmt.Fprintf(stderr, "%sumask: %q is not an octal mask\n", logPrefix, rest[0])
		return 2
	}
	prog, err := exec.LookPath(rest[2])
	if err != nil {
		fmt.Fprintf(stderr, "%sumask: %v\n", logPrefix, err)
		return 127
	}
	syscall.Umask(int(mask))
	err = syscall.Exec(prog, rest[2:], os.Environ())
	fmt.Fprintf(stderr, "%sumask: exec %s: %v\n", logPrefix, prog, err)
	return 126
}
