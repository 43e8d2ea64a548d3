package plan

import (
	"fmt"
	"maps"
	"strings"

	"github.com/devaipod/devaipod/pod/config"
)

// withhold takes out of the input what of the person's an untrusted
// repository's pod must not get, and names it for up's one line. The
// repository's code runs in the workspace (its lifecycle commands, image,
// Dockerfile and features) and in the agent (whatever the agent runs of
// it), so neither gets the person's host paths or host variables that the
// repository or the person's config names; the trusted values are left
// out by build (the gator still gets its token: it runs none of the
// repository's code), and ${localEnv:...} was substituted as if unset
// (the devcontainer's WithheldEnv).
func (b *builder) withhold() []string {
	var withheld []string
	if n := len(b.in.Mounts); n > 0 {
		withheld = append(withheld, fmt.Sprintf("[[mounts]] (%d)", n))
		b.in.Mounts = nil
	}
	if dc := b.in.Devcontainer; dc != nil {
		if len(dc.WithheldEnv) > 0 {
			withheld = append(withheld, "${localEnv} of "+strings.Join(dc.WithheldEnv, ", "))
		}
		if n := len(b.in.DevcontainerBinds); n > 0 {
			withheld = append(withheld, fmt.Sprintf("the devcontainer's host bind mounts (%d)", n))
			b.in.DevcontainerBinds = nil
		}
		if names := b.in.RunArgs.EnvFromHost; len(names) > 0 {
			withheld = append(withheld, "host variables its runArgs name ("+strings.Join(names, ", ")+")")
			b.in.RunArgs.EnvFromHost = nil
		}
		// A copy: the caller's config is not changed.
		c := *dc
		// The host's devices are the person's: privileged (every device
		// the user can open) and --device.
		if c.Privileged || b.in.RunArgs.Privileged {
			withheld = append(withheld, "privileged (every host device you can open)")
			c.Privileged, b.in.RunArgs.Privileged = false, false
		}
		if d := b.in.RunArgs.Devices; len(d) > 0 {
			withheld = append(withheld, "host devices ("+strings.Join(d, ", ")+")")
			b.in.RunArgs.Devices = nil
		}
		if names := c.Devaipod.EnvAllowlist; len(names) > 0 {
			withheld = append(withheld, "host variables its customizations.devaipod.envAllowlist names ("+strings.Join(names, ", ")+")")
			c.Devaipod.EnvAllowlist = nil
		}
		if d := c.Devaipod.AllowedDomains; len(d) > 0 {
			withheld = append(withheld, "the hosts its customizations.devaipod.allowedDomains opens ("+strings.Join(d, ", ")+")")
			c.Devaipod.AllowedDomains = nil
		}
		b.in.Devcontainer = &c
	}
	if b.mode == config.NetworkOpen {
		// No proxy to hold the keys: the agent would get them as they are.
		var keys []string
		env := maps.Clone(b.in.HostEnv)
		for _, k := range LLMKeyVars {
			if isCredentialVar(k) && env[k] != "" {
				keys = append(keys, k)
				delete(env, k)
			}
		}
		if len(keys) > 0 {
			withheld = append(withheld, "your LLM keys in network mode \"open\" ("+strings.Join(keys, ", ")+")")
			b.in.HostEnv = env
		}
	}
	return withheld
}
