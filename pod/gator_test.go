package pod

import (
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/source"
)

func TestForgeAPIURL(t *testing.T) {
	for _, tt := range []struct{ configured, forge, want string }{
		{"", "", ""},
		{"", source.DefaultForgeURL, ""},
		{"", "https://ghe.example.test/", "https://ghe.example.test/api/v3/"},
		{"https://api.ghe.example.test/", "https://ghe.example.test", "https://api.ghe.example.test/"},
	} {
		if got := forgeAPIURL(tt.configured, tt.forge); got != tt.want {
			t.Errorf("forgeAPIURL(%q, %q) = %q; want %q (an Enterprise token must never go to api.github.com)", tt.configured, tt.forge, got, tt.want)
		}
	}
}

func TestGatorScopes(t *testing.T) {
	withToken := &config.Config{Trusted: config.TrustedConfig{Env: config.TrustedEnvConfig{Vars: map[string]string{"GH_TOKEN": "ghp_x"}}}}
	emptyToken := &config.Config{Trusted: config.TrustedConfig{Env: config.TrustedEnvConfig{Vars: map[string]string{"GH_TOKEN": ""}}}}
	// Only parsed, never dialled: a forge of the test's own naming.
	const forge = "https://forge.example.test"
	onGitHub := &source.Source{Remote: forge + "/org/app.git"}
	for _, tt := range []struct {
		name  string
		flags []string
		cfg   *config.Config
		src   *source.Source
		want  string
	}{
		{"default scope on the source's repository", nil, withToken, onGitHub, "github:org/app:read,create-draft"},
		{"ssh remote", nil, withToken, &source.Source{Remote: "git@forge.example.test:org/app.git"}, "github:org/app:read,create-draft"},
		{"no token, no gator", nil, &config.Config{}, onGitHub, ""},
		{"an empty token is none", nil, emptyToken, onGitHub, ""},
		{"not on the forge", nil, withToken, &source.Source{Remote: "https://git.example.test/org/app.git"}, ""},
		// The gator would refuse the scope, and not start.
		{"a name the gator refuses", nil, withToken, &source.Source{Remote: forge + "/org/app.git.git"}, ""},
		{"flags win", []string{"github:org/*:read"}, withToken, onGitHub, "github:org/*:read"},
	} {
		got, err := gatorScopes(tt.flags, tt.cfg, tt.src, forge, map[string]string{})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if s := strings.Join(got, " "); s != tt.want {
			t.Errorf("%s: scopes %q; want %q", tt.name, s, tt.want)
		}
	}
	if _, err := gatorScopes([]string{"github:org"}, withToken, onGitHub, forge, nil); err == nil {
		t.Error("a malformed --gator scope was accepted")
	}
}
