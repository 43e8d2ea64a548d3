package pod

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// The kernel's key quota (keyrings(7)) caps how many containers a user's
// podman can run at once. runc gives every container it starts a session
// keyring of its own, named "_ses." and the container's id, so that the
// container does not share the caller's; the kernel charges it to the
// user the container's root maps to, which for rootless podman is the user
// itself. An unprivileged user may hold kernel.keys.maxkeys keys (200 by
// default) and kernel.keys.maxbytes bytes of them (20000); root has
// root_maxkeys and root_maxbytes (1000000 and 25000000). Once the quota is
// spent, runc fails to start a container with "unable to create session
// key: disk quota exceeded". `podman exec` joins the container's keyring
// by name and holds no key of its own; conmon holds none.
const (
	// KeysPerPod is how many keys a running pod holds at most: one per
	// container, and a pod has up to five (podman's infra container, the
	// workspace, the agent, the proxy and the gator).
	KeysPerPod = 5
	// KeyBytes is what one such keyring costs in the byte quota: its name
	// ("_ses." and a 64-digit id) and a NUL.
	KeyBytes = 70
	// RecommendedMaxKeys and RecommendedMaxBytes are the per-user limits
	// `KeyQuota.Fix` proposes at least (hack/setup-host.sh sets them on the
	// test host): 400 pods' worth of keys, and room for keys other than
	// runc's, which can be much larger than its keyrings.
	RecommendedMaxKeys  = 2000
	RecommendedMaxBytes = 2000000
)

// Where the kernel shows the key quota; tests point them elsewhere.
var (
	keyUsersFile = "/proc/key-users"
	keySysctlDir = "/proc/sys/kernel/keys"
)

// KeyQuota is a user's use of the kernel's key quota and its limits.
type KeyQuota struct {
	UID      int `json:"uid"`
	Keys     int `json:"keys"`
	MaxKeys  int `json:"maxKeys"`
	Bytes    int `json:"bytes"`
	MaxBytes int `json:"maxBytes"`
}

// ReadKeyQuota reads uid's key quota: its use and limits from
// /proc/key-users, where the kernel lists each user that holds keys, or
// the limits alone from the sysctls when uid holds none.
func ReadKeyQuota(uid int) (KeyQuota, error) {
	f, err := os.Open(keyUsersFile)
	if err != nil {
		return KeyQuota{}, fmt.Errorf("read the key quota: %w", err)
	}
	defer f.Close()
	q, found, err := parseKeyUsers(f, uid)
	if err != nil || found {
		return q, err
	}
	prefix := ""
	if uid == 0 {
		prefix = "root_"
	}
	if q.MaxKeys, err = readSysctlInt(prefix + "maxkeys"); err != nil {
		return q, err
	}
	q.MaxBytes, err = readSysctlInt(prefix + "maxbytes")
	return q, err
}

func readSysctlInt(name string) (int, error) {
	b, err := os.ReadFile(keySysctlDir + "/" + name)
	if err != nil {
		return 0, fmt.Errorf("read the key quota: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("read the key quota: kernel.keys.%s: %w", name, err)
	}
	return n, nil
}

// parseKeyUsers finds uid's line in /proc/key-users, whose lines read
// "  UID:  USAGE NKEYS/NIKEYS QNKEYS/MAXKEYS QNBYTES/MAXBYTES" (the quota
// counts are the Q ones). found is false when uid has no line.
func parseKeyUsers(r io.Reader, uid int) (q KeyQuota, found bool, err error) {
	q.UID = uid
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 5 || f[0] != strconv.Itoa(uid)+":" {
			continue
		}
		var ok1, ok2 bool
		q.Keys, q.MaxKeys, ok1 = fraction(f[3])
		q.Bytes, q.MaxBytes, ok2 = fraction(f[4])
		if !ok1 || !ok2 {
			return q, false, fmt.Errorf("read the key quota: unexpected line in %s: %q", keyUsersFile, sc.Text())
		}
		return q, true, nil
	}
	return q, false, sc.Err()
}

func fraction(s string) (a, b int, ok bool) {
	x, y, ok := strings.Cut(s, "/")
	a, err1 := strconv.Atoi(x)
	b, err2 := strconv.Atoi(y)
	return a, b, ok && err1 == nil && err2 == nil
}

// PodsLeft is how many more pods fit in the quota, at KeysPerPod keys each.
func (q KeyQuota) PodsLeft() int {
	return max(0, min((q.MaxKeys-q.Keys)/KeysPerPod, (q.MaxBytes-q.Bytes)/(KeysPerPod*KeyBytes)))
}

// Fix is the command, run as root, that makes room for pods more pods
// (and at least the recommended limits), or "" when there is room.
func (q KeyQuota) Fix(pods int) string {
	if q.PodsLeft() >= pods {
		return ""
	}
	// Never lower a limit: only the one that is short may need raising.
	keys := max(q.MaxKeys, RecommendedMaxKeys, roundUp(q.Keys+pods*KeysPerPod, 1000))
	bytes := max(q.MaxBytes, RecommendedMaxBytes, keys*1000, roundUp(q.Bytes+pods*KeysPerPod*KeyBytes, 100000))
	prefix := ""
	if q.UID == 0 {
		prefix = "root_"
	}
	return fmt.Sprintf("sysctl -w kernel.keys.%smaxkeys=%d kernel.keys.%smaxbytes=%d (and the same in /etc/sysctl.d/ to keep it)",
		prefix, keys, prefix, bytes)
}

func roundUp(n, unit int) int { return (n + unit - 1) / unit * unit }
