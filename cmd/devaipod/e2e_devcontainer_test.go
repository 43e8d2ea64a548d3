package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// freePort is a TCP port free on the host's loopback right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestE2EDevcontainer ups a repository whose devcontainer.json builds its
// image, sets variables with ${...}, asks for privileges, forwards a port
// and has every lifecycle command; then checks each took effect in the
// workspace and none reached the agent, and the once-only semantics across
// stop/start and attach.
func TestE2EDevcontainer(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	port := freePort(t)
	initMarker := filepath.Join(t.TempDir(), "initialized")
	// Each lifecycle command logs where it ran: the workspace has the
	// secrets' folder, the agent has not.
	side := "$(test -d /run/devaipod/secrets && echo ws || echo agent)"
	lcLog := "/workspaces/fixture/.lifecycle.log"
	commitFiles(t, repo, map[string]string{
		".devcontainer/Dockerfile": "FROM localhost/devaipod-default:latest\nARG GREETING\nRUN echo \"$GREETING\" > /built-marker\n",
		".devcontainer/devcontainer.json": `{
  // JSONC: comments and trailing commas, as the spec allows.
  "name": "e2e",
  "build": {"dockerfile": "Dockerfile", "args": {"GREETING": "built-${localEnv:E2E_GREETING}"},},
  "containerEnv": {"FROM_HOST": "${localEnv:E2E_HOST_VALUE}", "WS_FOLDER": "${containerWorkspaceFolder}", "BASENAME": "${localWorkspaceFolderBasename}"},
  "remoteEnv": {"REMOTE": "remote-${containerEnv:FROM_HOST}", "E2E_DC_SECRET": "from-the-repository", "DASHED-NAME": "dashed"},
  "remoteUser": "agent",
  "capAdd": ["SYS_PTRACE"],
  "runArgs": ["--cap-add=NET_ADMIN", "-e", "RUNARG=1"],
  "initializeCommand": "touch \"$E2E_INIT_MARKER\" && (sleep 30 &)",
  "onCreateCommand": "echo onCreate:` + side + ` >> ` + lcLog + `",
  "updateContentCommand": ["sh", "-c", "echo updateContent:` + side + ` >> ` + lcLog + `"],
  "postCreateCommand": {"a": "echo a > /var/tmp/postcreate-a", "b": ["sh", "-c", "echo $REMOTE > /var/tmp/postcreate-b"]},
  "postStartCommand": "echo postStart:` + side + ` >> ` + lcLog + ` && (busybox httpd -p 0.0.0.0:` + fmt.Sprint(port) + ` -h /workspaces/fixture &)",
  "postAttachCommand": "echo postAttach:` + side + ` >> ` + lcLog + ` && cat /workspaces/fixture/.banner 2>/dev/null; true",
  "forwardPorts": [` + fmt.Sprint(port) + `],
}
`,
		".devcontainer/features/devcontainer.json": `{"image": "localhost/devaipod-default:latest", "features": {"ghcr.io/devcontainers/features/go:1": {}}}`,
		".devcontainer/failing/devcontainer.json":  `{"image": "localhost/devaipod-default:latest", "postCreateCommand": "printf 'boom-output \\033]0;pwned\\007\\n'; exit 7"}`,
	})
	env := []string{"E2E_GREETING=hello", "E2E_HOST_VALUE=from-host", "E2E_INIT_MARKER=" + initMarker,
		"DEVAIPOD_DEVCONTAINER_CLI=devcontainer-cli-not-installed"}
	// A trusted variable: root-only in the workspace, yet the remote user's
	// commands get it, and remoteEnv cannot override it.
	env = append(env, "E2E_DC_SECRET=dc-secret")
	cfg := standInConfig(t, "[trusted.env]\nallowlist = [\"E2E_DC_SECRET\"]\n")
	name := uniqueName("e2e-dc")
	cleanup(t, name)

	// initializeCommand runs on the host: refused unless allowed.
	r := devaipod(t, env, "--config", cfg, "up", repo, "--trust", "--name", name)
	if r.code == 0 || !strings.Contains(r.stderr, "initializeCommand") || !strings.Contains(r.stderr, "--allow-host-commands") {
		t.Fatalf("up ran a repository's initializeCommand without --allow-host-commands:\n%s", r)
	}
	if _, err := os.Stat(initMarker); err == nil {
		t.Fatal("initializeCommand ran on the host although refused")
	}
	// features need the devcontainer CLI: a clear message, nothing created.
	r = devaipod(t, env, "--config", cfg, "up", repo, "--trust", "--name", name, "--devcontainer", ".devcontainer/features/devcontainer.json")
	if r.code == 0 || !strings.Contains(r.stderr, "features") || !strings.Contains(r.stderr, "devcontainer CLI") {
		t.Errorf("features without the devcontainer CLI: %s", r)
	}
	// With the devcontainer CLI, up has it build the image with the
	// features. The real CLI fetches a manifest from the internet on every
	// build, so a stand-in checks devaipod's arguments and builds with
	// podman, as the CLI does with --docker-path podman.
	cli := filepath.Join(t.TempDir(), "devcontainer")
	os.WriteFile(cli, []byte(`#!/bin/sh
[ "$1" = build ] || exit 64
while [ $# -gt 0 ]; do case $1 in --image-name) tag=$2; shift;; --config) cfg=$2; shift;; --workspace-folder) ws=$2; shift;; --docker-path) dp=$2; shift;; esac; shift; done
[ "$dp" = podman ] && [ -f "$cfg" ] && [ -f "$ws/README.md" ] || { echo "bad arguments: $dp $cfg $ws" >&2; exit 65; }
printf 'FROM localhost/devaipod-default:latest\nRUN echo with-features > /feature-marker\n' | podman build -q -t "$tag" -f - "$ws" >/dev/null
`), 0o755)
	features := uniqueName("e2e-dcf")
	cleanup(t, features)
	mustDevaipod(t, append(env, "DEVAIPOD_DEVCONTAINER_CLI="+cli), "--config", cfg, "up", repo, "--trust", "--name", features,
		"--devcontainer", ".devcontainer/features/devcontainer.json")
	if r := devaipod(t, nil, "exec", features, "--", "cat", "/feature-marker"); strings.TrimSpace(r.stdout) != "with-features" {
		t.Errorf("the image built by the devcontainer CLI is not the workspace's: %s", r)
	}

	// A failing lifecycle command stops up, with its output, and up
	// removes what it created.
	r = devaipod(t, env, "--config", cfg, "up", repo, "--trust", "--name", name, "--devcontainer", ".devcontainer/failing/devcontainer.json")
	// The repository's command printed a terminal title escape: shown,
	// not obeyed, both as it ran and in the error.
	if r.code == 0 || !strings.Contains(r.stderr, "postCreateCommand failed (exit 7)") || strings.Count(r.stderr, `boom-output \x1b]0;pwned\x07`) != 2 || strings.ContainsRune(r.stderr, 0x1b) {
		t.Errorf("a failing postCreateCommand: %s", r)
	}
	if left := labelled(t, name); len(left) > 0 {
		t.Fatalf("refused or failed ups left %v", left)
	}

	began := time.Now()
	up := mustDevaipod(t, env, "--config", cfg, "up", repo, "--trust", "--name", name, "--allow-host-commands")
	if _, err := os.Stat(initMarker); err != nil {
		t.Errorf("initializeCommand did not run on the host with --allow-host-commands: %v", err)
	}
	// It left a process in the background, which holds its output open:
	// up does not wait for it.
	if took := time.Since(began); took > 25*time.Second {
		t.Errorf("up took %s: it waited for what initializeCommand left in the background", took)
	}
	if !strings.Contains(up.stderr, "building the devcontainer's image") {
		t.Errorf("up did not say it built the image:\n%s", up.stderr)
	}
	inWorkspace := func(script string) string {
		t.Helper()
		r := devaipod(t, nil, "exec", name, "--", "sh", "-c", script)
		if r.code != 0 {
			t.Errorf("workspace %q: %s", script, r)
		}
		return strings.TrimSpace(r.stdout)
	}
	if got := inWorkspace("cat /built-marker"); got != "built-hello" {
		t.Errorf("the workspace does not run the built image (build arg from ${localEnv}): %q", got)
	}
	if got := inWorkspace(`echo "$FROM_HOST $WS_FOLDER $BASENAME $RUNARG"`); got != "from-host /workspaces/fixture fixture 1" {
		t.Errorf("containerEnv / runArgs in the workspace: %q", got)
	}
	if got := inWorkspace("cat " + lcLog + "; cat /var/tmp/postcreate-a /var/tmp/postcreate-b"); got != "onCreate:ws\nupdateContent:ws\npostStart:ws\na\nremote-from-host" {
		t.Errorf("lifecycle after up:\n%s", got)
	}
	// exec runs as the remote user, with remoteEnv and the trusted
	// variables; --user picks another.
	if got := inWorkspace(`id -un; echo "$HOME $REMOTE $E2E_DC_SECRET"`); got != "agent\n/home/agent remote-from-host dc-secret" {
		t.Errorf("exec as the remote user (want agent, its HOME, remoteEnv and the trusted variable):\n%s", got)
	}
	// A remoteEnv name no shell would take (a shell drops it, so env runs
	// directly).
	if r := devaipod(t, nil, "exec", name, "--", "env"); !strings.Contains(r.stdout, "\nDASHED-NAME=dashed\n") {
		t.Errorf("exec lacks remoteEnv's DASHED-NAME: %s", r)
	}
	r = devaipod(t, nil, "exec", name, "--user", "root", "--", "sh", "-c", `id -u; grep CapEff /proc/self/status; echo "$E2E_DC_SECRET"`)
	if got := strings.TrimSpace(r.stdout); r.code != 0 || !strings.HasPrefix(got, "0\n") || strings.Contains(got, "0000000000000000") || !strings.HasSuffix(got, "\ndc-secret") {
		t.Errorf("exec --user root: want uid 0, the devcontainer's capabilities and the trusted variable: %s", r)
	}
	if r := devaipod(t, nil, "exec", name, "--user", "no-such-user", "--", "true"); r.code == 0 || !strings.Contains(r.stderr, "no-such-user") {
		t.Errorf("exec --user no-such-user: want a failure naming the user: %s", r)
	}

	t.Run("nothing of it reaches the agent", func(t *testing.T) {
		r := devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", `grep CapEff /proc/self/status; echo "[$FROM_HOST$RUNARG$REMOTE]"`)
		if !strings.Contains(r.stdout, "0000000000000000") || !strings.Contains(r.stdout, "[]") {
			t.Errorf("agent has the devcontainer's capabilities or variables:\n%s", r)
		}
	})

	t.Run("forwardPorts are published on the host's loopback", func(t *testing.T) {
		var body string
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/README.md", port))
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if body = string(b); strings.Contains(body, "fixture") {
					break
				}
			}
			time.Sleep(300 * time.Millisecond)
		}
		if !strings.Contains(body, "fixture") {
			t.Errorf("no answer from the forwarded port %d: %q", port, body)
		}
		if r := podmanPort(t, name); !strings.Contains(r, `"HostIp":"127.0.0.1","HostPort":"`+fmt.Sprint(port)+`"`) || strings.Contains(r, `"HostIp":""`) || strings.Contains(r, "0.0.0.0") {
			t.Errorf("the port is not published on 127.0.0.1 only: %s", r)
		}
	})

	// After up the agent has had write access: the commands of start and
	// attach run on its side (they may run its edits).
	t.Run("onCreate once, postStart on every start, postAttach on attach", func(t *testing.T) {
		mustDevaipod(t, nil, "stop", name)
		// What needs a running pod says so, and how to start it.
		for _, args := range [][]string{{"exec", name, "--", "true"}, {"exec", name, "-c", "agent", "--", "true"},
			{"attach", name, "--no-ui"}, {"allow", name, "example.test"}, {"verify", name}} {
			r := devaipod(t, nil, args...)
			if r.code == 0 || !strings.Contains(r.stderr, "pod "+name+" is exited, not running") || !strings.Contains(r.stderr, "Hint: `devaipod start NAME`") {
				t.Errorf("%v on a stopped pod: %s", args, r)
			}
		}
		mustDevaipod(t, nil, "start", name)
		// The command cats a file the agent wrote, with a terminal
		// title escape in it: attach shows it, does not obey it.
		if r := devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", `printf 'banner \033]0;pwned\007\n' > /workspaces/fixture/.banner`); r.code != 0 {
			t.Fatalf("agent writes .banner: %s", r)
		}
		if r := mustDevaipod(t, nil, "attach", name, "--no-ui"); !strings.Contains(r.stderr, `banner \x1b]0;pwned\x07`) || strings.ContainsRune(r.stderr, 0x1b) {
			t.Errorf("attach showed the agent's escape raw, or not at all:\n%q", r.stderr)
		}
		if got := inWorkspace("cat " + lcLog); got != "onCreate:ws\nupdateContent:ws\npostStart:ws\npostStart:agent\npostAttach:agent" {
			t.Errorf("lifecycle after stop, start, attach:\n%s", got)
		}
	})
}

