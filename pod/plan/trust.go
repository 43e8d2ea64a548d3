package plan

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
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
		// Security options name host files (seccomp=PATH) and undo the
		// confinement privileged would (unmask, systempaths, label,
		// *=unconfined).
		if o := append(slices.Clone(c.SecurityOpt), b.in.RunArgs.SecurityOpt...); len(o) > 0 {
			withheld = append(withheld, "security options ("+strings.Join(o, ", ")+")")
			c.SecurityOpt, b.in.RunArgs.SecurityOpt = nil, nil
		}
		// Ports published on the host's 127.0.0.1, where the person's own
		// tools listen and connect: the stranger's workspace would take
		// their connections.
		if len(c.ForwardPorts) > 0 {
			var ports []string
			for _, p := range c.ForwardPorts {
				ports = append(ports, strconv.Itoa(p.Port))
			}
			withheld = append(withheld, "ports on this host's 127.0.0.1 ("+strings.Join(ports, ", ")+")")
			c.ForwardPorts = nil
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
