package main

// End-to-end tests of what a newcomer meets first: errors that say what
// was wrong (issue 18), exec's command line, list -q and podman's named
// connections, with the real binary and, where it matters, real podman.

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// errorLine is the line of stderr that starts with "Error: " (progress
// lines may come before it), "" when there is none.
func errorLine(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "Error: ") {
			return l
		}
	}
	return ""
}

// TestE2EErrorsSayWhy: each error names what was wrong and where, in the
// user's terms.
func TestE2EErrorsSayWhy(t *testing.T) {
	e2e(t)
	missing := filepath.Join(t.TempDir(), "nonexistent")

	t.Run("a failed clone shows git's reason", func(t *testing.T) {
		r := devaipod(t, nil, "up", "file://"+missing)
		want := "Error: clone file://" + missing + ": git clone: '" + missing + "' does not appear to be a git repository"
		if r.code == 0 || errorLine(r.stderr) != want {
			t.Errorf("up of a missing repository: %s\nwant the error line %q", r, want)
		}
		if !strings.Contains(r.stderr, "\n  Please make sure you have the correct access rights and the repository exists.\n") {
			t.Errorf("git's advice is cut: %s", r)
		}
	})

	t.Run("a repository owned by another user says so", func(t *testing.T) {
		// GIT_TEST_ASSUME_DIFFERENT_OWNER makes git see another owner (a
		// test cannot chown as an unprivileged user); the global config is
		// emptied so that no safe.directory lets it through.
		repo := fixtureRepo(t)
		env := []string{"GIT_TEST_ASSUME_DIFFERENT_OWNER=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1"}
		r := devaipod(t, env, "up", repo, "--dry-run")
		for _, want := range []string{"Error: git refuses to read " + repo + ": it belongs to another user", "dubious ownership",
			"git config --global --add safe.directory " + repo} {
			if r.code == 0 || !strings.Contains(r.stderr, want) {
				t.Errorf("up of a repository owned by another user: %s\nwant %q", r, want)
			}
		}
		if strings.Contains(r.stderr, "is not a git repository") {
			t.Errorf("the refusal is reported as no repository: %s", r)
		}
	})

	t.Run("a devcontainer error names the file in the repository", func(t *testing.T) {
		repo := fixtureRepo(t)
		commitFiles(t, repo, map[string]string{".devcontainer/devcontainer.json": "{\n  \"image\": \"localhost/devaipod-default:latest\",\n  \"runArgs\": [\"--memory\", \"0\"]\n}\n"})
		r := devaipod(t, nil, "up", "file://"+repo, "--dry-run")
		want := "Error: in file://" + repo + `: .devcontainer/devcontainer.json:3: key "runArgs[0]": --memory: size "0": must be more than zero`
		if r.code == 0 || errorLine(r.stderr) != want {
			t.Errorf("up of a repository with a bad devcontainer.json: %s\nwant %q", r, want)
		}
		r = devaipod(t, nil, "up", repo, "--dry-run")
		want = "Error: " + repo + `/.devcontainer/devcontainer.json:3: key "runArgs[0]"`
		if r.code == 0 || !strings.HasPrefix(errorLine(r.stderr), want) || strings.Contains(r.stderr, "devaipod-src-") {
			t.Errorf("up of a checkout with a bad devcontainer.json: %s\nwant %q", r, want)
		}
	})

	repo := fixtureRepo(t)
	cfgFile := func(text string) string {
		p := filepath.Join(t.TempDir(), "devaipod.toml")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wideCfg := cfgFile("[network]\nallow = [\"api.example.test\",\n  \"*.co.uk\"]\n")
	starCfg := cfgFile("[network]\nallow = [\"*\"]\n")
	sizeCfg := cfgFile("[agent.limits]\nmemory = \"99999999999g\"\n")
	imageCfg := cfgFile("[workspace]\nimage = \"bad//image\"\n")
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string // in stderr; the run fails
	}{
		{"a bad image reference", []string{"up", repo, "--image", "bad//image", "--dry-run"}, `Error: --image: image "bad//image": not an image name`},
		// root's home is out of the test user's reach.
		{"a checkout the user cannot read", []string{"up", "/root/repo", "--dry-run"}, "Error: the user " + me.Username + " cannot read /root/repo: it cannot enter /root"},
		{"a bad image in the config", []string{"--config", imageCfg, "up", repo, "--dry-run"}, "Error: " + imageCfg + `:2: workspace.image: image "bad//image"`},
		{"a rule over a public suffix", []string{"up", repo, "--allow", "*.com", "--dry-run"}, `Error: --allow: rule "*.com" opens every host under "com", a public suffix`},
		{"a rule for every host", []string{"up", repo, "--allow", "*", "--force", "--dry-run"}, `Error: --allow: rule "*" would allow every host`},
		{"every host in the config", []string{"--config", starCfg, "up", repo, "--dry-run"}, "Error: " + starCfg + `:2: network.allow: rule "*" would allow every host`},
		{"an overflowing size", []string{"--config", sizeCfg, "up", repo, "--dry-run"}, "Error: " + sizeCfg + `:2: agent.limits.memory: size "99999999999g": too large`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := devaipod(t, nil, tt.args...)
			if r.code == 0 || !strings.HasPrefix(errorLine(r.stderr), tt.want) {
				t.Errorf("devaipod %s: %s\nwant stderr starting %q", strings.Join(tt.args, " "), r, tt.want)
			}
		})
	}

	t.Run("forced and configured wide rules are warned of", func(t *testing.T) {
		r := devaipod(t, nil, "--config", wideCfg, "up", repo, "--allow", "*.com", "--force", "--allow", "*.github.io", "--dry-run")
		for _, want := range []string{
			`Warning: --allow: rule "*.com" opens every host under "com"`,
			`Warning: --allow: rule "*.github.io" opens every host under "github.io"`,
			"Warning: " + wideCfg + `:2: network.allow: rule "*.co.uk" opens every host under "co.uk"`,
		} {
			if r.code != 0 || !strings.Contains(r.stderr, want) {
				t.Errorf("up with wide rules: %s\nwant %q", r, want)
			}
		}
	})
}

