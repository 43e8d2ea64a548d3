package devcontainer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/tailscale/hujson"
)

// Limits that keep a hostile file from costing much: devcontainer.json
// files are a few kilobytes.
const (
	maxFileSize = 1 << 20
	maxDepth    = 64
)

// Load reads and parses the devcontainer.json at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read devcontainer.json: %w", err)
	}
	return Parse(data, path)
}

// Parse parses devcontainer.json text (JSON with comments and trailing
// commas); file names it in errors and is the base of relative build
// paths. Every problem found is reported: the error is an *Error, or
// Errors when there are several.
func Parse(data []byte, file string) (*Config, error) {
	if len(data) > maxFileSize {
		return nil, &Error{File: file, Msg: fmt.Sprintf("file is larger than %d bytes; a devcontainer.json is a few kilobytes", maxFileSize)}
	}
	// A UTF-8 byte order mark is what some editors write; a line comment
	// on the last line without a newline is valid JSONC, but hujson wants
	// the newline. Neither changes line numbers.
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	if !bytes.HasSuffix(data, []byte("\n")) {
		data = append(slices.Clip(data), '\n')
	}
	if blank(data) {
		return nil, &Error{File: file, Msg: "the file holds no JSON object (it is empty or only comments)"}
	}
	if line, col, ok := tooDeep(data); ok {
		return nil, &Error{File: file, Line: line, Column: col, Msg: fmt.Sprintf("syntax error: nested deeper than %d levels", maxDepth)}
	}
	root, err := hujson.Parse(data)
	if err != nil {
		return nil, syntaxError(file, err)
	}
	d := &decoder{file: file, data: data, lines: map[string]int{}}
	d.lineStarts = lineStarts(data)
	c := d.config(&root)
	if c != nil {
		c.scanVariables(d)
	}
	if len(d.errs) > 0 {
		sort.SliceStable(d.errs, func(i, j int) bool { return d.errs[i].Line < d.errs[j].Line })
		return nil, d.errs.asError()
	}
	sort.Strings(c.Unsupported)
	c.Unsupported = slices.Compact(c.Unsupported)
	sort.Strings(c.Warnings)
	return c, nil
}

var (
	envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	capName    = regexp.MustCompile(`^[A-Za-z_]+$`)
)

