package plan

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/devaipod/devaipod/internal/helperargs"

	"github.com/devaipod/devaipod/internal/size"

	"github.com/devaipod/devaipod/pod/config"
)

// agentPreset is what an [agent] kind means.
type agentPreset struct {
	// command starts the agent's server on the agent's loopback.
	command func(port int) config.Command
	// health is the path up polls until it answers 2xx; "" means any
	// answer at the agent's URL will do.
	health string
	// passwordEnv is the variable through which the server learns the
	// pod's password ("" when it has none).
	passwordEnv string
	// passwordUser is the basic-auth user name clients send with it.
	passwordUser string
	// env is set in the agent before the user's own variables.
	env map[string]string
}

var agentPresets = map[string]agentPreset{
	config.AgentOpencode: {
		command: func(port int) config.Command {
			return config.Command{"opencode", "serve", "--hostname", "127.0.0.1", "--port", strconv.Itoa(port)}
		},
		health:       "/global/health",
		passwordEnv:  "OPENCODE_SERVER_PASSWORD",
		passwordUser: "opencode",
		// What opencode would fetch or send on its own: model metadata,
		// updates, LSP servers, plugins from npm, shared sessions. In the
		// sandbox the proxy would deny these anyway; turning them off
		// keeps the audit log to what the agent asked for. The user's
		// own variables come later and can turn any back on.
		env: map[string]string{
			"OPENCODE_DISABLE_MODELS_FETCH":    "1",
			"OPENCODE_DISABLE_AUTOUPDATE":      "1",
			"OPENCODE_DISABLE_LSP_DOWNLOAD":    "1",
			"OPENCODE_DISABLE_SHARE":           "1",
			"OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
			"OPENCODE_DISABLE_CLAUDE_CODE":     "1",
			"OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
		},
	},
	config.AgentCustom: {},
}

// presetOf is the config's agent kind, opencode by default.
func presetOf(a config.AgentConfig) agentPreset {
	if a.Kind == "" {
		return agentPresets[config.AgentOpencode]
	}
	return agentPresets[a.Kind]
}

// PasswordVar holds the agent's password in the workspace (a secret file,
// see SecretDir) for the shims and devaipod's own requests.
const PasswordVar = "DEVAIPOD_AGENT_PASSWORD"

// MaxTaskLabel bounds the task stored in the pod's label; the agent gets
// all of it.
const MaxTaskLabel = 1024

// TaskLabel is the task as the io.devaipod.task label keeps it: cut at
// MaxTaskLabel bytes, on a character boundary.
func TaskLabel(task string) string {
	if len(task) <= MaxTaskLabel {
		return task
	}
	cut := MaxTaskLabel - len("…")
	for cut > 0 && !utf8.RuneStart(task[cut]) {
		cut--
	}
	return task[:cut] + "…"
}

