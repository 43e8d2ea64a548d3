package devcontainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// corpus lists the *.json files of a testdata folder; an empty corpus is a
// failure, not a silent pass.
func corpus(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var inputs []string
	for _, f := range files {
		if !strings.HasSuffix(f, ".golden.json") {
			inputs = append(inputs, f)
		}
	}
	if len(inputs) == 0 {
		t.Fatalf("no test files in testdata/%s", dir)
	}
	return inputs
}

// golden compares got with the file, or rewrites it under -update.
func golden(t *testing.T, file string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test ./pod/devcontainer -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (rerun with -update and review the diff):\ngot:\n%s\nwant:\n%s", file, got, want)
	}
}

// marshal is indented JSON without HTML escapes, for readable goldens.
func marshal(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestGoodCorpus parses every testdata/good/*.json and compares the
// Config, as JSON, with NAME.golden.json.
func TestGoodCorpus(t *testing.T) {
	for _, f := range corpus(t, "good") {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := Load(f)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if c.File != f {
				t.Errorf("File = %q, want %q", c.File, f)
			}
			golden(t, strings.TrimSuffix(f, ".json")+".golden.json", marshal(t, c))
		})
	}
}

// TestBadCorpus parses every testdata/bad/*.json and compares the error
// text with NAME.err.
func TestBadCorpus(t *testing.T) {
	for _, f := range corpus(t, "bad") {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := Load(f)
			if err == nil {
				t.Fatalf("Load succeeded, want an error; got %+v", c)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("error %T is not (and does not wrap) *Error", err)
			} else if e.File != f {
				t.Errorf("error names file %q, want %q", e.File, f)
			}
			golden(t, strings.TrimSuffix(f, ".json")+".err", []byte(err.Error()+"\n"))
		})
	}
	// Every golden file has its input, so none is left behind unchecked.
	errs, _ := filepath.Glob("testdata/bad/*.err")
	for _, e := range errs {
		if _, err := os.Stat(strings.TrimSuffix(e, ".err") + ".json"); err != nil {
			t.Errorf("%s has no .json input", e)
		}
	}
	goldens, _ := filepath.Glob("testdata/good/*.golden.json")
	for _, g := range goldens {
		if _, err := os.Stat(strings.TrimSuffix(g, ".golden.json") + ".json"); err != nil {
			t.Errorf("%s has no .json input", g)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "devcontainer.json"))
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load(missing) = %v, want an error wrapping fs.ErrNotExist", err)
	}
}

func TestParseTooLarge(t *testing.T) {
	data := append([]byte(`{"name": "`), bytes.Repeat([]byte("x"), maxFileSize)...)
	data = append(data, `"}`...)
	_, err := Parse(data, "big.json")
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Parse(huge) = %v, want a size error", err)
	}
}

// TestParseFieldForms checks the decoded values of the forms that the
// golden files show, so that a careless -update cannot bless a regression.
func TestParseFieldForms(t *testing.T) {
	c, err := Load("testdata/good/full-image.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.OnCreateCommand.Steps; len(got) != 1 || !slices.Equal(got[0].Args, []string{"/bin/sh", "-c", "make deps"}) || c.OnCreateCommand.Parallel {
		t.Errorf("string form: %+v", c.OnCreateCommand)
	}
	if got := c.UpdateContentCommand.Steps; len(got) != 1 || !slices.Equal(got[0].Args, []string{"make", "generate"}) {
		t.Errorf("array form: %+v", c.UpdateContentCommand)
	}
	pc := c.PostCreateCommand
	if !pc.Parallel || len(pc.Steps) != 2 || pc.Steps[0].Name != "server" || pc.Steps[1].Name != "db" ||
		!slices.Equal(pc.Steps[1].Args, []string{"pg_ctl", "start", "-D", "/var/lib/pg data"}) {
		t.Errorf("object form (file order, parallel): %+v", pc)
	}
	if c.Image == "" || c.Build != nil {
		t.Errorf("image form: Image %q Build %+v", c.Image, c.Build)
	}
	if c.UpdateRemoteUserUID == nil || *c.UpdateRemoteUserUID {
		t.Errorf("updateRemoteUserUID: %v", c.UpdateRemoteUserUID)
	}
	if !slices.Equal(c.RemoteEnvUnset, []string{"UNSET_ME"}) || c.RemoteEnv["EDITOR"] != "vi" {
		t.Errorf("remoteEnv: %v unset %v", c.RemoteEnv, c.RemoteEnvUnset)
	}
	wantPorts := []Port{{Port: 3000}, {Host: "localhost", Port: 8080}}
	if !slices.Equal(c.ForwardPorts, wantPorts) {
		t.Errorf("forwardPorts = %+v, want %+v", c.ForwardPorts, wantPorts)
	}
	wantUnsupported := []string{"appPort", "hostRequirements", "otherPortsAttributes", "overrideCommand", "portsAttributes", "shutdownAction", "userEnvProbe", "waitFor", "workspaceMount"}
	if !slices.Equal(c.Unsupported, wantUnsupported) {
		t.Errorf("Unsupported = %q, want %q", c.Unsupported, wantUnsupported)
	}
	if a := c.Devaipod.Agent; a == nil || a.Kind != "opencode" || a.Port != 4096 || a.Health != "/health" || a.Image != "localhost/agent:2" {
		t.Errorf("agent = %+v", a)
	}
	if len(c.Mounts) != 2 || c.Mounts[0].Type != MountBind || !slices.Equal(c.Mounts[0].Options, []string{"consistency=cached"}) {
		t.Errorf("mounts = %+v", c.Mounts)
	}

	b, err := Load("testdata/good/build-dockerfile.json")
	if err != nil {
		t.Fatal(err)
	}
	if b.Build.Dockerfile != filepath.Join("testdata", "good", "Dockerfile") || b.Build.Context != "testdata" {
		t.Errorf("build paths are not relative to the file: %+v", b.Build)
	}
	if !slices.Equal(b.Unsupported, []string{"build.options"}) {
		t.Errorf("Unsupported = %q", b.Unsupported)
	}
	abs, err := Parse([]byte(`{"build": {"dockerfile": "/abs/Dockerfile", "context": "/abs"}}`), "/repo/.devcontainer/devcontainer.json")
	if err != nil {
		t.Fatal(err)
	}
	if abs.Build.Dockerfile != "/abs/Dockerfile" || abs.Build.Context != "/abs" {
		t.Errorf("absolute build paths changed: %+v", abs.Build)
	}
	def, err := Parse([]byte(`{"build": {"dockerfile": "Dockerfile"}}`), "/repo/.devcontainer/devcontainer.json")
	if err != nil {
		t.Fatal(err)
	}
	if def.Build.Dockerfile != "/repo/.devcontainer/Dockerfile" || def.Build.Context != "/repo/.devcontainer" {
		t.Errorf("default context is not the file's directory: %+v", def.Build)
	}
}

func TestErrorFormat(t *testing.T) {
	_, err := Parse([]byte("{\n  \"build\": {\n    \"dockerfile\": 1\n  }\n}"), "x/devcontainer.json")
	want := `x/devcontainer.json:3: key "build.dockerfile": must be a string, not a number`
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
	_, err = Parse([]byte(`{"image": 1, "name": 2}`), "f.json")
	var list Errors
	if !errors.As(err, &list) || len(list) != 2 {
		t.Fatalf("two problems: got %#v", err)
	}
}

func TestStepString(t *testing.T) {
	for _, tt := range []struct {
		step Step
		want string
	}{
		{Step{Args: []string{"/bin/sh", "-c", "make && make test"}}, "make && make test"},
		{Step{Args: []string{"echo", "it's", "a b", "plain-arg", ""}}, `echo 'it'\''s' 'a b' plain-arg ''`},
	} {
		if got := tt.step.String(); got != tt.want {
			t.Errorf("%q.String() = %q, want %q", tt.step.Args, got, tt.want)
		}
	}
}

// TestTmpfsSizeErrors: a tmpfs size is read by the one size parser, and a
// size it refuses is an error with the file, line and key, not a silent
// default size.
func TestTmpfsSizeErrors(t *testing.T) {
	text := "{\n  \"image\": \"x\",\n  \"mounts\": [\n    \"type=tmpfs,target=/cache,tmpfs-size=0\"\n  ],\n  \"runArgs\": [\"--tmpfs\", \"/t:size=1.5g\"]\n}"
	_, err := Parse([]byte(text), "d/devcontainer.json")
	want := `d/devcontainer.json:4: key "mounts[0]": tmpfs-size: size "0": must be more than zero`
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
	if _, err := Parse([]byte(strings.Replace(text, "tmpfs-size=0", "tmpfs-size=1GiB", 1)), "d/devcontainer.json"); err != nil {
		t.Errorf("sizes podman takes (1GiB, 1.5g): %v", err)
	}
}
