package plan

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devaipod/devaipod/internal/helperargs"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/devcontainer"
	"github.com/devaipod/devaipod/pod/source"
)

// LLMKeyVars are the LLM API variables passed from the host to the agent:
// the keys as placeholders (see credentials), the rest as they are.
var LLMKeyVars = []string{
	"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY",
	"AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT", "OPENROUTER_API_KEY",
	"GROQ_API_KEY", "MISTRAL_API_KEY", "COHERE_API_KEY", "XAI_API_KEY", "TOGETHER_API_KEY",
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
	// agentInit is the agent's init, until build renders its
	// entrypoint: parts of the plan add bridges to it.
	agentInit helperargs.Init
	// wsImage is the workspace's image (and the agent's default), and
	// image what it sets.
	wsImage string
	image   ImageConfig
	mode    string
	// execAs is the devcontainer's remote user and remoteEnv.
	execAs ExecAs
	// creds are the pod's credentials, placeholders in the agent.
	creds []Credential
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
	if strings.HasPrefix(project, reservedPrefix) {
		project = "project" // the name of one of devaipod's own files there (SetupDoneFile)
	}
	dcImage := ""
	if dc := b.in.Devcontainer; dc != nil {
		dcImage = cmp.Or(b.in.DevcontainerImage, dc.Image)
	}
	b.wsImage = cmp.Or(b.in.Image, dcImage, cfg.Workspace.Image, config.DefaultImage)
	if b.in.ResolveImage != nil {
		var err error
		if b.image, err = b.in.ResolveImage(b.wsImage); err != nil {
			return nil, err
		}
	}
	b.workdir = path.Join(WorkspacesDir, project)
	// What the image's metadata says the container needs (its features'
	// users, hooks, entrypoints, privileges), merged as the devcontainer
	// CLI merges it, under the file's own values.
	if dc, label := b.in.Devcontainer, b.image.Labels[devcontainer.MetadataLabel]; dc != nil && label != "" {
		merged, err := dc.WithMetadata(label, devcontainer.Vars{ContainerWorkspaceFolder: b.workdir,
			DevcontainerID: devcontainer.DevcontainerID(map[string]string{LabelPod: b.short})})
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", b.wsImage, err)
		}
		b.in.Devcontainer = merged
	}
	agentURL := fmt.Sprintf("http://127.0.0.1:%d", b.port)

	podLabels := b.labels(LabelAgentURL, agentURL)
	if b.in.Task != "" {
		podLabels[LabelTask] = TaskLabel(b.in.Task)
	}
	if src != nil && src.Local && src.Dir != "" {
		podLabels[LabelSourceDir] = src.Dir
	}
	if b.in.Pool != "" {
		podLabels[LabelPool] = b.in.Pool
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
			b.volume(VolumeWorkspace, AgentUID),
			b.volume(VolumeAgentGit, AgentUID),
			b.volume(VolumeAgentHome, AgentUID),
			b.volume(VolumeAgentSock, AgentUID),
			b.volume(VolumeHostShare, 0),
		},
	}
	if b.in.Untrusted {
		p.Untrusted, p.Withheld = true, b.withhold()
		p.Pod.Labels[LabelUntrusted] = "true"
	}
	shared := collectEnv(cfg.Env.Allowlist, cfg.Env.Vars, b.in.HostEnv)
	trusted, trustedSecrets := b.trustedEnv()
	ws := b.workspace(shared, trusted, agentURL)
	secrets := trustedSecrets
	if b.in.Untrusted {
		secrets = nil // but the gator's token (below)
		if len(trusted) > 0 {
			p.Withheld = append([]string{"[trusted.env] (" + strings.Join(slices.Sorted(maps.Keys(trusted)), ", ") + ")"}, p.Withheld...)
		}
	}
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
	creds, credSecrets := b.credentials()
	p.Secrets, p.Credentials, b.creds = append(secrets, credSecrets...), creds, creds
	agent := b.agent(shared, trusted)
	b.applyProjectAgentSide(p, &agent, trusted)
	var gator *ContainerSpec
	if len(b.in.GatorScopes) > 0 {
		g, err := b.gator(trusted)
		if err != nil {
			return nil, err
		}
		gator = &g
		b.connectGator(&agent)
		if b.in.Untrusted { // the gator's token is made for it alone
			for _, name := range g.SecretEnv {
				if i := slices.IndexFunc(trustedSecrets, func(s SecretSpec) bool { return s.Name == name }); i >= 0 {
					p.Secrets = append(p.Secrets, trustedSecrets[i])
				}
			}
		}
	}
	// Withheld or not, no trusted value may reach the agent.
	if err := refuseGuardedValues(agent.Env, append(slices.Clone(trustedSecrets), credSecrets...)); err != nil {
		return nil, err
	}
	if p.Lifecycle.Has(StageCreate) {
		// up's setup commands run in the workspace, on the trusted side:
		// the agent starts once they are done (see SetupDoneFile).
		b.agentInit.WaitFor = SetupDoneFile
	}
	agent.Entrypoint, agent.Command = b.agentEntrypoint(agent.Command), nil
	p.Containers = []ContainerSpec{ws, agent}
	if gator != nil {
		p.Volumes = append(p.Volumes, b.volume(VolumeGatorSock, GatorUID), b.volume(VolumeGatorState, GatorUID))
		p.Containers = append(p.Containers, *gator)
		p.Checks = append(p.Checks, Check{Container: agent.Name, What: "the gator answers the agent",
			Command: HelperCommand(helperargs.WaitHTTP{Timeout: 30 * time.Second, Status: "2xx", URL: "http://" + GatorAddr + "/healthz"})})
	}
	egress := helperargs.EgressCheck{Canary: CanaryAddr}
	switch b.mode {
	case config.NetworkAllowlist:
		if !cfg.Network.NoDefaultAllow {
			p.Allow = append(p.Allow, config.DefaultAllow...)
		}
		p.Allow = append(append(p.Allow, cfg.Network.Allow...), b.in.Allow...)
		if dc := b.in.Devcontainer; dc != nil {
			p.Allow = append(p.Allow, dc.Devaipod.AllowedDomains...)
		}
		// A credential is for reaching its hosts.
		for _, name := range slices.Sorted(maps.Keys(cfg.Credentials)) {
			p.Allow = append(p.Allow, cfg.Credentials[name].Hosts...)
		}
		p.Volumes = append(p.Volumes, b.volume(VolumeProxySock, ProxyUID), b.volume(VolumeProxyState, ProxyUID))
		proxy, caSecret := b.proxy(p.Allow, creds)
		if caSecret != nil {
			p.Secrets = append(p.Secrets, *caSecret)
		}
		p.Containers = append(p.Containers, proxy)
		egress.Proxy = "http://" + ProxyAddr
	case config.NetworkOpen:
		p.Warnings = append(p.Warnings, "network mode \"open\": the agent shares the pod's network and its egress is unrestricted")
	}
	if b.mode != config.NetworkOpen {
		p.Checks = append(p.Checks, Check{Container: ws.Name, What: "the canary answers in the pod's network namespace",
			Command: HelperCommand(helperargs.EgressCheck{ExpectCanary: CanaryAddr}), Gate: true})
		// The fast verify battery (below) tries the same and more: this
		// check stands in for it under --no-verify.
		if b.in.NoVerify {
			p.Checks = append(p.Checks, Check{Container: agent.Name, Command: HelperCommand(egress),
				What: "the agent has no direct way out" + map[bool]string{true: " and the proxy answers"}[b.mode == config.NetworkAllowlist]})
		}
	}
	p.MaskPatterns = config.MaskPatterns(cfg)
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
	verify := b.verifyArgs(agent)
	p.Verify = verify.Args()[1:] // the flags, kept in a label for devaipod verify
	if label, err := json.Marshal(p.Verify); err == nil {
		p.Pod.Labels[LabelVerify] = string(label)
	}
	if b.mode != config.NetworkOpen && !b.in.NoVerify {
		names := maps.Clone(trusted)
		maps.Copy(names, ws.SecretEnv)
		verify.Fast, verify.SecretVars = true, slices.Sorted(maps.Keys(names))
		p.Checks = append(p.Checks, Check{Container: agent.Name, Command: HelperCommand(verify),
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
	if len(p.Withheld) > 0 {
		p.Warnings = append(p.Warnings, "the repository is not trusted: its pod is not given "+strings.Join(p.Withheld, "; "))
	}
	if b.in.Host.Version != "" && !b.in.Host.LimitsEnforced() {
		if ignored := cgroupLimits(p.Containers); len(ignored) > 0 {
			p.Warnings = append(p.Warnings, "this host does not enforce the pod's resource limits ("+strings.Join(ignored, "; ")+
				"): rootless podman on cgroup v1 ignores them; the /tmp size limit still holds (`devaipod doctor` says more)")
		}
	}
	if agent := p.Container(RoleAgent); agent != nil {
		if p.NoModel = b.noModel(p, *agent); p.NoModel != "" {
			if p.Task != "" {
				return nil, &NoModelError{Reason: p.NoModel}
			}
			p.Pod.Labels[LabelNoModel] = p.NoModel
			p.Warnings = append(p.Warnings, "the agent has no model it can reach: "+p.NoModel+"; it will answer, and no task will get done")
		}
	}
	for i := range p.Containers {
		p.Containers[i].LogSizeMax = LogSizeMax
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

// labelExecAs keeps on the pod who exec and attach run workspace commands
// as: the devcontainer's remote user, else the image's USER. exec starts them as root, the only user that can read the trusted
// variables' files, and the helper becomes that user once it has read them.
func (b *builder) labelExecAs(p *Plan) error {
	as := b.execAs
	as.User = cmp.Or(as.User, b.image.User)
	if as.User == "" {
		return nil
	}
	label, err := json.Marshal(as)
	if err != nil {
		return err
	}
	p.Pod.Labels[LabelExec] = string(label)
	return nil
}

// HelperCommand is the command line of a helper command in the pod's
// containers, at the helper image's mount.
func HelperCommand(cmd interface{ Args() []string }) []string {
	return append([]string{HelperBin}, cmd.Args()...)
}

// cgroupLimits lists the containers' limits that the kernel's cgroups
// enforce, "ROLE memory M, pids N, cpus C" each.
func cgroupLimits(ctrs []ContainerSpec) []string {
	var out []string
	for _, c := range ctrs {
		l := c.Limits
		if l == nil || !l.Enforceable() {
			continue
		}
		var parts []string
		if l.Memory != "" {
			parts = append(parts, "memory "+l.Memory)
		}
		if l.Pids > 0 {
			parts = append(parts, fmt.Sprintf("pids %d", l.Pids))
		}
		if l.CPUs > 0 {
			parts = append(parts, fmt.Sprintf("cpus %g", l.CPUs))
		}
		out = append(out, c.Role+" "+strings.Join(parts, ", "))
	}
	return out
}
