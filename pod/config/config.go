package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devaipod/devaipod/gator/policy"

	"github.com/devaipod/devaipod/internal/size"

	"github.com/BurntSushi/toml"
	"github.com/devaipod/devaipod/pod/source"
)

// Config is devaipod's configuration file (TOML). Every key is documented in
// docs/configuration.md; unknown keys are errors, not silently ignored.
type Config struct {
	// Env is passed to both the workspace and the agent.
	Env EnvConfig `toml:"env"`
	// Trusted is passed to the trusted side only (workspace, later the
	// gator), never to the agent.
	Trusted TrustedConfig `toml:"trusted"`
	Agent   AgentConfig   `toml:"agent"`
	// Workspace configures the trusted workspace container.
	Workspace WorkspaceConfig `toml:"workspace"`
	// Network decides the agent's way out.
	Network NetworkConfig `toml:"network"`
	// Mounts are extra host paths bind-mounted into the pod's containers.
	Mounts []MountConfig `toml:"mounts"`
	// Forge is the GitHub (or GitHub Enterprise) server: pull request
	// sources and the gator's API.
	Forge ForgeConfig `toml:"forge"`
	// Gator grants the agent scoped forge access.
	Gator GatorConfig `toml:"gator"`
	// Credentials are secrets the agent holds only as placeholders: the
	// proxy puts the real value into requests to their hosts.
	Credentials map[string]CredentialConfig `toml:"credentials"`
	// Approvals configures how a person hears of requests that wait.
	Approvals ApprovalsConfig `toml:"approvals"`

	// Warnings are what the file allows that the user should know of
	// (such as a rule that opens a whole public suffix), each with the
	// file, line and key; up reports them. Not a key of the file.
	Warnings []string `toml:"-"`
}

// CredentialConfig is [credentials.NAME]: the agent's variable NAME holds a
// placeholder, which the proxy replaces with the real value in the headers
// of requests to Hosts.
type CredentialConfig struct {
	// Hosts are allow rules (host, host:port, *.suffix); port 443 unless
	// given. They are added to the allowlist.
	Hosts []string `toml:"hosts"`
	// Env is the variable of devaipod's environment that holds the value
	// (default: NAME); Secret a podman secret that holds it instead.
	Env    string `toml:"env"`
	Secret string `toml:"secret"`
}

// ForgeConfig names the forge's web and API addresses.
type ForgeConfig struct {
	// URL is the web address whose pull request URLs up accepts
	// (default https://github.com).
	URL string `toml:"url"`
	// APIURL is its REST API (default https://api.github.com/ for
	// github.com); the gator uses it, and up to find a fork's branch.
	APIURL string `toml:"api_url"`
}

// GatorConfig is [gator].
type GatorConfig struct {
	GitHub GatorGitHubConfig `toml:"github"`
}

// GatorGitHubConfig grants permissions per repository:
// repos = { "OWNER/REPO" = ["read", "create-draft"], "OWNER/*" = ["read"] }.
type GatorGitHubConfig struct {
	Repos map[string][]string `toml:"repos"`
	// ProtectedPaths are the files no commit the gator pushes may touch
	// ("dir/**" for everything under dir); empty means the CI definitions
	// of policy.DefaultProtectedPaths.
	ProtectedPaths []string `toml:"protected_paths"`
}

// MountConfig is one [[mounts]] entry: a host path for the workspace (and,
// when listed, the agent), read-only unless RW.
type MountConfig struct {
	Source string `toml:"source"`
	Target string `toml:"target"`
	RW     bool   `toml:"rw"`
	// Containers lists the roles that get the mount: "workspace" (the
	// default) and/or "agent".
	Containers []string `toml:"containers"`
}

// Network modes.
const (
	// NetworkAllowlist: the agent's only way out is the pod's proxy, which
	// allows the listed hosts and denies everything else.
	NetworkAllowlist = "allowlist"
	// NetworkModeNone: no way out at all.
	NetworkModeNone = "none"
	// NetworkOpen: the agent shares the pod's network, unrestricted.
	NetworkOpen = "open"
)

