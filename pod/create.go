package pod

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

// Request is what `devaipod up` asks for: a repository, how to run its
// agent, and how to report. Zero values mean the defaults.
type Request struct {
	// Source is a local git checkout, a git URL or a pull request URL.
	Source string
	// Task is the agent's first message ("" for none).
	Task string
	// Name is the pod's short name ("" derives one from the source).
	Name string
	// Image overrides the workspace and agent images; Ref picks the
	// branch or tag of a git URL; ForgeURL is the forge whose pull
	// request URLs are accepted (default [forge] url).
	Image, Ref, ForgeURL string
	// Allow adds proxy rules for this pod. A rule that opens a whole
	// public suffix ("*.com", see config.RuleWarning) is refused unless
	// Force is set.
	Allow []string
	Force bool
	// WorkspaceAccess is the agent's access to the repository: rw or ro
	// (default [agent] workspace_access).
	WorkspaceAccess string
	// Devcontainer is the devcontainer.json to use, as a path in the
	// repository ("" to search).
	Devcontainer string
	// AllowHostCommands lets the devcontainer's initializeCommand run on
	// this host.
	AllowHostCommands bool
	// NoVerify leaves the fast containment battery out of up's checks.
	NoVerify bool
	// Gator are --gator scopes.
	Gator []string
	// Grants are the approvals given for every pod of a repository
	// (devaipod approve --for repo); nil for none.
	Grants *Grants
	// Trusted are the repositories the person trusts (devaipod trust);
	// nil trusts none. Trust trusts the request's repository for this up.
	// AskTrust, when set, asks the person about a repository that is
	// neither (not for a dry run); nil leaves it untrusted. See Trust.
	Trusted  *TrustStore
	Trust    bool
	AskTrust func(TrustQuestion) (TrustAnswer, error)
	// Trusting hears what was decided about the repository, before
	// anything of it runs (what an untrusted one's pod is not given comes
	// with the plan's warnings); nil drops it.
	Trusting func(Trust)
	// Pull is the pull policy (PullMissing when empty).
	Pull string
	// ReadyTimeout bounds the wait for the agent's server.
	ReadyTimeout time.Duration
	// KeepOnFailure leaves what a failed up created, for inspection.
	KeepOnFailure bool
	// DryRun plans and creates nothing; no engine is needed.
	DryRun bool
	// Apply, when set, makes the pod from the plan in place of Up, while
	// the clone (tree) still exists: another engine's up (up --engine
	// kube). The plan is then built as for a dry run: no image is looked
	// up, pulled or built on this host.
	Apply func(ctx context.Context, pl *plan.Plan, tree string) error
	// NoPool makes a pod even when the warm pool has one for the request.
	// An up with a Name never claims one (a pool pod's name is its own).
	NoPool bool
	// PoolFill makes a pod for the pool (see FillPool) when it holds fewer
	// than PoolSize idle pods for the request, and nothing otherwise.
	PoolFill bool
	PoolSize int

	// Config is the user's configuration, read from ConfigFile (which no
	// mount may expose).
	Config     *config.Config
	ConfigFile string
	// HostEnv is the environment devaipod runs in.
	HostEnv map[string]string

	// Progress hears each step, Warn what the user should know; Output
	// the output of builds, pulls, host and lifecycle commands. Each may
	// be nil.
	Progress func(string)
	Warn     func(string)
	Output   io.Writer
}

// Result is what Create made, or the pod of that name it found.
type Result struct {
	// Plan is the new pod's (nil when Existing is set).
	Plan   *plan.Plan
	Source *source.Source
	// Existing is set when a pod of the requested name existed, made
	// from the same source: up made nothing, and started it if it was
	// stopped (see Existing.Action; a dry run only says what it would
	// do). A pod of that name from another source is an
	// *ExistingPodError.
	Existing *Existing
	// Steps are what up does (a dry run: would do), in order.
	Steps []Step
	// Claimed says the pod was taken from the warm pool, made before.
	Claimed bool
	// PoolKey is the fingerprint of the request's pod when the pool was
	// asked (see FillPool).
	PoolKey string
	// Trust is what was decided about the repository (zero for an
	// existing pod).
	Trust Trust
}

