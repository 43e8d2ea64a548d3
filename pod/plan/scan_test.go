package plan

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/internal/gittest"
	"github.com/devaipod/devaipod/pod/source"
)

// checkedOut commits files (name -> content; "->target" makes a symlink)
// to a new repository and checks it out the way up does.
func checkedOut(t *testing.T, files map[string]string) string {
	t.Helper()
	repo := gittest.Repo(t)
	for name, content := range files {
		p := filepath.Join(repo, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		gittest.WriteFile(t, p, content)
	}
	gittest.Git(t, repo, []string{"add", "-A"}, []string{"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "files"})
	return checkOut(t, repo)
}

func TestScanTree(t *testing.T) {
	dir := checkedOut(t, map[string]string{
		".env":                 "SECRET=1",
		"deploy/.env.prod":     "SECRET=2",
		"certs/server.key":     "key",
		"certs/server.crt":     "crt",
		".devcontainer/x.json": "{}",
		".vscode":              "->/home/u/.ssh", // the repository chooses a host path
		"lib/ci":               "->../elsewhere",
		"id_rsa.pub":           "pub",
	})
	// config.ProtectedPaths of a config with [agent] protect set.
	protect := []string{".devcontainer", ".vscode", ".envrc", "lib/ci/deploy", ".gitmodules"}
	info, err := source.ScanTree(context.Background(), dir, protect, []string{".env", ".env.*", "*.pem", "*.key", "id_*"})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(info.Masked)
	if got := strings.Join(info.Masked, ","); got != ".env,certs/server.key,deploy/.env.prod,id_rsa.pub" {
		t.Errorf("masked = %s", got)
	}
	if !info.Present[".devcontainer"] || len(info.Present) != 1 {
		t.Errorf("present = %v; want .devcontainer, a directory", info.Present)
	}
	if got := strings.Join(info.Unprotectable, ","); got != ".vscode,lib/ci/deploy" {
		t.Errorf("unprotectable = %s; symlinks and paths under them must never be bound", got)
	}
	dirs, files := PlaceHolders(protect, info)
	if strings.Join(dirs, ",") != "" || strings.Join(files, ",") != ".envrc,.gitmodules" {
		t.Errorf("placeholders dirs %v files %v", dirs, files)
	}
}

// TestScanTreeSubmodules finds HEAD's submodules (gitlinks), which the copy
// leaves empty, and the plan warns about them.
func TestScanTreeSubmodules(t *testing.T) {
	repo := gittest.Repo(t)
	gittest.WriteFile(t, filepath.Join(repo, "top.txt"), "top")
	gittest.Git(t, repo, []string{"add", "top.txt"},
		[]string{"update-index", "--add", "--cacheinfo", "160000," + strings.Repeat("ab", 20) + ",vendor/lib"},
		[]string{"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "with a submodule"})
	info, err := source.ScanTree(context.Background(), checkOut(t, repo), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(info.Submodules, []string{"vendor/lib"}) {
		t.Errorf("submodules = %v; want [vendor/lib]", info.Submodules)
	}
	in := planInput()
	in.Tree = info
	pl, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(pl.Warnings, func(w string) bool {
		return strings.Contains(w, "submodules (vendor/lib) are not copied") && strings.Contains(w, "git submodule update --init")
	}) {
		t.Errorf("no warning about the submodule: %q", pl.Warnings)
	}
}

// checkOut checks repo's HEAD out the way up does and returns where.
func checkOut(t *testing.T, repo string) string {
	t.Helper()
	ctx := context.Background()
	src, err := source.Resolve(ctx, repo, source.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "co")
	if err := src.Checkout(ctx, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}
