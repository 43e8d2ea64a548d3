package config

import (
	"errors"
	"strings"
	"testing"
)

func TestRuleWarning(t *testing.T) {
	for _, tt := range []struct {
		rule        string
		warn, whole bool
	}{
		{"*.com", true, true},
		{"*.com:*", true, true},
		{"*.co.uk", true, true},
		{"*.test", true, true}, // a top-level domain, listed or not
		{"*.github.io", true, false},
		{"*.example.test", false, false},
		{"*.pkg.example.test:8443", false, false},
		{"*.openai.azure.com", false, false},
		{"com", false, false}, // one host, however odd
		{"api.example.test", false, false},
		{"10.0.2.2", false, false},
		{"a b", false, false}, // malformed: ValidateRule's to say
	} {
		msg, whole := RuleWarning(tt.rule)
		if (msg != "") != tt.warn || whole != tt.whole {
			t.Errorf("RuleWarning(%q) = %q, %v; want a warning %v, whole suffix %v", tt.rule, msg, whole, tt.warn, tt.whole)
		}
		if msg != "" && !strings.Contains(msg, `"`+tt.rule+`"`) {
			t.Errorf("RuleWarning(%q) = %q does not name the rule", tt.rule, msg)
		}
	}
}

func TestValidateRuleEveryHost(t *testing.T) {
	for _, r := range []string{"*", "*:*", "*:443"} {
		err := ValidateRule(r)
		if err == nil || !strings.Contains(err.Error(), "would allow every host") || !strings.Contains(err.Error(), `mode = "open"`) {
			t.Errorf("ValidateRule(%q) = %v; want a refusal that says what it would do and what to use", r, err)
		}
	}
}

// TestConfigRuleChecks: [network] allow warns of a rule that opens a whole
// public suffix, with file, line and key; "*" alone is an error there, and
// a credential is never given to a whole public suffix.
func TestConfigRuleChecks(t *testing.T) {
	const file = "/home/u/.config/devaipod.toml"
	cfg, err := ParseConfig(file, []byte("[network]\nmode = \"allowlist\"\nallow = [\"api.example.test\", \"*.com\"]\n"+
		"[credentials.T]\nenv = \"X\"\nhosts = [\"*.github.io\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		file + `:3: network.allow: rule "*.com" opens every host under "com", a public suffix`,
		file + `:6: credentials.T.hosts: rule "*.github.io" opens every host under "github.io"`,
	}
	if len(cfg.Warnings) != len(want) {
		t.Fatalf("warnings = %q; want %d", cfg.Warnings, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(cfg.Warnings[i], w) {
			t.Errorf("warning %d = %q; want it to start with %q", i, cfg.Warnings[i], w)
		}
	}

	for _, tt := range []struct {
		text, key, msg string
		line           int
	}{
		{"[network]\nallow = [\"*\"]\n", "network.allow", "would allow every host", 2},
		{"[credentials.T]\nenv = \"X\"\nhosts = [\"*.co.uk\"]\n", "credentials.T.hosts", "give them the credential", 3},
		{"[workspace]\nimage = \"bad//image\"\n", "workspace.image", `image "bad//image"`, 2},
		{"[agent]\nkind = \"custom\"\ncommand = \"x\"\nimage = \"Upper/Case\"\n", "agent.image", "must be lowercase", 4},
		{"[agent.limits]\nmemory = \"-1g\"\n", "agent.limits.memory", "not a size", 2},
	} {
		_, err := ParseConfig(file, []byte(tt.text))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != tt.key || ce.Line != tt.line || !strings.Contains(ce.Msg, tt.msg) || ce.File != file {
			t.Errorf("ParseConfig(%q) = %v; want %s:%d: %s: ...%s...", tt.text, err, file, tt.line, tt.key, tt.msg)
		}
	}
}

func TestValidateImage(t *testing.T) {
	for _, ok := range []string{
		"debian", "debian:12", "docker.io/library/debian:12", "localhost/devaipod-default:latest",
		"registry.example.test:5000/team/img:v1.2", "quay.io/org/img@sha256:" + strings.Repeat("ab", 32),
		strings.Repeat("0f", 32), "sha256:" + strings.Repeat("0f", 32), "5ed42fc3deaa",
	} {
		if err := ValidateImage(ok); err != nil {
			t.Errorf("ValidateImage(%q): %v", ok, err)
		}
	}
	for bad, why := range map[string]string{
		"bad//image":            "not an image name",
		"Upper/Case":            "must be lowercase",
		"docker://debian":       "without a scheme",
		"img:tag:again":         "not an image name",
		"img@sha256:short":      "",
		"":                      "empty",
		"-leading-dash":         "not an image name",
		"a/b:" + "x y":          "not an image name",
		"host:port/img:tag:tag": "",
	} {
		err := ValidateImage(bad)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ValidateImage(%q) = %v; want an error saying %q", bad, err, why)
		}
	}
}