// creation is one Create call: the request and its reporting.
type creation struct {
	req      Request
	progress func(string)
	warn     func(string)
	out      io.Writer
	// steps are the steps taken so far, before the plan's (see Step).
	steps []Step
	// built are the images a step builds (not pulled or looked up).
	built map[string]bool
	// images are the images up makes sure of.
	images *imageSet
}

// Create turns a request into a pod: it resolves and clones the source,
// reads its devcontainer.json, makes sure of the images, builds the plan
// (once) and applies it with Up. It is all or nothing, as Up is. With
// req.DryRun it stops at the plan, and eng may be nil.
//
// A pod of the name asked for (req.Name) that exists already is looked at
// first, right after the source is resolved and before anything is
// cloned: made from the same source (SameSource), it is used as it is, or
// started when it is stopped, and Result.Existing says so; else Create
// fails with an *ExistingPodError and touches nothing. With req.DryRun and
// an engine, it only says what it would do.
func Create(ctx context.Context, eng Engine, req Request) (res *Result, err error) {
	c := &creation{req: req, progress: req.Progress, warn: req.Warn, out: cmp.Or[io.Writer](req.Output, io.Discard), built: map[string]bool{}}
	if c.progress == nil {
		c.progress = func(string) {}
	}
	if c.warn == nil {
		c.warn = func(string) {}
	}
	id, err := c.identify(ctx)
	if err != nil {
		return nil, err
	}
	// A pod of the name asked for may exist: use it, or refuse, before
	// anything is cloned (a dry run without podman cannot tell). A derived
	// name ends in random digits: the user asked for a new pod, and Up
	// refuses the rare clash.
	if eng != nil && req.Name != "" {
		ex, err := c.useExisting(ctx, eng, id.name, id.src)
		if err != nil {
			return nil, err
		}
		if ex != nil {
			return &Result{Source: id.src, Existing: ex}, nil
		}
	}
	trust, err := c.decideTrust(ctx, id.src)
	if err != nil {
		return nil, err
	}
	if req.Trusting != nil {
		req.Trusting(trust)
	}
	defer func() {
		if res != nil {
			res.Trust = trust
		}
	}()
	in, forbidden, err := c.input(id)
	if err != nil {
		return nil, err
	}
	in.Untrusted = !trust.Trusted
	src, cfg := in.Source, in.Config
	req = c.req // with the defaults input filled in

	// The clone (host git) and podman's image and host lookups are
	// independent: run them at once. The clone creates nothing in podman.
	c.progress("cloning " + src.Display + "...")
	c.step(StepClone, "") // described once the clone tells the commit
	cloneAt := len(c.steps) - 1
	tmp, removeTmp, err := MakeTempDir(CloneDirPrefix)
	if err != nil {
		return nil, err
	}
	defer removeTmp()
	tree := filepath.Join(tmp, "repo")
	cloneCtx, cancelClone := context.WithCancel(ctx)
	defer cancelClone()
	cloned := make(chan error, 1)
	go func() { cloned <- src.Checkout(cloneCtx, tree) }()

	images := &imageSet{eng: eng, policy: req.Pull, configs: map[string]plan.ImageConfig{},
		pulled: map[string]bool{}, anonymous: map[string]bool{}, privateRegistries: cfg.Workspace.PrivateRegistries,
		log: c.progress, warn: c.warn, out: c.out}
	c.images = images
	looked := make(chan error, 1)
	hostInfo := func() (plan.HostInfo, error) { return plan.HostInfo{}, nil }
	offline := req.DryRun || req.Apply != nil // nothing of this host's podman
	if offline {
		looked <- nil
	} else {
		// The images known before the repository's devcontainer.json
		// (usually all of them): the workspace's and the helper.
		go func() {
			looked <- images.lookUp(ctx, cmp.Or(req.Image, cfg.Workspace.Image, config.DefaultImage), config.DefaultHelperImage)
		}()
		// Podman's info is slow (0.3 to 1 s of the service's CPU) and
		// only needed for the limits warning (every pod has limits: the
		// agent's defaults, the sidecars'): ask for it alongside.
		hostInfo = sync.OnceValues(func() (plan.HostInfo, error) { return eng.Info(ctx) })
		go hostInfo()
	}
	if err := <-cloned; err != nil {
		return nil, err
	}
	in.Source = src // now with the commit of a URL's clone
	c.steps[cloneAt].What = cloneStep(src)
	in.AgentConfigInRepo = hasAgentConfig(tree)
	if in.Tree, err = source.ScanTree(ctx, tree, config.ProtectedPaths(cfg), config.MaskPatterns(cfg)); err != nil {
		return nil, fmt.Errorf("scan the repository: %w", err)
	}
	var builder Engine
	if !offline {
		builder = eng
	}
	if err := c.prepareDevcontainer(ctx, builder, &in, tree, forbidden); err != nil {
		return nil, err
	}
	if offline {
		pl, err := plan.Build(in)
		if err != nil {
			return nil, err
		}
		if req.Apply != nil && !req.DryRun {
			for _, w := range pl.Warnings {
				c.warn(w)
			}
			return &Result{Plan: pl, Source: src}, req.Apply(ctx, pl, tree)
		}
		steps := append(c.steps, imageSteps(pl, req.Pull, c.built, images.anonymous)...)
		steps = append(steps, upSteps(pl.Redacted(), src.Commit, req.ReadyTimeout)...) // printed: no value of the host's
		return &Result{Plan: pl, Source: src, Steps: steps}, nil
	}
	if in.Host, err = hostInfo(); err != nil {
		return nil, err
	}
	if err := <-looked; err != nil {
		return nil, err
	}
	in.ResolveImage = func(img string) (plan.ImageConfig, error) { return images.ensure(ctx, img) }
	var key string
	if req.PoolFill || (!req.NoPool && req.Name == "") {
		if key, err = fingerprint(in); err != nil {
			return nil, err
		}
		// A task the agent has no model for is refused before a pool
		// pod is claimed (and spent).
		if _, err := plan.Build(in); errors.As(err, new(*plan.NoModelError)) {
			return nil, err
		}
		if res, err := c.usePool(ctx, eng, in, key); res != nil || err != nil {
			return res, err
		}
	}
	if req.PoolFill {
		in.Pool = key
	}
	pl, err := plan.Build(in)
	if err != nil {
		return nil, err
	}
	for _, img := range pl.Images() {
		if _, err := images.ensure(ctx, img); err != nil {
			return nil, err
		}
	}
	for _, w := range pl.Warnings {
		c.warn(w)
	}
	opts := UpOptions{ReadyTimeout: req.ReadyTimeout, KeepOnFailure: req.KeepOnFailure,
		Progress: func(step string) { c.progress(step + "...") }, Output: c.out}
	if err := Up(ctx, eng, pl, tree, opts); err != nil {
		if ctx.Err() != nil && !req.KeepOnFailure {
			return nil, fmt.Errorf("interrupted; removed what up had created: %w", err)
		}
		return nil, err
	}
	return &Result{Plan: pl, Source: src, PoolKey: key}, nil
}

