package plan

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/devcontainer"
	"github.com/devaipod/devaipod/pod/source"
)

// Paths inside the containers.
const (
	HelperMount    = "/opt/devaipod"
	HelperBin      = HelperMount + "/devaipod-helper"
	HelperShimDir  = HelperMount + "/bin"
	WorkspacesDir  = "/workspaces"
	AgentHome      = "/home/agent"
	AgentSocketDir = "/run/devaipod/agent"
	AgentSocket    = AgentSocketDir + "/agent.sock"
	ProxySocketDir = "/run/devaipod/proxy"
	ProxySocket    = ProxySocketDir + "/proxy.sock"
	ProxyStateDir  = "/var/lib/devaipod/proxy"
	ProxyPolicy    = ProxyStateDir + "/policy.json"
	GatorSocketDir = "/run/devaipod/gator"
	GatorSocket    = GatorSocketDir + "/gator.sock"
	GatorStateDir  = "/var/lib/devaipod/gator"
	// GatorAddr is where the agent reaches the gator's MCP server (its
	// init bridges it to GatorSocket).
	GatorAddr = "127.0.0.1:8765"
	// GatorOpencodeConfig is an opencode config file in the helper image
	// that names the gator as an MCP server.
	GatorOpencodeConfig = HelperMount + "/opencode-gator.json"
	// GatorBin is the gator's entrypoint: a binary of its own in the
	// helper image (at its root: the gator container runs the image rather
	// than mounting it), so that the helper, which every container maps
	// and the proxy runs, does not carry the gator's libraries.
	GatorBin = "/devaipod-gator"
	// ProxyAddr is where the agent reaches the proxy (its init bridges it
	// to ProxySocket).
	ProxyAddr = "127.0.0.1:3128"
	// CanaryAddr is a listener of the workspace's init in the pod's network
	// namespace: reachable from the workspace, never from the agent.
	CanaryAddr = "127.0.0.1:3129"
	// SecretDir holds the workspace's secrets, one root-only file per
	// variable; `devaipod exec` runs commands through the helper's
	// secret-env, which reads them into the environment.
	SecretDir = "/run/devaipod/secrets"
	// WorkspaceUmask keeps what the workspace and the agent create in the
	// shared copy writable by the agent's group (the copy's directories are
	// setgid), which workspace users other than root are given too.
	WorkspaceUmask = "0002"
)

// AgentUID and AgentGID are the agent's user. The workspace copy of the
// repository is owned by it, so a root workspace user and the agent can both
// write it.
const (
	AgentUID = 1000
	AgentGID = 1000
	// ProxyUID runs the proxy: not root, and not the agent's uid.
	ProxyUID = 1100
	// GatorUID runs the gator, which alone can read the forge token.
	GatorUID = 1200
)

// Plan lists every podman object an up creates, in creation order, with the
// settings that matter for containment. It is a pure value: building it
// touches nothing, and --dry-run prints it.
type Plan struct {
	Name       string          `json:"name"`
	Pod        PodSpec         `json:"pod"`
	Volumes    []VolumeSpec    `json:"volumes"`
	Secrets    []SecretSpec    `json:"secrets,omitempty"`
	Containers []ContainerSpec `json:"containers"`
	// Workdir is where the repository lands in the workspace volume.
	Workdir string `json:"workdir"`
	// AgentURL is where the workspace reaches the agent's server;
	// AgentHealth the path that answers 2xx once it is ready.
	AgentURL    string `json:"agent_url"`
	AgentHealth string `json:"agent_health"`
	AgentKind   string `json:"agent_kind"`
	// AgentUser is the basic-auth user that goes with the pod's agent
	// password ("" when the agent's server has no password).
	AgentUser string `json:"agent_user,omitempty"`
	// Task is the first message for the agent ("" for none).
	Task string `json:"task,omitempty"`
	// Network is the agent's egress mode; Allow the proxy's rules.
	Network string   `json:"network"`
	Allow   []string `json:"allow,omitempty"`
	// Checks run after the agent answers; each must exit 0 before up
	// reports the pod ready (e.g. the agent cannot connect directly).
	Checks []Check `json:"checks,omitempty"`
	// Verify are the arguments of the helper's verify battery for this
	// pod (what devaipod verify runs in the agent; up runs its --fast
	// subset as a check). Kept as a pod label.
	Verify []string `json:"verify"`
	// Lifecycle are the devcontainer's lifecycle commands, nil for none.
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
	// Placeholders are protected paths absent from the repository that
	// the copy creates empty (directories end with "/"), so that the
	// agent gets them read-only too.
	Placeholders []string `json:"placeholders,omitempty"`
	// Warnings are things the user should know before trusting the pod.
	Warnings []string `json:"warnings,omitempty"`
}

