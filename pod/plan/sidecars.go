package plan

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/devaipod/devaipod/internal/helperargs"

	"github.com/devaipod/devaipod/pod/config"
)

// The gator holds the forge token and gives the agent scoped forge access
// over MCP (package gator, run by devaipod-gator from the helper image). It
// runs in the pod's network namespace, as its own user, with the token as a
// secret file only it can read; the agent reaches it through a socket on a
// pod volume that it mounts read-only, bridged to GatorAddr by its init.

// TokenVars are the trusted variables the gator takes its token from, in
// order of preference.
var TokenVars = []string{"GH_TOKEN", "GITHUB_TOKEN"}

// ErrNoToken says the gator has no token to work with.
var ErrNoToken = errors.New("no forge token")

// gator is the gator's container. secretEnv is the workspace's trusted
// variables (name -> podman secret), where the token comes from.
func (b *builder) gator(secretEnv map[string]string) (ContainerSpec, error) {
	args := helperargs.Gator{Listen: "unix:" + GatorSocket, Pod: b.short, Workspace: b.workdir,
		APIURL: b.in.GatorAPIURL, GitURL: b.in.GatorGitURL, Scopes: b.in.GatorScopes,
		ProtectedPaths: b.cfg.Gator.GitHub.ProtectedPaths, AuditLogs: []string{"-", GatorAuditLog},
		ApprovalDir: GatorApprovalDir, AskTimeout: b.cfg.Network.AskTimeoutOr()}
	if src := b.in.Source; src != nil && b.in.GatorRepo != "" {
		for _, c := range src.RemoteCommits {
			args.KnownCommits = append(args.KnownCommits, b.in.GatorRepo+"@"+c)
		}
	}
	secrets := map[string]string{}
	for _, v := range TokenVars {
		if name, ok := secretEnv[v]; ok {
			secrets[v] = name
			args.TokenFile = SecretDir + "/" + v
			break
		}
	}
	if len(secrets) == 0 {
		return ContainerSpec{}, fmt.Errorf("the gator needs %s in [trusted.env] (allowlist, vars or secrets): %w",
			strings.Join(TokenVars, " or "), ErrNoToken)
	}
	c := b.sidecar(RoleGator, GatorUID, GatorLimits, append([]string{GatorBin}, args.Args()...),
		Mount{Volume: ObjectName(b.short, VolumeGatorSock), Dest: GatorSocketDir},
		Mount{Volume: ObjectName(b.short, VolumeGatorState), Dest: GatorStateDir},
		// Read-only: the gator pushes the workspace's commits, it never
		// changes them.
		Mount{Volume: ObjectName(b.short, VolumeWorkspace), Dest: WorkspacesDir, ReadOnly: true},
		// The agent's commits are in its own git directory.
		Mount{Volume: ObjectName(b.short, VolumeAgentGit), Dest: path.Join(b.workdir, ".git"), ReadOnly: true})
	c.SecretEnv, c.SecretUID = secrets, GatorUID
	return c, nil
}

// connectGator gives the agent its way to the gator, and tells opencode
// about it.
func (b *builder) connectGator(agent *ContainerSpec) {
	b.agentInit.Forwards = append(b.agentInit.Forwards, helperargs.Forward(GatorAddr, GatorSocket))
	agent.Mounts = append(agent.Mounts, Mount{Volume: ObjectName(b.short, VolumeGatorSock), Dest: GatorSocketDir, ReadOnly: true})
	agent.Env["DEVAIPOD_GATOR_URL"] = "http://" + GatorAddr + "/mcp"
	if _, set := agent.Env["OPENCODE_CONFIG"]; !set && b.cfg.Agent.Kind != config.AgentCustom {
		agent.Env["OPENCODE_CONFIG"] = GatorOpencodeConfig
	}
}

// proxy runs the helper's allowlist proxy: the agent's only way out. It
// reads the credentials' values from their secrets, and [network]
// upstream_ca from one of the pod's own (returned, nil without it).
func (b *builder) proxy(allow []string, creds []Credential) (ContainerSpec, *SecretSpec) {
	// The proxy runs the helper image's binary at its root (the
	// image, not a mount of it).
	proxy := helperargs.Proxy{Listen: "unix:" + ProxySocket, Pod: b.short, PolicyFile: ProxyPolicy, Allow: allow,
		AuditLogs: []string{"-", ProxyAuditLog}, Ask: b.cfg.Network.Ask, ApprovalDir: ProxyApprovalDir,
		ForbiddenPaths: b.in.ForbiddenPaths}
	if len(proxy.Ask) > 0 {
		proxy.AskTimeout = b.cfg.Network.AskTimeoutOr()
	}
	secretEnv := map[string]string{}
	for _, c := range creds {
		proxy.Credentials = append(proxy.Credentials, CredentialArg(c))
		proxy.CredentialDir = SecretDir
		secretEnv[c.Name] = c.Secret
	}
	var caSecret *SecretSpec
	if b.in.UpstreamCA != "" {
		caSecret = &SecretSpec{Name: ObjectName(b.short, "upstream-ca"), Labels: b.labels(), Value: b.in.UpstreamCA}
		secretEnv[UpstreamCAVar] = caSecret.Name
		proxy.UpstreamCA = SecretDir + "/" + UpstreamCAVar
	}
	c := b.sidecar(RoleProxy, ProxyUID, ProxyLimits, append([]string{ProxyBin}, proxy.Args()...),
		Mount{Volume: ObjectName(b.short, VolumeProxySock), Dest: ProxySocketDir},
		Mount{Volume: ObjectName(b.short, VolumeProxyState), Dest: ProxyStateDir})
	if len(secretEnv) > 0 {
		c.SecretEnv, c.SecretUID = secretEnv, ProxyUID
	}
	return c, caSecret
}

// sidecar is a trusted helper container of the pod (proxy, gator): the
// helper image, its own non-root user, no capabilities, a read-only root.
func (b *builder) sidecar(role string, uid int, limits config.Limits, entrypoint []string, mounts ...Mount) ContainerSpec {
	return ContainerSpec{
		Limits:          &limits,
		Name:            ContainerName(b.short, role),
		Role:            role,
		Image:           b.helper,
		Entrypoint:      entrypoint,
		User:            fmt.Sprintf("%d:%d", uid, uid),
		Labels:          b.labels(LabelRole, role),
		Network:         NetworkPod,
		PrivateIPC:      true,
		CapDrop:         []string{"ALL"},
		NoNewPrivileges: true,
		ReadOnlyRoot:    true,
		Mounts:          mounts,
		StopTimeout:     5,
	}
}
