package layering

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/devaipod/devaipod/"

// mayImport lists, for every package of the module, the module's packages
// it may import (its tests aside). docs/architecture.md explains each line;
// a new package, or a new arrow, is added to both.
var mayImport = map[string][]string{
	// The CLI: flags, output, exit codes, over the library.
	"cmd/devaipod":                  {"pod", "pod/config", "pod/plan", "pod/podman", "pod/kube", "pod/kubeclient", "gator/policy", "proxy/record", "internal/approval", "internal/helperargs", "internal/safetext", "internal/size"},
	"cmd/devaipod/internal/fakellm": {},
	// The binaries of the helper image: never the library, nor podman.
	"cmd/devaipod-helper": {"proxy", "proxy/rule", "internal/approval", "internal/auditlog", "internal/cmdline", "internal/endpoint", "internal/helperargs", "internal/size"},
	"cmd/devaipod-gator":  {"gator", "gator/policy", "internal/approval", "internal/auditlog", "internal/cmdline", "internal/endpoint", "internal/helperargs"},
	// The library: orchestration over the Engine interface.
	"pod":              {"pod/config", "pod/devcontainer", "pod/plan", "pod/source", "gator/policy", "proxy/record", "internal/approval", "internal/auditlog", "internal/helperargs"},
	"pod/podman":       {"pod", "pod/plan", "internal/size"},
	"pod/kubeclient":   {"pod", "pod/plan", "pod/kube", "pod/config", "pod/source", "internal/helperargs"},
	"pod/kube":         {"pod/config", "pod/plan", "internal/helperargs", "internal/size"},
	"pod/plan":         {"pod/config", "pod/devcontainer", "pod/source", "proxy/rule", "internal/helperargs", "internal/size"},
	"pod/config":       {"pod/source", "proxy/rule", "gator/policy", "internal/size"},
	"pod/source":       {"internal/gitpack", "internal/safetext"},
	"pod/devcontainer": {"proxy/rule", "internal/size"},
	// The sidecars' servers.
	"proxy":        {"proxy/rule", "proxy/record", "internal/auditlog"},
	"proxy/record": {},
	"proxy/rule":   {},
	"gator":        {"gator/policy", "internal/approval", "internal/auditlog", "internal/gitpack"},
	"gator/policy": {},
	// Shared leaves: nothing of this module.
	"internal/approval":   {},
	"internal/auditlog":   {},
	"internal/cmdline":    {},
	"internal/endpoint":   {},
	"internal/helperargs": {},
	"internal/safetext":   {},
	"internal/size":       {},
	"internal/gitpack":    {},
	"internal/gittest":    {},
	"internal/layering":   {},
	"hack/proxybench":     {"proxy"},
}

// podmanOnly are the import prefixes of podman's own code: the bindings and
// the libraries they bring. Only pod/podman imports them.
var podmanOnly = []string{"github.com/containers/", "go.podman.io/"}

// packages reads the module's packages: directory -> the imports of its
// non-test files.
func packages(t *testing.T, root string) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !slices.Contains(pkgs[rel], p) {
				pkgs[rel] = append(pkgs[rel], p)
			}
		}
		if _, ok := pkgs[rel]; !ok {
			pkgs[rel] = []string{}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func TestLayers(t *testing.T) {
	pkgs := packages(t, "../..")
	if len(pkgs) < 10 {
		t.Fatalf("found %d packages; the walk is broken", len(pkgs))
	}
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	for pkg, imports := range pkgs {
		allowed, known := mayImport[pkg]
		if !known {
			t.Errorf("package %s is not in the layering table: add it here and to docs/architecture.md", pkg)
			continue
		}
		if !strings.Contains(string(doc), "`"+pkg+"`") {
			t.Errorf("docs/architecture.md does not name package %s", pkg)
		}
		for _, imp := range imports {
			if own, ok := strings.CutPrefix(imp, module); ok && !slices.Contains(allowed, own) {
				t.Errorf("%s imports %s, which its layer may not (docs/architecture.md)", pkg, own)
			}
			for _, p := range podmanOnly {
				if strings.HasPrefix(imp, p) && pkg != "pod/podman" {
					t.Errorf("%s imports %s: only pod/podman talks to podman", pkg, imp)
				}
			}
		}
	}
}

// TestPlanLinksNoPodman follows the plan's imports through the module: a
// pure plan must not reach podman by way of another package either.
func TestPlanLinksNoPodman(t *testing.T) {
	pkgs := packages(t, "../..")
	seen := map[string]bool{}
	var walk func(pkg string, via []string)
	walk = func(pkg string, via []string) {
		if seen[pkg] {
			return
		}
		seen[pkg] = true
		for _, imp := range pkgs[pkg] {
			for _, p := range podmanOnly {
				if strings.HasPrefix(imp, p) {
					t.Errorf("pod/plan reaches %s through %s", imp, strings.Join(append(via, pkg), " -> "))
				}
			}
			if own, ok := strings.CutPrefix(imp, module); ok {
				walk(own, append(via, pkg))
			}
		}
	}
	walk("pod/plan", nil)
	if len(seen) < 3 {
		t.Fatalf("walked %d packages from pod/plan; the walk is broken", len(seen))
	}
}