// agent is the untrusted side: the shared env, its own keys, nothing
// trusted; no capabilities, no network but the proxy's socket.
func (b *builder) agent(shared, trusted map[string]string) ContainerSpec {
	cfg := b.cfg
	preset := presetOf(cfg.Agent)
	env := copyEnv(preset.env)
	maps.Copy(env, shared)
	if b.in.AgentPassword != "" && preset.passwordEnv != "" {
		env[preset.passwordEnv] = b.in.AgentPassword
	}
	if b.in.Task != "" && cfg.Agent.Kind == config.AgentCustom {
		env["DEVAIPOD_TASK"] = b.in.Task // opencode gets it through its API instead
	}
	for _, k := range LLMKeyVars {
		if v, ok := b.in.HostEnv[k]; ok && (b.mode == config.NetworkOpen || !isCredentialVar(k)) {
			env[k] = v
		}
	}
	for k, v := range b.in.HostEnv {
		if rest, ok := strings.CutPrefix(k, AgentEnvPrefix); ok && rest != "" {
			env[rest] = v
		}
	}
	for k := range trusted {
		delete(env, k) // a trusted name never reaches the agent, whatever its source
	}
	for _, c := range b.creds {
		env[c.Name] = c.Placeholder // whatever else named it
	}
	env["HOME"] = AgentHome
	env["USER"] = "agent"
	env["TMPDIR"] = "/tmp"
	// The agent's init; the gator may add a bridge before build renders
	// it (see agentInit).
	b.agentInit = helperargs.Init{Exposes: []string{helperargs.Expose(AgentSocket, fmt.Sprintf("127.0.0.1:%d", b.port))}}
	readOnly := cfg.Agent.WorkspaceAccess == config.AccessRO
	mounts := []Mount{
		{Volume: ObjectName(b.short, VolumeWorkspace), Dest: WorkspacesDir, ReadOnly: readOnly},
		// Its own git directory over the repository's .git: the agent
		// never sees the one the trusted side uses.
		{Volume: ObjectName(b.short, VolumeAgentGit), Dest: path.Join(b.workdir, ".git"), ReadOnly: readOnly},
		{Volume: ObjectName(b.short, VolumeAgentGit), Dest: AgentGitCopyDir, ReadOnly: readOnly},
		{Volume: ObjectName(b.short, VolumeAgentHome), Dest: AgentHome},
		{Volume: ObjectName(b.short, VolumeAgentSock), Dest: AgentSocketDir},
		// Writable by root only (file modes decide): devaipod copies what
		// a person shares into it, through this mount.
		{Volume: ObjectName(b.short, VolumeHostShare), Dest: HostShareDir},
	}
	network := NetworkNone
	switch b.mode {
	case config.NetworkAllowlist:
		b.agentInit.Forwards = append(b.agentInit.Forwards, helperargs.Forward(ProxyAddr, ProxySocket))
		// Read-only: the agent can connect to the socket, not replace it.
		mounts = append(mounts, Mount{Volume: ObjectName(b.short, VolumeProxySock), Dest: ProxySocketDir, ReadOnly: true})
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			env[k] = "http://" + ProxyAddr
		}
		if len(b.creds) > 0 {
			// The proxy shows its own certificates for the credentials'
			// hosts: its CA, fetched by the init, must be trusted.
			maps.Copy(env, caEnv)
			b.agentInit.ProxyCA, b.agentInit.CADir = "http://"+ProxyAddr+ProxyCAPath, AgentCADir
		}
		env["NO_PROXY"], env["no_proxy"] = "127.0.0.1,localhost", "127.0.0.1,localhost"
	case config.NetworkOpen:
		network = NetworkPod
	}
	command := cfg.Agent.Command
	if len(command) == 0 {
		command = preset.command(b.port)
	}
	limits := cfg.Agent.Limits
	if limits.TmpSize == "" {
		limits.TmpSize = config.DefaultTmpSize
	}
	if limits.Pids == 0 {
		limits.Pids = config.DefaultPids
	}
	if limits.Memory == "" {
		limits.Memory = config.DefaultMemory
	}
	return ContainerSpec{
		Name:            ContainerName(b.short, RoleAgent),
		Role:            RoleAgent,
		Image:           cmp.Or(b.in.Image, cfg.Agent.Image, b.wsImage),
		Command:         command, // after the init (see agentEntrypoint)
		User:            fmt.Sprintf("%d:%d", AgentUID, AgentGID),
		Workdir:         b.workdir,
		Umask:           WorkspaceUmask,
		Env:             env,
		Labels:          b.labels(LabelRole, RoleAgent),
		Network:         network,
		PrivateIPC:      true,
		CapDrop:         []string{"ALL"},
		NoNewPrivileges: true,
		ReadOnlyRoot:    true,
		Mounts:          mounts,
		Binds:           append(b.agentBinds(readOnly), b.hostBinds(RoleAgent)...),
		ImageMounts:     []ImageMount{{Image: b.helper, Dest: HelperMount}},
		Tmpfs:           []Tmpfs{{Dest: "/tmp", Size: limits.TmpSize, Options: "rw,nosuid,nodev,mode=1777"}},
		Limits:          &limits,
		Seccomp:         SeccompAgent,
		StopTimeout:     5,
	}
}