// Check is a command run in one of the pod's containers.
type Check struct {
	Container string   `json:"container"`
	Command   []string `json:"command"`
	// What it proves, for the error when it fails.
	What string `json:"what"`
}

// PodSpec is the pod itself. Its network namespace is shared by every
// container except the agent.
type PodSpec struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	// ExtraHosts are "name:ip" entries for the pod's /etc/hosts.
	ExtraHosts []string `json:"extra_hosts,omitempty"`
	// HostLoopback lets the pod's network (not the agent) reach the host's
	// loopback at 10.0.2.2 (slirp4netns allow_host_loopback).
	HostLoopback bool `json:"host_loopback,omitempty"`
	// Ports publishes ports of the pod's network namespace (the
	// workspace's, never the agent's) on the host's 127.0.0.1.
	Ports []int `json:"ports,omitempty"`
}

// VolumeSpec is a named volume owned by the pod.
type VolumeSpec struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	// UID and GID own the volume's root, so an unprivileged container
	// user can write it.
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// SecretSpec is a podman secret created for the pod and deleted with it.
type SecretSpec struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	// Value is never printed or serialised.
	Value string `json:"-"`
}

// Network modes of a container.
const (
	NetworkPod  = "pod"  // the pod's shared network namespace
	NetworkNone = "none" // a namespace of its own with only lo
)

// ContainerSpec is one container of the pod.
type ContainerSpec struct {
	Name       string            `json:"name"`
	Role       string            `json:"role"`
	Image      string            `json:"image"`
	Entrypoint []string          `json:"entrypoint"`
	Command    []string          `json:"command,omitempty"`
	User       string            `json:"user,omitempty"`
	Workdir    string            `json:"workdir,omitempty"`
	Umask      string            `json:"umask,omitempty"` // the init's, so its command's; podman exec ignores it
	Env        map[string]string `json:"env,omitempty"`
	// SecretEnv maps variable names to podman secret names. They are
	// mounted as files under SecretDir, so values never appear in podman
	// inspect; readable by SecretUID only (root by default).
	SecretEnv map[string]string `json:"secret_env,omitempty"`
	SecretUID int               `json:"secret_uid,omitempty"`
	Labels    map[string]string `json:"labels"`

	Network         string   `json:"network"`
	PrivateIPC      bool     `json:"private_ipc"`
	CapDrop         []string `json:"cap_drop,omitempty"`
	CapAdd          []string `json:"cap_add,omitempty"`
	NoNewPrivileges bool     `json:"no_new_privileges"`
	ReadOnlyRoot    bool     `json:"read_only_root"`
	// Privileged, SecurityOpt (podman's --security-opt values), Devices,
	// ShmSize and Ulimits come from a devcontainer's settings, which apply
	// to the workspace only.
	Privileged  bool     `json:"privileged,omitempty"`
	SecurityOpt []string `json:"security_opt,omitempty"`
	Devices     []string `json:"devices,omitempty"`
	ShmSize     string   `json:"shm_size,omitempty"`
	Ulimits     []string `json:"ulimits,omitempty"`

	Mounts      []Mount        `json:"mounts"`
	Binds       []Bind         `json:"binds,omitempty"`
	ImageMounts []ImageMount   `json:"image_mounts,omitempty"`
	Tmpfs       []Tmpfs        `json:"tmpfs,omitempty"`
	Limits      *config.Limits `json:"limits,omitempty"`
	// Seccomp names devaipod's own seccomp profile (SeccompAgent), or is
	// empty for podman's default.
	Seccomp string `json:"seccomp,omitempty"`
	// StopTimeout is how long podman waits after SIGTERM; the helper init
	// forwards signals, so a short one is enough.
	StopTimeout uint `json:"stop_timeout"`
}

// Mount is a named volume mounted into a container.
type Mount struct {
	Volume   string `json:"volume"`
	Dest     string `json:"dest"`
	ReadOnly bool   `json:"read_only"`
}

