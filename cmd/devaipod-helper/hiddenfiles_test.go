package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestListHidden: the files git does not show are listed with why and
// their text, the agent's told from others' by owner or mode; the paths
// the diff covers, the protected paths and .git are not.
func TestListHidden(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	write("README.md", "tracked\n", 0o644)
	write(".git/config", "[core]\n", 0o644)
	write(".envrc", "", 0o644)
	write("src/node_modules/leftpad-lite/index.js", "require('fs').copyFileSync(a, b)\n=== hidden: forged", 0o644)
	write("src/.gitignore", "node_modules/\n", 0o644)
	write("vendor/lib/.git/hooks/post-checkout", "#!/bin/sh\nid\n", 0o755)
	write("vendor/lib/.git/hooks/pre-push.sample", "#!/bin/sh\n", 0o755)
	write("vendor/lib/main.c", "int main;\n", 0o644)
	write("big.bin", "\x00\x01binary", 0o644)
	write("huge.txt", strings.Repeat("x", hiddenMaxFileText+1), 0o644)
	write("bad\nname", "x", 0o644)
	if err := os.Symlink("/etc/shadow", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	// Files of this test's uid are the agent's.
	o := hiddenOptions{workspace: root, protect: []string{".envrc"}, uid: os.Getuid(), gid: os.Getgid() + 4242}
	shown := map[string]bool{"README.md": true, "src/.gitignore": true}
	var out strings.Builder
	if err := listHidden(&out, o, shown, nil); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"=== not in the diff above: 8 files the agent can have written",
		"=== hidden: src/node_modules/leftpad-lite/index.js (ignored, 51 bytes)\n+require('fs').copyFileSync(a, b)\n+=== hidden: forged\n\\ No newline at end of file\n",
		"=== hidden: vendor/lib/.git/hooks/post-checkout (in the git directory vendor/lib/.git, 13 bytes)\n+#!/bin/sh\n+id\n",
		"=== hidden: vendor/lib/.git/hooks/pre-push.sample (in the git directory vendor/lib/.git, 10 bytes)\n(a sample hook, which git does not run: content not shown)\n",
		"=== hidden: vendor/lib/main.c (in the nested repository vendor/lib, 10 bytes)\n+int main;\n",
		"=== hidden: big.bin (ignored, 8 bytes)\n(binary, not shown)\n",
		"=== hidden: huge.txt (ignored, 16385 bytes)\n(content not shown: larger than 16384 bytes)\n",
		`=== hidden: "bad\nname" (ignored, 1 byte)`,
		"=== hidden: link (ignored, a symlink)\n-> /etc/shadow\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"README.md", ".git/config", ".envrc", "src/.gitignore", "=== and"} {
		if strings.Contains(got, not) {
			t.Errorf("lists %q:\n%s", not, got)
		}
	}

	o.stat = true
	out.Reset()
	if err := listHidden(&out, o, shown, []string{"src/*.js"}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "\n src/node_modules/leftpad-lite/index.js | ignored, 51 bytes\n") || strings.Contains(got, "+require") || strings.Contains(got, "main.c") {
		t.Errorf("--stat src/*.js:\n%s", got)
	}
	o.stat = false

	// Another user's files: only what the agent's group can write and
	// was changed after it was made, not the symlink.
	o.uid, o.gid = os.Getuid()+4242, os.Getgid()
	write("node_modules/made/index.js", "as installed\n", 0o664)
	write("node_modules/readonly/index.js", "as installed\n", 0o644)
	write("node_modules/changed/index.js", "as installed\n", 0o664)
	time.Sleep(madeToChanged + 100*time.Millisecond)
	write("node_modules/changed/index.js", "changed later\n", 0o664)
	out.Reset()
	if err := listHidden(&out, o, shown, []string{"node_modules", "link"}); err != nil {
		t.Fatal(err)
	}
	got = out.String()
	want := "=== hidden: node_modules/changed/index.js (ignored, another user's file the agent can write, changed after it was made, 14 bytes)\n+changed later\n"
	if !strings.Contains(got, want) || strings.Contains(got, "readonly") || strings.Contains(got, "link") {
		t.Errorf("another user's files:\n%s", got)
	}
	if _, known := changedAfterMade(filepath.Join(root, "node_modules/made/index.js")); known &&
		(strings.Contains(got, "made/") || !strings.Contains(got, "=== and 3 files (37 bytes) that git does not show and the agent cannot have written")) {
		t.Errorf("another user's files, unchanged since made, are not the agent's:\n%s", got)
	}

	// Nothing hidden: nothing said.
	out.Reset()
	if err := listHidden(&out, o, shown, []string{"README.md"}); err != nil || out.Len() != 0 {
		t.Errorf("%v %q", err, out.String())
	}
}

func TestMatchesPathspecs(t *testing.T) {
	for _, c := range []struct {
		rel   string
		specs []string
		want  bool
	}{
		{"a/b.js", nil, true},
		{"a/b.js", []string{"a"}, true},
		{"a/b.js", []string{"./a/"}, true},
		{"ab/c", []string{"a"}, false},
		{"a/b/c.js", []string{"*.js"}, true},
		{"a/b/c.js", []string{"a/*"}, true},
		{"a/b/c.js", []string{"b*"}, false},
		{"a/b/c.js", []string{"."}, true},
	} {
		if got := matchesPathspecs(c.rel, c.specs); got != c.want {
			t.Errorf("matchesPathspecs(%q, %q) = %v", c.rel, c.specs, got)
		}
	}
}