// TestE2EErrorsDryRunSteps: a dry run lists the steps up would take,
// the devcontainer CLI's features build among them.
func TestE2EErrorsDryRunSteps(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	commitFiles(t, repo, map[string]string{".devcontainer/devcontainer.json": `{"image": "localhost/devaipod-default:latest", "features": {"ghcr.io/devcontainers/features/go:1": {}}}`})
	cli := filepath.Join(t.TempDir(), "devcontainer")
	if err := os.WriteFile(cli, []byte("#!/bin/sh\necho the dry run ran the devcontainer CLI >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := mustDevaipod(t, []string{"DEVAIPOD_DEVCONTAINER_CLI=" + cli}, "up", repo, "--dry-run", "--name", uniqueName("e2e-steps"))
	if strings.Contains(r.stderr, "ran the devcontainer CLI") {
		t.Errorf("the dry run built: %s", r)
	}
	var steps []string
	_, after, ok := strings.Cut(r.stdout, "Steps up would take")
	for _, l := range strings.Split(after, "\n")[1:] {
		if f := strings.Fields(l); len(f) > 1 {
			steps = append(steps, f[1])
		}
	}
	// The repository is not trusted: the build's base image is made sure
	// of before the features build.
	if order := strings.Join(steps, " "); !ok || !strings.HasPrefix(order, "clone image features image") || !strings.Contains(order, "create copy create copy") ||
		!strings.Contains(order, "start ready check") {
		t.Errorf("dry run steps %q; want clone, image, features, image ... create, copy ... start, ready, check:\n%s", order, r.stdout)
	}
	if !strings.Contains(after, cli+" build --workspace-folder") || !strings.Contains(after, "ghcr.io/devcontainers/features/go:1") {
		t.Errorf("the features step does not show the devcontainer CLI's build:\n%s", after)
	}
}

// TestE2EExec: exec's flags stop at the command (devaipod exec NAME ls -la
// runs ls -la), while -c right after NAME and "--" still work; list -q
// prints names only.
func TestE2EExec(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	cfg := standInConfig(t, "")
	name := uniqueName("e2e-exec")
	cleanup(t, name)
	mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", name)

	r := devaipod(t, nil, "exec", name, "ls", "-la")
	if r.code != 0 || !strings.Contains(r.stdout, "README.md") || !strings.Contains(r.stdout, " .git\n") {
		t.Errorf("exec NAME ls -la: %s\nwant a long listing with hidden files", r)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", name, "-c", "agent", "id", "-u"}, "1000"},
		{[]string{"exec", name, "-c", "agent", "--", "id", "-u"}, "1000"},
		{[]string{"exec", "-c", "agent", name, "id", "-u"}, "1000"},
		{[]string{"exec", name, "--user", "root", "id", "-u"}, "0"},
		{[]string{"exec", name, "sh", "-c", "echo $0", "-c"}, "-c"}, // the command's -c, not exec's
		{[]string{"exec", name, "--", "sh", "-c", "echo dashes"}, "dashes"},
	} {
		if r := devaipod(t, nil, tt.args...); r.code != 0 || strings.TrimSpace(r.stdout) != tt.want {
			t.Errorf("devaipod %s: %s\nwant %q", strings.Join(tt.args, " "), r, tt.want)
		}
	}
	if r := devaipod(t, nil, "exec", name, "sh", "-c", "exit 7"); r.code != 7 {
		t.Errorf("exec's exit status: %s; want 7", r)
	}
	if r := devaipod(t, nil, "exec", name, "-la"); r.code == 0 || !strings.Contains(r.stderr, "unknown shorthand flag: 'l' in -la") {
		t.Errorf("exec NAME -la (no command): %s; want exec's flag error", r)
	}

	r = mustDevaipod(t, nil, "list", "-q")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	found := false
	for _, l := range lines {
		if l == name {
			found = true
		}
		if strings.Contains(l, " ") || l == "NAME" {
			t.Errorf("list -q prints more than names: %q", r.stdout)
			break
		}
	}
	if !found {
		t.Errorf("list -q lacks %s:\n%s", name, r.stdout)
	}
}

// podmanService starts `podman system service` on a socket of its own for
// the test, and returns its URI.
func podmanService(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "podman.sock")
	cmd := exec.Command("podman", "system", "service", "--time=0", "unix://"+sock)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONTAINER_HOST=") && !strings.HasPrefix(kv, "CONTAINER_CONNECTION=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return "unix://" + sock
		}
	}
	t.Fatalf("podman system service made no socket at %s", sock)
	return ""
}