// NetworkConfig configures egress.
type NetworkConfig struct {
	// Mode is allowlist (default), none or open.
	Mode string `toml:"mode"`
	// Allow adds proxy rules to the built-in list of LLM API hosts.
	Allow []string `toml:"allow"`
	// NoDefaultAllow drops the built-in list.
	NoDefaultAllow bool `toml:"no_default_allow"`
	// ExtraHosts adds "name:ip" entries to the pod's /etc/hosts.
	ExtraHosts []string `toml:"extra_hosts"`
	// HostLoopback lets the pod (not the agent) reach the host's loopback
	// at 10.0.2.2 (rootless slirp4netns only).
	HostLoopback bool `toml:"host_loopback"`
	// UpstreamCA are PEM files of extra roots the proxy trusts when it
	// talks to a host with a credential (a private endpoint, a test).
	UpstreamCA []string `toml:"upstream_ca"`
	// Ask are rules whose requests wait for a person's decision
	// (devaipod approvals) instead of being refused; AskTimeout is how
	// long they wait (default DefaultAskTimeout), then they are refused.
	Ask        []string `toml:"ask"`
	AskTimeout string   `toml:"ask_timeout"`
}

// DefaultAskTimeout is how long a request waits for a decision.
const DefaultAskTimeout = time.Minute

// AskTimeoutOr is [network] ask_timeout (validated), else the default.
func (n NetworkConfig) AskTimeoutOr() time.Duration {
	if d, err := time.ParseDuration(n.AskTimeout); err == nil && d > 0 {
		return d
	}
	return DefaultAskTimeout
}

// ApprovalsConfig is [approvals].
type ApprovalsConfig struct {
	// Notify is a command that devaipod approvals --watch runs for each new
	// request: {pod}, {kind}, {what} and {id} in its words are replaced.
	Notify []string `toml:"notify"`
}

// DefaultCredentials bind the built-in LLM key variables to their
// providers' API hosts: when one is set where devaipod runs, the agent
// gets a placeholder and the proxy puts the key in on those hosts.
// [credentials.NAME] replaces an entry.
var DefaultCredentials = map[string][]string{
	"ANTHROPIC_API_KEY":  {"api.anthropic.com"},
	"OPENAI_API_KEY":     {"api.openai.com"},
	"GOOGLE_API_KEY":     {"generativelanguage.googleapis.com"},
	"GEMINI_API_KEY":     {"generativelanguage.googleapis.com"},
	"OPENROUTER_API_KEY": {"openrouter.ai"},
	"GROQ_API_KEY":       {"api.groq.com"},
	"MISTRAL_API_KEY":    {"api.mistral.ai"},
	"COHERE_API_KEY":     {"api.cohere.ai", "api.cohere.com"},
	"XAI_API_KEY":        {"api.x.ai"},
	"TOGETHER_API_KEY":   {"api.together.xyz"},
}

// DefaultAllow is the built-in allowlist: the LLM APIs agents talk to.
var DefaultAllow = []string{
	"api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com",
	"api.groq.com", "api.mistral.ai", "openrouter.ai", "api.cohere.ai",
	"api.x.ai", "api.together.xyz",
}

// EnvConfig selects variables: Allowlist names variables copied from the
// environment devaipod runs in (missing ones are skipped); Vars sets values
// and wins over the allowlist.
type EnvConfig struct {
	Allowlist []string          `toml:"allowlist"`
	Vars      map[string]string `toml:"vars"`
}

// TrustedConfig holds what only the trusted side may see.
type TrustedConfig struct {
	Env TrustedEnvConfig `toml:"env"`
}

