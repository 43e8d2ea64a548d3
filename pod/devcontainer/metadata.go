package devcontainer

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// MetadataLabel is the image label in which the devcontainer CLI, and the
// images of the devcontainers collection, keep what the container needs
// beyond its image: a JSON array of devcontainer.json fragments, the
// base image's first, then each feature's (with its "id"), in install
// order.
const MetadataLabel = "devcontainer.metadata"

// maxMetadata and maxMetadataEntries bound the label: the image is the
// repository's choice (a base image and a feature each make one entry).
const (
	maxMetadata        = 1 << 20
	maxMetadataEntries = 100
)

// WithMetadata returns a copy of c merged with the entries of an image's
// devcontainer.metadata label, as the devcontainer CLI merges them (the
// spec's image metadata): c's own values win over the metadata's, the
// later entries' over the earlier ones' for single values (remoteUser,
// containerUser); privileged and init hold if any says so; capAdd,
// securityOpt, forwardPorts and entrypoints are the union, in order;
// containerEnv, remoteEnv and mounts (by target) merge, c last; each
// in-container lifecycle command of the metadata runs before c's own, in
// order (Before), a command identical to c's own once. Keys of an entry
// that devaipod does not read are said in the copy's Warnings.
//
// Each entry's variables are substituted with vars, but never a host
// value: ${localEnv:...} is as unset (an image gets nothing of the host).
func (c *Config) WithMetadata(label string, vars Vars) (*Config, error) {
	if len(label) > maxMetadata {
		return nil, fmt.Errorf("%s label: more than %d bytes", MetadataLabel, maxMetadata)
	}
	vars.LocalEnv, vars.LocalWorkspaceFolder, vars.WithholdLocalEnv = nil, "", true
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(label), &raw); err != nil {
		var one json.RawMessage // a single object is allowed too
		if err2 := json.Unmarshal([]byte(label), &one); err2 != nil || len(one) == 0 || one[0] != '{' {
			return nil, fmt.Errorf("%s label: %w", MetadataLabel, err)
		}
		raw = []json.RawMessage{one}
	}
	m := *c
	var entries []*Config
	var from []string
	for i, r := range raw {
		var id struct {
			ID         string `json:"id"`
			Entrypoint string `json:"entrypoint"`
		}
		json.Unmarshal(r, &id)
		if i == maxMetadataEntries {
			return nil, fmt.Errorf("%s label: more than %d entries", MetadataLabel, maxMetadataEntries)
		}
		e, err := parseMetadataEntry(r, fmt.Sprintf("%s[%d]", MetadataLabel, i))
		if err != nil {
			return nil, err
		}
		if err := e.Substitute(vars); err != nil {
			return nil, fmt.Errorf("the image's %w", err)
		}
		if id.Entrypoint != "" {
			e.Entrypoints = []string{id.Entrypoint}
		}
		entries = append(entries, e)
		from = append(from, cmp.Or(id.ID, "the image"))
		for _, k := range e.Unsupported {
			if k != "id" && k != "entrypoint" && k != "customizations" && k != "overrideCommand" {
				m.Warnings = append(m.Warnings, fmt.Sprintf("the image's %s[%d] (%s): %s is not supported, ignored", MetadataLabel, i, from[i], k))
			}
		}
	}
	for i := len(entries) - 1; i >= 0; i-- { // the latest entry that sets one
		e := entries[i]
		if m.RemoteUser == "" && c.RemoteUser == "" {
			m.RemoteUser = e.RemoteUser
		}
		if m.ContainerUser == "" && c.ContainerUser == "" {
			m.ContainerUser = e.ContainerUser
		}
	}
	m.ContainerEnv, m.RemoteEnv = map[string]string{}, map[string]string{}
	var capAdd, securityOpt, entrypoints []string
	var mounts []Mount
	var ports []Port
	for _, e := range append(entries, c) {
		m.Privileged = m.Privileged || e.Privileged
		m.Init = m.Init || e.Init
		maps.Copy(m.ContainerEnv, e.ContainerEnv)
		maps.Copy(m.RemoteEnv, e.RemoteEnv)
		capAdd = appendNew(capAdd, e.CapAdd...)
		securityOpt = appendNew(securityOpt, e.SecurityOpt...)
		entrypoints = appendNew(entrypoints, e.Entrypoints...)
		for _, mt := range e.Mounts {
			mounts = slices.DeleteFunc(mounts, func(o Mount) bool { return o.Target == mt.Target })
			mounts = append(mounts, mt)
		}
		for _, p := range e.ForwardPorts {
			if !slices.Contains(ports, p) {
				ports = append(ports, p)
			}
		}
	}
	if len(m.ContainerEnv) == 0 {
		m.ContainerEnv = nil
	}
	if len(m.RemoteEnv) == 0 {
		m.RemoteEnv = nil
	}
	m.CapAdd, m.SecurityOpt, m.Entrypoints, m.Mounts, m.ForwardPorts = capAdd, securityOpt, entrypoints, mounts, ports
	for _, f := range []struct {
		own  **LifecycleCommand
		meta func(*Config) *LifecycleCommand
	}{
		{&m.OnCreateCommand, func(e *Config) *LifecycleCommand { return e.OnCreateCommand }},
		{&m.UpdateContentCommand, func(e *Config) *LifecycleCommand { return e.UpdateContentCommand }},
		{&m.PostCreateCommand, func(e *Config) *LifecycleCommand { return e.PostCreateCommand }},
		{&m.PostStartCommand, func(e *Config) *LifecycleCommand { return e.PostStartCommand }},
		{&m.PostAttachCommand, func(e *Config) *LifecycleCommand { return e.PostAttachCommand }},
	} {
		var before []*LifecycleCommand
		for i, e := range entries {
			cmd := f.meta(e)
			// The CLI's own build keeps the file's commands in the label
			// too: they run once.
			if cmd == nil || (*f.own != nil && slices.EqualFunc(cmd.Steps, (*f.own).Steps, stepsEqual)) ||
				slices.ContainsFunc(before, func(b *LifecycleCommand) bool { return slices.EqualFunc(cmd.Steps, b.Steps, stepsEqual) }) {
				continue
			}
			cmd.From = from[i]
			before = append(before, cmd)
		}
		if len(before) == 0 {
			continue
		}
		own := &LifecycleCommand{}
		if *f.own != nil {
			c := **f.own
			own = &c
		}
		own.Before = before
		*f.own = own
	}
	return &m, nil
}

// parseMetadataEntry reads one entry as a devcontainer.json fragment.
func parseMetadataEntry(r json.RawMessage, name string) (*Config, error) {
	e, err := Parse(r, name)
	if err != nil {
		return nil, fmt.Errorf("the image's %w", err)
	}
	return e, nil
}

func stepsEqual(a, b Step) bool { return a.Name == b.Name && slices.Equal(a.Args, b.Args) }

// appendNew appends the values of vs that list does not hold yet.
func appendNew(list []string, vs ...string) []string {
	for _, v := range vs {
		if !slices.Contains(list, v) {
			list = append(list, v)
		}
	}
	return list
}