// TestE2EErrorsNamedConnection: devaipod reaches podman through a named
// connection (podman system connection add), chosen as podman chooses:
// --connection, then CONTAINER_CONNECTION, then CONTAINER_HOST; an
// unknown name is an error that lists the names.
func TestE2EErrorsNamedConnection(t *testing.T) {
	e2e(t)
	live := podmanService(t)
	dead := "unix://" + filepath.Join(t.TempDir(), "dead.sock")
	conns := filepath.Join(t.TempDir(), "podman-connections.json")
	if err := os.WriteFile(conns, []byte(`{"Connection": {"Connections": {"live": {"URI": "`+live+`"}, "dead": {"URI": "`+dead+`"}}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The test's connections only: podman's own config is left as it is.
	env := func(kv ...string) []string {
		return append([]string{"PODMAN_CONNECTIONS_CONF=" + conns, "CONTAINER_HOST=", "CONTAINER_CONNECTION="}, kv...)
	}
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		want string // "" for success, else in stderr
	}{
		{"CONTAINER_CONNECTION", env("CONTAINER_CONNECTION=live"), nil, ""},
		{"CONTAINER_CONNECTION before CONTAINER_HOST", env("CONTAINER_CONNECTION=dead", "CONTAINER_HOST="+live), nil,
			"cannot reach the podman service at " + dead + " (connection dead, from CONTAINER_CONNECTION)"},
		{"--connection NAME before CONTAINER_CONNECTION", env("CONTAINER_CONNECTION=dead"), []string{"--connection", "live"}, ""},
		{"--connection URI before CONTAINER_CONNECTION", env("CONTAINER_CONNECTION=dead"), []string{"--connection", live}, ""},
		{"CONTAINER_HOST", env("CONTAINER_HOST=" + live), nil, ""},
		{"an unknown name", env("CONTAINER_CONNECTION=nope"), nil, `no podman connection named "nope" (CONTAINER_CONNECTION)` + "\nHint: podman's connections are dead, live"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := devaipod(t, tt.env, append(tt.args, "list", "-q")...)
			switch {
			case tt.want == "" && (r.code != 0 || strings.Contains(r.stderr, "started one")):
				t.Errorf("list through %s: %s; want it to use the connection's service", tt.name, r)
			case tt.want != "" && (r.code == 0 || !strings.Contains(r.stderr, tt.want)):
				t.Errorf("list through %s: %s\nwant %q", tt.name, r, tt.want)
			}
		})
	}
}