// TrustedEnvConfig is an EnvConfig whose values are delivered as podman
// secrets, plus references to podman secrets the user created.
type TrustedEnvConfig struct {
	Allowlist []string          `toml:"allowlist"`
	Vars      map[string]string `toml:"vars"`
	// Secrets maps existing podman secrets to variables: "VAR=secret_name".
	Secrets []string `toml:"secrets"`
}

// AgentConfig configures the agent container.
type AgentConfig struct {
	// Kind picks a preset: "opencode" (the default) or "custom", which
	// needs Command.
	Kind string `toml:"kind"`
	// Image defaults to the workspace image.
	Image string `toml:"image"`
	// Command runs the agent's server; a string runs through /bin/sh -c.
	Command Command `toml:"command"`
	// Port is the TCP port the agent's server listens on inside the agent.
	Port int `toml:"port"`
	// Health is the path up polls until the agent's server answers 2xx.
	Health string `toml:"health"`
	Limits Limits `toml:"limits"`
	// Protect lists workspace paths (relative to the repository) that the
	// agent sees read-only (.devcontainer always is; the agent's .git is
	// a directory of its own). nil means DefaultProtect.
	Protect []string `toml:"protect"`
	// Mask lists file name patterns (path.Match syntax, matched against
	// each file's base name) whose files the agent sees empty. nil means
	// DefaultMask; an empty list masks nothing.
	Mask []string `toml:"mask"`
	// WorkspaceAccess is "rw" (the default) or "ro" (review-only agents).
	WorkspaceAccess string `toml:"workspace_access"`
}

// WorkspaceConfig configures the workspace container.
type WorkspaceConfig struct {
	Image string `toml:"image"`
	// PrivateRegistries are registries (HOST[:PORT], as an image names
	// them) on loopback or private addresses that an untrusted
	// repository's images may come from; others are refused there.
	PrivateRegistries []string `toml:"private_registries"`
	// Limits caps the workspace like [agent.limits] caps the agent; none
	// by default (a devcontainer's runArgs may set them too).
	Limits Limits `toml:"limits"`
}

// Limits caps the agent's resources. Zero values mean podman's defaults
// (no limit), except TmpSize, which always has a size.
type Limits struct {
	Memory  string  `toml:"memory"`
	CPUs    float64 `toml:"cpus"`
	Pids    int64   `toml:"pids"`
	TmpSize string  `toml:"tmp_size"`
	// Timeout is the agent's maximum lifetime ("8h"); podman stops it
	// then. Empty: no limit.
	Timeout string `toml:"timeout"`
}

// Enforceable tells whether any limit needs the host's cgroups (the /tmp
// size is a tmpfs option and always holds).
func (l Limits) Enforceable() bool { return l.Memory != "" || l.CPUs > 0 || l.Pids > 0 }

// Command is a command line given in TOML as an array of arguments or as
// a single string for /bin/sh -c.
type Command []string

// UnmarshalTOML implements toml.Unmarshaler.
func (c *Command) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case string:
		if strings.TrimSpace(v) == "" {
			return errors.New("command is empty")
		}
		*c = Command{"/bin/sh", "-c", v}
	case []any:
		if len(v) == 0 {
			return errors.New("command is empty")
		}
		args := make(Command, 0, len(v))
		for _, a := range v {
			s, ok := a.(string)
			if !ok {
				return fmt.Errorf("command arguments must be strings, got %T", a)
			}
			args = append(args, s)
		}
		*c = args
	default:
		return fmt.Errorf("command must be a string or an array of strings, got %T", v)
	}
	return nil
}

// Defaults.
const (
	DefaultImage       = "localhost/devaipod-default:latest"
	DefaultHelperImage = "localhost/devaipod-helper:latest"
	DefaultAgentPort   = 4096
	DefaultTmpSize     = "512m"
	// DefaultPids caps the agent's processes: far above what an agent and
	// its tools use, far below what a fork bomb needs to hurt the host.
	DefaultPids = 4096
	// DefaultMemory caps the agent's memory.
	DefaultMemory = "8g"
)

