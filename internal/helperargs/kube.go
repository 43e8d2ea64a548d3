package helperargs

import (
	"strconv"
	"time"
)

// The commands of a pod rendered for Kubernetes (package pod/kube), where
// nothing copies files into a volume before the containers start and an
// image cannot be mounted: init containers of the helper image do it.

// KubeInit is an init container's work: copy the helper's files out of its
// image (Install), give the volumes' roots their owners (Chowns), copy
// secrets to where their one user can read them (Secrets), then wait for the
// engine's marker (Wait) before the pod's containers start.
type KubeInit struct {
	Install string   // a directory: the helper, bin/ and opencode-gator.json land there
	Chowns  []string // PATH=UID:GID, see Chown
	Secrets []string // SRC=DEST:UID, see SecretCopy
	Wait    string   // a file the engine creates once it has copied the tree in
	Timeout time.Duration
	// SubPathProbe is a directory to create with a file "ok" in it, which
	// SubPathCheck (the same directory, mounted by subPath in the agent's
	// Pod) requires, after the wait: a runtime that ignores subPath (podman
	// before 4.4) mounts the whole volume there instead, and the agent,
	// whose protected paths are subPath mounts, does not start.
	SubPathProbe, SubPathCheck string
}

// Chown is a --chown value: the directory path gets owner uid:gid.
func Chown(path string, uid, gid int) string {
	return path + "=" + strconv.Itoa(uid) + ":" + strconv.Itoa(gid)
}

// SecretCopy is a --secrets value: the files of src are copied into dest,
// owned by uid (and its group), readable by it alone.
func SecretCopy(src, dest string, uid int) string { return src + "=" + dest + ":" + strconv.Itoa(uid) }

func (x KubeInit) Args() []string {
	a := argv{"kube-init"}
	a.str("install", x.Install)
	a.list("chown", x.Chowns)
	a.list("secrets", x.Secrets)
	a.str("wait", x.Wait)
	a.duration("timeout", x.Timeout)
	a.str("subpath-probe", x.SubPathProbe)
	a.str("subpath-check", x.SubPathCheck)
	return a
}

// Untar extracts a tar stream from standard input into Dir, with the
// owners and modes of its headers, and then creates Done (if set): the
// engine's side of the handshake (pod/kube's package doc).
type Untar struct {
	Dir  string
	Done string
}

func (x Untar) Args() []string {
	a := argv{"untar"}
	a.str("dir", x.Dir)
	a.str("done", x.Done)
	return a
}

// Umask runs Command with the umask Mask (octal): Kubernetes has no umask
// setting, and the shared copy of the repository needs 0002.
type Umask struct {
	Mask    string
	Command []string
}

func (x Umask) Args() []string {
	return append([]string{"umask", x.Mask, "--"}, x.Command...)
}
