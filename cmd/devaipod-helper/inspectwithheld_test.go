package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestHostMounts reads a mountinfo as rootless podman leaves it (a host
// bind, a named volume, secrets, podman's own files) and names the host
// path only.
func TestHostMounts(t *testing.T) {
	const mountinfo = `348 233 0:92 / / rw,relatime - overlay overlay rw,lowerdir=/home/u/.local/share/containers/storage/overlay/l/M2
350 348 0:105 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
352 348 254:0 /tmp/bind\040src /b ro,relatime - ext4 /dev/vda rw
353 348 254:0 /home/u/.local/share/containers/storage/volumes/mtestvol/_data /v rw,nosuid,nodev,relatime - ext4 /dev/vda rw
354 348 0:40 /containers/overlay-containers/631b/userdata/run/secrets /run/secrets rw,nosuid,nodev,relatime - tmpfs tmpfs rw
372 348 254:0 /home/u/.local/share/containers/storage/overlay-containers/631b/userdata/secrets/mtest /run/devaipod/secrets/X rw,relatime - ext4 /dev/vda rw
373 351 0:6 /null /dev/null rw,relatime - devtmpfs devtmpfs rw
374 348 254:0 /var/lib/containers/storage/volumes/v/_data /w rw shared:1 - xfs /dev/sda1 rw
375 348 254:0 /home/u/.ssh /root/.ssh ro master:2 - xfs /dev/sda1 rw
`
	file := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(file, []byte(mountinfo), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := hostMounts(file)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"the host's /tmp/bind src is mounted at /b", "the host's /home/u/.ssh is mounted at /root/.ssh"}
	if !slices.Equal(got, want) {
		t.Errorf("hostMounts = %q; want %q", got, want)
	}
}

// TestWithheld: in a container tree that holds a trusted value in a
// process's environment, in a file and as a secret, each is named; an
// allowed secret and other values are not.
func TestWithheld(t *testing.T) {
	root := t.TempDir()
	write := func(p, content string) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "s3cr3t-trusted-value"
	write("proc/42/environ", "PATH=/bin\x00LEAK="+secret+"\x00")
	write("proc/42/cmdline", "sleep\x00100\x00")
	write("proc/self/mountinfo", "350 348 0:105 / /proc rw - proc proc rw\n")
	write("workspaces/p/leaked.txt", "token: "+secret+"\n")
	write("run/devaipod/secrets/DEVAIPOD_AGENT_PASSWORD", "pw")
	write("run/devaipod/secrets/MY_TOKEN", secret)
	o := &verifyOptions{workspace: "/workspaces/p", secretHashes: []string{fmt.Sprintf("%x", sha256.Sum256([]byte(secret)))}}
	v := newVerifier(o)
	v.root, v.environ, v.pid = root, []string{"PATH=/bin"}, 1
	checked, problems := v.withheld(context.Background(), []string{"DEVAIPOD_AGENT_PASSWORD"})
	joined := strings.Join(problems, "\n")
	for _, want := range []string{"PID 42 (?) environment: LEAK holds a trusted value", "/workspaces/p/leaked.txt", "/run/devaipod/secrets holds a secret: MY_TOKEN"} {
		if !strings.Contains(joined, want) {
			t.Errorf("problems lack %q:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "DEVAIPOD_AGENT_PASSWORD") || checked == "" {
		t.Errorf("checked %q, problems:\n%s", checked, joined)
	}
}
