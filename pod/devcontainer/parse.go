package devcontainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/devaipod/devaipod/proxy/rule"

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

var hujsonErr = regexp.MustCompile(`^hujson: line (\d+), column (\d+): (.*)$`)

func syntaxError(file string, err error) error {
	e := &Error{File: file, Msg: "syntax error: " + err.Error()}
	if m := hujsonErr.FindStringSubmatch(err.Error()); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Column, _ = strconv.Atoi(m[2])
		e.Msg = "syntax error: " + m[3]
	}
	return e
}

// tooDeep reports the position of the first bracket nested deeper than
// maxDepth, skipping strings and comments; hujson recurses once per level.
func tooDeep(b []byte) (line, col int, deep bool) {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case c == '/' && i+1 < len(b) && b[i+1] == '/':
			for i < len(b) && b[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			end := bytes.Index(b[i+2:], []byte("*/"))
			if end < 0 {
				return 0, 0, false // hujson reports the unterminated comment
			}
			i += end + 3
		case c == '{' || c == '[':
			depth++
			if depth > maxDepth {
				line = 1 + bytes.Count(b[:i], []byte("\n"))
				col = i - bytes.LastIndexByte(b[:i], '\n')
				return line, col, true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return 0, 0, false
}

// blank reports whether b holds only whitespace and comments.
func blank(b []byte) bool {
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n':
		case bytes.HasPrefix(b[i:], []byte("//")):
			for i < len(b) && b[i] != '\n' {
				i++
			}
		case bytes.HasPrefix(b[i:], []byte("/*")):
			end := bytes.Index(b[i+2:], []byte("*/"))
			if end < 0 {
				return false
			}
			i += end + 3
		default:
			return false
		}
	}
	return true
}