// config decodes the top-level object.
func (d *decoder) config(root *hujson.Value) *Config {
	members, ok := d.object(root, "")
	if !ok {
		d.errs[len(d.errs)-1].Msg = "the file must hold one JSON object, not " + kindName(root)
		return nil
	}
	c := &Config{File: d.file, lines: d.lines}
	dir := filepath.Dir(d.file)
	var build *Build
	var legacyDockerfile, legacyContext *member
	var imageAt *hujson.Value
	for _, m := range members {
		v, key := m.value, m.key
		switch m.name {
		case "$schema":
			// Editors' schema reference; nothing to do.
		case "name":
			c.Name, _ = d.str(v, key)
		case "image":
			c.Image, _ = d.str(v, key)
			imageAt = v
		case "build":
			build = d.build(v, key, dir, c)
		case "dockerFile":
			mm := m
			legacyDockerfile = &mm
		case "context":
			mm := m
			legacyContext = &mm
		case "workspaceFolder":
			if s, ok := d.str(v, key); ok {
				if !strings.Contains(s, "${") {
					if err := checkContainerPath(s); err != nil {
						d.errorf(v, key, "%v", err)
					}
				}
				c.WorkspaceFolder = s
			}
		case "containerEnv":
			c.ContainerEnv, _ = d.envMap(v, key, false)
		case "remoteEnv":
			c.RemoteEnv, c.RemoteEnvUnset = d.envMap(v, key, true)
		case "remoteUser":
			c.RemoteUser, _ = d.str(v, key)
		case "containerUser":
			c.ContainerUser, _ = d.str(v, key)
		case "updateRemoteUserUID":
			if b, ok := d.boolean(v, key); ok {
				c.UpdateRemoteUserUID = &b
			}
		case "initializeCommand":
			c.InitializeCommand = d.lifecycle(v, key)
		case "onCreateCommand":
			c.OnCreateCommand = d.lifecycle(v, key)
		case "updateContentCommand":
			c.UpdateContentCommand = d.lifecycle(v, key)
		case "postCreateCommand":
			c.PostCreateCommand = d.lifecycle(v, key)
		case "postStartCommand":
			c.PostStartCommand = d.lifecycle(v, key)
		case "postAttachCommand":
			c.PostAttachCommand = d.lifecycle(v, key)
		case "capAdd":
			if caps, ok := d.strList(v, key); ok {
				for i, cp := range caps {
					if !capName.MatchString(cp) && !strings.Contains(cp, "${") {
						d.errorf(d.elem(v, i), fmt.Sprintf("%s[%d]", key, i), "%q is not a capability name such as SYS_PTRACE", cp)
					}
				}
				c.CapAdd = caps
			}
		case "securityOpt":
			if opts, ok := d.strList(v, key); ok {
				for i, o := range opts {
					if strings.TrimSpace(o) == "" {
						d.errorf(d.elem(v, i), fmt.Sprintf("%s[%d]", key, i), "must not be empty")
					}
				}
				c.SecurityOpt = opts
			}
		case "privileged":
			c.Privileged, _ = d.boolean(v, key)
		case "init":
			c.Init, _ = d.boolean(v, key)
		case "runArgs":
			if args, ok := d.strList(v, key); ok {
				// Checked now for the line numbers; values that hold
				// variables are checked again after Substitute.
				if _, err := parseRunArgs(args, false); err != nil {
					var re *RunArgError
					if errors.As(err, &re) {
						d.errorf(d.elem(v, re.Index), fmt.Sprintf("%s[%d]", key, re.Index), "%s", re.Msg)
					} else {
						d.errorf(v, key, "%v", err)
					}
				}
				c.RunArgs = args
			}
		case "mounts":
			c.Mounts = d.mounts(v, key, c)
		case "forwardPorts":
			c.ForwardPorts = d.ports(v, key, c)
		case "features":
			c.Features = d.features(v, key)
		case "overrideFeatureInstallOrder":
			c.OverrideFeatureInstallOrder, _ = d.strList(v, key)
		case "customizations":
			d.customizations(v, key, c)
		case "dockerComposeFile":
			d.errorf(v, key, "compose-based devcontainers are not supported: use image or build.dockerfile")
		default:
			c.Unsupported = append(c.Unsupported, key)
		}
	}
	if legacyDockerfile != nil {
		if build != nil {
			d.errorf(legacyDockerfile.value, "dockerFile", "build and the legacy dockerFile are both set; use build.dockerfile only")
		} else if s, ok := d.str(legacyDockerfile.value, "dockerFile"); ok {
			if strings.TrimSpace(s) == "" {
				d.errorf(legacyDockerfile.value, "dockerFile", "must not be empty")
			}
			build = &Build{rawDockerfile: s, rawContext: ".", dir: dir}
			if legacyContext != nil {
				build.rawContext, _ = d.str(legacyContext.value, "context")
			}
		}
	} else if legacyContext != nil {
		if build != nil {
			d.errorf(legacyContext.value, "context", "the legacy top-level context is set with build; use build.context")
		} else {
			c.Unsupported = append(c.Unsupported, "context")
		}
	}
	if build != nil {
		build.resolve()
		c.Build = build
	}
	if c.Build != nil && c.Image != "" {
		d.errorf(imageAt, "image", "image and build.dockerfile are both set; use one of them")
	}
	return c
}

func (d *decoder) build(v *hujson.Value, key, dir string, c *Config) *Build {
	members, ok := d.object(v, key)
	if !ok {
		return nil
	}
	b := &Build{rawContext: ".", dir: dir}
	hasDockerfile := false
	for _, m := range members {
		switch m.name {
		case "dockerfile":
			b.rawDockerfile, hasDockerfile = d.str(m.value, m.key)
			if hasDockerfile && strings.TrimSpace(b.rawDockerfile) == "" {
				d.errorf(m.value, m.key, "must not be empty")
			}
		case "context":
			b.rawContext, _ = d.str(m.value, m.key)
			if strings.TrimSpace(b.rawContext) == "" {
				b.rawContext = "."
			}
		case "args":
			b.Args, _ = d.envMap(m.value, m.key, false)
		case "target":
			b.Target, _ = d.str(m.value, m.key)
		case "cacheFrom":
			b.CacheFrom, _ = d.strOrList(m.value, m.key)
		default:
			c.Unsupported = append(c.Unsupported, m.key)
		}
	}
	if !hasDockerfile {
		if _, found := findMember(members, "dockerfile"); !found {
			d.errorf(v, key+".dockerfile", "required when build is set (the Dockerfile's path, relative to devcontainer.json)")
		}
		return nil
	}
	return b
}

// resolve joins the raw paths to the directory of devcontainer.json, as
// the spec says; paths that still hold variables wait for Substitute.
func (b *Build) resolve() {
	if !strings.Contains(b.rawDockerfile, "${") {
		b.Dockerfile = joinDir(b.dir, b.rawDockerfile)
	} else {
		b.Dockerfile = b.rawDockerfile
	}
	if !strings.Contains(b.rawContext, "${") {
		b.Context = joinDir(b.dir, b.rawContext)
	} else {
		b.Context = b.rawContext
	}
}

func joinDir(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}
