package pod

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/devcontainer"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

// The repository's devcontainer.json shapes the trusted workspace the way
// the devcontainer CLI would. Its privilege settings (capAdd, privileged,
// securityOpt, runArgs, mounts) reach the workspace only; the agent gets
// nothing of it but what customizations.devaipod asks for on the agent's
// side (its kind and command, host variables by name, allowed hosts), each
// of which up reports.

// DevcontainerOptions say how to load a checkout's devcontainer.json.
type DevcontainerOptions struct {
	// Explicit is --devcontainer: a path in the repository ("" to search).
	Explicit string
	// Name is the pod's short name (for ${devcontainerId}).
	Name string
	// LocalFolder is ${localWorkspaceFolder}: the user's checkout, or the
	// clone of a URL. Project is the repository's name (the folder under
	// /workspaces unless workspaceFolder says otherwise).
	LocalFolder string
	Project     string
	HostEnv     map[string]string
	// Forbidden are host paths no bind mount may be or contain (see
	// ForbiddenMounts).
	Forbidden []string
	// Untrusted: the repository is not trusted, so ${localEnv:...} of a
	// host variable is empty (Config.WithheldEnv names them), and its bind
	// mounts, which the plan leaves out, are not resolved.
	Untrusted bool
}

// Devcontainer is a loaded devcontainer.json with its runArgs parsed and
// its bind mounts checked.
type Devcontainer struct {
	Config  *devcontainer.Config
	RunArgs devcontainer.RunArgs
	Binds   []plan.HostMount
}

// LoadDevcontainer finds, parses, substitutes and checks the
// devcontainer.json of a checkout made by Source.Checkout (whose files are
// not on disk: the devcontainer's folder is checked out first). It returns
// nil when the repository has none.
func LoadDevcontainer(ctx context.Context, tree string, o DevcontainerOptions) (*Devcontainer, error) {
	paths := []string{".devcontainer", ".devcontainer.json"}
	if o.Explicit != "" {
		paths = append(paths, path.Clean(filepath.ToSlash(o.Explicit)))
	}
	if err := source.CheckoutPaths(ctx, tree, paths...); err != nil {
		return nil, err
	}
	file, err := devcontainer.Find(tree, o.Explicit)
	if err != nil || file == "" {
		return nil, err
	}
	dc, err := devcontainer.Load(file)
	if err != nil {
		return nil, err
	}
	if dc.Build != nil {
		// A build's context may be any folder of the repository.
		if err := source.CheckoutPaths(ctx, tree); err != nil {
			return nil, err
		}
	}
	project := cmp.Or(plan.DevcontainerProject(dc), o.Project, filepath.Base(o.LocalFolder))
	err = dc.Substitute(devcontainer.Vars{
		LocalEnv:                 o.HostEnv,
		LocalWorkspaceFolder:     o.LocalFolder,
		ContainerWorkspaceFolder: path.Join(plan.WorkspacesDir, project),
		DevcontainerID:           devcontainer.DevcontainerID(map[string]string{plan.LabelPod: o.Name}),
		WithholdLocalEnv:         o.Untrusted,
	})
	if err != nil {
		return nil, err
	}
	if err := dc.CheckBuildPaths(tree); err != nil {
		return nil, err
	}
	if dc.Image != "" {
		if err := config.ValidateImage(dc.Image); err != nil {
			return nil, &devcontainer.Error{File: dc.File, Key: "image", Msg: err.Error()}
		}
	}
	ra, err := devcontainer.ParseRunArgs(dc.RunArgs)
	if err != nil {
		return nil, fmt.Errorf("%s: runArgs: %w", dc.File, err)
	}
	// Bind mounts are host paths chosen by the repository: the same rules
	// as [[mounts]], writable unless marked read-only (as the spec says).
	var binds []config.MountConfig
	for _, m := range append(slices.Clone(dc.Mounts), ra.Mounts...) {
		if m.Type == devcontainer.MountBind {
			binds = append(binds, config.MountConfig{Source: m.Source, Target: m.Target, RW: !m.ReadOnly, Containers: []string{plan.RoleWorkspace}})
		}
	}
	if o.Untrusted {
		// Withheld by the plan, which counts them: no host path is looked at.
		var named []plan.HostMount
		for _, b := range binds {
			named = append(named, plan.HostMount{Source: b.Source, Target: b.Target, RW: b.RW, Containers: b.Containers})
		}
		return &Devcontainer{Config: dc, RunArgs: ra, Binds: named}, nil
	}
	resolved, err := ResolveMounts(binds, o.Forbidden)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dc.File, err)
	}
	return &Devcontainer{Config: dc, RunArgs: ra, Binds: resolved}, nil
}

