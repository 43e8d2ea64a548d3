package devcontainer

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindCorpus runs Find over the layouts in testdata/find.
func TestFindCorpus(t *testing.T) {
	tests := []struct {
		layout, explicit string
		want             string // relative to the layout; "" for none
		err              string
	}{
		{layout: "standard", want: ".devcontainer/devcontainer.json"},
		{layout: "rootfile", want: ".devcontainer.json"},
		{layout: "both", want: ".devcontainer/devcontainer.json"},
		{layout: "preferred-over-sub", want: ".devcontainer/devcontainer.json"},
		{layout: "one-sub", want: ".devcontainer/python/devcontainer.json"},
		{layout: "many-sub", err: "several devcontainer configurations in testdata/find/many-sub/.devcontainer: " +
			".devcontainer/go/devcontainer.json, .devcontainer/python/devcontainer.json, .devcontainer/rust/devcontainer.json; choose one with --devcontainer PATH"},
		{layout: "many-sub", explicit: ".devcontainer/python/devcontainer.json", want: ".devcontainer/python/devcontainer.json"},
		{layout: "many-sub", explicit: ".devcontainer/rust", want: ".devcontainer/rust/devcontainer.json"},
		{layout: "none"},
		{layout: "deep"},
		{layout: "dir-not-file"},
		{layout: "explicit", explicit: "configs/ci.json", want: "configs/ci.json"},
		{layout: "explicit", explicit: "configs/missing.json", err: "--devcontainer configs/missing.json: testdata/find/explicit/configs/missing.json is not a file"},
		{layout: "explicit", explicit: "../standard/.devcontainer/devcontainer.json", err: "not inside the checkout"},
		{layout: "explicit", explicit: "configs", err: "is not a file"},
	}
	for _, tt := range tests {
		root := filepath.Join("testdata", "find", tt.layout)
		got, err := Find(root, tt.explicit)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Find(%s, %q) = %q, %v; want error containing %q", root, tt.explicit, got, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Find(%s, %q): %v", root, tt.explicit, err)
			continue
		}
		want := ""
		if tt.want != "" {
			want = filepath.Join(root, tt.want)
		}
		if got != want {
			t.Errorf("Find(%s, %q) = %q, want %q", root, tt.explicit, got, want)
		}
	}
}

// TestFindTempLayouts covers what a checked-in corpus cannot hold:
// symbolic links, absolute paths and unreadable roots.
func TestFindTempLayouts(t *testing.T) {
	write := func(t *testing.T, path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	symlink := func(t *testing.T, target, link string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		setup    func(t *testing.T, root, outside string)
		explicit func(root, outside string) string
		want     string
		err      string
	}{
		{name: "absolute explicit inside", setup: func(t *testing.T, root, _ string) { write(t, filepath.Join(root, "x", "dc.json")) },
			explicit: func(root, _ string) string { return filepath.Join(root, "x", "dc.json") }, want: "x/dc.json"},
		{name: "absolute explicit outside", setup: func(t *testing.T, _, outside string) { write(t, filepath.Join(outside, "dc.json")) },
			explicit: func(_, outside string) string { return filepath.Join(outside, "dc.json") }, err: "not inside the checkout"},
		{name: "link inside the checkout", setup: func(t *testing.T, root, _ string) {
			write(t, filepath.Join(root, "configs", "dc.json"))
			symlink(t, "../configs/dc.json", filepath.Join(root, ".devcontainer", "devcontainer.json"))
		}, want: ".devcontainer/devcontainer.json"},
		{name: "link leading outside", setup: func(t *testing.T, root, outside string) {
			write(t, filepath.Join(outside, "secret.json"))
			symlink(t, filepath.Join(outside, "secret.json"), filepath.Join(root, ".devcontainer.json"))
		}, err: "leads outside the checkout"},
		{name: "subfolder link leading outside", setup: func(t *testing.T, root, outside string) {
			write(t, filepath.Join(outside, "cfg", "devcontainer.json"))
			symlink(t, filepath.Join(outside, "cfg"), filepath.Join(root, ".devcontainer", "evil"))
		}, err: "leads outside the checkout"},
		{name: "explicit link leading outside", setup: func(t *testing.T, root, outside string) {
			write(t, filepath.Join(outside, "secret.json"))
			symlink(t, filepath.Join(outside, "secret.json"), filepath.Join(root, "dc.json"))
		}, explicit: func(string, string) string { return "dc.json" }, err: "leads outside the checkout"},
		{name: "dangling link", setup: func(t *testing.T, root, _ string) {
			symlink(t, "nowhere.json", filepath.Join(root, ".devcontainer.json"))
		}},
		{name: ".devcontainer is a file", setup: func(t *testing.T, root, _ string) { write(t, filepath.Join(root, ".devcontainer")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, outside := filepath.Join(t.TempDir(), "repo"), t.TempDir()
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, root, outside)
			explicit := ""
			if tt.explicit != nil {
				explicit = tt.explicit(root, outside)
			}
			got, err := Find(root, explicit)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Find = %q, %v; want error containing %q", got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if tt.want != "" {
				want = filepath.Join(root, tt.want)
			}
			if got != want {
				t.Errorf("Find = %q, want %q", got, want)
			}
		})
	}

	if _, err := Find(filepath.Join(t.TempDir(), "missing"), ""); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Find(missing root) = %v, want fs.ErrNotExist", err)
	}
}

func TestCheckBuildPaths(t *testing.T) {
	root := filepath.Join(t.TempDir(), "repo")
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, ".devcontainer"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, ".devcontainer", "devcontainer.json")
	for _, tt := range []struct {
		build, err string
	}{
		{`{"dockerfile": "Dockerfile"}`, ""},
		{`{"dockerfile": "Dockerfile", "context": ".."}`, ""},
		{`{"dockerfile": "../Dockerfile", "context": "../.."}`, `key "build.context": ` + filepath.Dir(root) + " is outside the checkout"},
		{`{"dockerfile": "/etc/Dockerfile"}`, `key "build.dockerfile": /etc/Dockerfile is outside the checkout`},
		{`{"dockerfile": "Dockerfile", "context": "../escape"}`, "leads outside the checkout"},
	} {
		c, err := Parse([]byte(`{"build": `+tt.build+`}`), file)
		if err != nil {
			t.Fatal(err)
		}
		err = c.CheckBuildPaths(root)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("build %s: CheckBuildPaths = %v, want %q", tt.build, err, tt.err)
		}
	}
	if err := (&Config{}).CheckBuildPaths(root); err != nil {
		t.Errorf("no build: %v", err)
	}
}