// podmanPort lists the pod's published ports.
func podmanPort(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("podman", "pod", "inspect", "--format", "{{json .InfraConfig.PortBindings}}", "devaipod-"+name).CombinedOutput()
	if err != nil {
		t.Errorf("podman pod inspect: %v %s", err, out)
	}
	return string(out)
}

// TestE2EWorkspaceUser ups a repository whose devcontainer.json builds an
// image with a non-root USER whose uid is not the agent's, and names no
// remoteUser: up, the lifecycle commands and exec run as that user, exec
// gives it the trusted variables (root-only files), and it and the agent
// can each change what the other wrote in the shared copy.
func TestE2EWorkspaceUser(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	commitFiles(t, repo, map[string]string{
		".devcontainer/Dockerfile":        "FROM localhost/devaipod-default:latest\nRUN useradd -m -u 1500 dev\nUSER dev\n",
		".devcontainer/devcontainer.json": `{"build": {"dockerfile": "Dockerfile"}, "postCreateCommand": "id -un > by-postcreate.txt"}`,
	})
	cfg := filepath.Join(t.TempDir(), "devaipod.toml")
	// The agent writes a file as it starts, with its own umask.
	if err := os.WriteFile(cfg, []byte(`[agent]
kind = "custom"
command = ["sh", "-c", "echo agent > by-agent.txt && exec busybox httpd -f -p 127.0.0.1:4096 -h /tmp"]
[trusted.env.vars]
E2E_WS_SECRET = "ws-secret"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	name := uniqueName("e2e-wsuser")
	cleanup(t, name)
	mustDevaipod(t, nil, "--config", cfg, "up", repo, "--trust", "--name", name)

	r := devaipod(t, nil, "exec", name, "--", "sh", "-c",
		`id -un; echo "$HOME $E2E_WS_SECRET"; cat by-postcreate.txt; echo dev >> by-agent.txt && echo dev > by-exec.txt && cat by-agent.txt`)
	if got := strings.TrimSpace(r.stdout); r.code != 0 || got != "dev\n/home/dev ws-secret\ndev\nagent\ndev" {
		t.Errorf("exec as the image's user (want dev, its HOME, the trusted variable, postCreate's file by dev, and the agent's file changed):\n%s", r)
	}
	r = devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c",
		`echo agent >> by-exec.txt && echo agent >> by-postcreate.txt && cat by-exec.txt by-postcreate.txt`)
	if got := strings.TrimSpace(r.stdout); r.code != 0 || got != "dev\nagent\ndev\nagent" {
		t.Errorf("the agent changes what the workspace's user wrote:\n%s", r)
	}
	if r := devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", `echo "[$E2E_WS_SECRET]"`); !strings.Contains(r.stdout, "[]") {
		t.Errorf("the trusted variable reached the agent: %s", r)
	}
	if r := devaipod(t, nil, "logs", name, "-c", "gator"); r.code == 0 || !strings.Contains(r.stderr, "pod "+name+" has no gator container") {
		t.Errorf("logs of a container the pod does not have: %s", r)
	}
	// attach's UI needs a terminal; the tests' stdin is not one.
	if r := devaipod(t, nil, "attach", name); r.code == 0 || !strings.Contains(r.stderr, "its input is not a terminal") || !strings.Contains(r.stderr, "--no-ui") {
		t.Errorf("attach without a terminal: %s", r)
	}
}

// TestE2ESetupRunsBeforeTheAgent: up's setup commands run on the trusted
// side, in the workspace, so the agent must not have run before them: a
// custom agent starts working as soon as it starts (it has its task in
// $DEVAIPOD_TASK), and one that rewrote the script a postCreateCommand runs
// would have the workspace run its code. This agent rewrites setup.sh the
// moment it starts; the postCreateCommand runs setup.sh after a pause. The
// setup's own script ran, the agent's never did, and the agent did start,
// after the setup.
func TestE2ESetupRunsBeforeTheAgent(t *testing.T) {
	e2e(t)
	repo := fixtureRepo(t)
	commitFiles(t, repo, map[string]string{
		"setup.sh":                        "echo setup > setup-ran.txt\n",
		".devcontainer/devcontainer.json": `{"image": "localhost/devaipod-default:latest", "postCreateCommand": "sleep 3; sh setup.sh"}`,
	})
	cfg := filepath.Join(t.TempDir(), "devaipod.toml")
	if err := os.WriteFile(cfg, []byte(`[agent]
kind = "custom"
command = ["sh", "-c", "echo 'echo agent > agent-code-ran.txt' > setup.sh && ls setup-ran.txt > agent-saw.txt 2>&1; exec busybox httpd -f -p 127.0.0.1:4096 -h /tmp"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	name := uniqueName("e2e-setup")
	cleanup(t, name)
	mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", name)
	r := devaipod(t, nil, "exec", name, "--", "sh", "-c",
		`cat setup-ran.txt; cat agent-saw.txt; cat setup.sh; ls agent-code-ran.txt 2>/dev/null || echo no-agent-code`)
	if got := strings.TrimSpace(r.stdout); r.code != 0 || got != "setup\nsetup-ran.txt\necho agent > agent-code-ran.txt\nno-agent-code" {
		t.Errorf("want the setup's script run before the agent started (which then saw its result and rewrote the script), and the agent's script never run:\n%s", r)
	}
}
