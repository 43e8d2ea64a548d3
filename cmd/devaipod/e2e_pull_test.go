package main

import (
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// testRegistry starts an OCI registry on the host's loopback, over HTTPS
// with a certificate podman trusts through the user's certs.d for its
// address only (removed at the end), and returns that address.
func testRegistry(t *testing.T) string {
	t.Helper()
	return startRegistry(t, registry.New(registry.Logger(log.New(io.Discard, "", 0))))
}

// startRegistry serves h as testRegistry serves its registry.
func startRegistry(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
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

// pushBusybox builds a small image (busybox) as image, pushes it to its
// registry and removes it here (and again at the end, once pulled).
func pushBusybox(t *testing.T, image string) {
	t.Helper()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("busybox (static) is needed for a small image: %v", err)
	}
	dir := t.TempDir()
	if out, err := exec.Command("cp", busybox, filepath.Join(dir, "busybox")).CombinedOutput(); err != nil {
		t.Fatalf("cp busybox: %v %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"),
		[]byte("FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeImages(image) })
	podmanCLI(t, "build", "-q", "-t", image, dir)
	podmanCLI(t, "push", "-q", image)
	podmanCLI(t, "rmi", image)
}

// removeImages removes every image whose name matches one of refs
// (podman's reference filter: a name, or a repository for all its tags).
func removeImages(refs ...string) {
	for _, ref := range refs {
		if out, err := exec.Command("podman", "images", "-q", "--filter", "reference="+ref).Output(); err == nil {
			for _, id := range strings.Fields(string(out)) {
				exec.Command("podman", "rmi", "-f", id).Run()
			}
		}
	}
}

// TestE2EPullImage ups a pod on an image that is only in a registry (one
// the test runs): --pull never refuses with what to do, a name the registry
// does not have fails with podman's reason and leaves nothing, and the
// default (--pull missing) pulls it, showing podman's progress.
func TestE2EPullImage(t *testing.T) {
	e2e(t)
	host := testRegistry(t)
	image := host + "/e2e/busybox:1"
	pushBusybox(t, image)

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
	if r.code == 0 || !strings.Contains(r.stderr, "Error: pull "+missing+": initializing source") || !strings.Contains(r.stderr, "manifest unknown") ||
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

// tokenRegistry is a registry that, as public registries do, lets anyone
// pull with a token from its token endpoint, but its repositories named
// private-* only with a login; it records how each token was asked for:
// anonymously, or with a login (Basic).
type tokenRegistry struct {
	inner http.Handler
	mu    sync.Mutex
	asked []string // "anonymous" or the login's user name
}

func (reg *tokenRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/token" {
		who := "anonymous"
		if user, _, ok := r.BasicAuth(); ok {
			who = user
		}
		reg.mu.Lock()
		reg.asked = append(reg.asked, who)
		reg.mu.Unlock()
		if who == "anonymous" && strings.Contains(r.URL.Query().Get("scope"), "/private-") {
			http.Error(w, "log in to pull this", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"token":"e2e","access_token":"e2e"}`)
		return
	}
	if r.Header.Get("Authorization") != "Bearer e2e" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="https://`+r.Host+`/token",service="e2e"`)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	reg.inner.ServeHTTP(w, r)
}

// logins returns who asked for tokens since the last call.
func (reg *tokenRegistry) logins() []string {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	asked := reg.asked
	reg.asked = nil
	return asked
}

// TestE2EUntrustedPullIsAnonymous: an untrusted repository's image, and
// its Dockerfile's base image, come from a registry you are logged in to.
// up pulls them without your login (the registry sees only anonymous
// token requests); trusted, the same up pulls with it (so the test can
// tell). An image only your login gets is not given to an untrusted
// repository, even once it is on this host, nor is an image built here.
func TestE2EUntrustedPullIsAnonymous(t *testing.T) {
	e2e(t)
	reg := &tokenRegistry{inner: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	host := startRegistry(t, reg)
	// Logged in as podman login does it, for this registry only: podman
	// and its service use the login from now on.
	podmanCLI(t, "login", "-u", "e2e-user", "-p", "e2e-password", host)
	t.Cleanup(func() { exec.Command("podman", "logout", host).Run() })
	image := host + "/e2e/public:1"
	pushBusybox(t, image)
	private := host + "/e2e/private-team:1"
	pushBusybox(t, private)
	if got := reg.logins(); !slices.Contains(got, "e2e-user") {
		t.Fatalf("the login and push did not log in (%v): the registry cannot tell logins", got)
	}
	rmi := func() { removeImages(image, private, "localhost/devaipod-build-fixture") }
	t.Cleanup(rmi)

	repo := fixtureRepo(t)
	commitFiles(t, repo, map[string]string{
		".devcontainer/devcontainer.json":         `{"image": "` + image + `"}`,
		".devcontainer/build/devcontainer.json":   `{"build": {"dockerfile": "Dockerfile"}}`,
		".devcontainer/build/Dockerfile":          "ARG BASE=" + host + "/e2e/public\nFROM ${BASE}:1\nRUN echo built > /built\n",
		".devcontainer/private/devcontainer.json": `{"image": "` + private + `"}`,
		".devcontainer/local/devcontainer.json":   `{"image": "localhost/devaipod-helper:latest"}`,
	})
	cfg := standInConfig(t, "[workspace]\nprivate_registries = [\""+host+"\"]\n")
	for _, tt := range []struct {
		name, devcontainer string
		trust              bool
		want               string
	}{
		{"untrusted image", ".devcontainer/devcontainer.json", false, "anonymous"},
		{"untrusted Dockerfile base", ".devcontainer/build/devcontainer.json", false, "anonymous"},
		{"trusted image", ".devcontainer/devcontainer.json", true, "e2e-user"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rmi()
			reg.logins()
			name := uniqueName("e2e-anon")
			cleanup(t, name)
			args := []string{"--config", cfg, "up", repo, "--name", name, "--devcontainer", tt.devcontainer}
			if tt.trust {
				args = append(args, "--trust")
			}
			up := mustDevaipod(t, nil, args...)
			got := reg.logins()
			if len(got) == 0 || slices.ContainsFunc(got, func(who string) bool { return who != tt.want }) {
				t.Errorf("the registry was asked for tokens by %v; want %s only\n%s", got, tt.want, up)
			}
			if !tt.trust && !strings.Contains(up.stderr, "without registry logins (the repository is not trusted)") {
				t.Errorf("up does not say it pulled without logins:\n%s", up)
			}
			if r := devaipod(t, nil, "exec", name, "--", "cat", "README.md"); strings.TrimSpace(r.stdout) != "fixture" {
				t.Errorf("exec in the pulled image's workspace: %s", r)
			}
		})
	}

	t.Run("an image only your login gets, and one built here, are refused", func(t *testing.T) {
		trusted := uniqueName("e2e-anon")
		cleanup(t, trusted)
		mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", trusted, "--devcontainer", ".devcontainer/private/devcontainer.json", "--trust")
		podmanCLI(t, "image", "exists", private) // on this host now, pulled with your login
		for _, tt := range []struct{ cfg, devcontainer, want string }{
			{cfg, ".devcontainer/private/devcontainer.json", "log in to pull this"},
			{cfg, ".devcontainer/local/devcontainer.json", "an image of this host"},
			// A registry on this host or a private network gives its
			// images to whoever asks from here: not named, refused.
			{standInConfig(t, ""), ".devcontainer/devcontainer.json", "a loopback or private address"},
		} {
			name := uniqueName("e2e-anon")
			r := devaipod(t, nil, "--config", tt.cfg, "up", repo, "--name", name, "--devcontainer", tt.devcontainer)
			if r.code == 0 || !strings.Contains(r.stderr, tt.want) || len(labelled(t, name)) > 0 {
				t.Errorf("an untrusted repository naming %s: %s\nwant a refusal saying %q, nothing left", tt.devcontainer, r, tt.want)
			}
		}
	})
}
