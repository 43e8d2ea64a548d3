package devcontainer

import (
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	env := map[string]string{"HOME": "/home/me", "EMPTY": "", "COLON": "a:b"}
	vars := Vars{
		LocalEnv:             env,
		LocalWorkspaceFolder: "/home/me/src/demo",
		DevcontainerID:       "0123456789abcdefghijklmnopqrstuv0123456789abcdefghij",
	}
	tests := []struct {
		in, want string
	}{
		{"plain", "plain"},
		{"${localEnv:HOME}/.ssh", "/home/me/.ssh"},
		{"${env:HOME}", "/home/me"},
		{"${localEnv:MISSING}", ""},
		{"${localEnv:MISSING:fallback}", "fallback"},
		{"${localEnv:MISSING:}", ""},
		{"${localEnv:EMPTY:fallback}", ""}, // set but empty: the value wins
		{"${localEnv:MISSING:a:b}", "a"},   // the CLI splits at every ':'
		{"${localEnv:COLON}", "a:b"},
		{"${localWorkspaceFolder}", "/home/me/src/demo"},
		{"${localWorkspaceFolderBasename}", "demo"},
		{"${containerWorkspaceFolder}", "/workspaces/demo"},
		{"${containerWorkspaceFolderBasename}", "demo"},
		{"${devcontainerId}", vars.DevcontainerID},
		{"${unknownVariable}", "${unknownVariable}"},
		{"${unknown:with:args}", "${unknown:with:args}"},
		{"${containerEnv:PATH}", "${containerEnv:PATH}"}, // no ContainerEnv given
		{"$HOME ${ HOME} $${localEnv:HOME}", "$HOME ${ HOME} $/home/me"},
		{"${localEnv:HOME}${localEnv:HOME}", "/home/me/home/me"},
		{"${localEnv:HOME", "${localEnv:HOME"},
		{"${a${localEnv:HOME}}", "${a${localEnv:HOME}}"}, // like the CLI: the first "${" opens the match
		{"${localEnv:HOME\n}", "${localEnv:HOME\n}"},     // no match across lines
	}
	for _, tt := range tests {
		c := &Config{Name: tt.in}
		if err := c.Substitute(vars); err != nil {
			t.Errorf("Substitute(%q): %v", tt.in, err)
			continue
		}
		if c.Name != tt.want {
			t.Errorf("Substitute(%q) = %q, want %q", tt.in, c.Name, tt.want)
		}
	}
}

func TestSubstituteNoVariableName(t *testing.T) {
	_, err := Parse([]byte("{\n  \"image\": \"x\",\n  \"containerEnv\": {\"A\": \"${localEnv}\"},\n  \"remoteEnv\": {\"B\": \"${containerEnv}\"}\n}"), "dc.json")
	want := `dc.json:3: key "containerEnv.A": ${localEnv} names no variable: write ${localEnv:NAME}
dc.json:4: key "remoteEnv.B": ${containerEnv} names no variable: write ${containerEnv:NAME}`
	if err == nil || err.Error() != want {
		t.Fatalf("Parse = %v\nwant    %s", err, want)
	}
	// Set programmatically, it is Substitute's error.
	c := &Config{File: "dc.json", Name: "${env}"}
	err = c.Substitute(Vars{})
	var e *Error
	if !errors.As(err, &e) || e.Key != "name" || !strings.Contains(e.Msg, "${env} names no variable") {
		t.Errorf("Substitute = %#v", err)
	}
	c = &Config{RemoteEnv: map[string]string{"X": "${containerEnv}"}}
	if err := c.SubstituteContainerEnv(map[string]string{}); err == nil {
		t.Error("SubstituteContainerEnv accepted ${containerEnv}")
	}
}