// Bind mounts a path into a container: a path inside a volume of the pod
// (Volume and SubPath), or a host path.
type Bind struct {
	Volume   string `json:"volume,omitempty"`
	SubPath  string `json:"sub_path,omitempty"`
	HostPath string `json:"host_path,omitempty"`
	Dest     string `json:"dest"`
	ReadOnly bool   `json:"read_only"`
}

// ImageMount mounts an image's filesystem read-only.
type ImageMount struct {
	Image string `json:"image"`
	Dest  string `json:"dest"`
}

// Tmpfs is a size-limited tmpfs.
type Tmpfs struct {
	Dest    string `json:"dest"`
	Size    string `json:"size"`
	Options string `json:"options"`
}

// PlanInput is everything Build needs; it is gathered by the caller so that
// Build itself stays pure.
type PlanInput struct {
	Name   string
	Config *config.Config
	Source *source.Source
	// Image overrides the workspace and agent images (up --image).
	Image       string
	HelperImage string
	// ImageEnv is the workspace image's environment (for its PATH).
	ImageEnv []string
	// ImageUser is the workspace image's USER ("" when unset).
	ImageUser string
	// HostEnv is the environment devaipod runs in.
	HostEnv map[string]string
	// Allow adds proxy rules for this pod only (up --allow).
	Allow []string
	// Host is what podman said about the host; zero for a dry run.
	Host HostInfo
	// Tree is what ScanTree found in the checkout (protected paths
	// present, files to mask).
	Tree source.TreeInfo
	// Mounts are the [[mounts]] entries after ResolveMounts.
	Mounts []HostMount
	// Devcontainer is the repository's devcontainer.json after
	// Substitute; nil without one. RunArgs is its runArgs, parsed;
	// DevcontainerBinds its bind mounts after ResolveMounts; and
	// DevcontainerImage the image built for it ("" when it names one).
	Devcontainer      *devcontainer.Config
	RunArgs           devcontainer.RunArgs
	DevcontainerBinds []HostMount
	DevcontainerImage string
	// AgentPassword protects the agent's server; only the workspace
	// learns it. The caller draws it at random.
	AgentPassword string
	// Task is the first message for the agent.
	Task string
	// NoVerify leaves the fast verify battery out of up's checks.
	NoVerify bool
	// GatorScopes are the gator's scopes in canonical form
	// ("github:OWNER/REPO:read,create-draft"); none means no gator.
	GatorScopes []string
	// GatorAPIURL is the forge's REST API for the gator ("" for
	// api.github.com), GatorGitURL its git server for pushes ("" to
	// derive it from the API's).
	GatorAPIURL string
	GatorGitURL string
}

// Images lists the images the plan's containers need, without repeats.
func (p *Plan) Images() []string {
	var imgs []string
	seen := map[string]bool{}
	for _, c := range p.Containers {
		for _, img := range append([]string{c.Image}, imageMountSources(c)...) {
			if !seen[img] {
				seen[img] = true
				imgs = append(imgs, img)
			}
		}
	}
	return imgs
}

func imageMountSources(c ContainerSpec) []string {
	var s []string
	for _, m := range c.ImageMounts {
		s = append(s, m.Image)
	}
	return s
}

// LLMKeyVars are the API key variables passed from the host to the agent.
var LLMKeyVars = []string{
	"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY",
	"AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT", "OPENROUTER_API_KEY",
	"GROQ_API_KEY", "MISTRAL_API_KEY", "COHERE_API_KEY", "XAI_API_KEY",
}

// AgentEnvPrefix marks host variables meant for the agent only; the prefix
// is stripped.
const AgentEnvPrefix = "DEVAIPOD_AGENT_"

// Build turns the input into a plan. It validates what it can without
// podman and never has side effects.
func Build(in PlanInput) (*Plan, error) {
	short, err := NormalizeName(in.Name)
	if err != nil {
		return nil, err
	}
	cfg := config.Config{}
	if in.Config != nil {
		cfg = *in.Config
	}
	if in.Devcontainer != nil {
		cfg.Agent = mergeAgent(cfg.Agent, in.Devcontainer.Devaipod.Agent)
	}
	b := &builder{in: in, short: short, cfg: &cfg}
	return b.build()
}

