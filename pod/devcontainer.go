package pod

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/devaipod/devaipod/pod/devcontainer"
)

// The repository's devcontainer.json shapes the trusted workspace the way
// the devcontainer CLI would. Its privilege settings (capAdd, privileged,
// securityOpt, runArgs, mounts) reach the workspace only; the agent gets
// nothing of it but what customizations.devaipod asks for on the agent's
// side (its kind and command, host variables by name, allowed hosts), each
// of which up reports.

// mergeAgent fills what the user's [agent] leaves unset from the
// project's customizations.devaipod.agent: the user's config wins.
func mergeAgent(user AgentConfig, project *devcontainer.Agent) AgentConfig {
	if project == nil {
		return user
	}
	if user.Kind == "" && len(user.Command) == 0 {
		user.Kind = project.Kind
		user.Command = project.Command
	}
	if user.Image == "" {
		user.Image = project.Image
	}
	if user.Port == 0 {
		user.Port = project.Port
	}
	if user.Health == "" {
		user.Health = project.Health
	}
	return user
}

// devcontainerProject is the project folder that workspaceFolder names,
// when it is a folder of /workspaces (where the volume is); "" otherwise.
func devcontainerProject(dc *devcontainer.Config) string {
	if dc == nil || dc.WorkspaceFolder == "" {
		return ""
	}
	dir, name := path.Split(path.Clean(dc.WorkspaceFolder))
	if dir != WorkspacesDir+"/" || !projectName.MatchString(name) {
		return ""
	}
	return name
}