// BuildTag names the image built for a devcontainer's build: by project and
// by what the build reads from the devcontainer (Dockerfile, args, target),
// so that ups of the same project share it and a changed Dockerfile gets a
// new one. Layers cached by podman make a rebuild of an unchanged context
// cheap.
func BuildTag(project string, b *devcontainer.Build) (string, error) {
	dockerfile, err := os.ReadFile(b.Dockerfile)
	if err != nil {
		return "", fmt.Errorf("read the devcontainer's Dockerfile: %w", err)
	}
	h := sha256.New()
	h.Write(dockerfile)
	for _, k := range slices.Sorted(maps.Keys(b.Args)) {
		fmt.Fprintf(h, "\x00arg %s=%s", k, b.Args[k])
	}
	fmt.Fprintf(h, "\x00target %s", b.Target)
	return fmt.Sprintf("localhost/devaipod-build-%s:%x", plan.VolumeSuffix(project, 0), h.Sum(nil)[:6]), nil
}

// HostCommandError refuses a devcontainer's initializeCommand, which runs
// on the host, not in a container, unless the user allowed it.
type HostCommandError struct {
	File    string // the devcontainer.json, relative to the repository
	Command string
	// Untrusted: the repository is not trusted, and its initializeCommand
	// does not run on this host even when allowed.
	Untrusted bool
}

func (e *HostCommandError) Error() string {
	msg := fmt.Sprintf("%s has an initializeCommand, which runs on this host, not in a container: %s", e.File, e.Command)
	if e.Untrusted {
		msg += " (and the repository is not trusted)"
	}
	return msg
}

// ToolMissingError says a program that a step needs is not installed.
type ToolMissingError struct {
	Tool string // its command name
	Why  string // what needs it
}

func (e *ToolMissingError) Error() string {
	return fmt.Sprintf("%s with %s, and it is not installed", e.Why, e.Tool)
}

