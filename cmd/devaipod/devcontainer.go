package main

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/devaipod/devaipod/pod/source"
	"github.com/spf13/cobra"
)

// prepareDevcontainer loads the checkout's devcontainer.json into in, runs
// its initializeCommand on the host when the user allowed it, and builds
// its image (p is nil for a dry run, which builds nothing).
func prepareDevcontainer(cmd *cobra.Command, g *globalFlags, f *upFlags, p *podman.Podman, in *plan.PlanInput, tree string, forbidden []string) error {
	ctx := cmd.Context()
	src := in.Source
	local := tree
	if src.Local {
		local = src.Dir
	}
	explicit := f.devcontainer
	if filepath.IsAbs(explicit) && src.Local {
		// A path in the user's checkout names the same path in the clone.
		rel, err := filepath.Rel(src.Dir, explicit)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("--devcontainer %s is not inside the repository %s", explicit, src.Dir)
		}
		explicit = rel
	}
	loaded, err := pod.LoadDevcontainer(ctx, tree, pod.DevcontainerOptions{Explicit: explicit, Name: in.Name,
		LocalFolder: local, Project: src.Project, HostEnv: in.HostEnv, Forbidden: forbidden})
	if err != nil || loaded == nil {
		return err
	}
	dc := loaded.Config
	rel, _ := filepath.Rel(tree, dc.File)
	g.infof(cmd, "using %s", rel)
	in.Devcontainer, in.RunArgs, in.DevcontainerBinds = dc, loaded.RunArgs, loaded.Binds

	if c := dc.InitializeCommand; c != nil && len(c.Steps) > 0 {
		if !f.allowHostCommands {
			return &hintError{err: fmt.Errorf("%s has an initializeCommand, which runs on this host, not in a container: %s", rel, c.Steps[0]),
				hint: "read it, then pass --allow-host-commands to run it (a repository must not run code on your host by default)"}
		}
		if !f.dryRun {
			if !src.Local { // it runs in the clone, which has the whole tree then
				if err := source.CheckoutAll(ctx, tree); err != nil {
					return err
				}
			}
			for _, step := range c.Steps {
				g.infof(cmd, "running initializeCommand on this host: %s", step)
				run := exec.CommandContext(ctx, step.Args[0], step.Args[1:]...)
				run.Dir, run.Stdout, run.Stderr = local, cmd.ErrOrStderr(), cmd.ErrOrStderr()
				if err := run.Run(); err != nil {
					return fmt.Errorf("initializeCommand %s: %w", step, err)
				}
			}
		}
	}

	project := src.Project
	if project == "" {
		project = "project"
	}
	if len(dc.Features) > 0 {
		return buildWithFeatures(cmd, g, f, p, in, tree, rel, project)
	}
	if dc.Build == nil {
		return nil
	}
	tag, err := pod.BuildTag(project, dc.Build)
	if err != nil {
		return err
	}
	in.DevcontainerImage = tag
	if p == nil || f.image != "" {
		return nil
	}
	g.infof(cmd, "building the devcontainer's image %s...", tag)
	out := cmd.ErrOrStderr()
	if g.quiet {
		out = io.Discard
	}
	spec := podman.BuildSpec{Dockerfile: dc.Build.Dockerfile, Context: dc.Build.Context, Args: dc.Build.Args, Target: dc.Build.Target, Tag: tag}
	_, err = p.BuildImage(ctx, spec, out)
	return err
}

// containerEnv is the workspace's environment for ${containerEnv:VAR}: the
// image's, then what the plan sets.
func containerEnv(image []string, planned map[string]string) map[string]string {
	env := map[string]string{}
	for _, kv := range image {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for k, v := range planned {
		env[k] = v
	}
	return env
}

// devcontainerCLI is the devcontainer CLI: $DEVAIPOD_DEVCONTAINER_CLI, else
// devcontainer on PATH.
func devcontainerCLI() (string, error) {
	if c := os.Getenv("DEVAIPOD_DEVCONTAINER_CLI"); c != "" {
		return exec.LookPath(c)
	}
	return exec.LookPath("devcontainer")
}

// buildWithFeatures has the devcontainer CLI build the image with the
// devcontainer's features (it runs podman's CLI for the build), as the
// devcontainer spec's reference implementation does.
func buildWithFeatures(cmd *cobra.Command, g *globalFlags, f *upFlags, p *podman.Podman, in *plan.PlanInput, tree, rel, project string) error {
	cli, err := devcontainerCLI()
	if err != nil {
		return &hintError{err: fmt.Errorf("%s uses features, which devaipod builds with the devcontainer CLI, and it is not installed", rel),
			hint: "install it (npm install -g @devcontainers/cli), or build the image yourself and pass --image NAME"}
	}
	data, err := os.ReadFile(in.Devcontainer.File)
	if err != nil {
		return err
	}
	tag := fmt.Sprintf("localhost/devaipod-build-%s:features-%x", strings.ToLower(project), sha256.Sum256(data))
	tag = tag[:strings.LastIndex(tag, ":")+len(":features-")+12]
	in.DevcontainerImage = tag
	if p == nil || f.image != "" {
		return nil
	}
	if err := source.CheckoutAll(cmd.Context(), tree); err != nil {
		return err
	}
	g.infof(cmd, "building the devcontainer's image %s with its features (%s)...", tag, cli)
	build := exec.CommandContext(cmd.Context(), cli, "build", "--workspace-folder", tree, "--config", in.Devcontainer.File,
		"--image-name", tag, "--docker-path", "podman")
	build.Stdout, build.Stderr = cmd.ErrOrStderr(), cmd.ErrOrStderr()
	if err := build.Run(); err != nil {
		return fmt.Errorf("devcontainer build: %w", err)
	}
	return nil
}