var projectName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// applyDevcontainer adds the devcontainer's settings to the workspace and
// the pod.
func (b *builder) applyDevcontainer(p *Plan, ws *ContainerSpec) error {
	dc, ra := b.in.Devcontainer, b.in.RunArgs
	if dc == nil {
		return nil
	}
	if dc.WorkspaceFolder != "" && devcontainerProject(dc) == "" {
		b.warnings = append(b.warnings, fmt.Sprintf("devcontainer.json: workspaceFolder %q is not supported (the repository is at %s): use /workspaces/NAME", dc.WorkspaceFolder, b.workdir))
	}
	for _, m := range [][]string{dc.Unsupported, ra.Unsupported} {
		if len(m) > 0 {
			b.warnings = append(b.warnings, "devcontainer.json: not supported, ignored: "+strings.Join(m, ", "))
		}
	}
	b.warnings = append(append(b.warnings, dc.Warnings...), ra.Warnings...)
	for _, ignored := range []struct {
		set  bool
		what string
	}{{ra.Init || dc.Init, "init (devaipod's helper is the init)"}, {ra.Hostname != "", "--hostname (the pod names the host)"},
		{ra.Userns != "", "--userns (the pod sets the user namespace)"}} {
		if ignored.set {
			b.warnings = append(b.warnings, "devcontainer.json: ignored: "+ignored.what)
		}
	}

	for k, v := range dc.ContainerEnv {
		ws.Env[k] = v
	}
	for k, v := range ra.Env {
		ws.Env[k] = v
	}
	for _, k := range ra.EnvFromHost {
		if v, ok := b.in.HostEnv[k]; ok {
			ws.Env[k] = v
		}
	}
	ws.User = firstNonEmpty(dc.ContainerUser, ra.User)
	ws.CapAdd = append(slices.Clone(dc.CapAdd), ra.CapAdd...)
	ws.Privileged = dc.Privileged || ra.Privileged
	ws.SecurityOpt = append(slices.Clone(dc.SecurityOpt), ra.SecurityOpt...)
	ws.Devices = ra.Devices
	ws.ShmSize = ra.ShmSize
	ws.Ulimits = ra.Ulimits
	maps.Copy(ws.Labels, ra.Labels)
	if ra.Memory != "" || ra.CPUs != "" || ra.PidsLimit != nil {
		// runArgs' limits, over [workspace.limits]
		l := &Limits{}
		if ws.Limits != nil {
			*l = *ws.Limits
		}
		l.Memory = firstNonEmpty(ra.Memory, l.Memory)
		if ra.CPUs != "" {
			cpus, err := strconv.ParseFloat(ra.CPUs, 64)
			if err != nil {
				return fmt.Errorf("devcontainer.json: runArgs --cpus %q: %w", ra.CPUs, err)
			}
			l.CPUs = cpus
		}
		if ra.PidsLimit != nil {
			l.Pids = *ra.PidsLimit
		}
		ws.Limits = l
	}
	p.Pod.ExtraHosts = append(p.Pod.ExtraHosts, ra.AddHosts...)

	// Mounts: binds arrive checked (ResolveMounts), in order; named
	// volumes become volumes of the pod, so that delete removes them.
	for _, m := range b.in.DevcontainerBinds {
		ws.Binds = append(ws.Binds, Bind{HostPath: m.Source, Dest: m.Target, ReadOnly: !m.RW})
	}
	for i, m := range append(slices.Clone(dc.Mounts), ra.Mounts...) {
		switch m.Type {
		case devcontainer.MountVolume:
			name := ObjectName(b.short, "dc-"+volumeSuffix(m.Source, i))
			if !slices.ContainsFunc(p.Volumes, func(v VolumeSpec) bool { return v.Name == name }) {
				p.Volumes = append(p.Volumes, VolumeSpec{Name: name, Labels: b.labels(), UID: 0, GID: 0})
			}
			ws.Mounts = append(ws.Mounts, Mount{Volume: name, Dest: m.Target, ReadOnly: m.ReadOnly})
		case devcontainer.MountTmpfs:
			ws.Tmpfs = append(ws.Tmpfs, Tmpfs{Dest: m.Target, Size: tmpfsSize(m.Options), Options: "rw,nosuid,nodev"})
		}
	}
	for _, t := range ra.Tmpfs {
		dest, opts, _ := strings.Cut(t, ":")
		ws.Tmpfs = append(ws.Tmpfs, Tmpfs{Dest: dest, Size: tmpfsSize(strings.Split(opts, ",")), Options: "rw,nosuid,nodev"})
	}

	for _, port := range dc.ForwardPorts {
		if !port.Local() {
			continue // another service's port (compose); the parser warned
		}
		if port.Port == b.port {
			return fmt.Errorf("devcontainer.json: forwardPorts %d is the agent's port; the agent is reached with `devaipod attach`", port.Port)
		}
		if !slices.Contains(p.Pod.Ports, port.Port) {
			p.Pod.Ports = append(p.Pod.Ports, port.Port)
		}
	}

	l := &Lifecycle{User: firstNonEmpty(dc.RemoteUser, dc.ContainerUser, ra.User, b.in.ImageUser), Workdir: b.workdir,
		OnCreate: dc.OnCreateCommand, UpdateContent: dc.UpdateContentCommand, PostCreate: dc.PostCreateCommand,
		PostStart: dc.PostStartCommand, PostAttach: dc.PostAttachCommand}
	for _, k := range slices.Sorted(maps.Keys(dc.RemoteEnv)) {
		l.Env = append(l.Env, k+"="+dc.RemoteEnv[k])
	}
	b.execAs = ExecAs{User: l.User, Env: l.Env}
	if !l.Empty() {
		p.Lifecycle = l
		label, err := lifecycleLabel(l)
		if err != nil {
			return err
		}
		if label != "" {
			p.Pod.Labels[LabelLifecycle] = label
		}
	}
	return nil
}

// applyProjectAgentSide adds what customizations.devaipod asks for the
// agent: host variables by name and allowed hosts. Both are the
// repository's choice, so up names them.
func (b *builder) applyProjectAgentSide(p *Plan, agent *ContainerSpec, trusted map[string]string) {
	dc := b.in.Devcontainer
	if dc == nil {
		return
	}
	var passed []string
	for _, k := range dc.Devaipod.EnvAllowlist {
		if _, isTrusted := trusted[k]; isTrusted {
			continue
		}
		if v, ok := b.in.HostEnv[k]; ok {
			agent.Env[k] = v
			passed = append(passed, k)
		}
	}
	if len(passed) > 0 {
		b.warnings = append(b.warnings, "the repository's devcontainer.json passes these host variables to the agent: "+strings.Join(passed, ", "))
	}
	if d := dc.Devaipod.AllowedDomains; len(d) > 0 && b.mode == NetworkAllowlist {
		b.warnings = append(b.warnings, "the repository's devcontainer.json allows the agent to reach: "+strings.Join(d, ", "))
	}
}