// Agent kinds.
const (
	AgentOpencode = "opencode"
	AgentCustom   = "custom"
)

// Workspace access modes of the agent.
const (
	AccessRW = "rw"
	AccessRO = "ro"
)

// DefaultProtect is what [agent] protect means when unset; AlwaysProtect
// is protected whatever it says. In the agent's view these paths are
// read-only: they make the trusted side run code. .git is not among them:
// the agent has a git directory of its own, which the trusted side never
// reads (see docs/sandboxing.md).
var (
	AlwaysProtect  = []string{".devcontainer"}
	DefaultProtect = []string{".vscode", ".gitmodules", ".envrc"}
	DefaultMask    = []string{".env", ".env.*", "*.pem", "*.key", "id_*"}
)

// ConfigError is a problem in a configuration file, with its position.
type ConfigError struct {
	File string
	Line int    // 0 when unknown
	Key  string // dotted key, "" when unknown
	Msg  string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": %s", e.Key)
	}
	fmt.Fprintf(&b, ": %s", e.Msg)
	return b.String()
}

// DefaultConfigPath is $XDG_CONFIG_HOME/devaipod.toml, else
// ~/.config/devaipod.toml.
func DefaultConfigPath() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "devaipod.toml")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".config", "devaipod.toml")
}

// LoadConfig reads the configuration file at path. A missing file gives the
// defaults when mustExist is false (the default path), and an error when
// the user named the file.
func LoadConfig(path string, mustExist bool) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !mustExist {
		return &Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig parses configuration text; file names it in errors.
func ParseConfig(file string, data []byte) (*Config, error) {
	var cfg Config
	md, err := toml.Decode(string(data), &cfg)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &ConfigError{File: file, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}
		}
		// Type mismatches come as plain errors with the position in the text.
		ce := &ConfigError{File: file, Msg: err.Error()}
		if m := decodeErr.FindStringSubmatch(err.Error()); m != nil {
			ce.Line, _ = strconv.Atoi(m[1])
			ce.Key, ce.Msg = m[2], typeMessage(m[3])
		}
		return nil, ce
	}
	// The decoder drops, without a word, a value that is not a table
	// where a map is wanted ([env] vars = ["A=1"]).
	// (A table made only by its sub-tables, [credentials.X], has no type.)
	for _, t := range tableKeys {
		if typ := md.Type(t.key...); typ != "" && typ != "Hash" {
			return nil, &ConfigError{File: file, Line: keyLine(data, t.key), Key: t.key.String(),
				Msg: fmt.Sprintf("must be a table, such as %s, not %s", t.example, tomlTypeName(typ))}
		}
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		key := undecoded[0].String()
		return nil, &ConfigError{File: file, Line: keyLine(data, undecoded[0]), Key: key,
			Msg: "unknown key (see docs/configuration.md for the keys devaipod reads)"}
	}
	if err := cfg.validate(); err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			ce.File = file
			// A missing key has no line: its table's is the next best.
			for key := strings.Split(ce.Key, "."); ce.Line == 0 && len(key) > 0; key = key[:len(key)-1] {
				ce.Line = keyLine(data, key)
			}
			var n int
			if _, err := fmt.Sscanf(ce.Key, "mounts[%d]", &n); err == nil {
				ce.Line = tableLine(data, "[[mounts]]", n)
			}
		}
		return nil, err
	}
	for _, w := range cfg.warnings() {
		w.File, w.Line = file, keyLine(data, strings.Split(w.Key, "."))
		cfg.Warnings = append(cfg.Warnings, w.Error())
	}
	return &cfg, nil
}