// prepareDevcontainer loads the checkout's devcontainer.json into in, runs
// its initializeCommand on the host when the request allows it, and builds
// its image (eng is nil for a dry run, which builds nothing).
func (c *creation) prepareDevcontainer(ctx context.Context, eng Engine, in *plan.PlanInput, tree string, forbidden []string) (err error) {
	req, src := c.req, in.Source
	defer func() { err = inRepository(err, tree, src) }()
	local := tree
	if src.Local {
		local = src.Dir
	}
	explicit := req.Devcontainer
	if filepath.IsAbs(explicit) && src.Local {
		// A path in the user's checkout names the same path in the clone.
		rel, err := filepath.Rel(src.Dir, explicit)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return &InputError{Field: "devcontainer", Err: fmt.Errorf("%s is not inside the repository %s", explicit, src.Dir)}
		}
		explicit = rel
	}
	loaded, err := LoadDevcontainer(ctx, tree, DevcontainerOptions{Explicit: explicit, Name: in.Name,
		LocalFolder: local, Project: src.Project, HostEnv: in.HostEnv, Forbidden: forbidden, Untrusted: in.Untrusted})
	if err != nil || loaded == nil {
		return err
	}
	dc := loaded.Config
	rel, _ := filepath.Rel(tree, dc.File)
	c.progress("using " + rel)
	in.Devcontainer, in.RunArgs, in.DevcontainerBinds = dc, loaded.RunArgs, loaded.Binds

	if ic := dc.InitializeCommand; ic != nil && len(ic.Steps) > 0 {
		if !req.AllowHostCommands || in.Untrusted {
			return &HostCommandError{File: rel, Command: ic.Steps[0].String(), Untrusted: in.Untrusted}
		}
		where := "the clone"
		if src.Local {
			where = src.Dir
		}
		for _, step := range ic.Steps {
			c.step(StepInitialize, "run the devcontainer's initializeCommand on this host, in %s: %s", where, step)
		}
		if !req.DryRun {
			if !src.Local { // it runs in the clone, which has the whole tree then
				if err := source.CheckoutAll(ctx, tree); err != nil {
					return err
				}
			}
			// The object form's entries run at once, as the spec says
			// (and runStages does in the container).
			errs := make([]error, len(ic.Steps))
			var wg sync.WaitGroup
			out := &lockedWriter{mu: &sync.Mutex{}, w: c.out}
			for i, step := range ic.Steps {
				c.progress("running initializeCommand on this host: " + step.String())
				run := exec.CommandContext(ctx, step.Args[0], step.Args[1:]...)
				run.Dir, run.Stdout, run.Stderr = local, out, out
				run.WaitDelay = hostOutputDelay
				do := func() {
					if err := run.Run(); err != nil && !errors.Is(err, exec.ErrWaitDelay) {
						errs[i] = fmt.Errorf("initializeCommand %s: %w", step, err)
					}
				}
				if ic.Parallel {
					wg.Go(do)
				} else if do(); errs[i] != nil {
					return errs[i]
				}
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return err
			}
		}
	}

	if in.Untrusted {
		// The images the repository names are pulled without the
		// person's registry logins.
		if dc.Image != "" && req.Image == "" {
			c.images.anonymous[dc.Image] = true
		}
		if a := dc.Devaipod.Agent; a != nil && a.Image != "" {
			c.images.anonymous[a.Image] = true
		}
	}
	project := cmp.Or(src.Project, "project")
	if len(dc.Features) > 0 {
		return c.buildWithFeatures(ctx, eng, in, tree, rel, project)
	}
	if dc.Build == nil {
		return nil
	}
	tag, err := BuildTag(project, dc.Build)
	if err != nil {
		return err
	}
	in.DevcontainerImage = tag
	if req.Image != "" {
		return nil // --image replaces the devcontainer's
	}
	if err := c.anonymousBases(ctx, eng, in); err != nil {
		return err
	}
	dockerfile, _ := filepath.Rel(tree, dc.Build.Dockerfile)
	c.step(StepBuild, "build the workspace's image %s from the devcontainer's %s with podman", tag, dockerfile)
	c.built[tag] = true
	if eng == nil {
		return nil
	}
	c.progress("building the devcontainer's image " + tag + "...")
	spec := BuildSpec{Dockerfile: dc.Build.Dockerfile, Context: dc.Build.Context, Args: dc.Build.Args, Target: dc.Build.Target, Tag: tag,
		NoPull: in.Untrusted}
	_, err = eng.BuildImage(ctx, spec, c.out)
	return err
}

// devcontainerCLI is the devcontainer CLI: $DEVAIPOD_DEVCONTAINER_CLI, else
// devcontainer on PATH.
func devcontainerCLI(hostEnv map[string]string) (string, error) {
	if c := hostEnv["DEVAIPOD_DEVCONTAINER_CLI"]; c != "" {
		return exec.LookPath(c)
	}
	return exec.LookPath("devcontainer")
}