// volumeSuffix makes a devcontainer volume's name part of a pod volume
// name.
func volumeSuffix(source string, i int) string {
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '-'
	}, source)
	if clean == "" {
		return "anon-" + strconv.Itoa(i)
	}
	return clean
}

// tmpfsSize reads tmpfs-size= or size= from mount options; 64m otherwise.
func tmpfsSize(opts []string) string {
	for _, o := range opts {
		for _, k := range []string{"tmpfs-size=", "size="} {
			if v, ok := strings.CutPrefix(o, k); ok && sizeExpr.MatchString(v) {
				return v
			}
		}
	}
	return "64m"
}

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
}

// Devcontainer is a loaded devcontainer.json with its runArgs parsed and
// its bind mounts checked.
type Devcontainer struct {
	Config  *devcontainer.Config
	RunArgs devcontainer.RunArgs
	Binds   []HostMount
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
	if err := checkoutPaths(ctx, tree, paths...); err != nil {
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
		if err := checkoutPaths(ctx, tree); err != nil {
			return nil, err
		}
	}
	project := firstNonEmpty(devcontainerProject(dc), o.Project, filepath.Base(o.LocalFolder))
	err = dc.Substitute(devcontainer.Vars{
		LocalEnv:                 o.HostEnv,
		LocalWorkspaceFolder:     o.LocalFolder,
		ContainerWorkspaceFolder: path.Join(WorkspacesDir, project),
		DevcontainerID:           devcontainer.DevcontainerID(map[string]string{LabelPod: o.Name}),
	})
	if err != nil {
		return nil, err
	}
	if err := dc.CheckBuildPaths(tree); err != nil {
		return nil, err
	}
	ra, err := devcontainer.ParseRunArgs(dc.RunArgs)
	if err != nil {
		return nil, fmt.Errorf("%s: runArgs: %w", dc.File, err)
	}
	// Bind mounts are host paths chosen by the repository: the same rules
	// as [[mounts]], writable unless marked read-only (as the spec says).
	var binds []MountConfig
	for _, m := range append(slices.Clone(dc.Mounts), ra.Mounts...) {
		if m.Type == devcontainer.MountBind {
			binds = append(binds, MountConfig{Source: m.Source, Target: m.Target, RW: !m.ReadOnly, Containers: []string{RoleWorkspace}})
		}
	}
	resolved, err := ResolveMounts(binds, o.Forbidden)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dc.File, err)
	}
	return &Devcontainer{Config: dc, RunArgs: ra, Binds: resolved}, nil
}

// CheckoutAll writes every file of HEAD into a checkout's folder (made by
// Source.Checkout, which leaves them out), for tools that read them there.
func CheckoutAll(ctx context.Context, tree string) error { return checkoutPaths(ctx, tree) }

// checkoutPaths writes the named paths of HEAD (every path when none is
// named) into the checkout's folder. Paths HEAD does not have are skipped.
func checkoutPaths(ctx context.Context, tree string, paths ...string) error {
	args := []string{"ls-files", "-z", "--"}
	files, err := git(ctx, tree, append(args, paths...)...)
	if err != nil || files == "" {
		return err
	}
	cmd := gitCommand(ctx, tree, "checkout-index", "-f", "-z", "--stdin")
	cmd.Stdin = strings.NewReader(files)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("check out %s: %v: %s", strings.Join(paths, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
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
	return fmt.Sprintf("localhost/devaipod-build-%s:%x", volumeSuffix(project, 0), h.Sum(nil)[:6]), nil
}