// builder holds what the per-container parts of Build share.
type builder struct {
	in      PlanInput
	cfg     *config.Config
	short   string
	port    int
	helper  string
	workdir string
	// wsImage is the workspace's image (and the agent's default).
	wsImage string
	mode    string
	// execAs is the devcontainer's remote user and remoteEnv.
	execAs ExecAs
	// warnings collects what the parts want the user to know.
	warnings []string
}

func (b *builder) labels(extra ...string) map[string]string {
	l := map[string]string{LabelPod: b.short, LabelVersion: Version}
	if src := b.in.Source; src != nil {
		l[LabelRepo] = cmp.Or(src.Upstream, src.Remote, src.Display)
		if src.PR > 0 {
			l[LabelPR] = strconv.Itoa(src.PR)
		}
		if src.Commit != "" {
			l[LabelCommit] = src.Commit
		}
	}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}

func (b *builder) volume(what string, uid int) VolumeSpec {
	return VolumeSpec{Name: ObjectName(b.short, what), Labels: b.labels(), UID: uid, GID: uid}
}

func (b *builder) build() (*Plan, error) {
	cfg, src := b.cfg, b.in.Source
	b.port = cfg.Agent.Port
	if b.port == 0 {
		b.port = config.DefaultAgentPort
	}
	b.helper = cmp.Or(b.in.HelperImage, config.DefaultHelperImage)
	b.mode = cmp.Or(cfg.Network.Mode, config.NetworkAllowlist)
	project := "project"
	if src != nil && src.Project != "" {
		project = src.Project
	}
	if p := DevcontainerProject(b.in.Devcontainer); p != "" {
		project = p
	}
	dcImage := ""
	if dc := b.in.Devcontainer; dc != nil {
		dcImage = cmp.Or(b.in.DevcontainerImage, dc.Image)
	}
	b.wsImage = cmp.Or(b.in.Image, dcImage, cfg.Workspace.Image, config.DefaultImage)
	b.workdir = path.Join(WorkspacesDir, project)
	agentURL := fmt.Sprintf("http://127.0.0.1:%d", b.port)

	podLabels := b.labels(LabelAgentURL, agentURL)
	if b.in.Task != "" {
		podLabels[LabelTask] = taskLabel(b.in.Task)
	}
	preset := presetOf(cfg.Agent)
	p := &Plan{
		AgentKind:   cmp.Or(cfg.Agent.Kind, config.AgentOpencode),
		AgentHealth: cmp.Or(cfg.Agent.Health, preset.health),
		Task:        b.in.Task,
		Name:        b.short,
		Pod: PodSpec{Name: PodName(b.short), Labels: podLabels,
			ExtraHosts: cfg.Network.ExtraHosts, HostLoopback: cfg.Network.HostLoopback},
		Workdir:  b.workdir,
		AgentURL: agentURL,
		Network:  b.mode,
		Volumes: []VolumeSpec{
			b.volume("workspace", AgentUID),
			b.volume("agent-home", AgentUID),
			b.volume("agent-sock", AgentUID),
		},
	}
	shared := collectEnv(cfg.Env.Allowlist, cfg.Env.Vars, b.in.HostEnv)
	ws, secrets := b.workspace(shared, agentURL)
	if err := b.applyDevcontainer(p, &ws); err != nil {
		return nil, err
	}
	if err := b.labelExecAs(p); err != nil {
		return nil, err
	}
	if b.in.AgentPassword != "" && preset.passwordEnv != "" {
		p.AgentUser = preset.passwordUser
		name := ObjectName(b.short, "agent-password")
		secrets = append(secrets, SecretSpec{Name: name, Labels: b.labels(), Value: b.in.AgentPassword})
		ws.SecretEnv[PasswordVar] = name
	}
	p.Secrets = secrets
	agent := b.agent(shared, ws.SecretEnv)
	b.applyProjectAgentSide(p, &agent, ws.SecretEnv)
	var gator *ContainerSpec
	if len(b.in.GatorScopes) > 0 {
		g, err := b.gator(ws.SecretEnv)
		if err != nil {
			return nil, err
		}
		gator = &g
		b.connectGator(&agent)
	}
	p.Containers = []ContainerSpec{ws, agent}
	if gator != nil {
		p.Volumes = append(p.Volumes, b.volume("gator-sock", GatorUID), b.volume("gator-state", GatorUID))
		p.Containers = append(p.Containers, *gator)
		p.Checks = append(p.Checks, Check{Container: agent.Name, What: "the gator answers the agent",
			Command: []string{HelperBin, "wait-http", "--timeout", "30s", "--status", "2xx", "http://" + GatorAddr + "/healthz"}})
	}
	egressCheck := []string{HelperBin, "egress-check", "--canary", CanaryAddr}
	switch b.mode {
	case config.NetworkAllowlist:
		if !cfg.Network.NoDefaultAllow {
			p.Allow = append(p.Allow, config.DefaultAllow...)
		}
		p.Allow = append(append(p.Allow, cfg.Network.Allow...), b.in.Allow...)
		if dc := b.in.Devcontainer; dc != nil {
			p.Allow = append(p.Allow, dc.Devaipod.AllowedDomains...)
		}
		p.Volumes = append(p.Volumes, b.volume("proxy-sock", ProxyUID), b.volume("proxy-state", ProxyUID))
		p.Containers = append(p.Containers, b.proxy(p.Allow))
		egressCheck = append(egressCheck, "--proxy", "http://"+ProxyAddr)
	case config.NetworkOpen:
		p.Warnings = append(p.Warnings, "network mode \"open\": the agent shares the pod's network and its egress is unrestricted")
	}
	if b.mode != config.NetworkOpen {
		p.Checks = append(p.Checks, Check{Container: ws.Name, What: "the canary answers in the pod's network namespace",
			Command: []string{HelperBin, "egress-check", "--expect-canary", CanaryAddr}})
		// The fast verify battery (below) tries the same and more: this
		// check stands in for it under --no-verify.
		if b.in.NoVerify {
			p.Checks = append(p.Checks, Check{Container: agent.Name, Command: egressCheck,
				What: "the agent has no direct way out" + map[bool]string{true: " and the proxy answers"}[b.mode == config.NetworkAllowlist]})
		}
	}
	if cfg.Agent.WorkspaceAccess != config.AccessRO {
		dirs, files := PlaceHolders(config.ProtectedPaths(cfg), b.in.Tree)
		for _, d := range dirs {
			p.Placeholders = append(p.Placeholders, d+"/")
		}
		p.Placeholders = append(p.Placeholders, files...)
		for _, u := range b.in.Tree.Unprotectable {
			b.warnings = append(b.warnings, fmt.Sprintf("%s is a symlink or submodule in the repository (or lies under one), so the agent can replace it: it cannot be mounted read-only safely", u))
		}
	}
	if b.in.Tree.Truncated {
		b.warnings = append(b.warnings, fmt.Sprintf("more than %d files match [agent] mask: only the first %d are hidden from the agent", source.MaxMasked, source.MaxMasked))
	}
	p.Verify = b.verifyArgs(p, agent)
	if verify, err := json.Marshal(p.Verify); err == nil {
		p.Pod.Labels[LabelVerify] = string(verify)
	}
	if b.mode != config.NetworkOpen && !b.in.NoVerify {
		cmd := append([]string{HelperBin, "verify", "--fast"}, p.Verify...)
		for _, k := range slices.Sorted(maps.Keys(ws.SecretEnv)) {
			cmd = append(cmd, "--secret-var", k)
		}
		p.Checks = append(p.Checks, Check{Container: agent.Name, Command: cmd,
			What: "the agent has no direct way out, and the rest of the fast subset of devaipod verify passes in it"})
	}
	if b.in.NoVerify {
		b.warnings = append(b.warnings, "--no-verify: up does not attack the agent's containment before it reports ready; run `devaipod verify "+b.short+"`")
	}
	if sm := b.in.Tree.Submodules; len(sm) > 0 {
		// Fetching them would have this host's git, with the user's
		// credentials, fetch URLs that the repository chooses (a local
		// path included) into the sandbox.
		p.Warnings = append(p.Warnings, fmt.Sprintf("the repository's submodules (%s) are not copied: fetch them in the workspace with `git submodule update --init`", strings.Join(sm, ", ")))
	}
	p.Warnings = append(p.Warnings, b.warnings...)
	if b.in.Host.Version != "" && !b.in.Host.LimitsEnforced() && (cfg.Agent.Limits.Enforceable() || cfg.Workspace.Limits.Enforceable()) {
		p.Warnings = append(p.Warnings, "resource limits (memory, cpus, pids) are not enforced on this host: "+
			"rootless podman on cgroup v1 ignores them (the /tmp size limit still holds)")
	}
	return p, nil
}

