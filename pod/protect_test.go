package pod

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// checkedOut commits files (name -> content; "->target" makes a symlink)
// to a new repository and checks it out the way up does.
func checkedOut(t *testing.T, files map[string]string) string {
	t.Helper()
	repo := testRepo(t)
	for name, content := range files {
		p := filepath.Join(repo, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		writeFile(t, p, content)
	}
	gitIn(t, repo, []string{"add", "-A"}, []string{"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "files"})
	return checkOut(t, repo)
}

// gitIn runs each git command in repo.
func gitIn(t *testing.T, repo string, cmds ...[]string) {
	t.Helper()
	for _, args := range cmds {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
}

// checkOut checks repo's HEAD out the way up does and returns where.
func checkOut(t *testing.T, repo string) string {
	t.Helper()
	ctx := context.Background()
	src, err := ResolveSource(ctx, repo, "")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "co")
	if err := src.Checkout(ctx, dir); err != nil {
		t.Fatal(err)
	}
	return dir
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
	protect := append(slices.Clone(AlwaysProtect), ".vscode", ".envrc", "lib/ci/deploy", ".gitmodules")
	info, err := ScanTree(context.Background(), dir, protect, DefaultMask)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(info.Masked)
	if got := strings.Join(info.Masked, ","); got != ".env,certs/server.key,deploy/.env.prod,id_rsa.pub" {
		t.Errorf("masked = %s", got)
	}
	if !info.Present[".devcontainer"] || !info.Present[".git/hooks"] || info.Present[".git/config"] {
		t.Errorf("present = %v", info.Present)
	}
	if _, ok := info.Present[".git/config"]; !ok {
		t.Errorf(".git/config not found: %v", info.Present)
	}
	if got := strings.Join(info.Unprotectable, ","); got != ".vscode,lib/ci/deploy" {
		t.Errorf("unprotectable = %s; symlinks and paths under them must never be bound", got)
	}
	dirs, files := PlaceHolders(protect, info)
	if strings.Join(dirs, ",") != "" || strings.Join(files, ",") != ".envrc,.gitmodules" {
		t.Errorf("placeholders dirs %v files %v", dirs, files)
	}

	// The copy creates the placeholders, and git does not report them.
	got, _ := readTar(t, context.Background(), dir, "p", ".envrc", "new/dir/")
	for _, name := range []string{"p/.envrc", "p/new/", "p/new/dir/"} {
		if got[name] == nil {
			t.Errorf("placeholder %s missing from the copy", name)
		}
	}
	if status, err := git(context.Background(), dir, "status", "--porcelain", "--ignored"); err != nil {
		t.Fatal(err)
	} else if exclude, _ := os.ReadFile(filepath.Join(dir, ".git", "info", "exclude")); !strings.Contains(string(exclude), "/.envrc") {
		t.Errorf("info/exclude lacks the placeholder:\n%s\n%s", exclude, status)
	}
}

func TestResolveMounts(t *testing.T) {
	home := t.TempDir()
	for _, d := range []string{".ssh", "cache/go", "work"} {
		os.MkdirAll(filepath.Join(home, d), 0o755)
	}
	os.Symlink(filepath.Join(home, ".ssh"), filepath.Join(home, "innocent"))
	config := filepath.Join(home, ".config", "devaipod.toml")
	os.MkdirAll(filepath.Dir(config), 0o755)
	writeFile(t, config, "")
	forbidden := ForbiddenMounts(home, config, "/run/user/1000")

	ok, err := ResolveMounts([]MountConfig{{Source: filepath.Join(home, "cache/go"), Target: "/cache"}}, forbidden)
	if err != nil || len(ok) != 1 || ok[0].RW || strings.Join(ok[0].Containers, ",") != RoleWorkspace {
		t.Errorf("plain mount: %+v %v; want read-only, workspace only", ok, err)
	}
	for _, tt := range []struct{ source, rule string }{
		{filepath.Join(home, ".ssh"), `".ssh"`},
		{filepath.Join(home, "innocent"), `".ssh"`}, // resolved through the symlink
		{home, "contains"},                          // a parent of credentials
		{filepath.Dir(config), "devaipod.toml"},
		{"/run/user/1000/podman", "podman"},
		{"/", "root"},
	} {
		_, err := ResolveMounts([]MountConfig{{Source: tt.source, Target: "/x"}}, forbidden)
		var me *MountError
		if tt.source == "/run/user/1000/podman" && errors.Is(err, os.ErrNotExist) {
			continue // not on this host; the rule is checked below without resolving
		}
		if !errors.As(err, &me) || !strings.Contains(me.Error(), tt.rule) {
			t.Errorf("mount %s: err %v; want a refusal naming %s", tt.source, err, tt.rule)
		}
	}
	if rule := blockedRule("/run/user/1000/podman/podman.sock", forbidden); !strings.Contains(rule, "podman") {
		t.Errorf("podman socket rule = %q", rule)
	}
}

func TestConfigProtectKeys(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{"[agent]\nprotect = [\"../x\"]\n", "agent.protect"},
		{"[agent]\nprotect = [\"/etc\"]\n", "agent.protect"},
		{"[agent]\nmask = [\"a/b\"]\n", "agent.mask"},
		{"[agent]\nworkspace_access = \"rwx\"\n", "agent.workspace_access"},
		{"[agent]\nkind = \"claude\"\n", "agent.kind"},
		{"[agent]\nkind = \"custom\"\n", "agent.command"},
		{"[agent]\nhealth = \"health\"\n", "agent.health"},
		{"[agent.limits]\ntimeout = \"soon\"\n", "agent.limits.timeout"},
		{"[workspace.limits]\npids = -1\n", "c.toml:2: workspace.limits.pids"},
		{"[[mounts]]\nsource = \"rel\"\ntarget = \"/x\"\n", "mounts[0]"},
		{"[[mounts]]\nsource = \"/a\"\ntarget = \"/x/../y\"\n", "mounts[0]"},
		{"[[mounts]]\nsource = \"/a\"\ntarget = \"/x\"\n\n[[mounts]]\nsource = \"/a\"\ntarget = \"/x\"\ncontainers = [\"proxy\"]\n", "c.toml:5: mounts[1]"},
	} {
		_, err := ParseConfig("c.toml", []byte(tt.text))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err %v; want one naming %s", tt.text, err, tt.want)
		}
	}
	cfg, err := ParseConfig("c.toml", []byte("[agent]\nmask = []\n"))
	if err != nil || cfg.Agent.Mask == nil || len(MaskPatterns(cfg)) != 0 {
		t.Errorf("mask = [] must mask nothing: %v %v", cfg, err)
	}
}

func TestAgentSeccompProfile(t *testing.T) {
	data, err := agentSeccompProfile()
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	// unshare and clone are allowed only without namespace flags.
	for _, want := range []string{`"unshare"`, `"clone"`, `"SCMP_CMP_MASKED_EQ"`, `"clone3"`} {
		if !strings.Contains(s, want) {
			t.Errorf("profile lacks %s", want)
		}
	}
	if strings.Count(s, `"unshare"`) != 1 || strings.Count(s, `"clone"`) != 1 {
		t.Errorf("unshare or clone is still allowed unconditionally somewhere")
	}
	// ptrace and process_vm_* appear once: in the rule that refuses them.
	for _, name := range []string{`"ptrace"`, `"process_vm_readv"`, `"process_vm_writev"`} {
		if strings.Count(s, name) != 1 {
			t.Errorf("%s appears %d times; want only in its refusing rule", name, strings.Count(s, name))
		}
	}
}

func TestTaskLabel(t *testing.T) {
	long := strings.Repeat("é", MaxTaskLabel)
	got := taskLabel(long)
	if len(got) > MaxTaskLabel || !strings.HasSuffix(got, "…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Errorf("taskLabel cut badly: %d bytes", len(got))
	}
	if taskLabel("short") != "short" {
		t.Error("short tasks must stay as they are")
	}
}

// TestScanTreeSubmodules finds HEAD's submodules (gitlinks), which the copy
// leaves empty, and the plan warns about them.
func TestScanTreeSubmodules(t *testing.T) {
	repo := testRepo(t)
	writeFile(t, filepath.Join(repo, "top.txt"), "top")
	gitIn(t, repo, []string{"add", "top.txt"},
		[]string{"update-index", "--add", "--cacheinfo", "160000," + strings.Repeat("ab", 20) + ",vendor/lib"},
		[]string{"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "with a submodule"})
	info, err := ScanTree(context.Background(), checkOut(t, repo), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(info.Submodules, []string{"vendor/lib"}) {
		t.Errorf("submodules = %v; want [vendor/lib]", info.Submodules)
	}
	in := planInput()
	in.Tree = info
	plan, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(plan.Warnings, func(w string) bool {
		return strings.Contains(w, "submodules (vendor/lib) are not copied") && strings.Contains(w, "git submodule update --init")
	}) {
		t.Errorf("no warning about the submodule: %q", plan.Warnings)
	}
}
