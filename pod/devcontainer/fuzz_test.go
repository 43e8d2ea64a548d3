package devcontainer

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, and that whatever it accepts
// survives a round trip: the Config written back as devcontainer.json
// parses to the same Config (all fields but Unsupported, whose values are
// not kept).
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"good", "bad"} {
		files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte(`{"mounts": [{"type": "bind", "source": "/a\nb", "target": "/c"}], "forwardPorts": ["9"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.json")
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned a Config with an error: %v", err)
			}
			if err.Error() == "" {
				t.Fatal("empty error text")
			}
			return
		}
		text, err := encodeDevcontainer(c)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		again, err := Parse(text, "fuzz.json")
		if err != nil {
			t.Fatalf("re-parse of\n%s\nfailed: %v\noriginal:\n%s", text, err, data)
		}
		c.Unsupported, again.Unsupported = nil, nil
		a, _ := json.Marshal(c)
		b, _ := json.Marshal(again)
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the config\nfirst:  %s\nsecond: %s\nvia:\n%s", a, b, text)
		}
		// Substitute must not panic either, whatever the values.
		_ = again.Substitute(Vars{LocalEnv: map[string]string{"HOME": "/h"}, LocalWorkspaceFolder: "/src/p", DevcontainerID: "id", ContainerEnv: map[string]string{}})
		_, _ = ParseRunArgs(again.RunArgs)
	})
}

// encodeDevcontainer writes c back in devcontainer.json form.
func encodeDevcontainer(c *Config) ([]byte, error) {
	m := map[string]any{}
	set := func(k string, v string) {
		if v != "" {
			m[k] = v
		}
	}
	set("name", c.Name)
	set("image", c.Image)
	if b := c.Build; b != nil {
		bm := map[string]any{"dockerfile": b.Dockerfile, "context": b.Context}
		if b.Args != nil {
			bm["args"] = b.Args
		}
		if b.Target != "" {
			bm["target"] = b.Target
		}
		if b.CacheFrom != nil {
			bm["cacheFrom"] = b.CacheFrom
		}
		m["build"] = bm
	}
	set("workspaceFolder", c.WorkspaceFolder)
	if c.ContainerEnv != nil {
		m["containerEnv"] = c.ContainerEnv
	}
	if c.RemoteEnv != nil || c.RemoteEnvUnset != nil {
		re := map[string]any{}
		for k, v := range c.RemoteEnv {
			re[k] = v
		}
		for _, k := range c.RemoteEnvUnset {
			re[k] = nil
		}
		m["remoteEnv"] = re
	}
	set("remoteUser", c.RemoteUser)
	set("containerUser", c.ContainerUser)
	if c.UpdateRemoteUserUID != nil {
		m["updateRemoteUserUID"] = *c.UpdateRemoteUserUID
	}
	for _, lc := range []struct {
		key string
		cmd *LifecycleCommand
	}{
		{"initializeCommand", c.InitializeCommand}, {"onCreateCommand", c.OnCreateCommand},
		{"updateContentCommand", c.UpdateContentCommand}, {"postCreateCommand", c.PostCreateCommand},
		{"postStartCommand", c.PostStartCommand}, {"postAttachCommand", c.PostAttachCommand},
	} {
		if lc.cmd == nil {
			continue
		}
		if lc.cmd.Parallel {
			// Go maps lose the order; write the object by hand below.
			m[lc.key] = orderedSteps(lc.cmd.Steps)
		} else {
			m[lc.key] = lc.cmd.Steps[0].Args
		}
	}
	if c.CapAdd != nil {
		m["capAdd"] = c.CapAdd
	}
	if c.SecurityOpt != nil {
		m["securityOpt"] = c.SecurityOpt
	}
	if c.Privileged {
		m["privileged"] = true
	}
	if c.Init {
		m["init"] = true
	}
	if c.RunArgs != nil {
		m["runArgs"] = c.RunArgs
	}
	if c.Mounts != nil {
		var mounts []any
		for _, mt := range c.Mounts {
			if len(mt.Options) == 0 {
				obj := map[string]any{"type": mt.Type, "target": mt.Target}
				if mt.Source != "" {
					obj["source"] = mt.Source
				}
				if mt.ReadOnly {
					obj["readonly"] = true
				}
				mounts = append(mounts, obj)
				continue
			}
			fields := []string{"type=" + mt.Type, "target=" + mt.Target}
			if mt.Source != "" {
				fields = append(fields, "source="+mt.Source)
			}
			if mt.ReadOnly {
				fields = append(fields, "readonly")
			}
			fields = append(fields, mt.Options...)
			var b strings.Builder
			w := csv.NewWriter(&b)
			if err := w.Write(fields); err != nil {
				return nil, err
			}
			w.Flush()
			mounts = append(mounts, strings.TrimSuffix(b.String(), "\n"))
		}
		m["mounts"] = mounts
	}
	if c.ForwardPorts != nil {
		var ports []any
		for _, p := range c.ForwardPorts {
			if p.Host == "" {
				ports = append(ports, p.Port)
			} else {
				ports = append(ports, p.Host+":"+strconv.Itoa(p.Port))
			}
		}
		m["forwardPorts"] = ports
	}
	if c.Features != nil {
		m["features"] = c.Features
	}
	if c.OverrideFeatureInstallOrder != nil {
		m["overrideFeatureInstallOrder"] = c.OverrideFeatureInstallOrder
	}
	d := map[string]any{}
	if c.Devaipod.EnvAllowlist != nil {
		d["envAllowlist"] = c.Devaipod.EnvAllowlist
	}
	if c.Devaipod.AllowedDomains != nil {
		d["allowedDomains"] = c.Devaipod.AllowedDomains
	}
	if a := c.Devaipod.Agent; a != nil {
		am := map[string]any{}
		if a.Kind != "" {
			am["kind"] = a.Kind
		}
		if a.Image != "" {
			am["image"] = a.Image
		}
		if a.Command != nil {
			am["command"] = a.Command
		}
		if a.Port != 0 {
			am["port"] = a.Port
		}
		if a.Health != "" {
			am["health"] = a.Health
		}
		d["agent"] = am
	}
	if len(d) > 0 {
		m["customizations"] = map[string]any{"devaipod": d}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(m)
	return b.Bytes(), err
}

// orderedSteps is a lifecycle object that keeps its steps' order.
type orderedSteps []Step

func (o orderedSteps) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, s := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(s.Name)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(s.Args)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
