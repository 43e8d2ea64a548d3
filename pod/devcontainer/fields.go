package devcontainer

// The properties that take more than a scalar: lifecycle commands, mounts,
// ports, features, customizations.devaipod.

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/devaipod/devaipod/proxy/rule"

	"github.com/tailscale/hujson"
)

// lifecycle decodes a *Command property; nil means nothing to run.
func (d *decoder) lifecycle(v *hujson.Value, key string) *LifecycleCommand {
	const want = "a string, an array of strings or an object of those"
	switch v.Value.Kind() {
	case '"', '[':
		args, ok := d.command(v, key, want)
		if !ok || args == nil {
			return nil
		}
		return &LifecycleCommand{Steps: []Step{{Args: args}}}
	case '{':
		members, ok := d.object(v, key)
		if !ok {
			return nil
		}
		lc := &LifecycleCommand{Parallel: true}
		for _, m := range members {
			if m.name == "" {
				d.errorf(m.value, m.key, "step names must not be empty")
				continue
			}
			args, ok := d.command(m.value, m.key, "a string or an array of strings")
			if ok && args != nil {
				lc.Steps = append(lc.Steps, Step{Name: m.name, Args: args})
			}
		}
		if len(lc.Steps) == 0 {
			return nil
		}
		return lc
	}
	d.wrongType(v, key, want)
	return nil
}

// command decodes a string (run by /bin/sh -c) or an array (run as is);
// empty ones give nil args and are skipped, as the devcontainer CLI does.
func (d *decoder) command(v *hujson.Value, key, want string) ([]string, bool) {
	switch v.Value.Kind() {
	case '"':
		s, ok := d.str(v, key)
		if !ok || strings.TrimSpace(s) == "" {
			return nil, ok
		}
		return append(slices.Clone(Shell), s), true
	case '[':
		args, ok := d.strList(v, key)
		if !ok || len(args) == 0 {
			return nil, ok
		}
		return args, true
	}
	d.wrongType(v, key, want)
	return nil, false
}

func (d *decoder) mounts(v *hujson.Value, key string, c *Config) []Mount {
	elems, ok := d.array(v, key, "an array of mount strings or objects")
	if !ok {
		return nil
	}
	var out []Mount
	for i, e := range elems {
		k := fmt.Sprintf("%s[%d]", key, i)
		switch e.Value.Kind() {
		case '"':
			s, ok := d.str(e, k)
			if !ok {
				continue
			}
			m, err := ParseMount(s)
			if err == nil {
				err = checkMount(m, false)
			}
			if err != nil {
				d.errorf(e, k, "%v", err)
				continue
			}
			out = append(out, m)
		case '{':
			members, ok := d.object(e, k)
			if !ok {
				continue
			}
			var m Mount
			good := true
			for _, mm := range members {
				switch mm.name {
				case "type":
					m.Type, ok = d.str(mm.value, mm.key)
				case "source":
					m.Source, ok = d.str(mm.value, mm.key)
				case "target":
					m.Target, ok = d.str(mm.value, mm.key)
				case "readonly":
					m.ReadOnly, ok = d.boolean(mm.value, mm.key)
				default:
					c.Unsupported = append(c.Unsupported, mm.key)
					ok = true
				}
				good = good && ok
			}
			if !good {
				continue
			}
			if _, has := findMember(members, "type"); !has {
				d.errorf(e, k+".type", "required: bind, volume or tmpfs")
				continue
			}
			if _, has := findMember(members, "target"); !has {
				d.errorf(e, k+".target", "required: the absolute path in the container")
				continue
			}
			if err := checkMount(m, false); err != nil {
				d.errorf(e, k, "%v", err)
				continue
			}
			out = append(out, m)
		default:
			d.wrongType(e, k, "a mount string (\"type=bind,source=...,target=...\") or an object")
		}
	}
	return out
}

var portHost = regexp.MustCompile(`^([A-Za-z0-9.-]+):([0-9]{1,5})$`)

func (d *decoder) ports(v *hujson.Value, key string, c *Config) []Port {
	elems, ok := d.array(v, key, "an array of port numbers or \"host:port\" strings")
	if !ok {
		return nil
	}
	var out []Port
	for i, e := range elems {
		k := fmt.Sprintf("%s[%d]", key, i)
		var p Port
		switch e.Value.Kind() {
		case '0':
			n, ok := d.integer(e, k)
			if !ok {
				continue
			}
			if n < 1 || n > 65535 {
				d.errorf(e, k, "%d is not a port (1-65535)", n)
				continue
			}
			p.Port = int(n)
		case '"':
			s, ok := d.str(e, k)
			if !ok {
				continue
			}
			num := s
			if m := portHost.FindStringSubmatch(s); m != nil {
				p.Host, num = m[1], m[2]
			}
			n, err := strconv.Atoi(num)
			if err != nil || len(num) > 5 {
				d.errorf(e, k, "%q is not a port number or \"host:port\"", s)
				continue
			}
			if n < 1 || n > 65535 {
				d.errorf(e, k, "%d is not a port (1-65535)", n)
				continue
			}
			p.Port = n
			if !p.Local() {
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s: %q forwards a port of another host (a compose service); devaipod publishes only the dev container's own ports", k, s))
			}
		default:
			d.wrongType(e, k, "a port number or a \"host:port\" string")
			continue
		}
		out = append(out, p)
	}
	return out
}

