package plan

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/devaipod/devaipod/internal/helperargs"

	"github.com/devaipod/devaipod/pod/config"
)

// workspace is the trusted side. Trusted values travel as podman secrets
// (trusted: name -> secret), given to it only for a trusted repository.
func (b *builder) workspace(shared, trusted map[string]string, agentURL string) ContainerSpec {
	env := copyEnv(shared)
	env["DEVAIPOD_AGENT_URL"] = agentURL
	env["PATH"] = imagePath(b.image.Env) + ":" + HelperShimDir
	maps.Copy(env, workspaceGitConfig(b.workdir))
	secretEnv := map[string]string{}
	for k, secret := range trusted {
		if !b.in.Untrusted {
			secretEnv[k] = secret
		}
		delete(env, k)
	}
	return ContainerSpec{
		Name:       ContainerName(b.short, RoleWorkspace),
		Role:       RoleWorkspace,
		Image:      b.wsImage,
		Entrypoint: b.workspaceInit(),
		Workdir:    b.workdir,
		Umask:      WorkspaceUmask,
		Env:        env,
		SecretEnv:  secretEnv,
		Labels:     b.labels(LabelRole, RoleWorkspace),
		Network:    NetworkPod,
		Mounts: []Mount{
			{Volume: ObjectName(b.short, VolumeWorkspace), Dest: WorkspacesDir},
			{Volume: ObjectName(b.short, VolumeAgentSock), Dest: AgentSocketDir, ReadOnly: true},
		},
		Binds:       b.hostBinds(RoleWorkspace),
		Limits:      workspaceLimits(b.cfg.Workspace.Limits),
		ImageMounts: []ImageMount{{Image: b.helper, Dest: HelperMount}},
		StopTimeout: 5,
	}
}

// trustedEnv is [trusted.env]: each variable's podman secret, and the
// secrets the pod makes for the values it takes from devaipod's
// environment and configuration.
func (b *builder) trustedEnv() (map[string]string, []SecretSpec) {
	cfg := b.cfg
	secretEnv := map[string]string{}
	var secrets []SecretSpec
	trusted := collectEnv(cfg.Trusted.Env.Allowlist, cfg.Trusted.Env.Vars, b.in.HostEnv)
	for _, k := range slices.Sorted(maps.Keys(trusted)) {
		if trusted[k] == "" {
			b.warnings = append(b.warnings, fmt.Sprintf("trusted variable %s is empty and is not passed (podman secrets cannot be empty)", k))
			continue
		}
		name := ObjectName(b.short, "env-"+strings.ToLower(k))
		secrets = append(secrets, SecretSpec{Name: name, Labels: b.labels(), Value: trusted[k], Guards: "trusted variable " + k})
		secretEnv[k] = name
	}
	for _, s := range cfg.Trusted.Env.Secrets {
		v, secret, _ := strings.Cut(s, "=")
		secretEnv[v] = secret
	}
	return secretEnv, secrets
}

// workspaceLimits is nil unless [workspace.limits] sets something.
func workspaceLimits(l config.Limits) *config.Limits {
	if l == (config.Limits{}) {
		return nil
	}
	return &l
}

// workspaceInit bridges the agent's server into the pod's network, except
// in open mode, where the agent is in that network itself.
func (b *builder) workspaceInit(command ...string) []string {
	init := helperargs.Init{Canary: "tcp:" + CanaryAddr, Command: command}
	if b.mode != config.NetworkOpen {
		init.Forwards = []string{helperargs.Forward(fmt.Sprintf("127.0.0.1:%d", b.port), AgentSocket)}
	}
	return HelperCommand(init)
}

// hostBinds are the [[mounts]] entries for a role. Only an explicit
// rw = true makes one writable.
func (b *builder) hostBinds(role string) []Bind {
	var binds []Bind
	for _, m := range b.in.Mounts {
		if slices.Contains(m.Containers, role) {
			binds = append(binds, Bind{HostPath: m.Source, Dest: m.Target, ReadOnly: !m.RW})
		}
	}
	return binds
}

// workspaceGitConfig is git configuration for every git the workspace
// runs, as GIT_CONFIG_* variables: they rank above every config file and
// reach git's child processes too. The workspace's .git is out of the
// agent's reach (the agent has its own), but the working tree is the
// agent's: a nested repository it plants there has its own config
// (core.fsmonitor, filters), which a status that recursed into it would
// run. So:
//   - safe.directory: the copy belongs to the agent user, and git would
//     refuse it as "dubious ownership"; it names only this folder;
//   - core.fsmonitor=false: no fsmonitor program, here or in a nested
//     repository;
//   - diff.ignoreSubmodules=all and submodule.recurse=false: status, diff
//     and the commands that would recurse into a nested repository (a
//     gitlink, once someone runs git add -A) do not enter it.
func workspaceGitConfig(workdir string) map[string]string {
	settings := [][2]string{
		{"safe.directory", workdir},
		{"core.fsmonitor", "false"},
		{"diff.ignoreSubmodules", "all"},
		{"submodule.recurse", "false"},
	}
	env := map[string]string{"GIT_CONFIG_COUNT": strconv.Itoa(len(settings))}
	for i, kv := range settings {
		env[fmt.Sprintf("GIT_CONFIG_KEY_%d", i)] = kv[0]
		env[fmt.Sprintf("GIT_CONFIG_VALUE_%d", i)] = kv[1]
	}
	return env
}

// TrustedValues are the values [trusted.env] takes from the configuration
// and from host, by name (not those of podman secrets, which devaipod
// never reads).
func TrustedValues(cfg *config.Config, host map[string]string) map[string]string {
	values := collectEnv(cfg.Trusted.Env.Allowlist, cfg.Trusted.Env.Vars, host)
	maps.DeleteFunc(values, func(_, v string) bool { return v == "" })
	return values
}
