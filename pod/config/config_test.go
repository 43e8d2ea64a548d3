package config

import (
	"errors"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig("c.toml", []byte(`
[env]
allowlist = ["EDITOR"]
[env.vars]
LANG = "C.UTF-8"

[trusted.env]
allowlist = ["GH_TOKEN"]
secrets = ["NPM_TOKEN=npm_token"]
[trusted.env.vars]
JIRA = "x"

[agent]
image = "localhost/agent:1"
command = "opencode serve --port 4096"
port = 4096
[agent.limits]
memory = "4g"
cpus = 1.5
pids = 512
tmp_size = "1g"

[workspace]
image = "localhost/ws:1"
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Agent.Command, " "); got != "/bin/sh -c opencode serve --port 4096" {
		t.Errorf("agent.command = %q; want it run through /bin/sh -c", got)
	}
	if cfg.Agent.Limits.CPUs != 1.5 || cfg.Agent.Limits.Pids != 512 || cfg.Workspace.Image != "localhost/ws:1" {
		t.Errorf("decoded %+v", cfg)
	}
	arr, err := ParseConfig("c.toml", []byte("[agent]\ncommand = [\"a\", \"b c\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(arr.Agent.Command) != 2 || arr.Agent.Command[1] != "b c" {
		t.Errorf("array command = %q", arr.Agent.Command)
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name, text string
		line       int
		key, msg   string
	}{
		{"unknown key", "[agent]\nimage = \"x\"\ncomand = \"y\"\n", 3, "agent.comand", "unknown key"},
		{"unknown table", "[agnet]\nimage = \"x\"\n", 1, "agnet", "unknown key"},
		{"unknown nested", "[trusted.env]\nallowlist = []\nsecret = []\n", 3, "trusted.env.secret", "unknown key"},
		{"private registry with a path", "[workspace]\nimage = \"x\"\nprivate_registries = [\"10.0.0.5:5000/team\"]\n", 3, "workspace.private_registries", "is not a registry"},
		{"notify program from a placeholder", "[approvals]\nnotify = [\"{what}\"]\n", 2, "approvals.notify", "cannot hold a placeholder"},
		{"syntax", "[agent]\nimage = \n", 2, "", "expected value"},
		{"wrong type", "[agent]\nport = \"x\"\n", 2, "agent.port", "must be a whole number, not a string"},
		{"list for a string", "[agent.limits]\nmemory = 4\n", 2, "agent.limits.memory", "must be a string, in quotes, not a whole number"},
		{"string for a list", "[network]\nallow = \"x.test\"\n", 2, "network.allow", "must be a list"},
		{"scalar for a table", "agent = 3\n", 1, "agent", "must be a table, not a whole number"},
		{"array of tables", "[[agent]]\nimage = \"x\"\n", 1, "agent", "not a list of tables"},
		{"list for vars", "[env]\nvars = [\"LANG=C\"]\n", 2, "env.vars", "must be a table"},
		{"string for trusted vars", "[trusted.env]\nvars = \"A=1\"\n", 2, "trusted.env.vars", "must be a table"},
		{"number for credentials", "credentials = 3\n", 1, "credentials", "must be a table"},
		{"list for repos", "[gator.github]\nrepos = [\"octo/app\"]\n", 2, "gator.github.repos", "must be a table"},
		{"repo without owner", "[gator.github]\nrepos = { \"octo\" = [\"read\"] }\n", 2, "gator.github.repos", `"octo": missing "/" between owner and repository (such as`},
		{"unknown permission", "[gator.github]\nrepos = { \"octo/app\" = [\"admin\"] }\n", 2, "gator.github.repos", `unknown permission "admin"`},
		{"bad secret name", "[trusted.env]\nsecrets = [\"A=bad,secret\"]\n", 2, "trusted.env.secrets", "a secret's name"},
		{"credential with a bad secret name", "[credentials.MY_TOKEN]\nhosts = [\"a.test\"]\nsecret = \"a/b\"\n", 3, "credentials.MY_TOKEN.secret", "not a podman secret's name"},
		{"infinite cpus", "[agent.limits]\ncpus = inf\n", 2, "agent.limits.cpus", "from 0.01"},
		{"nan cpus", "[workspace.limits]\ncpus = nan\n", 2, "workspace.limits.cpus", "from 0.01"},
		{"tiny cpus", "[agent.limits]\ncpus = 0.001\n", 2, "agent.limits.cpus", "at least 0.01"},
		{"tiny memory", "[agent.limits]\nmemory = \"1k\"\n", 2, "agent.limits.memory", "smallest memory limit"},
		{"bad command", "[agent]\ncommand = 3\n", 2, "agent.command", "string or an array"},
		{"empty command", "[agent]\ncommand = []\n", 2, "agent.command", "empty"},
		{"bad env name", "[env]\nallowlist = [\"A-B\"]\n", 2, "env.allowlist", "not a valid environment variable name"},
		{"bad secret", "[trusted.env]\nsecrets = [\"GH_TOKEN\"]\n", 2, "trusted.env.secrets", "VAR=podman_secret_name"},
		{"bad memory", "[agent.limits]\nmemory = \"lots\"\n", 2, "agent.limits.memory", "not a size"},
		{"zero memory", "[agent.limits]\npids = 10\nmemory = \"0\"\n", 3, "agent.limits.memory", "more than zero"},
		{"overflowing memory", "[workspace.limits]\nmemory = \"99999999999g\"\n", 2, "workspace.limits.memory", "too large"},
		{"zero tmp", "[agent.limits]\ntmp_size = \"0m\"\n", 2, "agent.limits.tmp_size", "more than zero"},
		{"bad port", "[agent]\nport = 70000\n", 2, "agent.port", "not a TCP port"},
		{"bad protected path", "[gator.github]\nprotected_paths = [\"/etc\"]\n", 2, "gator.github.protected_paths", "not a path pattern"},
		{"credential without hosts", "[credentials.MY_TOKEN]\nenv = \"X\"\n", 1, "credentials.MY_TOKEN.hosts", "name the hosts"},
		{"credential for every host", "[credentials.MY_TOKEN]\nhosts = [\"*\"]\n", 2, "credentials.MY_TOKEN.hosts", "every host"},
		{"credential with a bad host", "[credentials.MY_TOKEN]\nhosts = [\"a b\"]\n", 2, "credentials.MY_TOKEN.hosts", ""},
		{"credential env and secret", "[credentials.MY_TOKEN]\nhosts = [\"a.test\"]\nenv = \"X\"\nsecret = \"y\"\n", 1, "credentials.MY_TOKEN", "not both"},
		{"credential with a bad name", "[credentials.\"MY-TOKEN\"]\nhosts = [\"a.test\"]\n", 1, "credentials.MY-TOKEN", "not a valid environment variable name"},
		{"credential in open mode", "[network]\nmode = \"open\"\n[credentials.MY_TOKEN]\nhosts = [\"a.test\"]\n", 3, "credentials.MY_TOKEN", "need the proxy"},
		{"credential with devaipod's secret", "[credentials.MY_TOKEN]\nhosts = [\"a.test\"]\nsecret = \"devaipod-x\"\n", 3, "credentials.MY_TOKEN.secret", "devaipod's own"},
		{"ask every host", "[network]\nask = [\"*\"]\n", 2, "network.ask", "every host"},
		{"bad ask timeout", "[network]\nask_timeout = \"forever\"\n", 2, "network.ask_timeout", "duration"},
		{"empty notify", "[approvals]\nnotify = [\"\"]\n", 2, "approvals.notify", "empty"},
		{"workspace tmp_size", "[workspace.limits]\ntmp_size = \"1g\"\n", 2, "workspace.limits.tmp_size", "agent.limits"},
		{"relative upstream CA", "[network]\nupstream_ca = [\"ca.pem\"]\n", 2, "network.upstream_ca", "absolute path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig("/home/u/.config/devaipod.toml", []byte(tt.text))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("ParseConfig() error = %v; want a *ConfigError", err)
			}
			if ce.Line != tt.line || (tt.key != "" && ce.Key != tt.key) || !strings.Contains(ce.Msg, tt.msg) {
				t.Errorf("error = %q (line %d, key %q); want line %d, key %q, message containing %q", err, ce.Line, ce.Key, tt.line, tt.key, tt.msg)
			}
			if !strings.HasPrefix(err.Error(), "/home/u/.config/devaipod.toml:") {
				t.Errorf("error %q does not start with the file name", err)
			}
		})
	}
}

// TestSizesPodmanTakes: what podman and docker accept as sizes is accepted.
func TestSizesPodmanTakes(t *testing.T) {
	for _, v := range []string{"1.5g", "1t", "1GiB", "512m", "8388608"} {
		if _, err := ParseConfig("c.toml", []byte("[agent.limits]\nmemory = \""+v+"\"\ntmp_size = \""+v+"\"\n")); err != nil {
			t.Errorf("size %q: %v", v, err)
		}
	}
}

func TestLoadConfigMissing(t *testing.T) {
	if _, err := LoadConfig(t.TempDir()+"/none.toml", false); err != nil {
		t.Errorf("missing default config: %v; want defaults", err)
	}
	if _, err := LoadConfig(t.TempDir()+"/none.toml", true); err == nil {
		t.Error("missing --config file: no error")
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add("[agent]\ncommand = \"x\"\n")
	f.Add("[env]\nallowlist=[\"A\"]\n[env.vars]\nB=\"c\"\n")
	f.Add("[trusted.env]\nsecrets=[\"A=b\"]\n")
	f.Add("[agent.limits]\nmemory=\"1g\"\ncpus=2.0\n")
	f.Fuzz(func(t *testing.T, text string) {
		cfg, err := ParseConfig("f.toml", []byte(text))
		if err == nil && cfg == nil {
			t.Fatal("nil config without error")
		}
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.File != "f.toml" {
				t.Fatalf("error %v does not name the file", err)
			}
		}
	})
}