// warnings are what validate lets through but the user should know of:
// the rules that open a whole public suffix (see RuleWarning).
func (c *Config) warnings() []*ConfigError {
	var out []*ConfigError
	for _, r := range c.Network.Allow {
		if msg, _ := RuleWarning(r); msg != "" {
			out = append(out, &ConfigError{Key: "network.allow", Msg: msg})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Credentials)) {
		for _, h := range c.Credentials[name].Hosts {
			if msg, _ := RuleWarning(h); msg != "" {
				out = append(out, &ConfigError{Key: "credentials." + name + ".hosts", Msg: msg + ", and the proxy gives them the credential"})
			}
		}
	}
	return out
}

// tableKeys are the keys whose values are tables of the user's own keys
// (Go maps), with an example for the error.
var tableKeys = []struct {
	key     toml.Key
	example string
}{
	{toml.Key{"env", "vars"}, `{ LANG = "C.UTF-8" }`},
	{toml.Key{"trusted", "env", "vars"}, `{ JIRA_TOKEN = "..." }`},
	{toml.Key{"credentials"}, `[credentials.MY_TOKEN] with hosts = ["api.example.com"]`},
	{toml.Key{"gator", "github", "repos"}, `{ "octo/app" = ["read", "create-draft"] }`},
}

// tomlTypeName names a TOML type (MetaData.Type) for a person.
func tomlTypeName(t string) string {
	switch t {
	case "Array", "ArrayHash":
		return "a list"
	case "String":
		return "a string"
	case "Integer":
		return "a whole number"
	case "Float":
		return "a number"
	case "Bool":
		return "true or false"
	}
	return strings.ToLower(t)
}

// typeMessage rewrites the decoder's type errors, which name Go types,
// in the configuration's terms.
func typeMessage(msg string) string {
	if m := incompatibleType.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("must be %s, not %s", goTypeWanted(m[2]), goTypeGiven(m[1]))
	}
	if m := notATable.FindStringSubmatch(msg); m != nil {
		if strings.HasPrefix(m[1], "[]map") {
			return "must be a single table ([name]), not a list of tables ([[name]])"
		}
		return fmt.Sprintf("must be a table, not %s", goTypeGiven(m[1]))
	}
	return msg
}

func goTypeWanted(t string) string {
	switch t {
	case "slice":
		return `a list, such as ["a", "b"]`
	case "string":
		return "a string, in quotes"
	case "integer":
		return "a whole number"
	case "float":
		return "a number, such as 1.5"
	case "boolean":
		return "true or false"
	}
	return t
}

func goTypeGiven(t string) string {
	switch {
	case t == "string":
		return "a string"
	case t == "int64":
		return "a whole number"
	case t == "float64":
		return "a number with a fraction"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map"):
		return "a table"
	}
	return t
}

var (
	incompatibleType = regexp.MustCompile(`^incompatible types: TOML value has type (\S+); destination has type (\S+)$`)
	notATable        = regexp.MustCompile(`^type mismatch for \S+: expected table but found (\S+)$`)
	decodeErr        = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "([^"]*)"\): (.*)$`)
	envName          = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// secretName is what podman takes as a secret's name (its library's
	// rule; podman 4.3 wanted less, but a secret that exists passed).
	secretName = regexp.MustCompile(`^[^,/=\x00]{1,253}$`)
)