// claimReadyTimeout bounds the wait for a claimed pool pod's agent, which
// was ready when the pod was made.
const claimReadyTimeout = 10 * time.Second

// usePool claims an idle pool pod for the request whose pod's fingerprint
// is key and hands it the task; when filling the pool, it says whether the
// pool is full. A nil Result means a pod is to be made.
func (c *creation) usePool(ctx context.Context, eng Engine, in plan.PlanInput, key string) (*Result, error) {
	if c.req.PoolFill {
		objs, err := eng.Objects(ctx, "")
		if err != nil {
			return nil, err
		}
		if len(idlePods(objs, key)) >= c.req.PoolSize {
			return &Result{Source: in.Source, PoolKey: key}, nil
		}
		return nil, nil
	}
	short, err := claimIdle(ctx, eng, key, in.Task)
	if err != nil || short == "" {
		return nil, err
	}
	c.progress("took pod " + plan.PodName(short) + " from the pool; checking that its agent answers...")
	// The claim is spent whatever happens next: a pod that cannot serve
	// is deleted (on a context of its own: ctx may be cancelled by
	// Ctrl-C), and, but on failure, one is made.
	spend := func(err error) error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if _, derr := Delete(cctx, eng, short, false); derr != nil {
			return errors.Join(err, fmt.Errorf("remove the claimed pool pod %s: %w", short, derr))
		}
		return err
	}
	in.Name, in.Pool = short, key
	pl, err := plan.Build(in)
	if err != nil {
		return nil, spend(err)
	}
	unusable := func(why string) (*Result, error) {
		c.warn(fmt.Sprintf("the pool's pod %s %s: deleting it and making a pod", short, why))
		if err := spend(ctx.Err()); err != nil {
			return nil, err
		}
		return nil, nil
	}
	if in.Task != "" && pl.AgentKind != config.AgentOpencode {
		// A custom agent reads its task from its environment at start.
		return unusable("cannot take a task (a custom agent reads it at start)")
	}
	// Checked when it was made; its agent must answer now too.
	if err := waitReady(ctx, eng, pl, claimReadyTimeout); err != nil {
		return unusable(fmt.Sprintf("does not answer (%v)", err))
	}
	if err := handTask(ctx, eng, pl, func(s string) { c.progress(s + "...") }); err != nil {
		// All or nothing, as for a pod made by up: the claimed pod goes.
		return nil, spend(err)
	}
	return &Result{Plan: pl, Source: in.Source, Claimed: true, PoolKey: key}, nil
}

