package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/devaipod/devaipod/pod/source"
	"github.com/spf13/cobra"
)

type upFlags struct {
	name              string
	image             string
	ref               string
	dryRun            bool
	keepOnFailure     bool
	timeout           time.Duration
	allow             []string
	workspaceAccess   string
	devcontainer      string
	allowHostCommands bool
	noVerify          bool
	forgeURL          string
	gator             []string
	pull              string
}

var pullPolicies = []string{podman.PullMissing, podman.PullAlways, podman.PullNever}

func newUpCommand(g *globalFlags) *cobra.Command {
	f := &upFlags{}
	cmd := &cobra.Command{
		Use:   "up PATH|GIT-URL|PR-URL [TASK]",
		Short: "Create a pod for a repository and start its agent",
		Long: `Create a pod for a repository and wait until its agent's server answers.
With a TASK, the agent starts working on it at once (opencode: the first
message of a new session; a custom agent: $DEVAIPOD_TASK); status shows it.

The source is a local git checkout (its committed HEAD, with history; origin
points at the checkout's real remote; uncommitted changes are left out and
listed), a git URL (https, ssh, git, file, or user@host:path), cloned on
this host with your own git credentials, or a pull request URL
(https://github.com/OWNER/REPO/pull/N, or on --forge-url): its head is
checked out on branch pr-N, with the base repository as upstream.

up is all or nothing: if a step fails, or you press Ctrl-C, everything it
created is removed again (unless --keep-on-failure).`,
		Example: `  devaipod up .
  devaipod up ./myproject --name myproject
  devaipod up https://git.example.test/org/repo.git --ref main
  devaipod up . --dry-run --output json
  devaipod up . "fix the flaky test in pkg/cache"
  devaipod up https://github.com/org/repo/pull/42 "review this change"`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return errors.New("up takes a local git checkout, a git URL or a pull request URL, and optionally a task in quotes")
			}
			if len(args) == 2 && strings.TrimSpace(args[1]) == "" {
				return errors.New("the task is empty")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			task := ""
			if len(args) == 2 {
				task = args[1]
			}
			return runUp(cmd, g, f, args[0], task)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "", "pod name (default: the repository's name plus a random suffix)")
	fl.StringVar(&f.image, "image", "", "image for the workspace and the agent (default: [workspace] image, else "+config.DefaultImage+")")
	fl.StringVar(&f.pull, "pull", podman.PullMissing, "pull the pod's images from their registries: missing, always or never (images under localhost/ are never pulled)")
	fl.StringVar(&f.ref, "ref", "", "branch or tag to clone (git URLs only)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan (every object, with its security settings) and create nothing")
	fl.BoolVar(&f.keepOnFailure, "keep-on-failure", false, "leave what was created when up fails, for inspection")
	fl.DurationVar(&f.timeout, "timeout", 60*time.Second, "how long to wait for the agent's server")
	fl.StringVar(&f.devcontainer, "devcontainer", "", "the devcontainer.json to use, as a path in the repository (default: .devcontainer/devcontainer.json, .devcontainer.json, or the only .devcontainer/*/devcontainer.json)")
	fl.StringVar(&f.forgeURL, "forge-url", "", "web address of the GitHub Enterprise (or other) server whose pull request URLs up accepts (default: [forge] url, else https://github.com)")
	fl.StringArrayVar(&f.gator, "gator", nil, "grant the agent scoped GitHub access through the gator: github:OWNER/REPO[:PERMS], github:OWNER/*, github:readonly-all (repeatable; PERMS: read, comment, create-draft, push-branch, pending-review; see docs/gator.md)")
	fl.BoolVar(&f.noVerify, "no-verify", false, "skip the fast containment battery (devaipod verify --fast) that up runs in the agent before it reports ready")
	fl.BoolVar(&f.allowHostCommands, "allow-host-commands", false, "run the devcontainer's initializeCommand on this host (it is the repository's code)")
	fl.StringVar(&f.workspaceAccess, "workspace-access", "", "the agent's access to the workspace: rw or ro (default: [agent] workspace_access, else rw)")
	fl.StringArrayVar(&f.allow, "allow", nil, "also allow this host for this pod (repeatable; rule syntax: devaipod allow --help)")
	cmd.RegisterFlagCompletionFunc("pull", cobra.FixedCompletions(pullPolicies, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func runUp(cmd *cobra.Command, g *globalFlags, f *upFlags, input, task string) error {
	start := time.Now()
	ctx := cmd.Context()
	if !slices.Contains(pullPolicies, f.pull) {
		return fmt.Errorf("--pull %q: use missing, always or never", f.pull)
	}
	cfg, err := g.loadConfig()
	if err != nil {
		return err
	}
	name := f.name
	if name != "" {
		if name, err = plan.NormalizeName(name); err != nil {
			return err
		}
	}
	forge := cfg.Forge.URL
	if f.forgeURL != "" {
		forge = f.forgeURL
		if err := source.ValidateForgeURL(f.forgeURL); err != nil {
			return fmt.Errorf("--forge-url: %w", err)
		}
	}
	src, err := source.ResolveSourceWith(ctx, input, source.SourceOptions{Ref: f.ref, ForgeURL: forge, APIURL: cfg.Forge.APIURL})
	if err != nil {
		return err
	}
	for _, w := range src.Warnings {
		g.warnf(cmd, "%s", w)
	}
	if name == "" {
		name = plan.DeriveNameFor(src)
	}
	if a := f.workspaceAccess; a != "" && a != config.AccessRW && a != config.AccessRO {
		return fmt.Errorf("--workspace-access %q: use rw or ro", a)
	}
	for _, r := range f.allow {
		if err := config.ValidateRule(r); err != nil {
			return fmt.Errorf("--allow: %w", err)
		}
	}
	configFile := g.config
	if configFile == "" {
		configFile = config.DefaultConfigPath()
	}
	home, _ := os.UserHomeDir()
	forbidden := pod.ForbiddenMounts(home, configFile, os.Getenv("XDG_RUNTIME_DIR"))
	mounts, err := pod.ResolveMounts(cfg.Mounts, forbidden)
	if err != nil {
		return err
	}
	if f.workspaceAccess != "" {
		cfg.Agent.WorkspaceAccess = f.workspaceAccess
	}
	env := hostEnv()
	scopes, err := gatorScopes(f.gator, cfg, src, forge, env)
	if err != nil {
		return err
	}
	password, err := randomPassword()
	if err != nil {
		return err
	}
	in := plan.PlanInput{Name: name, Config: cfg, Source: src, Image: f.image, HostEnv: env, Allow: f.allow,
		Mounts: mounts, AgentPassword: password, Task: task, NoVerify: f.noVerify,
		GatorScopes: scopes, GatorAPIURL: forgeAPIURL(cfg.Forge.APIURL, forge), GatorGitURL: forge}
	if len(src.LeftOut) > 0 {
		g.warnf(cmd, "%d uncommitted path(s) in %s are not copied into the workspace: %s",
			len(src.LeftOut), src.Dir, summarisePaths(src.LeftOut, 5))
	}

	// The clone (host git) and connecting to podman are independent: run
	// them at once. The clone creates nothing in podman.
	g.infof(cmd, "cloning %s...", src.Display)
	tmp, err := os.MkdirTemp("", "devaipod-src-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "repo")
	cloneCtx, cancelClone := context.WithCancel(ctx)
	defer cancelClone()
	cloned := make(chan error, 1)
	go func() { cloned <- src.Checkout(cloneCtx, tree) }()

	var p *podman.Podman
	hostInfo := func() (plan.HostInfo, error) { return plan.HostInfo{}, nil }
	var rootless, modeKnown bool
	if !f.dryRun {
		if p, err = g.connect(cmd); err != nil {
			return err
		}
		defer p.Close()
		// Podman's info is slow (0.3 to 1 s of the service's CPU) and only
		// needed for the limits warning, and for the final message when the
		// socket does not tell the mode: ask for it alongside, if at all.
		rootless, modeKnown = p.Rootless()
		if !modeKnown || cfg.Agent.Limits.Enforceable() || cfg.Workspace.Limits.Enforceable() {
			type infoResult struct {
				host plan.HostInfo
				err  error
			}
			info := make(chan infoResult, 1)
			go func() {
				h, err := p.Info(ctx)
				info <- infoResult{h, err}
			}()
			hostInfo = sync.OnceValues(func() (plan.HostInfo, error) {
				r := <-info
				return r.host, r.err
			})
		}
	}
	// The images of the plan without the repository's devcontainer.json
	// (usually all of them) are looked up while the clone runs.
	type lookup struct {
		configs map[string]pod.ImageConfig
		err     error
	}
	early := make(chan lookup, 1)
	if p != nil {
		go func(in plan.PlanInput) { // a copy: in changes once the clone is there
			configs := map[string]pod.ImageConfig{}
			probe, err := plan.Build(in)
			if err == nil {
				err = lookUpImages(ctx, p, probe.Images(), configs)
			}
			early <- lookup{configs, err}
		}(in)
	}
	if err := <-cloned; err != nil {
		return err
	}
	in.Source = src // now with the commit of a URL's clone
	if in.Tree, err = source.ScanTree(ctx, tree, config.ProtectedPaths(cfg), config.MaskPatterns(cfg)); err != nil {
		return fmt.Errorf("scan the repository: %w", err)
	}
	if err := prepareDevcontainer(cmd, g, f, p, &in, tree, forbidden); err != nil {
		return err
	}
	if f.dryRun {
		plan, err := plan.Build(in)
		if err != nil {
			return err
		}
		if g.json() {
			return writeJSON(cmd.OutOrStdout(), plan.Redacted())
		}
		printPlan(cmd.OutOrStdout(), plan)
		return nil
	}
	if cfg.Agent.Limits.Enforceable() || cfg.Workspace.Limits.Enforceable() {
		if in.Host, err = hostInfo(); err != nil {
			return err
		}
	}
	// The plan needs the image's PATH and USER, and a missing image is better
	// reported now than as a create failure.
	probe, err := plan.Build(in)
	if err != nil {
		return err
	}
	looked := <-early
	if looked.err != nil {
		return looked.err
	}
	configs := looked.configs
	if err := ensureImages(cmd, g, p, probe.Images(), configs, f.pull); err != nil {
		return err
	}
	wsImage := configs[probe.Containers[0].Image]
	in.ImageEnv, in.ImageUser = wsImage.Env, wsImage.User
	if dc := in.Devcontainer; dc != nil {
		if err := dc.SubstituteContainerEnv(containerEnv(in.ImageEnv, probe.Containers[0].Env)); err != nil {
			return err
		}
	}
	plan, err := plan.Build(in)
	if err != nil {
		return err
	}
	for _, w := range plan.Warnings {
		g.warnf(cmd, "%s", w)
	}
	opts := pod.UpOptions{ReadyTimeout: f.timeout, KeepOnFailure: f.keepOnFailure,
		Progress: func(step string) { g.infof(cmd, "%s...", step) }, Output: cmd.ErrOrStderr()}
	if err := pod.Up(ctx, p, plan, tree, opts); err != nil {
		if ctx.Err() != nil && !f.keepOnFailure {
			return fmt.Errorf("interrupted; removed what up had created: %w", err)
		}
		return err
	}
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), map[string]any{
			"name": plan.Name, "pod": plan.Pod.Name, "workdir": plan.Workdir,
			"agent_url": plan.AgentURL, "commit": src.Commit, "seconds": time.Since(start).Seconds()})
	}
	// The mode from the socket's owner when it tells: /info was the
	// longest step of up.
	if !modeKnown {
		host, err := hostInfo()
		if err != nil {
			return err
		}
		rootless = host.Rootless
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "Pod %s is ready (%.1fs, %s podman).\n", plan.Name, time.Since(start).Seconds(), podmanMode(rootless))
	if !g.quiet {
		fmt.Fprintf(out, "  shell in the workspace:  devaipod exec %s\n", plan.Name)
		fmt.Fprintf(out, "  talk to the agent:       devaipod attach %s\n", plan.Name)
		fmt.Fprintf(out, "  remove it:               devaipod delete %s\n", plan.Name)
	}
	return nil
}

// lookUpImages records the config of each image that is present; missing
// ones are left to ensureImages, once the plan's images are final.
func lookUpImages(ctx context.Context, p *podman.Podman, images []string, configs map[string]pod.ImageConfig) error {
	for _, img := range images {
		c, err := p.ImageConfig(ctx, img)
		if errors.Is(err, pod.ErrNotFound) {
			continue
		} else if err != nil {
			return err
		}
		configs[img] = c
	}
	return nil
}

// ensureImages records the config of each image not in configs yet,
// pulling it first as policy says. A missing image is better reported now
// than as a create failure.
func ensureImages(cmd *cobra.Command, g *globalFlags, p *podman.Podman, images []string, configs map[string]pod.ImageConfig, policy string) error {
	ctx := cmd.Context()
	out := cmd.ErrOrStderr()
	if g.quiet {
		out = io.Discard
	}
	pull := func(img string) error {
		g.infof(cmd, "pulling %s...", img)
		if err := p.PullImage(ctx, img, out); err != nil {
			return &hintError{err: err, hint: "check the image's name and that this host reaches its registry (a private one needs `podman login REGISTRY`); an image built here is named localhost/NAME"}
		}
		return nil
	}
	for _, img := range images {
		_, known := configs[img]
		if policy == podman.PullAlways && podman.Pullable(img) {
			if err := pull(img); err != nil {
				return err
			}
		} else if known {
			continue
		}
		c, err := p.ImageConfig(ctx, img)
		if errors.Is(err, pod.ErrNotFound) && policy == podman.PullMissing && podman.Pullable(img) {
			if err := pull(img); err != nil {
				return err
			}
			c, err = p.ImageConfig(ctx, img)
		}
		if errors.Is(err, pod.ErrNotFound) {
			return missingImage(img, policy)
		} else if err != nil {
			return err
		}
		configs[img] = c
	}
	return nil
}

// missingImage says what to do about an image podman does not have after
// ensureImages did what policy allows.
func missingImage(img, policy string) error {
	switch {
	case podman.Pullable(img) && policy == podman.PullNever:
		return fmt.Errorf("image %s is not in podman's storage and --pull is never: pull it (podman pull %s) or drop --pull never", img, img)
	case podman.Pullable(img):
		return fmt.Errorf("image %s was pulled, yet podman does not find it by that name: name it by tag or digest alone", img)
	case img == config.DefaultImage || img == config.DefaultHelperImage:
		return fmt.Errorf("image %s is not in podman's storage: build devaipod's images with `make images` (or pass --image)", img)
	}
	return fmt.Errorf("image %s is not in podman's storage: build it, or name another with --image or [workspace] image", img)
}

// randomPassword draws the agent's password: 128 bits, URL-safe.
func randomPassword() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("draw the agent's password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func podmanMode(rootless bool) string {
	if rootless {
		return "rootless"
	}
	return "rootful"
}

func summarisePaths(paths []string, max int) string {
	if len(paths) <= max {
		return strings.Join(paths, ", ")
	}
	return strings.Join(paths[:max], ", ") + fmt.Sprintf(" and %d more", len(paths)-max)
}

// printPlan shows a plan for people: each object and its security settings.
func printPlan(w io.Writer, p *plan.Plan) {
	fmt.Fprintf(w, "Plan for pod %s (nothing created):\n", p.Pod.Name)
	fmt.Fprintf(w, "  pod      %s  labels %s\n", p.Pod.Name, labelString(p.Pod.Labels))
	for _, v := range p.Volumes {
		fmt.Fprintf(w, "  volume   %s  owner %d:%d\n", v.Name, v.UID, v.GID)
	}
	for _, s := range p.Secrets {
		fmt.Fprintf(w, "  secret   %s  (value hidden)\n", s.Name)
	}
	for _, c := range p.Containers {
		fmt.Fprintf(w, "  container %s (%s)\n", c.Name, c.Role)
		fmt.Fprintf(w, "    image        %s\n", c.Image)
		fmt.Fprintf(w, "    command      %s\n", strings.Join(append(append([]string{}, c.Entrypoint...), c.Command...), " "))
		user := c.User
		if user == "" {
			user = "(image default)"
		}
		fmt.Fprintf(w, "    user         %s\n", user)
		fmt.Fprintf(w, "    network      %s\n", c.Network)
		caps := "image default"
		if len(c.CapDrop) > 0 {
			caps = "drop " + strings.Join(c.CapDrop, ",")
		}
		fmt.Fprintf(w, "    capabilities %s; no-new-privileges %v; read-only root %v\n", caps, c.NoNewPrivileges, c.ReadOnlyRoot)
		for _, m := range c.Mounts {
			mode := "rw"
			if m.ReadOnly {
				mode = "ro"
			}
			fmt.Fprintf(w, "    mount        %s -> %s (%s)\n", m.Volume, m.Dest, mode)
		}
		for _, m := range c.ImageMounts {
			fmt.Fprintf(w, "    mount        image %s -> %s (ro)\n", m.Image, m.Dest)
		}
		for _, t := range c.Tmpfs {
			fmt.Fprintf(w, "    tmpfs        %s size %s\n", t.Dest, t.Size)
		}
		if c.Limits != nil {
			fmt.Fprintf(w, "    limits       memory %q cpus %v pids %d\n", c.Limits.Memory, c.Limits.CPUs, c.Limits.Pids)
		}
		fmt.Fprintf(w, "    env          %s\n", strings.Join(slices.Sorted(maps.Keys(c.Env)), " "))
		if len(c.SecretEnv) > 0 {
			fmt.Fprintf(w, "    secret env   %s\n", strings.Join(slices.Sorted(maps.Keys(c.SecretEnv)), " "))
		}
	}
	for _, warn := range p.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
}

func labelString(l map[string]string) string {
	parts := make([]string, 0, len(l))
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}