func (c *Config) validate() error {
	bad := func(key, format string, args ...any) error {
		return &ConfigError{Key: key, Msg: fmt.Sprintf(format, args...)}
	}
	checkNames := func(key string, names []string) error {
		for _, n := range names {
			if !envName.MatchString(n) {
				return bad(key, "%q is not a valid environment variable name", n)
			}
		}
		return nil
	}
	for key, names := range map[string][]string{
		"env.allowlist":         c.Env.Allowlist,
		"env.vars":              slices.Collect(maps.Keys(c.Env.Vars)),
		"trusted.env.allowlist": c.Trusted.Env.Allowlist,
		"trusted.env.vars":      slices.Collect(maps.Keys(c.Trusted.Env.Vars)),
	} {
		if err := checkNames(key, names); err != nil {
			return err
		}
	}
	seen := map[string]string{}
	for _, n := range append(append(slices.Clone(c.Trusted.Env.Allowlist), slices.Collect(maps.Keys(c.Trusted.Env.Vars))...), secretVars(c.Trusted.Env.Secrets)...) {
		if prev, ok := seen[strings.ToLower(n)]; ok && prev != n {
			return bad("trusted.env", "%q and %q differ only in case; podman secret names do not", prev, n)
		}
		seen[strings.ToLower(n)] = n
	}
	for _, s := range c.Trusted.Env.Secrets {
		v, secret, ok := strings.Cut(s, "=")
		if !ok || !envName.MatchString(v) || !secretName.MatchString(secret) {
			return bad("trusted.env.secrets", "%q must have the form VAR=podman_secret_name (a secret's name has no , / or =)", s)
		}
		// objectPrefix is plan.Prefix (a test holds them equal): config
		// sits below plan and cannot import it.
		if strings.HasPrefix(secret, objectPrefix) {
			return bad("trusted.env.secrets", "%q: secrets named %s* are devaipod's own and deleted with pods; rename yours", s, objectPrefix)
		}
	}
	for _, img := range []struct{ key, ref string }{{"workspace.image", c.Workspace.Image}, {"agent.image", c.Agent.Image}} {
		if img.ref != "" {
			if err := ValidateImage(img.ref); err != nil {
				return bad(img.key, "%v", err)
			}
		}
	}
	for _, r := range c.Workspace.PrivateRegistries {
		if u, err := url.Parse("//" + r); r == "" || err != nil || u.Host != r || strings.ContainsAny(r, "/@") {
			return bad("workspace.private_registries", "%q is not a registry: give HOST or HOST:PORT, as an image's name starts", r)
		}
	}
	switch c.Network.Mode {
	case "", NetworkAllowlist, NetworkModeNone, NetworkOpen:
	default:
		return bad("network.mode", "%q is not a network mode: use allowlist, none or open", c.Network.Mode)
	}
	for _, r := range c.Network.Allow {
		if err := ValidateRule(r); err != nil {
			return bad("network.allow", "%v", err)
		}
	}
	for _, r := range c.Network.Ask {
		if r == "*" || strings.HasPrefix(r, "*:") {
			return bad("network.ask", "%q would ask about every host: name the hosts", r)
		}
		if err := ValidateRule(r); err != nil {
			return bad("network.ask", "%v", err)
		}
	}
	if t := c.Network.AskTimeout; t != "" {
		if d, err := time.ParseDuration(t); err != nil || d <= 0 || d > time.Hour {
			return bad("network.ask_timeout", "%q: use a duration from 1s to 1h, such as \"60s\"", t)
		}
	}
	if len(c.Approvals.Notify) > 0 && c.Approvals.Notify[0] == "" {
		return bad("approvals.notify", "the command's first word is empty")
	}
	if len(c.Approvals.Notify) > 0 && strings.Contains(c.Approvals.Notify[0], "{") {
		return bad("approvals.notify", "%q: the command's first word cannot hold a placeholder (the agent writes what it is replaced with)", c.Approvals.Notify[0])
	}
	for _, f := range c.Network.UpstreamCA {
		if !filepath.IsAbs(f) {
			return bad("network.upstream_ca", "%q: use an absolute path to a PEM file", f)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Credentials)) {
		if err := c.Credentials[name].check(name, c.Network.Mode); err != nil {
			return err
		}
	}
	for _, h := range c.Network.ExtraHosts {
		name, ip, ok := strings.Cut(h, ":")
		if !ok || name == "" || net.ParseIP(ip) == nil {
			return bad("network.extra_hosts", "%q must have the form name:ip", h)
		}
	}
	if c.Agent.Port < 0 || c.Agent.Port > 65535 {
		return bad("agent.port", "%d is not a TCP port", c.Agent.Port)
	}
	switch c.Agent.Kind {
	case "", AgentOpencode:
	case AgentCustom:
		if len(c.Agent.Command) == 0 {
			return bad("agent.command", "kind \"custom\" needs a command that starts the agent's server")
		}
	default:
		return bad("agent.kind", "%q is not an agent kind: use opencode or custom", c.Agent.Kind)
	}
	if h := c.Agent.Health; h != "" && !strings.HasPrefix(h, "/") {
		return bad("agent.health", "%q must be a path starting with /", h)
	}
	switch c.Agent.WorkspaceAccess {
	case "", AccessRW, AccessRO:
	default:
		return bad("agent.workspace_access", "%q must be rw or ro", c.Agent.WorkspaceAccess)
	}
	for _, p := range c.Agent.Protect {
		if err := checkRelPath(p); err != nil {
			return bad("agent.protect", "%v", err)
		}
	}
	for _, m := range c.Agent.Mask {
		if _, err := path.Match(m, ""); err != nil || m == "" || strings.Contains(m, "/") {
			return bad("agent.mask", "%q is not a file name pattern (such as \"*.pem\")", m)
		}
	}
	if c.Forge.URL != "" {
		if err := source.ValidateForgeURL(c.Forge.URL); err != nil {
			return bad("forge.url", "%v", err)
		}
	}
	if u := c.Forge.APIURL; u != "" && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		return bad("forge.api_url", "%q must be an http(s) URL", u)
	}
	if _, err := policy.ScopesFromConfig(c.Gator.GitHub.Repos); err != nil {
		// The key and the repository are in the message already.
		// (Not the --gator flag's syntax, which the message may name.)
		msg := strings.TrimPrefix(err.Error(), "[gator.github] repos ")
		msg, _, _ = strings.Cut(msg, "; want github:")
		return bad("gator.github.repos", "%s (such as repos = { \"octo/app\" = [\"read\", \"create-draft\"] })", msg)
	}
	for _, p := range c.Gator.GitHub.ProtectedPaths {
		if err := policy.CheckProtectedPattern(p); err != nil {
			return bad("gator.github.protected_paths", "%v", err)
		}
	}
	for i, m := range c.Mounts {
		if err := m.check(); err != nil {
			return bad(fmt.Sprintf("mounts[%d]", i), "%v", err)
		}
	}
	if c.Workspace.Limits.TmpSize != "" {
		return bad("workspace.limits.tmp_size", "the workspace's /tmp is its image's: tmp_size is for [agent.limits] only")
	}
	for key, l := range map[string]Limits{"agent.limits": c.Agent.Limits, "workspace.limits": c.Workspace.Limits} {
		if err := l.check(key); err != nil {
			return err
		}
	}
	return nil
}