// buildWithFeatures has the devcontainer CLI build the image with the
// devcontainer's features (it runs podman's CLI for the build), as the
// devcontainer spec's reference implementation does.
func (c *creation) buildWithFeatures(ctx context.Context, eng Engine, in *plan.PlanInput, tree, rel, project string) error {
	cli, err := devcontainerCLI(in.HostEnv)
	if err != nil {
		if !c.req.DryRun {
			return &ToolMissingError{Tool: "the devcontainer CLI", Why: rel + " uses features, which devaipod builds"}
		}
		// A dry run builds nothing: it plans the build it would run.
		cli = "devcontainer"
		c.warn(rel + " uses features, which up builds with the devcontainer CLI, and it is not installed: up (not this dry run) needs it")
	}
	data, err := os.ReadFile(in.Devcontainer.File)
	if err != nil {
		return err
	}
	// An untrusted repository's build has a tag of its own: it never
	// replaces, nor is taken for, what a trusted build of the same file made.
	hashed := data
	if in.Untrusted {
		hashed = append(slices.Clone(data), "\x00untrusted"...)
	}
	tag := fmt.Sprintf("localhost/devaipod-build-%s:features-%x", strings.ToLower(project), sha256.Sum256(hashed))
	tag = tag[:strings.LastIndex(tag, ":")+len(":features-")+12]
	in.DevcontainerImage = tag
	if c.req.Image != "" {
		return nil // --image replaces the devcontainer's
	}
	if in.Untrusted && slices.Contains(in.Devcontainer.Unsupported, "build.options") {
		// The CLI passes them to podman build as they are.
		return fmt.Errorf("%s: the repository is not trusted, and its features are built by the devcontainer CLI, which would pass its build.options to podman build: trust the repository, or build the image yourself and pass --image", rel)
	}
	if err := c.anonymousBases(ctx, eng, in); err != nil {
		return err
	}
	c.step(StepFeatures, "build the workspace's image %s with the devcontainer's features (%s): the devcontainer CLI (%s build --workspace-folder CLONE --config %s --image-name %s --docker-path podman) builds it with podman's CLI",
		tag, strings.Join(slices.Sorted(maps.Keys(in.Devcontainer.Features)), ", "), cli, rel, tag)
	c.built[tag] = true
	if eng == nil {
		return nil
	}
	if err := source.CheckoutAll(ctx, tree); err != nil {
		return err
	}
	c.progress(fmt.Sprintf("building the devcontainer's image %s with its features (%s)...", tag, cli))
	file := in.Devcontainer.File
	var env []string
	if in.Untrusted {
		// The CLI reads the file as written and substitutes
		// ${localEnv:...} from its own environment, and reads registry
		// logins: it gets a copy without host variables, beside the file
		// (relative paths stay), and an environment of its own.
		if file, err = untrustedCopy(file, data); err != nil {
			return err
		}
		defer os.Remove(file)
		var remove func()
		if env, remove, err = untrustedBuildEnv(in.HostEnv); err != nil {
			return err
		}
		defer remove()
	}
	build := exec.CommandContext(ctx, cli, "build", "--workspace-folder", tree, "--config", file,
		"--image-name", tag, "--docker-path", "podman")
	build.Stdout, build.Stderr, build.Env = c.out, c.out, env
	build.WaitDelay = hostOutputDelay
	if err := build.Run(); err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		return fmt.Errorf("devcontainer build: %w", err)
	}
	return nil
}

// inRepository names the files of err as the user knows them: the clone in
// tree is a temporary directory, which means nothing to the user. For a
// local checkout the path is the checkout's (with its committed content);
// for a URL or a pull request, a path in the repository, which the error
// names.
func inRepository(err error, tree string, src *source.Source) error {
	if err == nil || tree == "" || !strings.Contains(err.Error(), tree) {
		return err
	}
	return &repositoryError{err: err, tree: tree, src: src}
}

// repositoryError is an error about a file of the repository, with the
// clone's path in it replaced (see inRepository). It unwraps to the error.
type repositoryError struct {
	err  error
	tree string
	src  *source.Source
}

