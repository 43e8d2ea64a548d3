package plan

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/devaipod/devaipod/pod/config"
)

// workspace is the trusted side. Trusted values travel as podman secrets.
func (b *builder) workspace(shared map[string]string, agentURL string) (ContainerSpec, []SecretSpec) {
	cfg := b.cfg
	env := copyEnv(shared)
	env["DEVAIPOD_AGENT_URL"] = agentURL
	env["PATH"] = imagePath(b.image.Env) + ":" + HelperShimDir
	// The copy belongs to the agent user; git in the workspace would refuse
	// it as "dubious ownership" without this. It names only this folder.
	env["GIT_CONFIG_COUNT"] = "1"
	env["GIT_CONFIG_KEY_0"] = "safe.directory"
	env["GIT_CONFIG_VALUE_0"] = b.workdir
	secretEnv := map[string]string{}
	var secrets []SecretSpec
	trusted := collectEnv(cfg.Trusted.Env.Allowlist, cfg.Trusted.Env.Vars, b.in.HostEnv)
	for _, k := range slices.Sorted(maps.Keys(trusted)) {
		if trusted[k] == "" {
			b.warnings = append(b.warnings, fmt.Sprintf("trusted variable %s is empty and is not passed (podman secrets cannot be empty)", k))
			continue
		}
		name := ObjectName(b.short, "env-"+strings.ToLower(k))
		secrets = append(secrets, SecretSpec{Name: name, Labels: b.labels(), Value: trusted[k]})
		secretEnv[k] = name
		delete(env, k)
	}
	for _, s := range cfg.Trusted.Env.Secrets {
		v, secret, _ := strings.Cut(s, "=")
		secretEnv[v] = secret
		delete(env, v)
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
		Limits:      workspaceLimits(cfg.Workspace.Limits),
		ImageMounts: []ImageMount{{Image: b.helper, Dest: HelperMount}},
		StopTimeout: 5,
	}, secrets
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
func (b *builder) workspaceInit() []string {
	args := []string{HelperBin, "init", "--canary", "tcp:" + CanaryAddr}
	if b.mode == config.NetworkOpen {
		return args
	}
	return append(args, "--forward", fmt.Sprintf("tcp:127.0.0.1:%d=unix:%s", b.port, AgentSocket))
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
