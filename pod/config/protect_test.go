package config

import (
	"strings"
	"testing"
)

func TestConfigProtectKeys(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{"[agent]\nprotect = [\"../x\"]\n", "agent.protect"},
		{"[agent]\nprotect = [\"/etc\"]\n", "agent.protect"},
		{"[agent]\nmask = [\"a/b\"]\n", "agent.mask"},
		{"[agent]\nworkspace_access = \"rwx\"\n", "agent.workspace_access"},
		{"[agent]\nkind = \"claude\"\n", "agent.kind"},
		{"[agent]\nkind = \"custom\"\n", "agent.command"},
		{"[agent]\nhealth = \"health\"\n", "agent.health"},
		{"[agent.limits]\ntimeout = \"soon\"\n", "agent.limits.timeout"},
		{"[workspace.limits]\npids = -1\n", "c.toml:2: workspace.limits.pids"},
		{"[[mounts]]\nsource = \"rel\"\ntarget = \"/x\"\n", "mounts[0]"},
		{"[[mounts]]\nsource = \"/a\"\ntarget = \"/x/../y\"\n", "mounts[0]"},
		{"[[mounts]]\nsource = \"/a\"\ntarget = \"/x\"\n\n[[mounts]]\nsource = \"/a\"\ntarget = \"/x\"\ncontainers = [\"proxy\"]\n", "c.toml:5: mounts[1]"},
	} {
		_, err := ParseConfig("c.toml", []byte(tt.text))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err %v; want one naming %s", tt.text, err, tt.want)
		}
	}
	cfg, err := ParseConfig("c.toml", []byte("[agent]\nmask = []\n"))
	if err != nil || cfg.Agent.Mask == nil || len(MaskPatterns(cfg)) != 0 {
		t.Errorf("mask = [] must mask nothing: %v %v", cfg, err)
	}
}