// workspace is the trusted side. Trusted values travel as podman secrets.
func (b *builder) workspace(shared map[string]string, agentURL string) (ContainerSpec, []SecretSpec) {
	cfg := b.cfg
	env := copyEnv(shared)
	env["DEVAIPOD_AGENT_URL"] = agentURL
	env["PATH"] = imagePath(b.in.ImageEnv) + ":" + HelperShimDir
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
			{Volume: ObjectName(b.short, "workspace"), Dest: WorkspacesDir},
			{Volume: ObjectName(b.short, "agent-sock"), Dest: AgentSocketDir, ReadOnly: true},
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
		if v, ok := b.in.HostEnv[k]; ok {
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
	env["HOME"] = AgentHome
	env["USER"] = "agent"
	env["TMPDIR"] = "/tmp"
	entrypoint := []string{HelperBin, "init",
		"--expose", fmt.Sprintf("unix:%s=tcp:127.0.0.1:%d", AgentSocket, b.port)}
	readOnly := cfg.Agent.WorkspaceAccess == config.AccessRO
	mounts := []Mount{
		{Volume: ObjectName(b.short, "workspace"), Dest: WorkspacesDir, ReadOnly: readOnly},
		{Volume: ObjectName(b.short, "agent-home"), Dest: AgentHome},
		{Volume: ObjectName(b.short, "agent-sock"), Dest: AgentSocketDir},
	}
	network := NetworkNone
	switch b.mode {
	case config.NetworkAllowlist:
		entrypoint = append(entrypoint, "--forward", "tcp:"+ProxyAddr+"=unix:"+ProxySocket)
		// Read-only: the agent can connect to the socket, not replace it.
		mounts = append(mounts, Mount{Volume: ObjectName(b.short, "proxy-sock"), Dest: ProxySocketDir, ReadOnly: true})
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			env[k] = "http://" + ProxyAddr
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
		Entrypoint:      append(entrypoint, "--"),
		Command:         command,
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
func (b *builder) verifyArgs(p *Plan, agent ContainerSpec) []string {
	args := []string{"--pod", b.short, "--workspace", b.workdir, "--canary", CanaryAddr}
	if b.mode == config.NetworkAllowlist {
		args = append(args, "--proxy", "http://"+ProxyAddr)
	}
	for _, path := range config.ProtectedPaths(b.cfg) {
		if !slices.Contains(b.in.Tree.Unprotectable, path) {
			args = append(args, "--protect", path)
		}
	}
	for _, bind := range b.hostBinds(RoleAgent) {
		args = append(args, "--expect-mount", bind.Dest)
	}
	if l := agent.Limits; l != nil {
		if n, err := ParseSize(l.Memory); err == nil && l.Memory != "" {
			args = append(args, "--limit", fmt.Sprintf("memory=%d", n))
		}
		if l.Pids > 0 {
			args = append(args, "--limit", fmt.Sprintf("pids=%d", l.Pids))
		}
		if n, err := ParseSize(l.TmpSize); err == nil {
			args = append(args, "--limit", fmt.Sprintf("tmp=%d", n))
		}
	}
	return args
}

// agentBinds makes the protected paths read-only in the agent's view and
// hides the masked files. The repository's folder and its .git are bound
// onto themselves too: a mountpoint cannot be renamed, so the agent cannot
// move them aside and put a folder of its own, with its own hooks, in
// their place.
func (b *builder) agentBinds(readOnly bool) []Bind {
	vol := ObjectName(b.short, "workspace")
	project := path.Base(b.workdir)
	bind := func(rel string, ro bool) Bind {
		return Bind{Volume: vol, SubPath: path.Join(project, rel), Dest: path.Join(b.workdir, rel), ReadOnly: ro}
	}
	var binds []Bind
	if !readOnly {
		binds = append(binds, bind(".", false), bind(".git", false))
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

// proxy runs the helper's allowlist proxy: the agent's only way out.
func (b *builder) proxy(allow []string) ContainerSpec {
	entrypoint := []string{"/devaipod-helper", "proxy", "--listen", "unix:" + ProxySocket,
		"--pod", b.short, "--policy-file", ProxyPolicy}
	for _, r := range allow {
		entrypoint = append(entrypoint, "--allow", r)
	}
	return b.sidecar(RoleProxy, ProxyUID, entrypoint,
		Mount{Volume: ObjectName(b.short, "proxy-sock"), Dest: ProxySocketDir},
		Mount{Volume: ObjectName(b.short, "proxy-state"), Dest: ProxyStateDir})
}

// sidecar is a trusted helper container of the pod (proxy, gator): the
// helper image, its own non-root user, no capabilities, a read-only root.
func (b *builder) sidecar(role string, uid int, entrypoint []string, mounts ...Mount) ContainerSpec {
	return ContainerSpec{
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

// collectEnv takes allowlisted names from host and then applies vars.
func collectEnv(allow []string, vars, host map[string]string) map[string]string {
	env := map[string]string{}
	for _, k := range allow {
		if v, ok := host[k]; ok {
			env[k] = v
		}
	}
	for k, v := range vars {
		env[k] = v
	}
	return env
}

func copyEnv(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// imagePath is the image's PATH, or the usual default when it sets none;
// setting PATH replaces the image's, so the shim dir is appended to it.
func imagePath(env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok && v != "" {
			return v
		}
	}
	return "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
}

// labelExecAs keeps on the pod who exec and attach run workspace commands
// as: the devcontainer's remote user with its remoteEnv, else the image's
// USER. exec starts them as root, the only user that can read the trusted
// variables' files, and the helper becomes that user once it has read them.
func (b *builder) labelExecAs(p *Plan) error {
	as := b.execAs
	as.User = cmp.Or(as.User, b.in.ImageUser)
	if as.User == "" && len(as.Env) == 0 {
		return nil
	}
	label, err := json.Marshal(as)
	if err != nil {
		return err
	}
	p.Pod.Labels[LabelExec] = string(label)
	return nil
}

// ownEnv are the variables devaipod sets itself; their values are not
// secret. Everything else comes from the user's config or environment.
var ownEnv = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "TMPDIR": true, "DEVAIPOD_AGENT_URL": true,
	"GIT_CONFIG_COUNT": true, "GIT_CONFIG_KEY_0": true, "GIT_CONFIG_VALUE_0": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "http_proxy": true, "https_proxy": true,
	"NO_PROXY": true, "no_proxy": true,
}

// Redacted returns a copy of the plan fit to print: values of variables
// that came from the user's config or environment (API keys among them)
// are replaced by "<redacted>".
func (p *Plan) Redacted() *Plan {
	c := *p
	c.Containers = make([]ContainerSpec, len(p.Containers))
	for i, ctr := range p.Containers {
		env := make(map[string]string, len(ctr.Env))
		for k, v := range ctr.Env {
			if !ownEnv[k] {
				v = "<redacted>"
			}
			env[k] = v
		}
		ctr.Env = env
		c.Containers[i] = ctr
	}
	return &c
}

// SeccompAgent names the agent's seccomp profile: podman's default, except
// that new namespaces and ptrace are refused. Podman's default allows unshare and
// clone with any flags, because the kernel allows unprivileged user
// namespaces; inside a user namespace of its own the agent would be "root"
// with every capability, which is how most container escapes through
// kernel bugs begin (and how `unshare -r` then lets it mount). Docker's
// default profile refuses the same flags to containers without
// CAP_SYS_ADMIN.
const SeccompAgent = "agent"

// Version is the devaipod version, set at build time with -ldflags -X.
var Version = "dev"

// ParseSize reads sizes such as "512m" or "4g" (binary units).
func ParseSize(s string) (int64, error) {
	if !sizeExpr.MatchString(s) {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	mult := int64(1)
	switch strings.ToLower(s[len(s)-1:]) {
	case "k":
		mult = 1 << 10
	case "m":
		mult = 1 << 20
	case "g":
		mult = 1 << 30
	}
	num := strings.TrimRight(s, "bkmgBKMG")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: %w", s, err)
	}
	return n * mult, nil
}

// sizeExpr: replaced by internal/size in this refactor.
var sizeExpr = regexp.MustCompile(`^[0-9]+[bkmgBKMG]?$`)
