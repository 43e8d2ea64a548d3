package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestE2EUntrustedRepository: a repository written by a stranger runs its
// devcontainer's code (a postCreateCommand as root, its features build, a
// process it leaves behind) in the workspace, and tries every route to the
// person's secrets: the trusted values' files, the environment, a
// ${localEnv:...}, its own host bind mount, the person's [[mounts]], the
// environment of the devcontainer CLI that builds its features. Untrusted,
// it gets none of them, up says what it withheld and how to trust it, and
// verify's untrusted-workspace row passes (and fails once a value is
// there). Trusted (devaipod trust), the same up gets them all, as before.
func TestE2EUntrustedRepository(t *testing.T) {
	e2e(t)
	const (
		secret   = "s3cr3t-value-e2e-trust"
		hostVar  = "host-var-value-e2e-trust"
		cloudKey = "cloud-key-value-e2e-trust"
	)
	repo := fixtureRepo(t)
	hostDir := t.TempDir()  // the repository's own bind mount
	port := freePort(t)     // the repository's forwardPorts
	personal := t.TempDir() // the person's [[mounts]]
	for _, d := range []string{hostDir, personal} {
		os.Chmod(d, 0o755)
		os.WriteFile(filepath.Join(d, "private.txt"), []byte("private\n"), 0o644)
	}
	// Everything the repository's code finds goes to stdout (up's
	// output) and into loot.txt in the working tree, which the agent reads.
	dump := `{ id -u; cat /run/devaipod/secrets/* 2>/dev/null; echo; env; cat /hostdir/private.txt /person/private.txt 2>&1; } | tee /workspaces/fixture/loot.txt; (sleep 600 &)`
	commitFiles(t, repo, map[string]string{
		".devcontainer/devcontainer.json": `{
  "image": "localhost/devaipod-default:latest",
  "containerEnv": {"FROM_HOST": "${localEnv:E2E_HOST_VAR}", "CLOUD": "${localEnv:AWS_SECRET_ACCESS_KEY:unset}"},
  "mounts": ["source=` + hostDir + `,target=/hostdir,type=bind"],
  "postCreateCommand": ` + jsonString(dump) + `
}
`,
		// Features are built by the devcontainer CLI, which reads the file
		// as written and puts in its own environment's variables (one
		// reference hidden behind a JSON escape).
		".devcontainer/features/devcontainer.json": `{"image": "localhost/devaipod-default:latest",
  "features": {"ghcr.io/devcontainers/features/go:1": {}}, "postCreateCommand": "cp /cli-env /workspaces/fixture/cli-env.txt",
  "forwardPorts": [` + fmt.Sprint(port) + `], "securityOpt": ["seccomp=unconfined"],
  "containerEnv": {"H": "${localEnv:E2E_HOST_VAR}", "ESC": "\u0024{localEnv:AWS_SECRET_ACCESS_KEY:none}"}}`,
		// ...and passes build.options to podman build as they are.
		".devcontainer/features-options/devcontainer.json": `{"build": {"dockerfile": "Dockerfile", "options": ["-v", "/:/host"]},
  "features": {"ghcr.io/devcontainers/features/go:1": {}}}`,
		".devcontainer/features-options/Dockerfile": "FROM localhost/devaipod-default:latest\n",
	})
	// A stand-in for the devcontainer CLI (see TestE2EDevcontainer) that
	// keeps its own environment and the file it is given in the image it
	// builds.
	cli := filepath.Join(t.TempDir(), "devcontainer")
	os.WriteFile(cli, []byte(`#!/bin/sh
while [ $# -gt 0 ]; do case $1 in --image-name) tag=$2; shift;; --config) cfg=$2; shift;; esac; shift; done
d=$(mktemp -d) && { env; cat "$cfg"; } > "$d/cli-env" && printf 'FROM localhost/devaipod-default:latest\nCOPY cli-env /cli-env\n' | podman build -q -t "$tag" -f - "$d" >/dev/null; s=$?; rm -rf "$d"; exit $s
`), 0o755)
	cfg := standInConfig(t, `[trusted.env.vars]
MY_TOKEN = "`+secret+`"
[[mounts]]
source = "`+personal+`"
target = "/person"
`)
	env := []string{"E2E_HOST_VAR=" + hostVar, "AWS_SECRET_ACCESS_KEY=" + cloudKey, "DEVAIPOD_DEVCONTAINER_CLI=" + cli}
	t.Cleanup(func() { removeImages("localhost/devaipod-build-fixture") })
	leaks := func(s string) []string {
		var found []string
		for _, v := range []string{secret, hostVar, cloudKey, "private\n"} {
			if strings.Contains(s, v) {
				found = append(found, strings.TrimSpace(v))
			}
		}
		return found
	}

	untrusted := uniqueName("e2e-untrusted")
	cleanup(t, untrusted)
	up := mustDevaipod(t, env, "--config", cfg, "up", repo, "--name", untrusted)
	for _, want := range []string{"the repository is not trusted", "its pod is not given [trusted.env] (MY_TOKEN)", "[[mounts]] (1)", "${localEnv} of AWS_SECRET_ACCESS_KEY, E2E_HOST_VAR",
		"the devcontainer's host bind mounts (1)", "devaipod trust " + repo} {
		if !strings.Contains(up.stderr, want) {
			t.Errorf("up of an untrusted repository does not say %q:\n%s", want, up)
		}
	}
	if found := leaks(up.stdout + up.stderr); len(found) > 0 {
		t.Errorf("up's output (the repository's commands') holds %v:\n%s", found, up)
	}

	r := mustDevaipod(t, nil, "exec", untrusted, "--", "sh", "-c", "cat loot.txt; echo secrets:; ls /run/devaipod/secrets 2>/dev/null; echo mounts:; ls /hostdir /person 2>&1; true")
	// A variable set on the host reads as if unset: its default, else "".
	if found := leaks(r.stdout); len(found) > 0 || !strings.Contains(r.stdout, "FROM_HOST=\n") || !strings.Contains(r.stdout, "CLOUD=unset\n") {
		t.Errorf("the untrusted repository's workspace holds %v (or the probe did not run):\n%s", found, r)
	}
	if !strings.Contains(r.stdout, "secrets:\nmounts:") { // the stand-in agent has no password
		t.Errorf("the secrets' folder is not empty:\n%s", r.stdout)
	}

	// The features build: the CLI gets none of the host's variables nor
	// its registry logins, in its environment or in the file it reads; a
	// file with build.options is refused, leaving nothing.
	features := uniqueName("e2e-untrusted-f")
	cleanup(t, features)
	featuresUp := mustDevaipod(t, env, "--config", cfg, "up", repo, "--name", features, "--devcontainer", ".devcontainer/features/devcontainer.json")
	// Nor its security options, nor ports on the host's loopback.
	for _, want := range []string{"security options (seccomp=unconfined)", fmt.Sprintf("ports on this host's 127.0.0.1 (%d)", port)} {
		if !strings.Contains(featuresUp.stderr, want) {
			t.Errorf("up of an untrusted repository does not say it withheld %q:\n%s", want, featuresUp.stderr)
		}
	}
	if out, err := exec.Command("podman", "pod", "inspect", "--format", "{{.InfraConfig.PortBindings}}", "devaipod-"+features).CombinedOutput(); err != nil || strings.Contains(string(out), fmt.Sprint(port)) {
		t.Errorf("the untrusted repository's port %d is published (or podman failed: %v): %s", port, err, out)
	}
	r = mustDevaipod(t, nil, "exec", features, "--", "cat", "cli-env.txt")
	if found := leaks(r.stdout); len(found) > 0 || !strings.Contains(r.stdout, "DOCKER_CONFIG=") || !strings.Contains(r.stdout, "REGISTRY_AUTH_FILE=") ||
		strings.Contains(r.stdout, "localEnv") || !strings.Contains(r.stdout, `"ESC": "none"`) {
		t.Errorf("the devcontainer CLI's environment or file holds %v or a host variable, or not the empty logins:\n%s", found, r)
	}
	refused := uniqueName("e2e-untrusted-r")
	r = devaipod(t, env, "--config", cfg, "up", repo, "--name", refused, "--devcontainer", ".devcontainer/features-options/devcontainer.json")
	if r.code == 0 || !strings.Contains(r.stderr, "would pass its build.options to podman build") || len(labelled(t, refused)) > 0 {
		t.Errorf("an untrusted features build with build.options: %s", r)
	}

	if r := mustDevaipod(t, nil, "status", untrusted); !strings.Contains(r.stdout, "not trusted: its workspace has nothing of yours") {
		t.Errorf("status does not say the repository is not trusted:\n%s", r)
	}

	// verify: the row passes, the whole battery too; then a value put in
	// the workspace (as the repository would, were it given one) fails it.
	v := devaipod(t, nil, "--config", cfg, "verify", untrusted, "-o", "json")
	if rows := verifyRows(t, v.stdout); v.code != 0 || rows["untrusted-workspace"] != "PASS" || rows["trusted-env"] != "PASS" {
		t.Errorf("verify of the untrusted pod: exit %d, untrusted-workspace %s, trusted-env %s\n%s", v.code, rows["untrusted-workspace"], rows["trusted-env"], v)
	}
	mustDevaipod(t, nil, "exec", untrusted, "--", "sh", "-c", "echo token="+secret+" > /tmp/planted")
	v = devaipod(t, nil, "--config", cfg, "verify", untrusted, "-o", "json")
	if rows := verifyRows(t, v.stdout); v.code != 1 || rows["untrusted-workspace"] != "FAIL" || !strings.Contains(v.stdout, "/tmp/planted") || strings.Contains(v.stdout, secret) {
		t.Errorf("verify with a trusted value planted in the workspace: exit %d, untrusted-workspace %s\n%s", v.code, rows["untrusted-workspace"], v)
	}

	// On a terminal, up asks; yes trusts it for this up, and remembers
	// nothing.
	asked := uniqueName("e2e-asked")
	cleanup(t, asked)
	term := exec.Command("script", "-qec", strings.Join([]string{os.Getenv("DEVAIPOD_BIN"), "--config", cfg, "up", repo, "--name", asked}, " "), "/dev/null")
	term.Stdin, term.Env = strings.NewReader("y\n"), append(os.Environ(), env...)
	out, err := term.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "is not trusted. Its devcontainer's lifecycle commands") ||
		!strings.Contains(string(out), "Trust it? [y]es for this up, [a]lways (devaipod trust), [N]o:") ||
		!strings.Contains(string(out), "the repository is trusted for this up (you said so)") || !strings.Contains(string(out), secret) {
		t.Errorf("up on a terminal, answered y: %v\n%s", err, out)
	}
	if r := mustDevaipod(t, nil, "trust", "--list"); strings.Contains(r.stdout, "fixture") {
		t.Errorf("yes for one up was remembered:\n%s", r)
	}

	// Trusted, the same repository gets what it gets today.
	mustDevaipod(t, nil, "trust", repo)
	t.Cleanup(func() { devaipod(t, nil, "trust", "--revoke", repo) })
	list := mustDevaipod(t, nil, "trust", "--list", "-o", "json")
	var entries []struct{ Dir string }
	real, _ := filepath.EvalSymlinks(repo)
	if err := json.Unmarshal([]byte(list.stdout), &entries); err != nil || !strings.Contains(list.stdout, real) {
		t.Errorf("trust --list does not name %s (%v):\n%s", real, err, list)
	}
	trusted := uniqueName("e2e-trusted")
	cleanup(t, trusted)
	up = mustDevaipod(t, env, "--config", cfg, "up", repo, "--name", trusted)
	if !strings.Contains(up.stderr, "the repository is trusted since") || strings.Contains(up.stderr, "not trusted") {
		t.Errorf("up of a trusted repository does not say since when:\n%s", up)
	}
	if !strings.Contains(up.stdout+up.stderr, secret) {
		t.Errorf("the trusted repository's postCreateCommand did not get the trusted value:\n%s", up)
	}
	r = mustDevaipod(t, nil, "exec", trusted, "--", "cat", "loot.txt")
	for _, want := range []string{secret, "FROM_HOST=" + hostVar, "CLOUD=" + cloudKey, "private\nprivate\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the trusted repository's workspace lacks %q:\n%s", want, r)
		}
	}
	// What trust means: its postCreateCommand copied the value into the
	// working tree, where the agent reads it, and verify says so.
	v = devaipod(t, nil, "--config", cfg, "verify", trusted, "-o", "json")
	if rows := verifyRows(t, v.stdout); v.code != 1 || rows["untrusted-workspace"] != "N-A" || rows["trusted-env-files"] != "FAIL" || !strings.Contains(v.stdout, "loot.txt") {
		t.Errorf("verify of the trusted pod: exit %d, untrusted-workspace %s, trusted-env-files %s\n%s", v.code, rows["untrusted-workspace"], rows["trusted-env-files"], v)
	}
	if r := mustDevaipod(t, nil, "trust", "--revoke", repo); !strings.Contains(r.stdout, "no longer trusted") {
		t.Errorf("trust --revoke: %s", r)
	}
	if r := devaipod(t, nil, "trust", "https://git.example.test/o/r/pull/1"); r.code == 0 || !strings.Contains(r.stderr, "only a local checkout is remembered") {
		t.Errorf("trust of a pull request: %s", r)
	}
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