func (e *repositoryError) Error() string {
	msg := e.err.Error()
	if e.src.Local {
		return strings.ReplaceAll(msg, e.tree, e.src.Dir)
	}
	msg = strings.ReplaceAll(msg, e.tree+string(filepath.Separator), "")
	msg = strings.ReplaceAll(msg, e.tree, ".")
	return "in " + e.src.Display + ": " + msg
}

func (e *repositoryError) Unwrap() error { return e.err }

// hostOutputDelay is how long a host command's output is still read once
// it has exited: c.out is no file, so the command writes to a pipe, and a
// process it left in the background (initializeCommand "x &") would
// otherwise hold up until it ends (what it writes later is lost).
const hostOutputDelay = 2 * time.Second

// buildEnvKept are the variables of devaipod's environment that an
// untrusted repository's feature build keeps: where programs and podman
// are, and nothing of the person's.
var buildEnvKept = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TERM", "TMPDIR",
	"XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "CONTAINER_HOST", "CONTAINER_CONNECTION",
	"CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF", "CONTAINERS_REGISTRIES_CONF"}

// untrustedBuildEnv is the environment of an untrusted repository's
// feature build: buildEnvKept, and registry logins pointed at an empty
// folder and file (the devcontainer CLI reads DOCKER_CONFIG's for the
// features it fetches, podman REGISTRY_AUTH_FILE first). remove removes
// them.
func untrustedBuildEnv(host map[string]string) (env []string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "devaipod-noauth-")
	if err != nil {
		return nil, nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	authFile := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(authFile, []byte("{}\n"), 0o600); err != nil {
		remove()
		return nil, nil, err
	}
	for _, k := range buildEnvKept {
		if v, ok := host[k]; ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, "DOCKER_CONFIG="+dir, "REGISTRY_AUTH_FILE="+authFile), remove, nil
}

// untrustedCopy writes, beside file, its data without host variables
// (devcontainer.WithoutHostVariables), and returns the copy's path.
func untrustedCopy(file string, data []byte) (string, error) {
	clean, err := devcontainer.WithoutHostVariables(data)
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	copyPath := filepath.Join(filepath.Dir(file), ".devaipod-untrusted-"+filepath.Base(file))
	if err := os.WriteFile(copyPath, clean, 0o600); err != nil {
		return "", err
	}
	return copyPath, nil
}

// anonymousBases makes sure, for an untrusted repository, of the images
// its build starts from (its image, its Dockerfile's bases), pulling those
// that are missing without the person's registry logins, before the build
// could pull them with the logins (eng is nil for a dry run).
func (c *creation) anonymousBases(ctx context.Context, eng Engine, in *plan.PlanInput) error {
	dc := in.Devcontainer
	if !in.Untrusted {
		return nil
	}
	bases := []string{dc.Image}
	if dc.Build != nil {
		var unknown []string
		var err error
		if bases, unknown, err = dockerfileBases(dc.Build.Dockerfile, dc.Build.Args); err != nil {
			return fmt.Errorf("read the devcontainer's Dockerfile: %w", err)
		}
		if len(unknown) > 0 {
			return fmt.Errorf("the repository is not trusted, and its Dockerfile names images devaipod cannot tell before the build (%s), which the build could then take from this host or pull with your registry logins: trust the repository, or build the image yourself and pass --image", strings.Join(unknown, ", "))
		}
	}
	for _, b := range bases {
		if b == "" {
			continue
		}
		c.images.anonymous[b] = true
		how := "pulled without your registry logins when it is not on this host (the repository is not trusted)"
		if c.req.Pull == PullNever {
			how = "it must be on this host (--pull never)"
		}
		c.step(StepImage, "make sure of the build's base image %s: %s", b, how)
		if eng != nil {
			if _, err := c.images.ensure(ctx, b); err != nil {
				return err
			}
		}
	}
	return nil
}