// TestSubstituteFields runs Substitute over a file that uses variables in
// every field and checks where each kind of variable is and is not
// replaced.
func TestSubstituteFields(t *testing.T) {
	c, err := Load("testdata/good/full-image.json")
	if err != nil {
		t.Fatal(err)
	}
	vars := Vars{
		LocalEnv:             map[string]string{"HOME": "/home/me", "HOST_VALUE": "from-host"},
		LocalWorkspaceFolder: "/home/me/src/demo",
		DevcontainerID:       "devid",
	}
	if err := c.Substitute(vars); err != nil {
		t.Fatal(err)
	}
	checks := []struct{ field, got, want string }{
		{"name", c.Name, "full demo"},
		{"image (default after the second colon)", c.Image, "localhost/devenv:latest"},
		{"workspaceFolder", c.WorkspaceFolder, "/workspaces/demo"},
		{"containerEnv", c.ContainerEnv["FROM_HOST"], "from-host"},
		{"containerEnv containerWorkspaceFolder", c.ContainerEnv["PROJECT_DIR"], "/workspaces/demo"},
		{"remoteEnv keeps containerEnv for later", c.RemoteEnv["PATH"], "${containerEnv:PATH}:/opt/tools/bin"},
		{"mount source", c.Mounts[0].Source, "/home/me/.cache/go"},
		{"mount devcontainerId", c.Mounts[1].Source, "node-modules-devid"},
		{"mount target", c.Mounts[1].Target, "/workspaces/demo/node_modules"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %q, want %q", ch.field, ch.got, ch.want)
		}
	}

	if err := c.SubstituteContainerEnv(map[string]string{"PATH": "/usr/bin:/bin"}); err != nil {
		t.Fatal(err)
	}
	if got := c.RemoteEnv["PATH"]; got != "/usr/bin:/bin:/opt/tools/bin" {
		t.Errorf("remoteEnv PATH after SubstituteContainerEnv = %q", got)
	}
}

func TestSubstituteContainerEnvScope(t *testing.T) {
	c, err := Load("testdata/good/variables.json")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(c.Warnings, func(w string) bool { return strings.HasPrefix(w, "containerEnv.WRONG_PLACE:") }) {
		t.Errorf("no warning for ${containerEnv:...} in containerEnv: %q", c.Warnings)
	}
	vars := Vars{
		LocalEnv:             map[string]string{"USER": "me"},
		ContainerEnv:         map[string]string{"HOME": "/home/dev"},
		LocalWorkspaceFolder: "/src/demo",
		DevcontainerID:       "id1",
	}
	if err := c.Substitute(vars); err != nil {
		t.Fatal(err)
	}
	if got := c.ContainerEnv["WRONG_PLACE"]; got != "${containerEnv:HOME}/x" {
		t.Errorf("containerEnv got ${containerEnv} replaced: %q", got)
	}
	if got := c.PostStartCommand.Steps[0].Args[2]; got != "echo /workspaces/default" {
		t.Errorf("postStartCommand = %q", got)
	}
	if got := c.PostCreateCommand.Steps[0].Args[2]; got != "echo /home/dev me" {
		t.Errorf("postCreateCommand = %q", got)
	}
	if c.WorkspaceFolder != "/workspaces/default" {
		t.Errorf("workspaceFolder = %q, want the default of ${localEnv:WS:...}", c.WorkspaceFolder)
	}
	if got := c.Mounts[0]; got.Source != "/src/demo/.cache" || got.Target != "/workspaces/default/.cache" {
		t.Errorf("mount = %+v", got)
	}
	if c.ContainerEnv["ID"] != "id1" || c.ContainerEnv["UNKNOWN"] != "${somethingElse}" {
		t.Errorf("containerEnv = %v", c.ContainerEnv)
	}
	ra, err := ParseRunArgs(c.RunArgs)
	if err != nil {
		t.Fatal(err)
	}
	if ra.Memory != "2g" || !slices.Equal(ra.Tmpfs, []string{"/workspaces/default/tmp"}) {
		t.Errorf("runArgs after Substitute = %+v", ra)
	}
}

func TestSubstituteIDScope(t *testing.T) {
	// The spec keeps ${devcontainerId} out of image and build, which may
	// be built before the id exists; initializeCommand and name get it.
	c, err := Parse([]byte(`{
		"build": {"dockerfile": "Dockerfile", "args": {"ID": "${devcontainerId}"}},
		"initializeCommand": "echo ${devcontainerId}",
		"capAdd": ["${devcontainerId}"]
	}`), "/repo/.devcontainer/devcontainer.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Substitute(Vars{DevcontainerID: "xyz"}); err != nil {
		t.Fatal(err)
	}
	if c.Build.Args["ID"] != "${devcontainerId}" {
		t.Errorf("build.args got the id: %q", c.Build.Args["ID"])
	}
	if got := c.InitializeCommand.Steps[0].Args[2]; got != "echo xyz" {
		t.Errorf("initializeCommand = %q", got)
	}
}

func TestSubstituteBuildPaths(t *testing.T) {
	c, err := Load("testdata/good/build-variable-path.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Substitute(Vars{LocalWorkspaceFolder: "/home/me/src/demo"}); err != nil {
		t.Fatal(err)
	}
	if c.Build.Dockerfile != "/home/me/src/demo/Dockerfile" || c.Build.Context != "/home/me/src/demo" {
		t.Errorf("build after Substitute = %+v", c.Build)
	}
	// A relative result is joined to the file's directory, as at parse time.
	c, err = Parse([]byte(`{"build": {"dockerfile": "${localEnv:DF}", "context": "${localEnv:CTX:..}"}}`), "/repo/.devcontainer/devcontainer.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Substitute(Vars{LocalEnv: map[string]string{"DF": "docker/Dockerfile"}}); err != nil {
		t.Fatal(err)
	}
	if c.Build.Dockerfile != "/repo/.devcontainer/docker/Dockerfile" || c.Build.Context != "/repo" {
		t.Errorf("build after Substitute = %+v", c.Build)
	}
}

func TestSubstituteChecksResolvedValues(t *testing.T) {
	tests := []struct {
		name, file, want string
	}{
		{"relative mount target", `{"mounts": ["type=volume,source=v,target=${localEnv:T}"]}`, `key "mounts[0]": target "rel" must be an absolute path`},
		{"bind source left unresolved", `{"mounts": ["type=bind,source=${localWorkspaceFolder}/x,target=/x"]}`, `bind source "${localWorkspaceFolder}/x" must be an absolute host path`},
		{"volume source with a slash", `{"mounts": ["source=${localEnv:HOME}/x,target=/x"]}`, `source "/home/me/x" is not a volume name; for a host path set type=bind`},
		{"workspaceFolder", `{"workspaceFolder": "${localEnv:T}"}`, `key "workspaceFolder": "rel" must be an absolute path`},
		{"runArgs", `{"runArgs": ["--memory", "${localEnv:T}"]}`, `key "runArgs[0]": --memory: size "rel": not a size`},
	}
	for _, tt := range tests {
		c, err := Parse([]byte(tt.file), "dc.json")
		if err != nil {
			t.Errorf("%s: Parse: %v", tt.name, err)
			continue
		}
		err = c.Substitute(Vars{LocalEnv: map[string]string{"T": "rel", "HOME": "/home/me"}})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Substitute = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestSubstituteAgentGetsNoHostValues(t *testing.T) {
	c, err := Load("testdata/good/agent-command-string.json")
	if err != nil {
		t.Fatal(err)
	}
	// Set programmatically (Parse refuses it): still not replaced.
	c.Devaipod.Agent.Image = "img:${localEnv:SECRET}"
	if err := c.Substitute(Vars{LocalEnv: map[string]string{"SECRET": "s3cr3t"}, DevcontainerID: "id9", ContainerWorkspaceFolder: "/workspaces/p"}); err != nil {
		t.Fatal(err)
	}
	if c.Devaipod.Agent.Image != "img:${localEnv:SECRET}" {
		t.Errorf("agent image got a host value: %q", c.Devaipod.Agent.Image)
	}
	if got := c.Devaipod.Agent.Command[2]; !strings.HasSuffix(got, "--data /data/id9") {
		t.Errorf("agent command = %q", got)
	}
}

func TestSubstituteContainerWorkspaceFolder(t *testing.T) {
	for _, tt := range []struct {
		name string
		file string
		vars Vars
		want string
	}{
		{"default from the local folder", `{}`, Vars{LocalWorkspaceFolder: "/src/my-proj/"}, "/workspaces/my-proj"},
		{"workspaceFolder from the file", `{"workspaceFolder": "/work/${localWorkspaceFolderBasename}"}`, Vars{LocalWorkspaceFolder: "/src/p"}, "/work/p"},
		{"the file's value wins", `{"workspaceFolder": "/work"}`, Vars{LocalWorkspaceFolder: "/src/p", ContainerWorkspaceFolder: "/workspaces/p"}, "/work"},
		{"the caller's without one", `{}`, Vars{LocalWorkspaceFolder: "/src/p", ContainerWorkspaceFolder: "/workspaces/q"}, "/workspaces/q"},
		{"unknown", `{}`, Vars{}, ""},
	} {
		c, err := Parse([]byte(tt.file), "dc.json")
		if err != nil {
			t.Fatal(err)
		}
		c.Name = "${containerWorkspaceFolder}"
		if err := c.Substitute(tt.vars); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if c.WorkspaceFolder != tt.want {
			t.Errorf("%s: WorkspaceFolder = %q, want %q", tt.name, c.WorkspaceFolder, tt.want)
		}
		if want := tt.want; want != "" && c.Name != want {
			t.Errorf("%s: ${containerWorkspaceFolder} = %q, want %q", tt.name, c.Name, want)
		}
	}
}

func TestSubstituteFeatures(t *testing.T) {
	c, err := Parse([]byte(`{"features": {"f:1": {"v": "${localEnv:V}", "list": ["${localEnv:V}"], "n": 1}}}`), "dc.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Substitute(Vars{LocalEnv: map[string]string{"V": "x"}}); err != nil {
		t.Fatal(err)
	}
	opts := c.Features["f:1"].(map[string]any)
	if opts["v"] != "x" || opts["list"].([]any)[0] != "x" {
		t.Errorf("features = %v", c.Features)
	}
}

// The expected ids come from the spec's JavaScript (JSON.stringify with
// sorted keys, SHA-256, BigInt.toString(32), padStart(52, '0')), run with
// node on these labels.
func TestDevcontainerID(t *testing.T) {
	tests := []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{}, "0h0jduhlbcr7h88kdb8muvk697kkvd7s47v7fq1h1g30uoealvsa"},
		{map[string]string{
			"devcontainer.local_folder": "/home/me/src/demo",
			"devcontainer.config_file":  "/home/me/src/demo/.devcontainer/devcontainer.json",
		}, "15ibqqn1o0gmcqkn3vccpegl97vk1cjh084rcq9fvab3fvqrn97a"},
		{map[string]string{"io.devaipod.pod": "demo-1a2b3c"}, "0tm2bll8ur64ir63444fprllivfoh908283mnc5gpcc4q29b30ie"},
		// Escapes, non-ASCII, and keys whose UTF-16 order differs from
		// their UTF-8 order (U+1F600 sorts before U+FF01 in JavaScript).
		{map[string]string{
			"b":      "quote\" back\\ nl\n tab\t ctl\u0001 <&> \u2028",
			"a":      "ü €",
			"\uff01": "x",
			"😀":      "emoji",
		}, "02602qmh4jvf8d2ritp1a9ukvabhp1sbgo3pqkgqr07ftmctls6f"},
	}
	for _, tt := range tests {
		if got := DevcontainerID(tt.labels); got != tt.want {
			t.Errorf("DevcontainerID(%q) = %s, want %s", tt.labels, got, tt.want)
		}
	}
	if !regexp.MustCompile(`^[0-9a-v]{52}$`).MatchString(DevcontainerID(map[string]string{"x": "y"})) {
		t.Error("id is not 52 base-32 digits")
	}
}

func TestWithoutHostVariables(t *testing.T) {
	in := []byte("\ufeff" + `{
  // a comment
  "build": {"context": "\u0024{localEnv:HOME:..}", "args": {"A": "x-${env:USER}-y", "${localEnv:K}": "v"}},
  "features": {"f": {"n": 1.50}},
  "keep": "${containerEnv:PATH} ${localWorkspaceFolder}",
}
`)
	out, err := WithoutHostVariables(in)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	build := got["build"].(map[string]any)
	if build["context"] != ".." || build["args"].(map[string]any)["A"] != "x--y" || build["args"].(map[string]any)[""] != "v" {
		t.Errorf("host variables left, or defaults lost:\n%s", out)
	}
	if got["keep"] != "${containerEnv:PATH} ${localWorkspaceFolder}" || !strings.Contains(string(out), "1.50") {
		t.Errorf("other variables or numbers changed:\n%s", out)
	}
	if strings.Contains(string(out), "localEnv") || strings.Contains(string(out), "${env") {
		t.Errorf("a host variable is left:\n%s", out)
	}
}
