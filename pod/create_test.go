package pod

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devaipod/devaipod/internal/gittest"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/devcontainer"
	"github.com/devaipod/devaipod/pod/plan"
)

// dryRun plans an up of repo with nothing but git: no engine.
func dryRun(t *testing.T, req Request) (*Result, []string, error) {
	t.Helper()
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	var log []string
	req.DryRun = true
	req.Warn = func(s string) { log = append(log, s) }
	if req.HostEnv == nil {
		req.HostEnv = map[string]string{}
	}
	res, err := Create(context.Background(), nil, req)
	return res, log, err
}

// repoWith makes a committed repository with files (path: content).
func repoWith(t *testing.T, files map[string]string) string {
	t.Helper()
	repo := gittest.Repo(t)
	for p, content := range files {
		gittest.WriteFile(t, filepath.Join(repo, p), content)
	}
	gittest.Git(t, repo, []string{"add", "."}, []string{"commit", "-q", "-m", "files"})
	return repo
}

// TestDevcontainerErrorsNameRepositoryFiles: an error in a devcontainer.json
// names the file as the user knows it (the checkout's, or a path in the
// repository of a URL), never the temporary clone.
func TestDevcontainerErrorsNameRepositoryFiles(t *testing.T) {
	repo := repoWith(t, map[string]string{".devcontainer/devcontainer.json": "{\n  \"image\": 5\n}\n"})
	const problem = `.devcontainer/devcontainer.json:2: key "image": must be a string, not a number`
	for _, tt := range []struct{ source, want string }{
		{repo, repo + "/" + problem},
		{"file://" + repo, "in file://" + repo + ": " + problem},
	} {
		_, _, err := dryRun(t, Request{Source: tt.source})
		if err == nil || err.Error() != tt.want {
			t.Errorf("up %s: error %v\nwant %s", tt.source, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "devaipod-src-") {
			t.Errorf("up %s: error %q names the temporary clone", tt.source, err)
		}
		var de *devcontainer.Error
		if !errors.As(err, &de) {
			t.Errorf("up %s: error %v does not unwrap to a *devcontainer.Error", tt.source, err)
		}
	}

	// A bad image name in the devcontainer is refused before any pull.
	bad := repoWith(t, map[string]string{".devcontainer/devcontainer.json": `{"image": "Bad//Image"}`})
	_, _, err := dryRun(t, Request{Source: "file://" + bad})
	if err == nil || !strings.HasPrefix(err.Error(), "in file://"+bad+`: .devcontainer/devcontainer.json: key "image": image "Bad//Image"`) {
		t.Errorf("a devcontainer with a bad image: %v", err)
	}
}

func TestCreateRefusesBadImage(t *testing.T) {
	repo := gittest.Repo(t)
	for _, img := range []string{"bad//image", "org/Upper", "x:tag:again"} {
		_, _, err := dryRun(t, Request{Source: repo, Image: img})
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != "image" || !strings.HasPrefix(err.Error(), `image: image "`+img+`"`) {
			t.Errorf("up --image %s --dry-run: %v; want a refusal naming it", img, err)
		}
	}
	if _, _, err := dryRun(t, Request{Source: repo, Image: "quay.io/org/img:1.0"}); err != nil {
		t.Errorf("up --image quay.io/org/img:1.0: %v", err)
	}
}

// TestCreateAllowBreadth: --allow over a whole public suffix is refused
// unless forced, and warned of when forced; a company's suffix is warned
// of; [network] allow's warnings reach the user.
func TestCreateAllowBreadth(t *testing.T) {
	repo := gittest.Repo(t)
	_, _, err := dryRun(t, Request{Source: repo, Allow: []string{"api.example.test", "*.com"}})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Field != "allow" || !ie.Forcible || !strings.Contains(err.Error(), `allow: rule "*.com" opens every host under "com"`) {
		t.Errorf("--allow '*.com': %v; want a refusal of the field allow that force would pass", err)
	}
	_, _, err = dryRun(t, Request{Source: repo, Allow: []string{"*"}, Force: true})
	if err == nil || !strings.Contains(err.Error(), "would allow every host") {
		t.Errorf("--allow '*' --force: %v; want a refusal (no rule allows every host)", err)
	}

	cfg, err := config.ParseConfig("/c.toml", []byte("[network]\nallow = [\"*.co.uk\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	res, log, err := dryRun(t, Request{Source: repo, Allow: []string{"*.com", "*.github.io"}, Force: true, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(log, "\n")
	for _, want := range []string{`--allow: rule "*.com" opens every host`, `--allow: rule "*.github.io" opens every host under "github.io"`,
		`/c.toml:2: network.allow: rule "*.co.uk"`} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings lack %q:\n%s", want, joined)
		}
	}
	if !strings.Contains(strings.Join(res.Plan.Allow, " "), "*.com") {
		t.Errorf("a forced rule is not in the plan: %v", res.Plan.Allow)
	}
}

// TestDryRunSteps: a dry run lists every step up would take, the builds
// on the host included (the devcontainer CLI's features build).
func TestDryRunSteps(t *testing.T) {
	cli := filepath.Join(t.TempDir(), "devcontainer")
	if err := os.WriteFile(cli, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	repo := repoWith(t, map[string]string{
		".devcontainer/devcontainer.json": `{"image": "localhost/devaipod-default:latest", "features": {"ghcr.io/devcontainers/features/go:1": {}},
			"initializeCommand": "echo hi", "postCreateCommand": "make deps"}`,
		".devcontainer/build/devcontainer.json": `{"build": {"dockerfile": "Dockerfile"}}`,
		".devcontainer/build/Dockerfile":        "FROM localhost/devaipod-default:latest\n",
	})
	res, _, err := dryRun(t, Request{Source: repo, Task: "fix it", AllowHostCommands: true, Trust: true,
		HostEnv: map[string]string{"DEVAIPOD_DEVCONTAINER_CLI": cli}, Devcontainer: ".devcontainer/devcontainer.json"})
	if err != nil {
		t.Fatal(err)
	}
	kinds := make([]string, len(res.Steps))
	var features, initialize, lifecycle string
	for i, s := range res.Steps {
		kinds[i] = s.Kind
		switch s.Kind {
		case StepFeatures:
			features = s.What
		case StepInitialize:
			initialize = s.What
		case StepLifecycle:
			lifecycle += s.What + "\n"
		}
	}
	order := strings.Join(kinds, " ")
	for _, want := range []string{"clone initialize features image", "create copy create copy create", "start lifecycle lifecycle ready check", "task"} {
		if !strings.Contains(order, want) {
			t.Errorf("steps %q lack %q in that order", order, want)
		}
	}
	for what, wants := range map[string][]string{
		features:   {cli + " build", "ghcr.io/devcontainers/features/go:1", "localhost/devaipod-build-" + strings.ToLower(filepath.Base(repo)) + ":features-", "--docker-path podman"},
		initialize: {"on this host", repo, "echo hi"},
		lifecycle:  {"postCreateCommand", "make deps", "then let the agent start"},
	} {
		for _, want := range wants {
			if !strings.Contains(what, want) {
				t.Errorf("step %q lacks %q", what, want)
			}
		}
	}
	if first := res.Steps[0]; first.Kind != StepClone || !strings.Contains(first.What, repo) || !strings.Contains(first.What, shortCommit(res.Source.Commit)) {
		t.Errorf("first step %+v; want the clone of %s at its commit", first, repo)
	}
	for _, s := range res.Steps {
		if s.Kind == StepImage && strings.Contains(s.What, "devaipod-build-") {
			t.Errorf("the image the features build makes is pulled or looked up too: %q", s.What)
		}
	}

	// --image replaces the devcontainer's image: nothing is built.
	res, _, err = dryRun(t, Request{Source: repo, Image: "localhost/mine:1", AllowHostCommands: true, Trust: true,
		HostEnv: map[string]string{"DEVAIPOD_DEVCONTAINER_CLI": cli}, Devcontainer: ".devcontainer/devcontainer.json"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Steps {
		if s.Kind == StepFeatures || s.Kind == StepBuild {
			t.Errorf("with --image, a build step: %+v", s)
		}
	}

	// A Dockerfile build is a step of its own.
	res, _, err = dryRun(t, Request{Source: "file://" + repo, Devcontainer: ".devcontainer/build/devcontainer.json"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range res.Steps {
		if s.Kind == StepBuild && strings.Contains(s.What, ".devcontainer/build/Dockerfile") && !strings.Contains(s.What, "devaipod-src-") {
			found = true
		}
	}
	if !found {
		t.Errorf("no build step naming the Dockerfile in the repository: %+v", res.Steps)
	}
}

// TestCreateApply: with Apply, Create builds the plan as a dry run does
// (no engine, nothing looked up) and hands it to Apply with the clone,
// which exists during the call and is gone after; Apply's error is
// Create's.
func TestCreateApply(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	repo := repoWith(t, map[string]string{"main.go": "package main\n"})
	var tree string
	applyErr := errors.New("the cluster said no")
	req := Request{Source: repo, Name: "applied", HostEnv: map[string]string{},
		Apply: func(ctx context.Context, pl *plan.Plan, dir string) error {
			tree = dir
			if pl.Name != "applied" {
				t.Errorf("Apply got plan %q", pl.Name)
			}
			// The clone has no work tree: its .git is what the copy reads.
			if _, err := os.Stat(filepath.Join(dir, ".git", "HEAD")); err != nil {
				t.Errorf("no clone in Apply's tree: %v", err)
			}
			return applyErr
		}}
	res, err := Create(context.Background(), nil, req)
	if !errors.Is(err, applyErr) || res == nil || res.Plan == nil {
		t.Fatalf("Create = %+v, %v; want the plan and Apply's error", res, err)
	}
	if tree == "" {
		t.Fatal("Apply was not called")
	}
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Errorf("the clone %s is left after Create: %v", tree, err)
	}
}

// TestInitializeCommandObjectRunsAtOnce: the object form's entries run in
// parallel, as the spec says; the string form one after another.
func TestInitializeCommandObjectRunsAtOnce(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	repo := repoWith(t, map[string]string{
		".devcontainer/devcontainer.json": `{"image": "localhost/devaipod-default:latest",
			"initializeCommand": {"a": "sleep 1; echo a >> ran", "b": ["sh", "-c", "sleep 1; echo b >> ran"]}}`,
	})
	start := time.Now()
	_, err := Create(context.Background(), newFake(), Request{Source: repo, AllowHostCommands: true, Trust: true, NoVerify: true,
		HostEnv: map[string]string{"DEVAIPOD_AGENT_OPENCODE_CONFIG_CONTENT": "{}"}})
	if err != nil {
		t.Fatal(err)
	}
	ran, _ := os.ReadFile(filepath.Join(repo, "ran"))
	if took := time.Since(start); len(ran) != 4 || took > 1900*time.Millisecond {
		t.Errorf("ran %q in %v; want both entries, at once", ran, took)
	}
}

// TestDryRunPlansFeaturesWithoutTheCLI: a dry run builds nothing, so it
// plans a devcontainer with features without the devcontainer CLI, and
// says that up needs it; up itself refuses without it.
func TestDryRunPlansFeaturesWithoutTheCLI(t *testing.T) {
	repo := repoWith(t, map[string]string{
		".devcontainer/devcontainer.json": `{"image": "mcr.microsoft.com/devcontainers/base:bookworm", "features": {"ghcr.io/devcontainers/features/go:1": {}}}`,
	})
	env := map[string]string{"DEVAIPOD_DEVCONTAINER_CLI": "/nonexistent/devcontainer"}
	res, log, err := dryRun(t, Request{Source: repo, Trust: true, HostEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	var features string
	for _, s := range res.Steps {
		if s.Kind == StepFeatures {
			features = s.What
		}
	}
	if !strings.Contains(features, "ghcr.io/devcontainers/features/go:1") || !strings.Contains(strings.Join(log, "\n"), "the devcontainer CLI, and it is not installed: up (not this dry run) needs it") {
		t.Errorf("features step %q, warnings %q", features, log)
	}
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	var tm *ToolMissingError
	if _, err := Create(context.Background(), newFake(), Request{Source: repo, Trust: true, HostEnv: env}); !errors.As(err, &tm) {
		t.Errorf("up without the CLI: %v; want a ToolMissingError", err)
	}
}

// TestWorkspaceFolderOutsideWorkspaces: a workspaceFolder devaipod does not
// honour is said, and ${containerWorkspaceFolder} is the value written.
func TestWorkspaceFolderOutsideWorkspaces(t *testing.T) {
	repo := repoWith(t, map[string]string{
		".devcontainer/devcontainer.json": `{"image": "localhost/devaipod-default:latest", "workspaceFolder": "/workspace",
			"postCreateCommand": "ls ${containerWorkspaceFolder}"}`,
	})
	res, _, err := dryRun(t, Request{Source: repo, Trust: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(res.Plan.Warnings, "\n"), `workspaceFolder "/workspace" is not supported`) || !strings.HasPrefix(res.Plan.Workdir, "/workspaces/") {
		t.Errorf("warnings %q, workdir %s", res.Plan.Warnings, res.Plan.Workdir)
	}
	if got := res.Plan.Lifecycle.PostCreate.Steps[0].Args; got[len(got)-1] != "ls /workspace" {
		t.Errorf("postCreateCommand %q", got)
	}
}
