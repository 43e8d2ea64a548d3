package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/devcontainer"
	"github.com/devaipod/devaipod/pod/source"
)

var update = flag.Bool("update", false, "rewrite golden files")

func planInput() PlanInput {
	return PlanInput{
		Name: "demo-1a2b3c",
		Config: &config.Config{
			Env:     config.EnvConfig{Allowlist: []string{"EDITOR", "MISSING"}, Vars: map[string]string{"LANG": "C.UTF-8"}},
			Trusted: config.TrustedConfig{Env: config.TrustedEnvConfig{Allowlist: []string{"GH_TOKEN"}, Vars: map[string]string{"JIRA_TOKEN": "jira-secret"}, Secrets: []string{"NPM_TOKEN=npm_token"}}},
			Agent:   config.AgentConfig{Limits: config.Limits{Memory: "4g", Pids: 512}},
		},
		Source:          &source.Source{Input: ".", Local: true, Dir: "/src/demo", Project: "demo", Remote: "https://git.example.test/org/demo.git", Commit: "0123456789abcdef0123456789abcdef01234567"},
		ResolveImage:    imageWith(ImageConfig{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C"}}),
		PlaceholderSalt: "salt0123",
		HostEnv: map[string]string{
			"EDITOR": "vi", "GH_TOKEN": "ghp-secret", "ANTHROPIC_API_KEY": "sk-ant",
			"DEVAIPOD_AGENT_MODEL": "fast", "DEVAIPOD_AGENT_GH_TOKEN": "sneaky", "HOME": "/home/u", "SSH_AUTH_SOCK": "/run/ssh",
		},
	}
}

func TestBuildGolden(t *testing.T) {
	defer func(v string) { Version = v }(Version)
	Version = "test"
	tests := []struct {
		name string
		edit func(*PlanInput)
	}{
		{"default", func(*PlanInput) {}},
		{"image-override", func(in *PlanInput) {
			in.Image = "localhost/custom:1"
			in.Config.Agent.Command = config.Command{"/bin/sh", "-c", "my-agent"}
			in.Config.Agent.Port = 5000
			in.Config.Workspace.Limits = config.Limits{Memory: "2g", Pids: 2048, Timeout: "24h"}
		}},
		{"rootless-cgroupv1", func(in *PlanInput) { in.Host = HostInfo{Version: "4.3.1", Rootless: true, CgroupVersion: "v1"} }},
		{"network-none", func(in *PlanInput) { in.Config.Network.Mode = config.NetworkModeNone }},
		{"network-open", func(in *PlanInput) { in.Config.Network.Mode = config.NetworkOpen }},
		{"network-allow", func(in *PlanInput) {
			in.Config.Network = config.NetworkConfig{Allow: []string{"api.example.test", "*.pkg.example.test:8443"}, NoDefaultAllow: true,
				ExtraHosts: []string{"mirror.example.test:10.0.2.2"}, HostLoopback: true}
			in.Allow = []string{"git.example.test:22"}
		}},
		{"protect-mask-mounts", func(in *PlanInput) {
			in.Config.Agent.Protect = []string{"Makefile", "scripts/ci"}
			in.Tree = source.TreeInfo{
				Present:       map[string]bool{".git/hooks": true, ".git/config": false, "Makefile": false},
				Masked:        []string{".env", "certs/server.key"},
				Unprotectable: []string{".devcontainer"},
			}
			in.Mounts = []HostMount{
				{Source: "/home/u/.cache/go-build", Target: "/cache/go-build", RW: true, Containers: []string{RoleWorkspace, RoleAgent}},
				{Source: "/home/u/.gitconfig", Target: "/etc/gitconfig", Containers: []string{RoleWorkspace}},
			}
		}},
		{"devcontainer", func(in *PlanInput) { withDevcontainer(t, in) }},
		{"gator", func(in *PlanInput) {
			in.GatorScopes = []string{"github:org/demo:read,create-draft", "github:org/*:read"}
			in.GatorAPIURL, in.GatorGitURL = "https://ghe.example.test/api/v3/", "https://ghe.example.test"
			in.GatorRepo = "org/demo"
			in.Source.RemoteCommits = []string{"89abcdef0123456789abcdef0123456789abcdef"}
			in.AgentPassword = "agent-password"
			in.ForbiddenPaths = []string{"/home/u/.ssh", "/home/u/.config/devaipod.toml"}
		}},
		{"credentials", func(in *PlanInput) {
			in.Config.Credentials = map[string]config.CredentialConfig{
				"MY_API_TOKEN":      {Hosts: []string{"api.example.test:8443"}},
				"OPENAI_API_KEY":    {Hosts: []string{"llm.example.test"}, Env: "WORK_OPENAI_KEY"},
				"REGISTRY_PASSWORD": {Hosts: []string{"registry.example.test"}, Secret: "registry_password"},
				"NOT_SET":           {Hosts: []string{"nowhere.example.test"}},
			}
			in.Config.Network.UpstreamCA = []string{"/etc/devaipod/ca.pem"}
			in.UpstreamCA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
			in.HostEnv["MY_API_TOKEN"], in.HostEnv["WORK_OPENAI_KEY"] = "tok-value", "sk-work"
			in.HostEnv["AZURE_OPENAI_API_KEY"], in.HostEnv["AZURE_OPENAI_ENDPOINT"] = "az-key", "https://demo.openai.azure.com/"
		}},
		{"untrusted", func(in *PlanInput) {
			in.Untrusted = true
			loadDevcontainer(t, in, true)
			in.Mounts = []HostMount{{Source: "/home/u/.cache/go-build", Target: "/cache/go-build", RW: true, Containers: []string{RoleWorkspace, RoleAgent}}}
			in.GatorScopes = []string{"github:org/demo:read,create-draft"}
			in.AgentPassword = "agent-password"
		}},
		{"workspace-ro", func(in *PlanInput) {
			in.Config.Agent.WorkspaceAccess = config.AccessRO
			in.Config.Agent.Limits.Timeout = "8h"
			in.Tree = source.TreeInfo{Masked: []string{".env"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := planInput()
			tt.edit(&in)
			plan, err := Build(in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(plan, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", "plan-"+tt.name+".json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./pod -run TestBuildGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Build() differs from %s (rerun with -update and review the diff):\n%s", golden, got)
			}
		})
	}
}

// TestBuildContainment checks the properties the threat table relies on,
// independently of the golden files.
func TestBuildContainment(t *testing.T) {
	plan, err := Build(planInput())
	if err != nil {
		t.Fatal(err)
	}
	ws, agent := *plan.Workspace(), *plan.Agent()
	if ws.Role != RoleWorkspace || agent.Role != RoleAgent {
		t.Fatalf("roles = %s, %s", ws.Role, agent.Role)
	}
	if agent.Network != NetworkNone || !agent.PrivateIPC {
		t.Errorf("agent network = %q, private ipc %v; want none, true", agent.Network, agent.PrivateIPC)
	}
	if strings.Join(agent.CapDrop, ",") != "ALL" || len(agent.CapAdd) != 0 {
		t.Errorf("agent caps drop %v add %v; want drop ALL, add none", agent.CapDrop, agent.CapAdd)
	}
	if !agent.NoNewPrivileges || !agent.ReadOnlyRoot {
		t.Error("agent lacks no-new-privileges or read-only root")
	}
	if agent.User == "" || strings.HasPrefix(agent.User, "0") {
		t.Errorf("agent user = %q; want a non-root uid", agent.User)
	}
	if len(agent.SecretEnv) != 0 {
		t.Errorf("agent gets secrets %v", agent.SecretEnv)
	}
	for _, k := range []string{"GH_TOKEN", "JIRA_TOKEN", "NPM_TOKEN"} {
		if _, ok := agent.Env[k]; ok {
			t.Errorf("agent env has trusted %s", k)
		}
		if _, ok := ws.SecretEnv[k]; !ok {
			t.Errorf("workspace lacks trusted %s as a secret", k)
		}
		if _, ok := ws.Env[k]; ok {
			t.Errorf("workspace has trusted %s as plain env (visible in podman inspect)", k)
		}
	}
	for _, v := range agent.Env {
		if strings.Contains(v, "secret") || v == "sneaky" {
			t.Errorf("agent env holds a trusted value %q", v)
		}
	}
	if agent.Env["ANTHROPIC_API_KEY"] != "devaipod-ANTHROPIC_API_KEY-salt0123" || agent.Env["MODEL"] != "fast" {
		t.Errorf("agent env misses the LLM key's placeholder or DEVAIPOD_AGENT_ var: %v", agent.Env)
	}
	// The key itself is the proxy's, as a secret.
	proxy := plan.Container(RoleProxy)
	if proxy == nil || proxy.SecretEnv["ANTHROPIC_API_KEY"] == "" || proxy.SecretUID != ProxyUID {
		t.Fatalf("the proxy lacks the LLM key's secret: %+v", proxy)
	}
	i := slices.IndexFunc(plan.Secrets, func(s SecretSpec) bool { return s.Name == proxy.SecretEnv["ANTHROPIC_API_KEY"] })
	if i < 0 || plan.Secrets[i].Value != "sk-ant" {
		t.Errorf("no secret with the LLM key for the proxy: %+v", plan.Secrets)
	}
	if !slices.Contains(proxy.Entrypoint, "ANTHROPIC_API_KEY=devaipod-ANTHROPIC_API_KEY-salt0123@api.anthropic.com") {
		t.Errorf("the proxy's command line lacks the credential: %q", proxy.Entrypoint)
	}
	for k, v := range agent.Env {
		if v == "sk-ant" {
			t.Errorf("agent env %s holds the LLM key", k)
		}
	}
	if _, ok := ws.Env["ANTHROPIC_API_KEY"]; ok {
		t.Error("workspace got the LLM key")
	}
	if agent.Env["EDITOR"] != "vi" || ws.Env["EDITOR"] != "vi" || ws.Env["LANG"] != "C.UTF-8" {
		t.Error("[env] did not reach both containers")
	}
	for _, k := range []string{"SSH_AUTH_SOCK", "HOME"} {
		if agent.Env[k] == hostEnvValue(k) {
			t.Errorf("agent inherited host %s", k)
		}
	}
	if agent.Env["HOME"] != AgentHome {
		t.Errorf("agent HOME = %q", agent.Env["HOME"])
	}
	for _, m := range agent.Mounts {
		if m.Dest == AgentSocketDir && m.ReadOnly {
			t.Error("agent must create its own socket")
		}
	}
	for _, m := range ws.Mounts {
		if m.Dest == AgentSocketDir && !m.ReadOnly {
			t.Error("workspace mounts the agent's socket dir read-write")
		}
	}
	for _, s := range plan.Secrets {
		b, _ := json.Marshal(s)
		if strings.Contains(string(b), "secret") && strings.Contains(string(b), "ghp-") {
			t.Errorf("secret value serialised: %s", b)
		}
	}
	if len(plan.Warnings) != 0 {
		t.Errorf("warnings without host info: %v", plan.Warnings)
	}
}

func hostEnvValue(k string) string { return planInput().HostEnv[k] }

func TestBuildRejectsBadName(t *testing.T) {
	in := planInput()
	in.Name = "Bad Name"
	if _, err := Build(in); err == nil {
		t.Error("Build accepted a bad name")
	}
}

func TestRedacted(t *testing.T) {
	plan, err := Build(planInput())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(plan.Redacted())
	for _, secret := range []string{"sk-ant", "ghp-secret", "jira-secret", "sneaky", "vi"} {
		if strings.Contains(string(b), `"`+secret+`"`) {
			t.Errorf("redacted plan holds %q", secret)
		}
	}
	if !strings.Contains(string(b), "http://127.0.0.1:3128") {
		t.Error("redacted plan lost devaipod's own values")
	}
	if plan.Agent().Env["EDITOR"] != "vi" {
		t.Error("Redacted changed the original plan")
	}
}

// withDevcontainer loads the corpus's every-field devcontainer.json into
// the input, as up does (without touching the host for the bind mount).
func withDevcontainer(t *testing.T, in *PlanInput) {
	t.Helper()
	loadDevcontainer(t, in, false)
}

// loadDevcontainer gives in the full devcontainer.json of the tests,
// with the host's variables withheld when withhold is set (an untrusted
// repository).
func loadDevcontainer(t *testing.T, in *PlanInput, withhold bool) {
	t.Helper()
	dc, err := devcontainer.Load(filepath.Join("..", "devcontainer", "testdata", "good", "full-image.json"))
	if err != nil {
		t.Fatal(err)
	}
	dc.File = "/src/demo/.devcontainer/devcontainer.json"
	err = dc.Substitute(devcontainer.Vars{LocalEnv: map[string]string{"HOME": "/home/u", "HOST_VALUE": "from-host"},
		LocalWorkspaceFolder: "/src/demo", ContainerWorkspaceFolder: "/workspaces/demo", DevcontainerID: "0123456789abcdefghijklmnopqrstuv0123456789abcdefghij",
		WithholdLocalEnv: withhold})
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.SubstituteContainerEnv(map[string]string{"PATH": "/usr/bin:/bin"}); err != nil {
		t.Fatal(err)
	}
	ra, err := devcontainer.ParseRunArgs(dc.RunArgs)
	if err != nil {
		t.Fatal(err)
	}
	in.Devcontainer, in.RunArgs = dc, ra
	in.DevcontainerBinds = []HostMount{{Source: "/home/u/.cache/go", Target: "/home/dev/.cache/go", RW: true, Containers: []string{RoleWorkspace}}}
	in.HostEnv["GOFLAGS"] = "-mod=mod"
	in.Config.Agent = config.AgentConfig{}
}

// TestDevcontainerNeverReachesTheAgent checks that no privilege setting,
// variable or mount of devcontainer.json reaches the agent, whatever it
// asks for; only customizations.devaipod does, and up says so.
func TestDevcontainerNeverReachesTheAgent(t *testing.T) {
	in := planInput()
	withDevcontainer(t, &in)
	plan, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	ws, agent := *plan.Workspace(), *plan.Agent()
	if !ws.Privileged || len(ws.CapAdd) == 0 || len(ws.SecurityOpt) == 0 || ws.Env["FROM_HOST"] != "from-host" || len(ws.Binds) == 0 {
		t.Fatalf("the workspace did not get the devcontainer's settings: %+v", ws)
	}
	if agent.Privileged || len(agent.CapAdd) != 0 || len(agent.SecurityOpt) != 0 || len(agent.Devices) != 0 || agent.ShmSize != "" {
		t.Errorf("agent got privilege settings: privileged %v caps %v secopt %v devices %v", agent.Privileged, agent.CapAdd, agent.SecurityOpt, agent.Devices)
	}
	for _, k := range []string{"PROJECT_DIR", "FROM_HOST", "RUN_ARG"} {
		if _, ok := agent.Env[k]; ok {
			t.Errorf("agent got the devcontainer's variable %s", k)
		}
	}
	for _, m := range agent.Mounts {
		if strings.Contains(m.Volume, "-dc-") {
			t.Errorf("agent mounts the devcontainer's volume %s", m.Volume)
		}
	}
	for _, b := range agent.Binds {
		if b.HostPath != "" && b.HostPath != "/dev/null" {
			t.Errorf("agent binds host path %s", b.HostPath)
		}
	}
	if agent.Env["GOFLAGS"] != "-mod=mod" || agent.Image != "localhost/agent:2" || plan.AgentHealth != "/health" {
		t.Errorf("customizations.devaipod did not reach the agent: env %v image %s health %s", agent.Env["GOFLAGS"], agent.Image, plan.AgentHealth)
	}
	warned := strings.Join(plan.Warnings, "\n")
	for _, want := range []string{"GOFLAGS", "proxy.golang.example", "not supported, ignored"} {
		if !strings.Contains(warned, want) {
			t.Errorf("no warning names %q:\n%s", want, warned)
		}
	}
	if !slices.Contains(plan.Pod.Ports, 3000) || !slices.Contains(plan.Pod.Ports, 8080) {
		t.Errorf("forwardPorts = %v", plan.Pod.Ports)
	}
}

func TestGatorNeedsAToken(t *testing.T) {
	in := planInput()
	in.Config.Trusted = config.TrustedConfig{}
	in.GatorScopes = []string{"github:org/demo:read"}
	if _, err := Build(in); !errors.Is(err, ErrNoToken) {
		t.Errorf("a gator without a token: err %v", err)
	}
}

// imageWith is a ResolveImage for which every image sets c.
func imageWith(c ImageConfig) func(string) (ImageConfig, error) {
	return func(string) (ImageConfig, error) { return c, nil }
}

func TestDevcontainerAllowedDomainsWarnOfPublicSuffixes(t *testing.T) {
	in := planInput()
	withDevcontainer(t, &in)
	in.Devcontainer.Devaipod.AllowedDomains = []string{"api.example.test", "*.com"}
	p, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(p.Warnings, func(w string) bool { return strings.Contains(w, `"*.com"`) && strings.Contains(w, "public suffix") }) {
		t.Errorf("no warning of *.com: %q", p.Warnings)
	}
}

// TestRefusesGuardedValuesInTheAgent: a trusted or credential value never
// reaches the agent under another name, or inside another value, whichever
// way the name was asked for; the agent's own password, an unrelated value
// and a short one (no credential: "us-east-1") do.
func TestRefusesGuardedValuesInTheAgent(t *testing.T) {
	const token, jira, key = "ghp_0123456789abcdefXYZ", "jira-0123456789abc", "sk-ant-0123456789abc"
	long := func(in *PlanInput) {
		in.HostEnv["GH_TOKEN"], in.HostEnv["ANTHROPIC_API_KEY"] = token, key
		in.Config.Trusted.Env.Vars = map[string]string{"JIRA_TOKEN": jira}
	}
	tests := []struct {
		name, guards string
		edit         func(*PlanInput)
	}{
		{"repository envAllowlist, trusted value", "trusted variable GH_TOKEN", func(in *PlanInput) {
			in.HostEnv["CI_TOKEN"] = token
			in.Devcontainer = &devcontainer.Config{Devaipod: devcontainer.Customizations{EnvAllowlist: []string{"CI_TOKEN"}}}
		}},
		{"shared allowlist, trusted var value", "trusted variable JIRA_TOKEN", func(in *PlanInput) {
			in.HostEnv["EDITOR"] = jira
		}},
		{"agent prefix, credential value", "credential ANTHROPIC_API_KEY", func(in *PlanInput) {
			in.HostEnv["DEVAIPOD_AGENT_LLM"] = key
		}},
		{"inside a longer value", "trusted variable GH_TOKEN", func(in *PlanInput) {
			in.HostEnv["DEVAIPOD_AGENT_REMOTE"] = "https://x:" + token + "@git.example.test/o/r.git"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := planInput()
			long(&in)
			tt.edit(&in)
			_, err := Build(in)
			var ge *GuardedValueError
			if !errors.As(err, &ge) || ge.Guards != tt.guards {
				t.Fatalf("err = %v; want the agent refused a value of %s", err, tt.guards)
			}
			for _, v := range []string{token, jira, key} {
				if strings.Contains(err.Error(), v) {
					t.Errorf("the error shows the value: %v", err)
				}
			}
		})
	}
	for name, edit := range map[string]func(*PlanInput){
		"an unrelated value": func(in *PlanInput) { in.HostEnv["DEVAIPOD_AGENT_CI_TOKEN"] = "another-value-entirely" },
		"a short value": func(in *PlanInput) {
			in.Config.Trusted.Env.Vars["REGION"] = "us-east-1"
			in.HostEnv["DEVAIPOD_AGENT_REGION"] = "us-east-1"
		},
	} {
		in := planInput()
		long(&in)
		edit(&in)
		if _, err := Build(in); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestUntrustedGetsNothingOfThePersons checks that the pod of a repository
// the person does not trust gets none of their trusted values, host paths
// or host variables, in any container but the gator (its token) and the
// proxy (the credentials), in every network mode.
func TestUntrustedGetsNothingOfThePersons(t *testing.T) {
	for _, mode := range []string{config.NetworkAllowlist, config.NetworkModeNone, config.NetworkOpen} {
		t.Run(mode, func(t *testing.T) {
			in := planInput()
			in.Untrusted = true
			loadDevcontainer(t, &in, true)
			in.Config.Network.Mode = mode
			in.Mounts = []HostMount{{Source: "/home/u/.cache/go-build", Target: "/cache/go-build", Containers: []string{RoleWorkspace, RoleAgent}}}
			in.HostEnv["NPM_CONFIG_REGISTRY"] = "https://npm.example.test"
			in.HostEnv["OPENAI_API_KEY"] = "sk-openai-value"
			if mode != config.NetworkOpen {
				in.GatorScopes = []string{"github:org/demo:read"}
			}
			in.AgentPassword = "agent-password"
			p, err := Build(in)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Untrusted || p.Pod.Labels[LabelUntrusted] != "true" || len(p.Withheld) == 0 {
				t.Fatalf("the plan does not say it is untrusted: %v %v %v", p.Untrusted, p.Pod.Labels, p.Withheld)
			}
			values := []string{"ghp-secret", "jira-secret", "from-host", "/home/u", "-mod=mod", "https://npm.example.test", "sk-ant", "sk-openai-value"}
			for _, c := range p.Containers {
				if c.Role == RoleGator || c.Role == RoleProxy {
					continue
				}
				if len(c.Binds) > 0 && c.Role == RoleWorkspace {
					t.Errorf("%s has host binds: %v", c.Role, c.Binds)
				}
				for _, b := range c.Binds {
					if strings.HasPrefix(b.HostPath, "/home/u") {
						t.Errorf("%s has the host path %s", c.Role, b.HostPath)
					}
				}
				for name := range c.SecretEnv {
					if name != PasswordVar {
						t.Errorf("%s gets the secret %s", c.Role, name)
					}
				}
				for k, v := range c.Env {
					for _, value := range values {
						if strings.Contains(v, value) {
							t.Errorf("%s: %s=%q holds the person's %q", c.Role, k, v, value)
						}
					}
				}
			}
			for _, s := range p.Secrets {
				if s.Value == "jira-secret" {
					t.Errorf("secret %s is made, though nothing may read it", s.Name)
				}
			}
			if g := p.Container(RoleGator); g != nil && g.SecretEnv["GH_TOKEN"] == "" {
				t.Errorf("the gator lost its token: %v", g.SecretEnv)
			}
			if ws := p.Workspace(); ws.Privileged || len(ws.Devices) > 0 {
				t.Errorf("the workspace gets the host's devices: privileged %v, devices %v", ws.Privileged, ws.Devices)
			}
			if slices.Contains(p.Allow, "proxy.golang.example") {
				t.Errorf("the repository's allowedDomains were applied: %v", p.Allow)
			}
			for _, w := range []string{"[trusted.env] (GH_TOKEN, JIRA_TOKEN, NPM_TOKEN)", "[[mounts]] (1)", "${localEnv} of HOME, HOST_VALUE",
				"the devcontainer's host bind mounts (1)", "customizations.devaipod.envAllowlist"} {
				if !slices.ContainsFunc(p.Withheld, func(s string) bool { return strings.Contains(s, w) }) {
					t.Errorf("Withheld does not name %q: %q", w, p.Withheld)
				}
			}
		})
	}
}
