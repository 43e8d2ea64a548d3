package plan

import (
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
	// SetupDoneFile, in the workspace volume (the agent's and the
	// workspace's) but outside the repository's folder, is what the
	// agent's init waits for before it starts the agent when up runs setup
	// commands in the workspace: up writes it through the workspace once
	// they are done, so that they never run what the agent wrote meanwhile.
	SetupDoneFile = WorkspacesDir + "/" + reservedPrefix + "setup-done"
	// reservedPrefix starts the names of devaipod's own files in
	// WorkspacesDir, which no repository's folder takes.
	reservedPrefix = ".devaipod-"
	// AgentGitCopyDir mounts the agent's git directory (VolumeAgentGit) a
	// second time, where no bind mount lies over it: up copies the
	// directory in there (podman's copy into a created container resolves
	// a path under a bind mount to the bind's source, the workspace's own
	// .git).
	AgentGitCopyDir = "/run/devaipod/git"
	ProxySocketDir  = "/run/devaipod/proxy"
	ProxySocket     = ProxySocketDir + "/proxy.sock"
	ProxyStateDir   = "/var/lib/devaipod/proxy"
	ProxyPolicy     = ProxyStateDir + "/policy.json"
	GatorSocketDir  = "/run/devaipod/gator"
	GatorSocket     = GatorSocketDir + "/gator.sock"
	GatorStateDir   = "/var/lib/devaipod/gator"
	// ProxyAuditLog and GatorAuditLog are the sidecars' audit records in
	// their state volumes, moved aside to NAME.1 at a bound (see
	// internal/auditlog); the same records go to the container's log,
	// which devaipod audit --follow reads.
	ProxyAuditLog = ProxyStateDir + "/audit.log"
	GatorAuditLog = GatorStateDir + "/audit.log"
	// ProxyApprovalDir and GatorApprovalDir hold the requests that wait
	// for a person (internal/approval), in the sidecars' state volumes.
	ProxyApprovalDir = ProxyStateDir + "/approvals"
	GatorApprovalDir = GatorStateDir + "/approvals"
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
	// ProxyBin is the helper at the image's root, which the proxy
	// container runs.
	ProxyBin = "/devaipod-helper"
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

// LogSizeMax caps every container's log: 16 MiB.
const LogSizeMax = 16 << 20

// Sidecar limits: the proxy and the gator serve the agent, which can flood
// them with requests; these keep a flood from growing them past what they
// need (the proxy runs in about 15 MiB, the gator in about 65 MiB), on hosts
// that enforce limits.
var (
	ProxyLimits = config.Limits{Memory: "256m", Pids: 256}
	GatorLimits = config.Limits{Memory: "512m", Pids: 256}
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
	// NoModel says why the agent has no model it can reach ("" when it
	// has one, or may): up refuses a task then, and status says it.
	NoModel string `json:"no_model,omitempty"`
	// Credentials are what the agent holds as placeholders and the
	// proxy puts in on their hosts.
	Credentials []Credential `json:"credentials,omitempty"`
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
	// MaskPatterns name the files whose content the agent never gets: not
	// in its working tree (Masked binds) nor, at any commit, in its git
	// directory's object store.
	MaskPatterns []string `json:"mask_patterns,omitempty"`
	// Untrusted says the repository is not trusted (PlanInput.Untrusted);
	// Withheld then names what of the person's the pod was not given.
	Untrusted bool     `json:"untrusted,omitempty"`
	Withheld  []string `json:"withheld,omitempty"`
	// Warnings are things the user should know before trusting the pod.
	Warnings []string `json:"warnings,omitempty"`
}

// Check is a command run in one of the pod's containers.
type Check struct {
	Container string   `json:"container"`
	Command   []string `json:"command"`
	// What it proves, for the error when it fails.
	What string `json:"what"`
	// Gate: the other checks run once it has passed. The canary's is
	// one: that the agent cannot reach the canary proves something only
	// once the canary is known to answer.
	Gate bool `json:"gate,omitempty"`
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
	// Guards names what the value is when the agent must never hold it,
	// under any name ("trusted variable GH_TOKEN", "credential
	// OPENAI_API_KEY"); empty for what the agent may hold (its own
	// password, the upstream CA).
	Guards string `json:"-"`
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
	// LogSizeMax caps the container's log file (bytes; podman's k8s-file
	// driver truncates it there): what the agent prints is kept, not
	// the host's disk filled.
	LogSizeMax int64 `json:"log_size_max"`
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
	// ResolveImage tells what an image sets for its containers. Build asks
	// it for the workspace's image (its PATH and USER), once; nil means
	// nothing is known (a dry run).
	ResolveImage func(image string) (ImageConfig, error)
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
	// PlaceholderSalt makes the credentials' placeholders unlike anything
	// else ([A-Za-z0-9]); the caller draws it at random.
	PlaceholderSalt string
	// UpstreamCA is the PEM of [network] upstream_ca's files, which the
	// caller reads.
	UpstreamCA string
	// ForbiddenPaths are host paths the agent's path requests are refused
	// without asking (the host checks again, symlinks resolved, when a
	// person approves one).
	ForbiddenPaths []string
	// Task is the first message for the agent.
	Task string
	// Pool is the fingerprint of a pool pod's plan (LabelPool); "" for a
	// pod made for one task.
	Pool string
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
	// GatorRepo is the source's repository on the forge, OWNER/REPO (a
	// pull request's base; "" if it has none there): the gator asks the
	// forge about the source's RemoteCommits in it.
	GatorRepo string
	// Untrusted is a repository the person has not said they trust: its
	// code (lifecycle commands, image, Dockerfile, features) runs in the
	// workspace, so the workspace gets nothing of theirs: no trusted
	// value, no host path, no host variable the repository names. The
	// gator and the proxy keep their credentials (they run none of its
	// code).
	Untrusted bool
	// AgentConfigInRepo: the repository has a config of its agent's
	// (opencode.json, .opencode/), which may name a model devaipod does
	// not see (see Plan.NoModel).
	AgentConfigInRepo bool
}

// ImageConfig is what an image sets for the containers made from it.
type ImageConfig struct {
	// ID is podman's id of the image (its config's digest).
	ID   string
	Env  []string // NAME=value
	User string   // USER, "" when unset
	// Labels are the image's labels (devaipod's helper image carries its
	// version in LabelVersion).
	Labels map[string]string
}

// Container returns the plan's container of a role, or nil.
func (p *Plan) Container(role string) *ContainerSpec {
	for i := range p.Containers {
		if p.Containers[i].Role == role {
			return &p.Containers[i]
		}
	}
	return nil
}

// Workspace and Agent are the containers every plan has.
func (p *Plan) Workspace() *ContainerSpec { return p.Container(RoleWorkspace) }
func (p *Plan) Agent() *ContainerSpec     { return p.Container(RoleAgent) }

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

// ownEnv are the variables devaipod sets itself; their values are not
// secret. Everything else comes from the user's config or environment.
var ownEnv = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "TMPDIR": true, "DEVAIPOD_AGENT_URL": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "http_proxy": true, "https_proxy": true,
	"NO_PROXY": true, "no_proxy": true,
}

