package devcontainer

import (
	"path"
	"strings"
)

// Config is a parsed devcontainer.json. Paths in Build are resolved relative
// to the file's directory; strings may still hold ${...} variables until
// Substitute runs. Fields the file leaves out are zero (nil for the pointer
// and map fields), so the caller can tell "unset" from "set to empty".
type Config struct {
	// File is the path the configuration came from, as given to Load or Parse.
	File string `json:"file,omitempty"`

	Name  string `json:"name,omitempty"`
	Image string `json:"image,omitempty"`
	// Build is set when the file builds its image from a Dockerfile
	// (build.dockerfile, or the legacy top-level dockerFile). Image and
	// Build are never both set; when neither is, the caller uses its
	// default image.
	Build *Build `json:"build,omitempty"`

	// WorkspaceFolder is where the source is in the container; "" means the
	// default, /workspaces/<basename of the local folder>.
	WorkspaceFolder string `json:"workspaceFolder,omitempty"`

	ContainerEnv map[string]string `json:"containerEnv,omitempty"`
	RemoteEnv    map[string]string `json:"remoteEnv,omitempty"`
	// RemoteEnvUnset lists remoteEnv names set to null, which the spec
	// defines as "remove this variable" (sorted).
	RemoteEnvUnset []string `json:"remoteEnvUnset,omitempty"`

	RemoteUser          string `json:"remoteUser,omitempty"`
	ContainerUser       string `json:"containerUser,omitempty"`
	UpdateRemoteUserUID *bool  `json:"updateRemoteUserUID,omitempty"`

	// InitializeCommand runs on the host before the container is created;
	// the others run inside the container (see LifecycleCommand).
	InitializeCommand    *LifecycleCommand `json:"initializeCommand,omitempty"`
	OnCreateCommand      *LifecycleCommand `json:"onCreateCommand,omitempty"`
	UpdateContentCommand *LifecycleCommand `json:"updateContentCommand,omitempty"`
	PostCreateCommand    *LifecycleCommand `json:"postCreateCommand,omitempty"`
	PostStartCommand     *LifecycleCommand `json:"postStartCommand,omitempty"`
	PostAttachCommand    *LifecycleCommand `json:"postAttachCommand,omitempty"`

	// Entrypoints are the scripts the image's metadata says its features
	// need running when the container starts (docker-in-docker's
	// docker-init.sh), in order: not a devcontainer.json property.
	Entrypoints []string `json:"entrypoints,omitempty"`

	CapAdd      []string `json:"capAdd,omitempty"`
	SecurityOpt []string `json:"securityOpt,omitempty"`
	Privileged  bool     `json:"privileged,omitempty"`
	Init        bool     `json:"init,omitempty"`

	// RunArgs is the raw runArgs array; ParseRunArgs maps it (after
	// Substitute). Parse has already checked that it parses.
	RunArgs []string `json:"runArgs,omitempty"`
	Mounts  []Mount  `json:"mounts,omitempty"`

	ForwardPorts []Port `json:"forwardPorts,omitempty"`

	// Features is kept as written (object of feature id to options); the
	// caller hands the file to the devcontainer CLI to build them.
	Features map[string]any `json:"features,omitempty"`
	// OverrideFeatureInstallOrder is read by the devcontainer CLI together
	// with Features.
	OverrideFeatureInstallOrder []string `json:"overrideFeatureInstallOrder,omitempty"`

	// Devaipod is customizations.devaipod.
	Devaipod Customizations `json:"devaipod,omitzero"`

	// Unsupported lists, sorted, every key of the file that devaipod
	// ignores: top-level keys ("shutdownAction"), keys inside objects that
	// devaipod reads ("build.options", "mounts[1].consistency",
	// "customizations.devaipod.foo"). The caller warns once.
	Unsupported []string `json:"unsupported,omitempty"`
	// Warnings are things that parse but may not do what the author meant,
	// each a full sentence naming the key.
	Warnings []string `json:"warnings,omitempty"`
	// WithheldEnv are the host variables that ${localEnv:...} named, set
	// on the host, that Substitute did not put in (Vars.WithholdLocalEnv),
	// sorted.
	WithheldEnv []string `json:"withheldEnv,omitempty"`

	// lines maps keys ("mounts[0].target") to their line in File, so that
	// errors found by Substitute can point at the line too.
	lines map[string]int
}

// Build says how to build the image from a Dockerfile.
type Build struct {
	// Dockerfile is the Dockerfile's path: the value in the file joined to
	// the directory of devcontainer.json (unless it is absolute).
	Dockerfile string `json:"dockerfile"`
	// Context is the build context, resolved the same way; default ".",
	// which is the directory of devcontainer.json.
	Context string            `json:"context"`
	Args    map[string]string `json:"args,omitempty"`
	Target  string            `json:"target,omitempty"`
	// CacheFrom lists images to use as build caches (string or array in
	// the file).
	CacheFrom []string `json:"cacheFrom,omitempty"`

	// The values as written; paths that hold ${...} are resolved by
	// Substitute, once the variables are known.
	rawDockerfile, rawContext string
	dir                       string
}

