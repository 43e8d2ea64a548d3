package plan

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/devaipod/devaipod/internal/size"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/devcontainer"
)

// mergeAgent fills what the user's [agent] leaves unset from the
// project's customizations.devaipod.agent: the user's config wins.
func mergeAgent(user config.AgentConfig, project *devcontainer.Agent) config.AgentConfig {
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

// DevcontainerProject is the project folder that workspaceFolder names,
// when it is a folder of /workspaces (where the volume is); "" otherwise.
func DevcontainerProject(dc *devcontainer.Config) string {
	if dc == nil || dc.WorkspaceFolder == "" {
		return ""
	}
	dir, name := path.Split(path.Clean(dc.WorkspaceFolder))
	if dir != WorkspacesDir+"/" || !projectName.MatchString(name) || strings.HasPrefix(name, reservedPrefix) {
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
	if dc.WorkspaceFolder != "" && DevcontainerProject(dc) == "" {
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
	// remoteEnv and the lifecycle commands may name the workspace's
	// variables as ${containerEnv:VAR}: the image's, then the plan's.
	// They are read below, so this is their last moment.
	if err := dc.SubstituteContainerEnv(containerEnv(b.image.Env, ws.Env)); err != nil {
		return err
	}
	ws.User = cmp.Or(dc.ContainerUser, ra.User)
	ws.CapAdd = append(slices.Clone(dc.CapAdd), ra.CapAdd...)
	ws.Privileged = dc.Privileged || ra.Privileged
	ws.SecurityOpt = append(slices.Clone(dc.SecurityOpt), ra.SecurityOpt...)
	ws.Devices = ra.Devices
	// The workspace holds your trusted values: say what the repository
	// gives it beyond a container's defaults.
	var grants []string
	if ws.Privileged {
		grants = append(grants, "privileged")
	}
	for _, c := range ws.CapAdd {
		grants = append(grants, "cap-add "+c)
	}
	for _, d := range ws.Devices {
		grants = append(grants, "device "+d)
	}
	for _, o := range ws.SecurityOpt {
		grants = append(grants, "security-opt "+o)
	}
	// The image's features' entrypoints run when the workspace starts,
	// under devaipod's init, then it waits as before.
	if len(dc.Entrypoints) > 0 {
		// From /, not the repository's folder, which the agent writes.
		ws.Entrypoint = b.workspaceInit("/bin/sh", "-c", "cd /\n"+strings.Join(dc.Entrypoints, "\n")+"\nwhile sleep 86400; do :; done")
		for _, e := range dc.Entrypoints {
			grants = append(grants, "entrypoint "+e)
		}
	}
	if len(grants) > 0 {
		holds := "which holds your trusted values"
		if b.in.Untrusted {
			holds = "which holds none of your trusted values"
		}
		b.warnings = append(b.warnings, "the repository's devcontainer.json and its image's metadata give the workspace ("+holds+"; never the agent): "+strings.Join(grants, ", "))
	}
	ws.ShmSize = ra.ShmSize
	ws.Ulimits = ra.Ulimits
	maps.Copy(ws.Labels, ra.Labels)
	if ra.Memory != "" || ra.CPUs != "" || ra.PidsLimit != nil {
		// runArgs' limits, over [workspace.limits]
		l := &config.Limits{}
		if ws.Limits != nil {
			*l = *ws.Limits
		}
		l.Memory = cmp.Or(ra.Memory, l.Memory)
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
	// A bind the file did not name came from the image's metadata: an
	// image never gets a host path (the file's were checked as [[mounts]]).
	for _, m := range dc.Mounts {
		if m.Type == devcontainer.MountBind && !b.in.Untrusted &&
			!slices.ContainsFunc(b.in.DevcontainerBinds, func(h HostMount) bool { return h.Target == m.Target }) {
			b.warnings = append(b.warnings, fmt.Sprintf("the image's devcontainer.metadata asks to bind the host's %s at %s: not bound (an image never gets a host path; name it in devcontainer.json or [[mounts]])", m.Source, m.Target))
		}
	}
	for i, m := range append(slices.Clone(dc.Mounts), ra.Mounts...) {
		switch m.Type {
		case devcontainer.MountVolume:
			name := ObjectName(b.short, "dc-"+VolumeSuffix(m.Source, i))
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

	// remoteEnv is for the tools' processes in the workspace: its
	// environment, which podman exec gives every command (never a label,
	// which anyone who can list the pod reads; a dry run redacts it, as
	// containerEnv). The variables devaipod's protections and shims
	// rely on stay its own.
	gitConfig := workspaceGitConfig(b.workdir)
	for _, k := range slices.Sorted(maps.Keys(dc.RemoteEnv)) {
		if _, git := gitConfig[k]; git || k == "DEVAIPOD_AGENT_URL" {
			b.warnings = append(b.warnings, fmt.Sprintf("devcontainer.json: remoteEnv %s is devaipod's own variable in the workspace; ignored", k))
			continue
		}
		ws.Env[k] = dc.RemoteEnv[k]
	}
	// The shims (oc) stay on a PATH that remoteEnv sets.
	if p, ok := dc.RemoteEnv["PATH"]; ok && !slices.Contains(strings.Split(p, ":"), HelperShimDir) {
		ws.Env["PATH"] = p + ":" + HelperShimDir
	}
	l := &Lifecycle{User: cmp.Or(dc.RemoteUser, dc.ContainerUser, ra.User, b.image.User), Workdir: b.workdir,
		OnCreate: dc.OnCreateCommand, UpdateContent: dc.UpdateContentCommand, PostCreate: dc.PostCreateCommand,
		PostStart: dc.PostStartCommand, PostAttach: dc.PostAttachCommand}
	b.execAs = ExecAs{User: l.User}
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
	if d := dc.Devaipod.AllowedDomains; len(d) > 0 && b.mode == config.NetworkAllowlist {
		b.warnings = append(b.warnings, "the repository's devcontainer.json allows the agent to reach: "+strings.Join(d, ", "))
		for _, r := range d {
			if msg, _ := config.RuleWarning(r); msg != "" {
				b.warnings = append(b.warnings, "the repository's devcontainer.json: allowedDomains "+msg)
			}
		}
	}
}

// volumeSuffix makes a devcontainer volume's name part of a pod volume
// name.
func VolumeSuffix(source string, i int) string {
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
			if v, ok := strings.CutPrefix(o, k); ok && validSize(v) {
				return v
			}
		}
	}
	return "64m"
}

func validSize(s string) bool {
	_, err := size.Parse(s)
	return err == nil
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
	maps.Copy(env, planned)
	return env
}