// identity is what names the pod: the resolved source and the pod's name.
type identity struct {
	src   *source.Source
	name  string
	forge string
	cfg   config.Config
}

// identify checks the request's pull policy and name and resolves its
// source (git on the host, and the forge's API for a pull request; no
// clone): enough to know the pod's name and what it is made from.
func (c *creation) identify(ctx context.Context) (identity, error) {
	req := &c.req
	req.Pull = cmp.Or(req.Pull, PullMissing)
	if !slices.Contains(PullPolicies, req.Pull) {
		return identity{}, &InputError{Field: "pull", Err: fmt.Errorf("%q is not a pull policy: use missing, always or never", req.Pull)}
	}
	if req.Image != "" {
		if err := config.ValidateImage(req.Image); err != nil {
			return identity{}, &InputError{Field: "image", Err: err}
		}
	}
	id := identity{name: req.Name}
	if req.Config != nil {
		id.cfg = *req.Config
	}
	if id.name != "" {
		var err error
		if id.name, err = plan.NormalizeName(id.name); err != nil {
			return identity{}, err
		}
	}
	id.forge = id.cfg.Forge.URL
	if req.ForgeURL != "" {
		id.forge = req.ForgeURL
		if err := source.ValidateForgeURL(req.ForgeURL); err != nil {
			return identity{}, &InputError{Field: "forge-url", Err: err}
		}
	}
	src, err := source.Resolve(ctx, req.Source, source.Options{Ref: req.Ref, ForgeURL: id.forge, APIURL: id.cfg.Forge.APIURL})
	if err != nil {
		return identity{}, err
	}
	for _, w := range src.Warnings {
		c.warn(w)
	}
	id.src = src
	if id.name == "" {
		id.name = plan.DeriveNameFor(src)
	}
	return id, nil
}

