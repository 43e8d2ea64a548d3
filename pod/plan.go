package pod

import (
	"fmt"
	"path"
	"sort"
	"strings"
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
	// SecretDir holds the workspace's secrets, one root-only file per
	// variable; `devaipod exec` runs commands through the helper's
	// secret-env, which reads them into the environment.
	SecretDir = "/run/devaipod/secrets"
)

// AgentUID and AgentGID are the agent's user. The workspace copy of the
// repository is owned by it, so a root workspace user and the agent can both
// write it.
const (
	AgentUID = 1000
	AgentGID = 1000
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
	// AgentURL is where the workspace reaches the agent's server.
	AgentURL string `json:"agent_url"`
	// Warnings are things the user should know before trusting the pod.
	Warnings []string `json:"warnings,omitempty"`
}

// PodSpec is the pod itself. Its network namespace is shared by every
// container except the agent.
type PodSpec struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
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
	Env        map[string]string `json:"env,omitempty"`
	// SecretEnv maps variable names to podman secret names. They are
	// mounted as files under SecretDir, so values never appear in podman
	// inspect.
	SecretEnv map[string]string `json:"secret_env,omitempty"`
	Labels    map[string]string `json:"labels"`

	Network         string   `json:"network"`
	PrivateIPC      bool     `json:"private_ipc"`
	CapDrop         []string `json:"cap_drop,omitempty"`
	CapAdd          []string `json:"cap_add,omitempty"`
	NoNewPrivileges bool     `json:"no_new_privileges"`
	ReadOnlyRoot    bool     `json:"read_only_root"`

	Mounts      []Mount      `json:"mounts"`
	ImageMounts []ImageMount `json:"image_mounts,omitempty"`
	Tmpfs       []Tmpfs      `json:"tmpfs,omitempty"`
	Limits      *Limits      `json:"limits,omitempty"`
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
	Config *Config
	Source *Source
	// Image overrides the workspace and agent images (up --image).
	Image       string
	HelperImage string
	// ImageEnv is the workspace image's environment (for its PATH).
	ImageEnv []string
	// HostEnv is the environment devaipod runs in.
	HostEnv map[string]string
	// Host is what podman said about the host; zero for a dry run.
	Host HostInfo
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
	cfg := in.Config
	if cfg == nil {
		cfg = &Config{}
	}
	src := in.Source
	wsImage := firstNonEmpty(in.Image, cfg.Workspace.Image, DefaultImage)
	agentImage := firstNonEmpty(in.Image, cfg.Agent.Image, wsImage)
	helper := firstNonEmpty(in.HelperImage, DefaultHelperImage)
	port := cfg.Agent.Port
	if port == 0 {
		port = DefaultAgentPort
	}
	command := cfg.Agent.Command
	if len(command) == 0 {
		command = DefaultAgentCommand
	}
	limits := cfg.Agent.Limits
	if limits.TmpSize == "" {
		limits.TmpSize = DefaultTmpSize
	}

	labels := func(extra ...string) map[string]string {
		l := map[string]string{LabelPod: short, LabelVersion: Version}
		for i := 0; i+1 < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return l
	}
	podLabels := labels()
	if src != nil {
		if src.Remote != "" {
			podLabels[LabelRepo] = src.Remote
		} else {
			podLabels[LabelRepo] = src.Input
		}
		if src.Commit != "" {
			podLabels[LabelCommit] = src.Commit
		}
	}

	project := "project"
	if src != nil && src.Project != "" {
		project = src.Project
	}
	workdir := path.Join(WorkspacesDir, project)
	agentURL := fmt.Sprintf("http://127.0.0.1:%d", port)

	podLabels[LabelAgentURL] = agentURL
	p := &Plan{
		Name:     short,
		Pod:      PodSpec{Name: PodName(short), Labels: podLabels},
		Workdir:  workdir,
		AgentURL: agentURL,
	}
	wsVol := ObjectName(short, "workspace")
	homeVol := ObjectName(short, "agent-home")
	sockVol := ObjectName(short, "agent-sock")
	p.Volumes = []VolumeSpec{
		{Name: wsVol, Labels: labels(), UID: AgentUID, GID: AgentGID},
		{Name: homeVol, Labels: labels(), UID: AgentUID, GID: AgentGID},
		{Name: sockVol, Labels: labels(), UID: AgentUID, GID: AgentGID},
	}

	shared := collectEnv(cfg.Env.Allowlist, cfg.Env.Vars, in.HostEnv)

	// Workspace: the trusted side. Trusted values travel as podman secrets.
	wsEnv := copyEnv(shared)
	wsEnv["DEVAIPOD_AGENT_URL"] = agentURL
	wsEnv["PATH"] = imagePath(in.ImageEnv) + ":" + HelperShimDir
	// The copy belongs to the agent user; git in the workspace would refuse
	// it as "dubious ownership" without this. It names only this folder.
	wsEnv["GIT_CONFIG_COUNT"] = "1"
	wsEnv["GIT_CONFIG_KEY_0"] = "safe.directory"
	wsEnv["GIT_CONFIG_VALUE_0"] = workdir
	secretEnv := map[string]string{}
	trusted := collectEnv(cfg.Trusted.Env.Allowlist, cfg.Trusted.Env.Vars, in.HostEnv)
	for _, k := range sortedKeys(trusted) {
		name := ObjectName(short, "env-"+strings.ToLower(k))
		p.Secrets = append(p.Secrets, SecretSpec{Name: name, Labels: labels(), Value: trusted[k]})
		secretEnv[k] = name
		delete(wsEnv, k)
	}
	for _, s := range cfg.Trusted.Env.Secrets {
		v, secret, _ := strings.Cut(s, "=")
		secretEnv[v] = secret
		delete(wsEnv, v)
	}
	ws := ContainerSpec{
		Name:  ContainerName(short, RoleWorkspace),
		Role:  RoleWorkspace,
		Image: wsImage,
		Entrypoint: []string{HelperBin, "init",
			"--forward", fmt.Sprintf("tcp:127.0.0.1:%d=unix:%s", port, AgentSocket)},
		Workdir:   workdir,
		Env:       wsEnv,
		SecretEnv: secretEnv,
		Labels:    labels(LabelRole, RoleWorkspace),
		Network:   NetworkPod,
		Mounts: []Mount{
			{Volume: wsVol, Dest: WorkspacesDir},
			{Volume: sockVol, Dest: AgentSocketDir, ReadOnly: true},
		},
		ImageMounts: []ImageMount{{Image: helper, Dest: HelperMount}},
		StopTimeout: 5,
	}

	// Agent: untrusted. Only the shared env, its own keys, nothing trusted.
	agentEnv := copyEnv(shared)
	for _, k := range LLMKeyVars {
		if v, ok := in.HostEnv[k]; ok {
			agentEnv[k] = v
		}
	}
	for k, v := range in.HostEnv {
		if rest, ok := strings.CutPrefix(k, AgentEnvPrefix); ok && rest != "" {
			agentEnv[rest] = v
		}
	}
	for k := range secretEnv {
		delete(agentEnv, k) // a trusted name never reaches the agent, whatever its source
	}
	agentEnv["HOME"] = AgentHome
	agentEnv["USER"] = "agent"
	agentEnv["TMPDIR"] = "/tmp"
	agent := ContainerSpec{
		Name:  ContainerName(short, RoleAgent),
		Role:  RoleAgent,
		Image: agentImage,
		Entrypoint: []string{HelperBin, "init",
			"--expose", fmt.Sprintf("unix:%s=tcp:127.0.0.1:%d", AgentSocket, port), "--"},
		Command:         command,
		User:            fmt.Sprintf("%d:%d", AgentUID, AgentGID),
		Workdir:         workdir,
		Env:             agentEnv,
		Labels:          labels(LabelRole, RoleAgent),
		Network:         NetworkNone,
		PrivateIPC:      true,
		CapDrop:         []string{"ALL"},
		NoNewPrivileges: true,
		ReadOnlyRoot:    true,
		Mounts: []Mount{
			{Volume: wsVol, Dest: WorkspacesDir},
			{Volume: homeVol, Dest: AgentHome},
			{Volume: sockVol, Dest: AgentSocketDir},
		},
		ImageMounts: []ImageMount{{Image: helper, Dest: HelperMount}},
		Tmpfs:       []Tmpfs{{Dest: "/tmp", Size: limits.TmpSize, Options: "rw,nosuid,nodev,mode=1777"}},
		Limits:      &limits,
		StopTimeout: 5,
	}
	p.Containers = []ContainerSpec{ws, agent}
	if in.Host.Version != "" && !in.Host.LimitsEnforced() && (limits.Memory != "" || limits.CPUs > 0 || limits.Pids > 0) {
		p.Warnings = append(p.Warnings, "agent resource limits (memory, cpus, pids) are not enforced on this host: "+
			"rootless podman on cgroup v1 ignores them (the /tmp size limit still holds)")
	}
	return p, nil
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

func sortedKeys(m map[string]string) []string {
	keys := mapKeys(m)
	sort.Strings(keys)
	return keys
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
