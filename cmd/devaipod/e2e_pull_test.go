package main

import (
	"encoding/pem"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// testRegistry starts an OCI registry on the host's loopback, over HTTPS
// with a certificate podman trusts through the user's certs.d for its
// address only (removed at the end), and returns that address.
func testRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	host := srv.Listener.Addr().String()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(home, ".config", "containers", "certs.d", host)
	if err := os.MkdirAll(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(certs)
		os.Remove(filepath.Dir(certs)) // when the test made it, and it is empty
	})
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(certs, "ca.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	return host
}

// podmanCLI runs the podman command and fails the test when it fails.
func podmanCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("podman", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestE2EPullImage ups a pod on an image that is only in a registry (one
// the test runs): --pull never refuses with what to do, a name the registry
// does not have fails with podman's reason and leaves nothing, and the
// default (--pull missing) pulls it, showing podman's progress.
func TestE2EPullImage(t *testing.T) {
	e2e(t)
	host := testRegistry(t)
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("busybox (static) is needed for a small image: %v", err)
	}
	// A small image, pushed to the registry and removed here.
	dir := t.TempDir()
	if out, err := exec.Command("cp", busybox, filepath.Join(dir, "busybox")).CombinedOutput(); err != nil {
		t.Fatalf("cp busybox: %v %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"),
		[]byte("FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	image := host + "/e2e/busybox:1"
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", image).Run() })
	podmanCLI(t, "build", "-q", "-t", image, dir)
	podmanCLI(t, "push", "-q", image)
	podmanCLI(t, "rmi", image)

	repo := fixtureRepo(t)
	cfg := standInConfig(t, "")
	name := uniqueName("e2e-pull")
	cleanup(t, name)

	r := devaipod(t, nil, "--config", cfg, "up", repo, "--name", name, "--image", image, "--pull", "never")
	if r.code == 0 || !strings.Contains(r.stderr, "image "+image+" is not in podman's storage and --pull is never") {
		t.Errorf("--pull never with a missing image: %s", r)
	}
	missing := host + "/e2e/busybox:no-such-tag"
	r = devaipod(t, nil, "--config", cfg, "up", repo, "--name", name, "--image", missing)
	if r.code == 0 || !strings.Contains(r.stderr, "pull "+missing) || !strings.Contains(r.stderr, "manifest unknown") ||
		!strings.Contains(r.stderr, "Hint: check the image's name") {
		t.Errorf("an image the registry does not have: %s", r)
	}
	if left := labelled(t, name); len(left) > 0 {
		t.Fatalf("failed ups left %v", left)
	}

	up := mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", name, "--image", image)
	if !strings.Contains(up.stderr, "pulling "+image+"...") || !strings.Contains(up.stderr, "Writing manifest") {
		t.Errorf("up did not say it pulled the image, with podman's progress:\n%s", up.stderr)
	}
	if got := podmanCLI(t, "inspect", "--format", "{{.ImageName}}", "devaipod-"+name+"-workspace"); got != image {
		t.Errorf("the workspace runs %q; want the pulled %s", got, image)
	}
	if r := devaipod(t, nil, "exec", name, "--", "sh", "-c", "cat README.md"); strings.TrimSpace(r.stdout) != "fixture" {
		t.Errorf("exec in the pulled image's workspace: %s", r)
	}
}