// input checks the rest of the request and resolves what it names (the
// mounts, the gator's scopes) into the plan's input, before anything is
// cloned or created. forbidden are the host paths no mount may expose.
func (c *creation) input(id identity) (in plan.PlanInput, forbidden []string, err error) {
	req := &c.req
	cfg, src, name, forge := id.cfg, id.src, id.name, id.forge
	if a := req.WorkspaceAccess; a != "" && a != config.AccessRW && a != config.AccessRO {
		return plan.PlanInput{}, nil, &InputError{Field: "workspace-access", Err: fmt.Errorf("%q is not an access mode: use rw or ro", a)}
	}
	for _, r := range req.Allow {
		if err := config.ValidateRule(r); err != nil {
			return plan.PlanInput{}, nil, &InputError{Field: "allow", Err: err}
		}
		switch msg, whole := config.RuleWarning(r); {
		case whole && !req.Force:
			return plan.PlanInput{}, nil, &InputError{Field: "allow", Err: fmt.Errorf("%s; name the hosts", msg), Forcible: true}
		case msg != "":
			c.warn("--allow: " + msg)
		}
	}
	for _, w := range cfg.Warnings {
		c.warn(w)
	}
	home, _ := os.UserHomeDir()
	forbidden = ForbiddenMounts(home, req.ConfigFile, req.HostEnv["XDG_RUNTIME_DIR"])
	mounts, err := ResolveMounts(cfg.Mounts, forbidden)
	if err != nil {
		return plan.PlanInput{}, nil, err
	}
	cfg.Agent.WorkspaceAccess = cmp.Or(req.WorkspaceAccess, cfg.Agent.WorkspaceAccess)
	scopes, err := gatorScopes(req.Gator, &cfg, src, forge, req.HostEnv)
	if err != nil {
		return plan.PlanInput{}, nil, err
	}
	allow := req.Allow
	if req.Grants != nil {
		granted, grantedScopes, err := req.Grants.For(src)
		if err != nil {
			return plan.PlanInput{}, nil, fmt.Errorf("read the approvals kept for the repository: %w", err)
		}
		allow = append(slices.Clone(allow), granted...)
		// A gator grant widens a gator the pod has; it makes none.
		if len(scopes) > 0 {
			scopes = append(scopes, grantedScopes...)
		}
		if len(granted)+len(grantedScopes) > 0 {
			c.warn(fmt.Sprintf("approved earlier for this repository (devaipod approvals --granted): %s", strings.Join(append(granted, grantedScopes...), ", ")))
		}
	}
	password, err := randomPassword()
	if err != nil {
		return plan.PlanInput{}, nil, err
	}
	salt, err := randomPassword()
	if err != nil {
		return plan.PlanInput{}, nil, err
	}
	upstreamCA, err := readUpstreamCA(cfg.Network.UpstreamCA)
	if err != nil {
		return plan.PlanInput{}, nil, fmt.Errorf("%s: %w", req.ConfigFile, err)
	}
	in = plan.PlanInput{Name: name, Config: &cfg, Source: src, Image: req.Image, HostEnv: req.HostEnv, Allow: allow,
		Mounts: mounts, AgentPassword: password, Task: req.Task, NoVerify: req.NoVerify,
		// Placeholders take [A-Za-z0-9]: the password's alphabet, less two.
		PlaceholderSalt: strings.NewReplacer("-", "", "_", "").Replace(salt), UpstreamCA: upstreamCA,
		ForbiddenPaths: absolutePaths(forbidden),
		GatorScopes:    scopes, GatorAPIURL: forgeAPIURL(cfg.Forge.APIURL, forge), GatorGitURL: forge}
	if owner, repo, ok := forgeRepo(src, forge); ok {
		in.GatorRepo = owner + "/" + repo
	}
	if len(src.LeftOut) > 0 {
		c.warn(fmt.Sprintf("%d uncommitted path(s) in %s are not copied into the workspace: %s",
			len(src.LeftOut), src.Dir, summarisePaths(src.LeftOut, 5)))
	}

	return in, forbidden, nil
}

// absolutePaths are the absolute ones of paths.
func absolutePaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		if filepath.IsAbs(p) {
			out = append(out, filepath.Clean(p))
		}
	}
	return out
}

// readUpstreamCA reads [network] upstream_ca's PEM files into one.
func readUpstreamCA(files []string) (string, error) {
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("[network] upstream_ca: %w", err)
		}
		if block, _ := pem.Decode(data); block == nil || block.Type != "CERTIFICATE" {
			return "", fmt.Errorf("[network] upstream_ca: %s holds no PEM certificate", f)
		}
		b.Write(data)
		if !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
	}
	return b.String(), nil
}

// randomPassword draws the agent's password: 128 bits, URL-safe.
func randomPassword() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("draw the agent's password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func summarisePaths(paths []string, max int) string {
	if len(paths) <= max {
		return strings.Join(paths, ", ")
	}
	return strings.Join(paths[:max], ", ") + fmt.Sprintf(" and %d more", len(paths)-max)
}

// AccessError is a local checkout the user devaipod runs as cannot read.
type AccessError = source.AccessError

// hasAgentConfig tells whether the repository in tree has a config of
// opencode's (which may name its model): opencode.json(c) or .opencode/.
func hasAgentConfig(tree string) bool {
	for _, name := range []string{"opencode.json", "opencode.jsonc", ".opencode"} {
		if _, err := os.Lstat(filepath.Join(tree, name)); err == nil {
			return true
		}
	}
	return false
}

// InputError is a value of the request that the library refuses. Field
// names it as the caller's interface does (devaipod's CLI: the flag
// --FIELD); the library speaks of no flag.
type InputError struct {
	Field string
	Err   error
	// Forcible: the request may insist (Request.Force).
	Forcible bool
}

func (e *InputError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }
