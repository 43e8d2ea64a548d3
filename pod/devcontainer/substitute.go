package devcontainer

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf16"

	"github.com/tailscale/hujson"
)

// Vars are the values of the spec's ${...} variables.
type Vars struct {
	// LocalEnv is the host environment for ${localEnv:NAME} (and its
	// older spelling ${env:NAME}). Missing names give the default after a
	// second colon, else "".
	LocalEnv map[string]string
	// ContainerEnv is the running container's environment for
	// ${containerEnv:NAME}; nil leaves those references for
	// SubstituteContainerEnv.
	ContainerEnv map[string]string
	// LocalWorkspaceFolder is the host folder that holds the source;
	// "" leaves ${localWorkspaceFolder} and its basename as written.
	LocalWorkspaceFolder string
	// ContainerWorkspaceFolder is where the source is in the container
	// when the file names no workspaceFolder; "" means
	// /workspaces/<basename of LocalWorkspaceFolder>.
	ContainerWorkspaceFolder string
	// DevcontainerID replaces ${devcontainerId}; "" leaves it as written.
	// See DevcontainerID.
	DevcontainerID string
	// WithholdLocalEnv makes ${localEnv:NAME} what it is when NAME is
	// unset (its default, else ""), whatever LocalEnv holds: the
	// repository is not trusted with the host's variables, nor with which
	// are set. Config.WithheldEnv names those set.
	WithholdLocalEnv bool
}

// fieldKind says which variables a string field may use.
type fieldKind uint8

const (
	// idOK: the spec lists the property among those supporting
	// ${devcontainerId} (not image or build: those may be prebuilt before
	// the id exists).
	idOK fieldKind = 1 << iota
	// containerEnvOK: the value is used once the container runs (remoteEnv
	// and the in-container lifecycle commands).
	containerEnvOK
	// agentSide: the value reaches the agent container
	// (customizations.devaipod.agent; postStartCommand and
	// postAttachCommand, which run there after start and at attach),
	// which never sees host values.
	agentSide
)

// variableRef matches ${...} as the devcontainer CLI does (/\$\{(.*?)\}/,
// where . stops at line breaks).
var variableRef = regexp.MustCompile(`\$\{([^}\r\n\x{2028}\x{2029}]*)\}`)

// expand replaces every ${name:arg:...} in s with what fn returns; fn
// gets the whole match (to leave it unchanged) and the parts split at
// ':'. Replaced text is not scanned again.
func expand(s string, fn func(match, name string, args []string) (string, error)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var firstErr error
	out := variableRef.ReplaceAllStringFunc(s, func(m string) string {
		parts := strings.Split(m[2:len(m)-1], ":")
		r, err := fn(m, parts[0], parts[1:])
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return r
	})
	return out, firstErr
}

// argOr is a reference's variable name, "" when it names none.
func argOr(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// lookup implements ${localEnv:NAME[:DEFAULT]} and ${containerEnv:...}.
func lookup(env map[string]string, match string, args []string) (string, error) {
	if len(args) == 0 {
		return match, fmt.Errorf("%s names no variable: write ${%s:NAME}", match, match[2:len(match)-1])
	}
	if v, ok := env[args[0]]; ok {
		return v, nil
	}
	if len(args) > 1 {
		return args[1], nil
	}
	return "", nil
}

// Substitute replaces the spec's variables in every string field:
// ${localEnv:NAME}, ${localEnv:NAME:default}, ${env:NAME},
// ${localWorkspaceFolder}, ${localWorkspaceFolderBasename},
// ${containerWorkspaceFolder}, ${containerWorkspaceFolderBasename},
// ${devcontainerId} (only in the properties the spec lists for it), and,
// when v.ContainerEnv is not nil, ${containerEnv:NAME[:default]} as
// SubstituteContainerEnv does. Unknown ${...} forms stay as written.
// customizations.devaipod.agent only gets the container-side variables:
// host values never reach the agent (Parse refuses host variables there).
//
// Build paths that held variables are resolved afterwards, WorkspaceFolder
// is set to the container workspace folder used, and the values that
// Parse could not check yet (mount paths, workspaceFolder, runArgs) are
// checked; the error lists every problem, like Parse's.
func (c *Config) Substitute(v Vars) error {
	var errs Errors
	fail := func(key string, err error) {
		errs = append(errs, &Error{File: c.File, Line: c.lineOf(key), Key: key, Msg: err.Error()})
	}
	withheld := map[string]bool{}
	defer func() { c.WithheldEnv = slices.Sorted(maps.Keys(withheld)) }()
	local := func(match, name string, args []string, cwf string, k fieldKind) (string, error) {
		switch name {
		case "localEnv", "env":
			if k&agentSide != 0 {
				return match, nil
			}
			if v.WithholdLocalEnv {
				// As if nothing were set, so that what the repository
				// gets tells nothing of the host either.
				if _, set := v.LocalEnv[argOr(args)]; set {
					withheld[args[0]] = true
				}
				return lookup(nil, match, args)
			}
			return lookup(v.LocalEnv, match, args)
		case "localWorkspaceFolder":
			if k&agentSide != 0 || v.LocalWorkspaceFolder == "" {
				return match, nil
			}
			return v.LocalWorkspaceFolder, nil
		case "localWorkspaceFolderBasename":
			if k&agentSide != 0 || v.LocalWorkspaceFolder == "" {
				return match, nil
			}
			return basename(v.LocalWorkspaceFolder), nil
		case "containerWorkspaceFolder":
			if cwf == "" {
				return match, nil
			}
			return cwf, nil
		case "containerWorkspaceFolderBasename":
			if cwf == "" {
				return match, nil
			}
			return path.Base(cwf), nil
		case "devcontainerId":
			if k&idOK == 0 || v.DevcontainerID == "" {
				return match, nil
			}
			return v.DevcontainerID, nil
		}
		return match, nil
	}

	// The container workspace folder is resolved first, with what is
	// known without it, as the devcontainer CLI does.
	// The file's own value first: it is what ${containerWorkspaceFolder}
	// says, and what the plan honours or warns about.
	cwf := cmp.Or(c.WorkspaceFolder, v.ContainerWorkspaceFolder)
	if cwf == "" && v.LocalWorkspaceFolder != "" {
		cwf = DefaultWorkspaceFolder(v.LocalWorkspaceFolder)
	}
	if cwf != "" {
		var err error
		cwf, err = expand(cwf, func(m, n string, a []string) (string, error) { return local(m, n, a, "", idOK) })
		if err != nil {
			fail("workspaceFolder", err)
		}
	}

	c.rewriteStrings(func(key, s string, k fieldKind) string {
		out, err := expand(s, func(m, n string, a []string) (string, error) { return local(m, n, a, cwf, k) })
		if err != nil {
			fail(key, err)
		}
		return out
	})
	if cwf != "" {
		c.WorkspaceFolder = cwf
	}
	if c.Build != nil && c.Build.rawDockerfile != "" {
		c.Build.resolve()
	}
	if v.ContainerEnv != nil {
		c.substituteContainerEnv(v.ContainerEnv, fail)
	}
	errs = append(errs, c.check(true)...)
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	return errs.asError()
}

// SubstituteContainerEnv replaces ${containerEnv:NAME[:default]} in
// remoteEnv and the in-container lifecycle commands, the properties used
// once the container runs; env is the running container's environment.
// Elsewhere such references stay as written (Parse warns about them).
func (c *Config) SubstituteContainerEnv(env map[string]string) error {
	var errs Errors
	c.substituteContainerEnv(env, func(key string, err error) {
		errs = append(errs, &Error{File: c.File, Line: c.lineOf(key), Key: key, Msg: err.Error()})
	})
	return errs.asError()
}

func (c *Config) substituteContainerEnv(env map[string]string, fail func(string, error)) {
	c.rewriteStrings(func(key, s string, k fieldKind) string {
		if k&containerEnvOK == 0 {
			return s
		}
		out, err := expand(s, func(m, n string, a []string) (string, error) {
			if n != "containerEnv" {
				return m, nil
			}
			return lookup(env, m, a)
		})
		if err != nil {
			fail(key, err)
		}
		return out
	})
}

// hostVariables are the variables whose values come from the host.
var hostVariables = map[string]bool{
	"localEnv": true, "env": true, "localWorkspaceFolder": true, "localWorkspaceFolderBasename": true,
}

// scanVariables reports, at parse time, ${localEnv} and friends without a
// name and host variables in what reaches the agent (errors), and
// ${containerEnv:...} where it is never replaced (a warning).
func (c *Config) scanVariables(d *decoder) {
	c.rewriteStrings(func(key, s string, k fieldKind) string {
		for _, m := range variableRef.FindAllStringSubmatch(s, -1) {
			name, _, hasArgs := strings.Cut(m[1], ":")
			switch {
			case !hasArgs && (name == "localEnv" || name == "env" || name == "containerEnv"):
				d.errs = append(d.errs, &Error{File: c.File, Line: c.lineOf(key), Key: key,
					Msg: fmt.Sprintf("%s names no variable: write ${%s:NAME}", m[0], name)})
			case k&agentSide != 0 && hostVariables[name]:
				d.errs = append(d.errs, &Error{File: c.File, Line: c.lineOf(key), Key: key,
					Msg: fmt.Sprintf("%s is not allowed here: this value reaches the agent, which never gets host values", m[0])})
			case k&agentSide != 0 && name == "containerEnv":
				// The workspace's variables hold what containerEnv took
				// from the host, and the pod's label would keep them.
				d.errs = append(d.errs, &Error{File: c.File, Line: c.lineOf(key), Key: key,
					Msg: fmt.Sprintf("%s is not allowed here: this command runs in the agent's container, which never gets the workspace's variables", m[0])})
			case k&containerEnvOK == 0 && name == "containerEnv":
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s: %s stays as written: ${containerEnv:...} is only replaced in remoteEnv and the lifecycle commands that run in the container", key, m[0]))
			}
		}
		return s
	})
}

// rewriteStrings calls fn for every string field that may hold
// variables and stores what it returns. Keys are visited in a fixed order
// (map keys sorted) so that errors and warnings are stable.
func (c *Config) rewriteStrings(fn func(key, s string, k fieldKind) string) {
	str := func(key string, p *string, k fieldKind) { *p = fn(key, *p, k) }
	list := func(key string, l []string, k fieldKind) {
		for i := range l {
			l[i] = fn(fmt.Sprintf("%s[%d]", key, i), l[i], k)
		}
	}
	strMap := func(key string, m map[string]string, k fieldKind) {
		for _, name := range sortedKeys(m) {
			m[name] = fn(key+"."+name, m[name], k)
		}
	}
	command := func(key string, lc *LifecycleCommand, k fieldKind) {
		if lc == nil {
			return
		}
		for i := range lc.Steps {
			sk := key
			if lc.Steps[i].Name != "" {
				sk = key + "." + lc.Steps[i].Name
			}
			list(sk, lc.Steps[i].Args, k)
		}
		for _, b := range lc.Before { // an image's metadata's
			for i := range b.Steps {
				list(key+" of "+b.From, b.Steps[i].Args, k)
			}
		}
	}

	str("name", &c.Name, idOK)
	str("image", &c.Image, 0)
	if b := c.Build; b != nil {
		if b.rawDockerfile != "" {
			str("build.dockerfile", &b.rawDockerfile, 0)
			str("build.context", &b.rawContext, 0)
		} else {
			str("build.dockerfile", &b.Dockerfile, 0)
			str("build.context", &b.Context, 0)
		}
		strMap("build.args", b.Args, 0)
		str("build.target", &b.Target, 0)
		list("build.cacheFrom", b.CacheFrom, 0)
	}
	str("workspaceFolder", &c.WorkspaceFolder, idOK)
	strMap("containerEnv", c.ContainerEnv, idOK)
	strMap("remoteEnv", c.RemoteEnv, idOK|containerEnvOK)
	str("remoteUser", &c.RemoteUser, idOK)
	str("containerUser", &c.ContainerUser, idOK)
	command("initializeCommand", c.InitializeCommand, idOK)
	command("onCreateCommand", c.OnCreateCommand, idOK|containerEnvOK)
	command("updateContentCommand", c.UpdateContentCommand, idOK|containerEnvOK)
	command("postCreateCommand", c.PostCreateCommand, idOK|containerEnvOK)
	// After start and at attach these run in the agent's container.
	command("postStartCommand", c.PostStartCommand, idOK|containerEnvOK|agentSide)
	command("postAttachCommand", c.PostAttachCommand, idOK|containerEnvOK|agentSide)
	list("capAdd", c.CapAdd, 0)
	list("securityOpt", c.SecurityOpt, 0)
	list("runArgs", c.RunArgs, idOK)
	for i := range c.Mounts {
		m := &c.Mounts[i]
		key := fmt.Sprintf("mounts[%d]", i)
		str(key+".type", &m.Type, idOK)
		str(key+".source", &m.Source, idOK)
		str(key+".target", &m.Target, idOK)
		list(key+".options", m.Options, idOK)
	}
	for _, id := range sortedKeys(c.Features) {
		c.Features[id] = rewriteAny("features."+id, c.Features[id], fn)
	}
	if a := c.Devaipod.Agent; a != nil {
		str("customizations.devaipod.agent.image", &a.Image, idOK|agentSide)
		list("customizations.devaipod.agent.command", a.Command, idOK|agentSide)
	}
}

func rewriteAny(key string, v any, fn func(key, s string, k fieldKind) string) any {
	switch v := v.(type) {
	case string:
		return fn(key, v, 0)
	case map[string]any:
		for _, k := range sortedKeys(v) {
			v[k] = rewriteAny(key+"."+k, v[k], fn)
		}
	case []any:
		for i := range v {
			v[i] = rewriteAny(fmt.Sprintf("%s[%d]", key, i), v[i], fn)
		}
	}
	return v
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// check validates what may hold variables: without strict (at parse
// time) values with ${...} are skipped; Substitute checks them all.
func (c *Config) check(strict bool) Errors {
	var errs Errors
	bad := func(key string, err error) {
		errs = append(errs, &Error{File: c.File, Line: c.lineOf(key), Key: key, Msg: err.Error()})
	}
	if w := c.WorkspaceFolder; w != "" && (strict || !strings.Contains(w, "${")) {
		if err := checkContainerPath(w); err != nil {
			bad("workspaceFolder", err)
		}
	}
	for i, m := range c.Mounts {
		if err := checkMount(m, strict); err != nil {
			bad(fmt.Sprintf("mounts[%d]", i), err)
		}
	}
	if _, err := parseRunArgs(c.RunArgs, strict); err != nil {
		if re, ok := err.(*RunArgError); ok {
			bad(fmt.Sprintf("runArgs[%d]", re.Index), fmt.Errorf("%s", re.Msg))
		} else {
			bad("runArgs", err)
		}
	}
	return errs
}

// lineOf finds the line of key, or of the nearest enclosing key that has
// one ("mounts[0].target" falls back to "mounts[0]", then "mounts").
func (c *Config) lineOf(key string) int {
	for key != "" {
		if l, ok := c.lines[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

// DevcontainerID computes the spec's ${devcontainerId} from the labels that
// identify a dev container: the labels as a JSON object with sorted keys
// and no whitespace (as JavaScript's JSON.stringify writes it), hashed
// with SHA-256, written as a base-32 number (digits 0-9a-v) left-padded
// with '0' to 52 characters. The devcontainer CLI uses the labels
// devcontainer.local_folder and devcontainer.config_file; devaipod picks
// its own (the caller decides, e.g. {"io.devaipod.pod": NAME}), so ids
// only need to be stable for devaipod.
func DevcontainerID(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	// JavaScript sorts strings by UTF-16 code units.
	sort.Slice(keys, func(i, j int) bool {
		return slices.Compare(utf16.Encode([]rune(keys[i])), utf16.Encode([]rune(keys[j]))) < 0
	})
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		jsString(&b, k)
		b.WriteByte(':')
		jsString(&b, labels[k])
	}
	b.WriteByte('}')
	sum := sha256.Sum256([]byte(b.String()))
	id := new(big.Int).SetBytes(sum[:]).Text(32)
	return strings.Repeat("0", 52-len(id)) + id
}

// jsString writes s as JSON.stringify does: only ", \ and control
// characters are escaped. Invalid UTF-8 is written as U+FFFD.
func jsString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// WithoutHostVariables is a devcontainer.json (JSONC) as standard JSON
// with every ${localEnv:NAME} and ${env:NAME}, in every string, keys
// included, made what it is when NAME is unset (its default, else ""): for
// a tool that reads the file as written and puts the host's variables in
// itself (the devcontainer CLI), when the repository is not trusted with
// them. Decoding first turns JSON escapes (\u0024{...}) into what they
// stand for, so none hides from it.
func WithoutHostVariables(data []byte) ([]byte, error) {
	std, err := hujson.Standardize(bytes.TrimPrefix(data, []byte("\ufeff")))
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(std))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	unset := func(s string) string {
		out, _ := expand(s, func(m, name string, args []string) (string, error) {
			if name != "localEnv" && name != "env" {
				return m, nil
			}
			if len(args) > 1 {
				return args[1], nil
			}
			return "", nil
		})
		return out
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case string:
			return unset(v)
		case []any:
			for i := range v {
				v[i] = walk(v[i])
			}
		case map[string]any:
			out := make(map[string]any, len(v))
			for k, e := range v {
				out[unset(k)] = walk(e)
			}
			return out
		}
		return v
	}
	return json.MarshalIndent(walk(doc), "", "  ")
}