// check validates [credentials.name] under network mode.
func (cr CredentialConfig) check(name, mode string) error {
	key := "credentials." + name
	bad := func(k, format string, args ...any) error {
		return &ConfigError{Key: key + k, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case !envName.MatchString(name):
		return bad("", "%q is not a valid environment variable name (the agent's variable that holds the placeholder)", name)
	case mode == NetworkOpen:
		return bad("", "credentials need the proxy, and network mode \"open\" has none: use the allowlist mode")
	case len(cr.Hosts) == 0:
		return bad(".hosts", "name the hosts where the proxy puts the value in (such as [\"api.example.test\"])")
	case cr.Env != "" && cr.Secret != "":
		return bad("", "give env or secret, not both")
	case cr.Env != "" && !envName.MatchString(cr.Env):
		return bad(".env", "%q is not a valid environment variable name", cr.Env)
	case cr.Secret != "" && !secretName.MatchString(cr.Secret):
		return bad(".secret", "%q is not a podman secret's name (it has no , / or =, and at most 253 bytes)", cr.Secret)
	case strings.HasPrefix(cr.Secret, objectPrefix):
		return bad(".secret", "%q: secrets named %s* are devaipod's own and deleted with pods; rename yours", cr.Secret, objectPrefix)
	}
	for _, h := range cr.Hosts {
		if h == "*" || strings.HasPrefix(h, "*:") {
			return bad(".hosts", "%q would send the value to every host: name the hosts", h)
		}
		if err := ValidateRule(h); err != nil {
			return bad(".hosts", "%v", err)
		}
		// Anybody's host under a public suffix would get the value.
		if msg, whole := RuleWarning(h); whole {
			return bad(".hosts", "%s, and the proxy would give them the credential: name the hosts", msg)
		}
	}
	return nil
}

// Bounds of [*.limits]: podman refuses a memory limit under 6 MiB, and no
// machine devaipod runs on has more CPUs than maxCPUs.
const (
	minMemory = 6 << 20
	maxCPUs   = 4096
)

// check validates limits; key names their table in errors.
func (l Limits) check(key string) error {
	bad := func(k, format string, args ...any) error {
		return &ConfigError{Key: key + "." + k, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) || l.CPUs < 0 || l.CPUs > maxCPUs:
		// inf would overflow podman's CPU quota into no limit at all.
		return bad("cpus", "must be a number of CPUs from 0.01 to %d (0 or none: no limit)", maxCPUs)
	case l.CPUs > 0 && l.CPUs < 0.01:
		return bad("cpus", "must be at least 0.01: the kernel's smallest CPU quota (0 or none: no limit)")
	case l.Pids < 0:
		return bad("pids", "must not be negative")
	}
	for k, v := range map[string]string{"memory": l.Memory, "tmp_size": l.TmpSize} {
		if _, err := size.Parse(v); v != "" && err != nil {
			return bad(k, "%v", err)
		}
	}
	if n, _ := size.Parse(l.Memory); l.Memory != "" && n < minMemory {
		return bad("memory", "%q is below podman's smallest memory limit, 6m", l.Memory)
	}
	if l.Timeout != "" {
		if d, err := time.ParseDuration(l.Timeout); err != nil || d < time.Second {
			return bad("timeout", "%q is not a duration of at least 1s (such as \"8h\")", l.Timeout)
		}
	}
	return nil
}

// keyLine finds the line that sets key: the key's last part inside the
// table named by the rest (TOML's decoder does not report key positions).
func keyLine(data []byte, key toml.Key) int {
	if len(key) == 0 {
		return 0
	}
	table := strings.Join(key[:len(key)-1], ".")
	last := key[len(key)-1]
	current := ""
	for i, line := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "[") {
			name := strings.Trim(t, "[] \t")
			if j := strings.Index(name, "]"); j >= 0 {
				name = name[:j]
			}
			current = strings.NewReplacer(" ", "", `"`, "", "'", "").Replace(name)
			if current == strings.Join(key, ".") {
				return i + 1
			}
			continue
		}
		k, _, ok := strings.Cut(t, "=")
		if !ok {
			continue
		}
		k = strings.Trim(strings.TrimSpace(k), `"'`)
		full := k
		if current != "" {
			full = current + "." + k
		}
		if (current == table && k == last) || full == strings.Join(key, ".") {
			return i + 1
		}
	}
	return 0
}

// tableLine finds the line of the n-th (from 0) header of an array of
// tables, such as [[mounts]].
func tableLine(data []byte, header string, n int) int {
	for i, line := range strings.Split(string(data), "\n") {
		if strings.ReplaceAll(strings.TrimSpace(line), " ", "") == header {
			if n == 0 {
				return i + 1
			}
			n--
		}
	}
	return 0
}

func secretVars(entries []string) []string {
	var vars []string
	for _, e := range entries {
		v, _, _ := strings.Cut(e, "=")
		vars = append(vars, v)
	}
	return vars
}

// objectPrefix starts the names of the podman objects devaipod creates.
const objectPrefix = "devaipod-"