// ownVariable tells the variables devaipod sets itself.
func ownVariable(name string) bool {
	_, git := workspaceGitConfig("")[name]
	return ownEnv[name] || git
}

// Redacted returns a copy of the plan fit to print: values of variables
// that came from the user's config or environment (API keys among them)
// are replaced by "<redacted>".
//
// The lifecycle commands are shown with those values redacted too: one
// may name a variable (${containerEnv:TOKEN}) whose value came from the
// host.
func (p *Plan) Redacted() *Plan {
	c := *p
	c.Containers = make([]ContainerSpec, len(p.Containers))
	var values []string
	for i, ctr := range p.Containers {
		env := make(map[string]string, len(ctr.Env))
		for k, v := range ctr.Env {
			if !ownVariable(k) {
				if len(v) >= minRedacted {
					values = append(values, v)
				}
				v = "<redacted>"
			}
			env[k] = v
		}
		ctr.Env = env
		c.Containers[i] = ctr
	}
	if p.Lifecycle != nil && len(values) > 0 {
		l := *p.Lifecycle
		for _, cmd := range []**devcontainer.LifecycleCommand{&l.OnCreate, &l.UpdateContent, &l.PostCreate, &l.PostStart, &l.PostAttach} {
			*cmd = redactCommand(*cmd, values)
		}
		c.Lifecycle = &l
	}
	return &c
}

// minRedacted is the shortest value Redacted looks for in commands: a
// shorter one ("1", "on") would redact what it happens to be part of.
const minRedacted = 4

// redactCommand is a copy of lc with each of values in its arguments
// replaced by "<redacted>".
func redactCommand(lc *devcontainer.LifecycleCommand, values []string) *devcontainer.LifecycleCommand {
	if lc == nil {
		return nil
	}
	c := *lc
	c.Steps = make([]devcontainer.Step, len(lc.Steps))
	for i, s := range lc.Steps {
		args := make([]string, len(s.Args))
		for j, a := range s.Args {
			for _, v := range values {
				a = strings.ReplaceAll(a, v, "<redacted>")
			}
			args[j] = a
		}
		c.Steps[i] = devcontainer.Step{Name: s.Name, Args: args}
	}
	c.Before = nil
	for _, b := range lc.Before {
		c.Before = append(c.Before, redactCommand(b, values))
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