func lineStarts(b []byte) []int {
	starts := []int{0}
	for i, c := range b {
		if c == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// decoder walks hujson's syntax tree, which keeps byte offsets, so that
// every type error can name its line and key.
type decoder struct {
	file       string
	data       []byte
	lineStarts []int
	errs       Errors
	lines      map[string]int
}

func (d *decoder) line(off int) int {
	return sort.Search(len(d.lineStarts), func(i int) bool { return d.lineStarts[i] > off })
}

func (d *decoder) errorf(v *hujson.Value, key, format string, args ...any) {
	e := &Error{File: d.file, Key: key, Msg: fmt.Sprintf(format, args...)}
	if v != nil {
		e.Line = d.line(v.StartOffset)
	}
	d.errs = append(d.errs, e)
}

func (d *decoder) mark(key string, v *hujson.Value) {
	if _, ok := d.lines[key]; !ok {
		d.lines[key] = d.line(v.StartOffset)
	}
}

func kindName(v *hujson.Value) string {
	switch v.Value.Kind() {
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "a value"
}

func (d *decoder) wrongType(v *hujson.Value, key, want string) {
	d.errorf(v, key, "must be %s, not %s", want, kindName(v))
}

// member is one object member whose name is decoded.
type member struct {
	name  string
	key   string // the dotted key in error messages
	value *hujson.Value
}

// object returns v's members, refusing duplicate names: JSON parsers
// disagree on which duplicate wins, and a reviewer reads the first one.
func (d *decoder) object(v *hujson.Value, key string) ([]member, bool) {
	obj, ok := v.Value.(*hujson.Object)
	if !ok {
		d.wrongType(v, key, "an object")
		return nil, false
	}
	d.mark(key, v)
	seen := map[string]int{}
	var out []member
	for i := range obj.Members {
		m := &obj.Members[i]
		name := m.Name.Value.(hujson.Literal).String()
		k := name
		if key != "" {
			k = key + "." + name
		}
		if first, dup := seen[name]; dup {
			d.errorf(&m.Name, k, "set twice (first on line %d); remove one", first)
			continue
		}
		seen[name] = d.line(m.Name.StartOffset)
		d.mark(k, &m.Name)
		out = append(out, member{name: name, key: k, value: &m.Value})
	}
	return out, true
}

func (d *decoder) str(v *hujson.Value, key string) (string, bool) {
	lit, ok := v.Value.(hujson.Literal)
	if !ok || lit.Kind() != '"' {
		d.wrongType(v, key, "a string")
		return "", false
	}
	d.mark(key, v)
	s := lit.String()
	if strings.ContainsRune(s, 0) {
		d.errorf(v, key, "must not contain a NUL character")
		return "", false
	}
	return s, true
}

func (d *decoder) boolean(v *hujson.Value, key string) (bool, bool) {
	lit, ok := v.Value.(hujson.Literal)
	if !ok || (lit.Kind() != 't' && lit.Kind() != 'f') {
		d.wrongType(v, key, "true or false")
		return false, false
	}
	d.mark(key, v)
	return lit.Bool(), true
}

// integer accepts a JSON number without a fraction.
func (d *decoder) integer(v *hujson.Value, key string) (int64, bool) {
	lit, ok := v.Value.(hujson.Literal)
	if !ok || lit.Kind() != '0' {
		d.wrongType(v, key, "a number")
		return 0, false
	}
	d.mark(key, v)
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		d.errorf(v, key, "must be a whole number, not %s", lit)
		return 0, false
	}
	return int64(f), true
}

func (d *decoder) array(v *hujson.Value, key, want string) ([]*hujson.Value, bool) {
	arr, ok := v.Value.(*hujson.Array)
	if !ok {
		d.wrongType(v, key, want)
		return nil, false
	}
	d.mark(key, v)
	out := make([]*hujson.Value, len(arr.Elements))
	for i := range arr.Elements {
		out[i] = &arr.Elements[i]
		d.mark(fmt.Sprintf("%s[%d]", key, i), out[i])
	}
	return out, true
}

// elem returns element i of an array value (v itself when out of range).
func (d *decoder) elem(v *hujson.Value, i int) *hujson.Value {
	if arr, ok := v.Value.(*hujson.Array); ok && i >= 0 && i < len(arr.Elements) {
		return &arr.Elements[i]
	}
	return v
}

func (d *decoder) strList(v *hujson.Value, key string) ([]string, bool) {
	elems, ok := d.array(v, key, "an array of strings")
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(elems))
	good := true
	for i, e := range elems {
		s, ok := d.str(e, fmt.Sprintf("%s[%d]", key, i))
		good = good && ok
		out = append(out, s)
	}
	return out, good
}

// strOrList accepts a string (one element) or an array of strings.
func (d *decoder) strOrList(v *hujson.Value, key string) ([]string, bool) {
	if lit, ok := v.Value.(hujson.Literal); ok && lit.Kind() == '"' {
		s, ok := d.str(v, key)
		return []string{s}, ok
	}
	if _, ok := v.Value.(*hujson.Array); !ok {
		d.wrongType(v, key, "a string or an array of strings")
		return nil, false
	}
	return d.strList(v, key)
}

// envMap reads an object of variable names to strings; with allowNull,
// null values are returned separately (remoteEnv's "unset").
func (d *decoder) envMap(v *hujson.Value, key string, allowNull bool) (map[string]string, []string) {
	members, ok := d.object(v, key)
	if !ok {
		return nil, nil
	}
	env := map[string]string{}
	var unset []string
	for _, m := range members {
		if !validEnvName(m.name) {
			d.errorf(m.value, m.key, "%q is not a variable name (it must be non-empty, without '=' or NUL)", m.name)
			continue
		}
		if allowNull {
			if lit, ok := m.value.Value.(hujson.Literal); ok && lit.Kind() == 'n' {
				unset = append(unset, m.name)
				continue
			}
		}
		if s, ok := d.str(m.value, m.key); ok {
			env[m.name] = s
		}
	}
	sort.Strings(unset)
	return env, unset
}

func validEnvName(n string) bool {
	return n != "" && !strings.ContainsAny(n, "=\x00")
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

func findMember(ms []member, name string) (*member, bool) {
	for i := range ms {
		if ms[i].name == name {
			return &ms[i], true
		}
	}
	return nil, false
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

// plain converts a hujson subtree to the values encoding/json produces.
func plain(v *hujson.Value) (any, error) {
	c := v.Clone()
	c.Standardize()
	dec := json.NewDecoder(bytes.NewReader(c.Pack()))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
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