// LifecycleCommand is one of the *Command properties. The string form
// becomes one step that runs "/bin/sh -c STRING"; the array form one step
// that runs exactly those arguments, without a shell; the object form one
// step per entry (each a string or an array, as above), named by its key,
// in the file's order, which the spec runs in parallel.
type LifecycleCommand struct {
	Steps    []Step `json:"steps"`
	Parallel bool   `json:"parallel,omitempty"`
	// From names where a command of an image's devcontainer.metadata
	// comes from (a feature's id, or "the image"); "" for the file's own.
	From string `json:"from,omitempty"`
	// Before are the same property's commands of the image's metadata, in
	// its order: they run first, each as its own command (the spec's
	// merge).
	Before []*LifecycleCommand `json:"before,omitempty"`
}

// Step is one command of a LifecycleCommand.
type Step struct {
	// Name is the key of the object form, "" otherwise.
	Name string   `json:"name,omitempty"`
	Args []string `json:"args"`
}

// Shell is the argv prefix a string command runs with.
var Shell = []string{"/bin/sh", "-c"}

// String shows the step as a user would write it: the script of a shell
// step, else the arguments quoted for a POSIX shell.
func (s Step) String() string {
	if len(s.Args) == 3 && s.Args[0] == Shell[0] && s.Args[1] == Shell[1] {
		return s.Args[2]
	}
	quoted := make([]string, len(s.Args))
	for i, a := range s.Args {
		quoted[i] = shellQuote(a)
	}
	return strings.Join(quoted, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Mount is one entry of mounts (string or object form), or of runArgs
// -v/--volume/--mount.
type Mount struct {
	// Type is bind, volume or tmpfs; the string form defaults to volume,
	// as docker --mount does.
	Type string `json:"type"`
	// Source is the host path of a bind mount, the volume name of a volume
	// ("" for an anonymous volume), empty for tmpfs.
	Source   string `json:"source,omitempty"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readonly,omitempty"`
	// Options keeps the other key=value fields of the string form
	// ("consistency=cached", "bind-propagation=rslave", "tmpfs-size=64m")
	// or the options of -v ("z", "U"), in order; the caller decides.
	Options []string `json:"options,omitempty"`
}

// Mount types.
const (
	MountBind   = "bind"
	MountVolume = "volume"
	MountTmpfs  = "tmpfs"
)

// Port is one entry of forwardPorts: a number (Host "") or "host:port".
type Port struct {
	Host string `json:"host,omitempty"`
	Port int    `json:"port"`
}

// Local reports whether the port is on the dev container itself: a plain
// number, or "localhost:N". Other hosts name compose services, which
// devaipod does not run.
func (p Port) Local() bool { return p.Host == "" || p.Host == "localhost" }

// Customizations is customizations.devaipod: what the project asks of
// devaipod's agent side.
type Customizations struct {
	// EnvAllowlist names host variables the project wants in the agent.
	EnvAllowlist []string `json:"envAllowlist,omitempty"`
	// AllowedDomains adds proxy rules (docs/network.md syntax).
	AllowedDomains []string `json:"allowedDomains,omitempty"`
	// Agent is the agent the project suggests; nil when not given.
	Agent *Agent `json:"agent,omitempty"`
}

// Agent is customizations.devaipod.agent: either a string (the kind) or an
// object with any of these keys. Zero fields mean devaipod's defaults
// (or the user's configuration, which wins).
type Agent struct {
	// Kind is AgentOpencode or AgentCustom (which needs Command), as in
	// devaipod's [agent] configuration; "" means the default.
	Kind string `json:"kind,omitempty"`
	// Image is the agent container's image; "" means the workspace image.
	Image string `json:"image,omitempty"`
	// Command runs the agent's server: an array runs as is, a string
	// through /bin/sh -c.
	Command []string `json:"command,omitempty"`
	// Port is the TCP port the server listens on, on 127.0.0.1 inside the
	// agent.
	Port int `json:"port,omitempty"`
	// Health is an HTTP path (starting with "/") on that port which answers
	// 2xx once the server is ready.
	Health string `json:"health,omitempty"`
}

// Agent kinds, the same as devaipod's [agent] kind.
const (
	AgentOpencode = "opencode"
	AgentCustom   = "custom"
)

// DefaultWorkspaceFolder is the spec's default workspaceFolder for a local
// folder: /workspaces/<basename>.
func DefaultWorkspaceFolder(localWorkspaceFolder string) string {
	return path.Join("/workspaces", basename(localWorkspaceFolder))
}

// basename is the last element of a host path (either separator).
func basename(p string) string {
	p = strings.TrimRight(p, `/\`)
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}
