package pod

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/config"
)

func TestTrustStore(t *testing.T) {
	ctx := context.Background()
	store := &TrustStore{Path: filepath.Join(t.TempDir(), "state", "trusted.json")}
	repo := repoWith(t, map[string]string{"sub/file": "x\n"})
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(repo, link); err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(repo)

	entry, already, err := store.Trust(ctx, filepath.Join(link, "sub"))
	if err != nil || already || entry.Dir != real || entry.At.IsZero() {
		t.Fatalf("Trust = %+v, %v, %v; want %s, new", entry, already, err, real)
	}
	if again, already, err := store.Trust(ctx, repo); err != nil || !already || again != entry {
		t.Errorf("Trust again = %+v, %v, %v; want the same entry, already", again, already, err)
	}
	if list, err := store.List(); err != nil || len(list) != 1 || list[0] != entry {
		t.Errorf("List = %+v, %v", list, err)
	}
	for _, url := range []string{"https://git.example.test/o/r.git", "https://github.com/o/r/pull/7", "git@git.example.test:o/r"} {
		var nr *NotRememberableError
		if _, _, err := store.Trust(ctx, url); !errors.As(err, &nr) || nr.PR != strings.Contains(url, "/pull/") {
			t.Errorf("Trust(%s) = %v; want a NotRememberableError", url, err)
		}
	}
	if _, err := store.Revoke(ctx, filepath.Join(t.TempDir(), "elsewhere")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Revoke of an untrusted folder = %v; want ErrNotFound", err)
	}
	// A checkout that is gone is revoked by the folder List shows.
	if gone, err := store.Revoke(ctx, real); err != nil || gone != entry {
		t.Errorf("Revoke = %+v, %v", gone, err)
	}
	if list, _ := store.List(); len(list) != 0 {
		t.Errorf("after Revoke, List = %+v", list)
	}
}