// features keeps the object as plain Go values (numbers as json.Number)
// after checking the shape the spec allows: id -> options object, version
// string or boolean.
func (d *decoder) features(v *hujson.Value, key string) map[string]any {
	members, ok := d.object(v, key)
	if !ok {
		return nil
	}
	out := map[string]any{}
	for _, m := range members {
		switch m.value.Value.Kind() {
		case '{', '"', 't', 'f':
		default:
			d.wrongType(m.value, m.key, "an options object, a version string or a boolean")
			continue
		}
		if m.name == "" {
			d.errorf(m.value, m.key, "feature ids must not be empty")
			continue
		}
		val, err := plain(m.value)
		if err != nil {
			d.errorf(m.value, m.key, "%v", err)
			continue
		}
		out[m.name] = val
	}
	return out
}

func (d *decoder) customizations(v *hujson.Value, key string, c *Config) {
	members, ok := d.object(v, key)
	if !ok {
		return
	}
	for _, m := range members {
		// Other tools' customizations (vscode, codespaces, ...) are theirs.
		if m.name != "devaipod" {
			continue
		}
		dm, ok := d.object(m.value, m.key)
		if !ok {
			continue
		}
		for _, f := range dm {
			switch f.name {
			case "envAllowlist":
				names, ok := d.strList(f.value, f.key)
				if !ok {
					continue
				}
				for i, n := range names {
					if !envVarName.MatchString(n) {
						d.errorf(d.elem(f.value, i), fmt.Sprintf("%s[%d]", f.key, i), "%q is not a variable name (letters, digits and _, not starting with a digit)", n)
					}
				}
				c.Devaipod.EnvAllowlist = names
			case "allowedDomains":
				rules, ok := d.strList(f.value, f.key)
				if !ok {
					continue
				}
				for i, r := range rules {
					if _, err := rule.Parse(r); err != nil {
						d.errorf(d.elem(f.value, i), fmt.Sprintf("%s[%d]", f.key, i), "%v", err)
					}
				}
				c.Devaipod.AllowedDomains = rules
			case "agent":
				c.Devaipod.Agent = d.agent(f.value, f.key, c)
			default:
				c.Unsupported = append(c.Unsupported, f.key)
			}
		}
	}
}

func (d *decoder) agent(v *hujson.Value, key string, c *Config) *Agent {
	a := &Agent{}
	if v.Value.Kind() == '"' {
		s, ok := d.str(v, key)
		if !ok {
			return nil
		}
		if s != AgentOpencode {
			d.errorf(v, key, "%q: the string form names a preset, and the only one is %q; a custom agent needs the object form with kind and command", s, AgentOpencode)
			return nil
		}
		a.Kind = s
		return a
	}
	if v.Value.Kind() != '{' {
		d.wrongType(v, key, "a string (the agent kind) or an object")
		return nil
	}
	members, ok := d.object(v, key)
	if !ok {
		return nil
	}
	for _, m := range members {
		switch m.name {
		case "kind":
			if s, ok := d.str(m.value, m.key); ok {
				if s != AgentOpencode && s != AgentCustom {
					d.errorf(m.value, m.key, "%q is not an agent kind: use %s or %s", s, AgentOpencode, AgentCustom)
				}
				a.Kind = s
			}
		case "image":
			a.Image, _ = d.str(m.value, m.key)
		case "command":
			args, ok := d.command(m.value, m.key, "a string or an array of strings")
			if ok && args == nil {
				d.errorf(m.value, m.key, "must not be empty")
			}
			a.Command = args
		case "port":
			if n, ok := d.integer(m.value, m.key); ok {
				if n < 1 || n > 65535 {
					d.errorf(m.value, m.key, "%d is not a port (1-65535)", n)
				}
				a.Port = int(n)
			}
		case "health":
			if s, ok := d.str(m.value, m.key); ok {
				if !strings.HasPrefix(s, "/") || strings.ContainsAny(s, " \t\r\n") {
					d.errorf(m.value, m.key, "%q must be an HTTP path starting with / (polled on 127.0.0.1:PORT)", s)
				}
				a.Health = s
			}
		default:
			c.Unsupported = append(c.Unsupported, m.key)
		}
	}
	if a.Kind == AgentCustom && len(a.Command) == 0 {
		d.errorf(v, key+".command", "kind %q needs a command that starts the agent's server", AgentCustom)
	}
	return a
}