// verifyArgs tells the verify battery what this pod promises: its canary
// and proxy, the paths the agent must not write, its mounts and limits.
func (b *builder) verifyArgs(agent ContainerSpec) helperargs.Verify {
	v := helperargs.Verify{Pod: b.short, Workspace: b.workdir, Canary: CanaryAddr}
	if b.mode == config.NetworkAllowlist {
		v.Proxy = "http://" + ProxyAddr
	}
	for _, path := range config.ProtectedPaths(b.cfg) {
		if !slices.Contains(b.in.Tree.Unprotectable, path) {
			v.Protect = append(v.Protect, path)
		}
	}
	for _, bind := range b.hostBinds(RoleAgent) {
		v.ExpectMounts = append(v.ExpectMounts, bind.Dest)
	}
	v.MaskedObjects = b.in.Tree.MaskedObjects
	for _, c := range b.creds {
		v.CredentialVars = append(v.CredentialVars, c.Name)
	}
	if l := agent.Limits; l != nil {
		if n, err := size.Parse(l.Memory); err == nil {
			v.Limits = append(v.Limits, helperargs.Limit("memory", n))
		}
		if l.Pids > 0 {
			v.Limits = append(v.Limits, helperargs.Limit("pids", l.Pids))
		}
		if n, err := size.Parse(l.TmpSize); err == nil {
			v.Limits = append(v.Limits, helperargs.Limit("tmp", n))
		}
	}
	return v
}

// agentEntrypoint is the agent's whole command line: its init, with the
// bridges the parts of the plan asked for, running the agent's command.
func (b *builder) agentEntrypoint(command []string) []string {
	init := b.agentInit
	init.Command = command
	return append([]string{HelperBin}, init.Args()...)
}

// agentBinds makes the protected paths read-only in the agent's view and
// hides the masked files. The repository's folder and its .git are bound
// onto themselves too: a mountpoint cannot be renamed, so the agent cannot
// move them aside and put a folder of its own, with its own hooks, in
// their place.
func (b *builder) agentBinds(readOnly bool) []Bind {
	vol := ObjectName(b.short, VolumeWorkspace)
	project := path.Base(b.workdir)
	bind := func(rel string, ro bool) Bind {
		return Bind{Volume: vol, SubPath: path.Join(project, rel), Dest: path.Join(b.workdir, rel), ReadOnly: ro}
	}
	var binds []Bind
	if !readOnly {
		binds = append(binds, bind(".", false))
		for _, p := range config.ProtectedPaths(b.cfg) {
			if !slices.Contains(b.in.Tree.Unprotectable, p) {
				binds = append(binds, bind(p, true))
			}
		}
	}
	for _, f := range b.in.Tree.Masked {
		binds = append(binds, Bind{HostPath: "/dev/null", Dest: path.Join(b.workdir, f), ReadOnly: true})
	}
	return binds
}

// GuardedValueError: the agent would get a trusted or credential value
// under another name.
type GuardedValueError struct {
	Var    string // the agent's variable
	Guards string // what its value is: "trusted variable GH_TOKEN"
}

func (e *GuardedValueError) Error() string {
	return fmt.Sprintf("the agent's variable %s would hold the value of %s", e.Var, e.Guards)
}

// minGuarded is the length from which refuseGuardedValues compares a
// value: a shorter one ("1", "us-east-1") is no credential, and would
// refuse ups for a value that is legitimately both trusted and the
// agent's. devaipod verify compares every length, by hash.
const minGuarded = 12

// refuseGuardedValues refuses an agent environment that holds a value the
// agent must never hold, under whatever name and inside whatever longer
// value (a URL with the token in it): a repository's envAllowlist may ask
// for CI_TOKEN when it holds the same token as the trusted GH_TOKEN.
// Trusted names are dropped from the agent's environment, but only the
// values tell this. (Values devaipod reads from podman secrets are not
// known here; devaipod verify compares those by hash.)
func refuseGuardedValues(env map[string]string, secrets []SecretSpec) error {
	for _, k := range slices.Sorted(maps.Keys(env)) {
		for _, s := range secrets {
			if s.Guards != "" && len(s.Value) >= minGuarded && strings.Contains(env[k], s.Value) {
				return &GuardedValueError{Var: k, Guards: s.Guards}
			}
		}
	}
	return nil
}
