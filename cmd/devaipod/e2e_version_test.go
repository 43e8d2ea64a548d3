package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
)

// cliVersion is the version DEVAIPOD_BIN reports.
func cliVersion(t *testing.T) string {
	t.Helper()
	var v map[string]string
	r := mustDevaipod(t, nil, "version", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v["version"] == "" {
		t.Fatalf("version -o json: %v\n%s", err, r)
	}
	return v["version"]
}

// helperImageRow is doctor's row about the helper image.
func helperImageRow(t *testing.T, r result) check {
	t.Helper()
	var checks []check
	if err := json.Unmarshal([]byte(r.stdout), &checks); err != nil {
		t.Fatalf("doctor -o json: %v\n%s", err, r)
	}
	for _, c := range checks {
		if c.Name == "image" && strings.Contains(c.Detail, config.DefaultHelperImage) {
			return c
		}
	}
	t.Fatalf("doctor has no row about %s:\n%s", config.DefaultHelperImage, r)
	return check{}
}

// TestE2EVersionHelperImage: make images labels the helper image with the
// version of its binaries, the same as the CLI's (make build gives all three
// the same), and doctor says they match; --version prints what version
// prints.
func TestE2EVersionHelperImage(t *testing.T) {
	e2e(t)
	want := cliVersion(t)
	out, err := exec.Command("podman", "image", "inspect", "--format",
		`{{index .Labels "`+plan.LabelVersion+`"}} {{index .Labels "`+pod.LabelImage+`"}}`, config.DefaultHelperImage).CombinedOutput()
	if err != nil {
		t.Fatalf("podman image inspect: %v %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != want+" "+pod.ImageHelper {
		t.Errorf("the helper image's labels %s, %s: %q, want %q (rebuild it: hack/as-test-user make images)", plan.LabelVersion, pod.LabelImage, got, want+" "+pod.ImageHelper)
	}
	row := helperImageRow(t, devaipod(t, nil, "doctor", "-o", "json"))
	if row.Status != "ok" || !strings.Contains(row.Detail, "devaipod "+want) {
		t.Errorf("doctor's helper image row: %+v, want ok with devaipod %s", row, want)
	}
	v := mustDevaipod(t, nil, "version")
	if f := mustDevaipod(t, nil, "--version"); f.stdout != v.stdout || !strings.HasPrefix(f.stdout, "devaipod "+want+" ") {
		t.Errorf("--version printed %q, version %q", f.stdout, v.stdout)
	}
}

// TestE2EVersionStaleHelper: a helper image of another version, in a podman
// storage of its own (the shared one stays as it is for the other tests),
// served by a podman service this test starts: doctor and up name the image,
// both versions and the command that rebuilds it, and up creates nothing.
func TestE2EVersionStaleHelper(t *testing.T) {
	e2e(t)
	want := cliVersion(t)
	const stale = "v0.0.1"
	dir := t.TempDir()
	store := []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
		"--tmpdir", filepath.Join(dir, "tmp"), "--storage-driver", "vfs"}
	podmanIn := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("podman", append(append([]string{}, store...), args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ctxDir := filepath.Join(dir, "context")
	os.MkdirAll(ctxDir, 0o755)
	os.WriteFile(filepath.Join(ctxDir, "Containerfile"), []byte("FROM scratch\nLABEL "+
		pod.LabelImage+"="+pod.ImageHelper+" "+plan.LabelVersion+"="+stale+"\n"), 0o644)
	podmanIn("build", "--pull=never", "-q", "-t", config.DefaultHelperImage, ctxDir)
	t.Cleanup(func() { exec.Command("podman", append(append([]string{}, store...), "rmi", "-af")...).Run() })

	sock := filepath.Join(dir, "podman.sock")
	svc := exec.Command("podman", append(append([]string{}, store...), "system", "service", "--time=0", "unix://"+sock)...)
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Process.Kill(); svc.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the podman service did not make %s", sock)
		}
		time.Sleep(100 * time.Millisecond)
	}
	conn := "unix://" + sock
	fix := "`" + pod.RebuildImages + "`"
	what := config.DefaultHelperImage + " is from devaipod " + stale + ", this devaipod is " + want

	t.Run("doctor", func(t *testing.T) {
		row := helperImageRow(t, devaipod(t, nil, "--connection", conn, "doctor", "-o", "json"))
		// Not both release versions: a warning (an older release would fail).
		if row.Status != "warn" || !strings.Contains(row.Detail, what) || !strings.Contains(row.Detail, fix) {
			t.Errorf("doctor's helper image row: %+v; want warn, %q and %s", row, what, fix)
		}
		text := devaipod(t, nil, "--connection", conn, "doctor")
		if !strings.Contains(text.stdout, what) || !strings.Contains(text.stdout, fix) {
			t.Errorf("doctor's text output does not say the image is stale:\n%s", text)
		}
	})

	t.Run("up", func(t *testing.T) {
		repo := fixtureRepo(t)
		cfg := filepath.Join(t.TempDir(), "devaipod.toml")
		os.WriteFile(cfg, nil, 0o644)
		name := uniqueName("e2e-stale")
		r := devaipod(t, nil, "--connection", conn, "--config", cfg, "up", repo, "--name", name)
		// The warning comes before anything is created; then up stops at
		// the default image, which this storage lacks.
		if !strings.Contains(r.stderr, "Warning: the helper image "+what) || !strings.Contains(r.stderr, fix) {
			t.Errorf("up does not warn that the helper image is stale:\n%s", r)
		}
		if r.code == 0 || !strings.Contains(r.stderr, config.DefaultImage) {
			t.Errorf("up went on without the default image:\n%s", r)
		}
		for _, kind := range [][]string{{"pod", "ps", "-q"}, {"ps", "-aq"}, {"volume", "ls", "-q"}} {
			if out := strings.TrimSpace(podmanIn(kind...)); out != "" {
				t.Errorf("up left %s objects: %s", kind[0], out)
			}
		}
	})
}