// TestCreateDecidesTrust: a repository is untrusted unless the request,
// the store or the person's answer says otherwise; the plan follows, and
// Trusting hears the decision before anything runs.
func TestCreateDecidesTrust(t *testing.T) {
	ctx := context.Background()
	repo := repoWith(t, map[string]string{
		".devcontainer/devcontainer.json": `{"image": "localhost/devaipod-default:latest", "containerEnv": {"K": "${localEnv:MY_KEY}"}}`})
	cfg, err := config.ParseConfig("/c.toml", []byte("[trusted.env.vars]\nMY_TOKEN = \"s3cr3t-value\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := &TrustStore{Path: filepath.Join(t.TempDir(), "trusted.json")}
	host := map[string]string{"MY_KEY": "host-key-value"}
	up := func(req Request) (*Result, Trust, []string) {
		t.Helper()
		req.Source, req.Config, req.Trusted, req.HostEnv = repo, cfg, store, host
		var heard Trust
		req.Trusting = func(tr Trust) { heard = tr }
		res, _, err := dryRun(t, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Trust != heard {
			t.Errorf("Result.Trust %+v differs from what Trusting heard %+v", res.Trust, heard)
		}
		warnings := res.Plan.Warnings // a dry run prints them with the plan
		said := slices.ContainsFunc(warnings, func(w string) bool {
			return strings.HasPrefix(w, "the repository is not trusted: its pod is not given")
		})
		if said != (len(res.Plan.Withheld) > 0) {
			t.Errorf("withheld %q, warnings %q: a warning names what was withheld, and only then", res.Plan.Withheld, warnings)
		}
		return res, heard, res.Plan.Withheld
	}
	res, tr, withheld := up(Request{})
	ws := res.Plan.Workspace()
	if tr.Trusted || !tr.Rememberable || !res.Plan.Untrusted || ws.Env["K"] != "" || ws.SecretEnv["MY_TOKEN"] != "" {
		t.Errorf("by default: trust %+v, plan untrusted %v, K=%q, secrets %v; want untrusted, nothing of the person's", tr, res.Plan.Untrusted, ws.Env["K"], ws.SecretEnv)
	}
	if got := strings.Join(withheld, "; "); !strings.Contains(got, "[trusted.env] (MY_TOKEN)") || !strings.Contains(got, "${localEnv} of MY_KEY") {
		t.Errorf("withheld = %q", got)
	}

	// A dry run never asks.
	asked := 0
	ask := func(answer TrustAnswer) func(TrustQuestion) (TrustAnswer, error) {
		return func(q TrustQuestion) (TrustAnswer, error) {
			asked++
			if q.Repo != repo || !q.Rememberable {
				t.Errorf("question = %+v", q)
			}
			return answer, nil
		}
	}
	if _, tr, _ = up(Request{AskTrust: ask(TrustAlways)}); tr.Trusted || asked != 0 {
		t.Errorf("a dry run asked (%d) or trusted (%+v)", asked, tr)
	}
	c := &creation{req: Request{Trusted: store, AskTrust: ask(TrustNo)}}
	src, _, err := resolveLocal(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	if tr, err := c.decideTrust(ctx, src); err != nil || tr.Trusted || asked != 1 {
		t.Errorf("answered no: %+v %v (asked %d)", tr, err, asked)
	}
	c.req.AskTrust = ask(TrustOnce)
	if tr, err := c.decideTrust(ctx, src); err != nil || !tr.Trusted || tr.How != TrustAnsweredYes {
		t.Errorf("answered yes: %+v %v", tr, err)
	}
	if list, _ := store.List(); len(list) != 0 {
		t.Errorf("yes for one up remembered it: %+v", list)
	}
	c.req.AskTrust = ask(TrustAlways)
	if tr, err := c.decideTrust(ctx, src); err != nil || !tr.Trusted || tr.How != TrustRemembered || tr.Since.IsZero() {
		t.Errorf("answered always: %+v %v", tr, err)
	}

	// Remembered now: trusted without asking, and the pod gets it all.
	asked = 0
	res, tr, withheld = up(Request{AskTrust: ask(TrustNo)})
	ws = res.Plan.Workspace()
	if !tr.Trusted || tr.How != TrustRemembered || res.Plan.Untrusted || ws.Env["K"] != "host-key-value" || ws.SecretEnv["MY_TOKEN"] == "" || len(withheld) != 0 || asked != 0 {
		t.Errorf("remembered: trust %+v, untrusted %v, K=%q, secrets %v, withheld %v, asked %d", tr, res.Plan.Untrusted, ws.Env["K"], ws.SecretEnv, withheld, asked)
	}
	if _, err := store.Revoke(ctx, repo); err != nil {
		t.Fatal(err)
	}
	if _, tr, _ = up(Request{Trust: true}); !tr.Trusted || tr.How != TrustForThisUp {
		t.Errorf("Request.Trust: %+v", tr)
	}

	// A URL's code is never remembered, whatever the store holds for the
	// checkout it was cloned from.
	if _, _, err := store.Trust(ctx, repo); err != nil {
		t.Fatal(err)
	}
	res, _, err = dryRun(t, Request{Source: "file://" + repo, Config: cfg, Trusted: store})
	if err != nil {
		t.Fatal(err)
	}
	if res.Trust.Trusted || res.Trust.Rememberable || !res.Plan.Untrusted {
		t.Errorf("a URL of a trusted checkout: %+v (untrusted %v); want untrusted, not rememberable", res.Trust, res.Plan.Untrusted)
	}
}

// TestUntrustedRunsNothingOnTheHost: an untrusted repository's
// initializeCommand is refused even when host commands are allowed.
func TestUntrustedRunsNothingOnTheHost(t *testing.T) {
	repo := repoWith(t, map[string]string{".devcontainer/devcontainer.json": `{"initializeCommand": "touch /tmp/never"}`})
	_, _, err := dryRun(t, Request{Source: repo, AllowHostCommands: true})
	var hce *HostCommandError
	if !errors.As(err, &hce) || !hce.Untrusted {
		t.Fatalf("up of an untrusted repository with host commands allowed: %v; want an untrusted HostCommandError", err)
	}
	if _, _, err := dryRun(t, Request{Source: repo, AllowHostCommands: true, Trust: true}); err != nil {
		t.Errorf("trusted, with host commands allowed: %v", err)
	}
}

func TestUntrustedBuildEnv(t *testing.T) {
	env, remove, err := untrustedBuildEnv(map[string]string{"PATH": "/bin", "HOME": "/home/u", "AWS_SECRET_ACCESS_KEY": "k", "HTTPS_PROXY": "http://u:p@proxy"})
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	joined := strings.Join(env, "\n")
	for _, want := range []string{"PATH=/bin", "HOME=/home/u", "DOCKER_CONFIG=", "REGISTRY_AUTH_FILE="} {
		if !strings.Contains(joined, want) {
			t.Errorf("env lacks %s:\n%s", want, joined)
		}
	}
	for _, not := range []string{"AWS_SECRET_ACCESS_KEY", "HTTPS_PROXY"} {
		if strings.Contains(joined, not) {
			t.Errorf("env has %s:\n%s", not, joined)
		}
	}
}

// TestUntrustedFeaturesAsWritten: the devcontainer CLI passes
// build.options to podman build as written, so an untrusted repository's
// features build is refused when the file has them, and goes ahead when
// trusted (host variables are taken out of the copy the CLI reads:
// TestE2EUntrustedRepository).
func TestUntrustedFeaturesAsWritten(t *testing.T) {
	cli := filepath.Join(t.TempDir(), "devcontainer")
	if err := os.WriteFile(cli, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	repo := repoWith(t, map[string]string{
		".devcontainer/options/devcontainer.json": `{"build": {"dockerfile": "Dockerfile", "options": ["-v", "/home:/h"]}, "features": {"x": {}}}`,
		".devcontainer/options/Dockerfile":        "FROM localhost/devaipod-default:latest\n",
		".devcontainer/env/devcontainer.json":     `{"image": "localhost/devaipod-default:latest", "features": {"x": {}}, "containerEnv": {"A": "${env:HOME}"}}`,
		".devcontainer/plain/devcontainer.json":   `{"image": "localhost/devaipod-default:latest", "features": {"x": {}}}`,
	})
	for _, dc := range []string{"options", "env", "plain"} {
		for _, trusted := range []bool{false, true} {
			_, _, err := dryRun(t, Request{Source: repo, Trust: trusted, Devcontainer: ".devcontainer/" + dc + "/devcontainer.json",
				HostEnv: map[string]string{"DEVAIPOD_DEVCONTAINER_CLI": cli}})
			refused := err != nil && strings.Contains(err.Error(), "would pass its build.options")
			if want := !trusted && dc == "options"; refused != want || (err != nil && !refused) {
				t.Errorf("%s, trusted %v: %v; want refused %v", dc, trusted, err, want)
			}
		}
	}
}
