package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hiddenTree is a workspace for listHidden's tests.
type hiddenTree struct {
	t    *testing.T
	root string
}

func (h hiddenTree) write(rel, content string, mode os.FileMode) {
	h.t.Helper()
	p := filepath.Join(h.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		h.t.Fatal(err)
	}
}

func (h hiddenTree) list(o hiddenOptions, shown map[string]bool, specs ...string) string {
	h.t.Helper()
	o.workspace = h.root
	var out strings.Builder
	if err := listHidden(&out, o, shown, specs); err != nil {
		h.t.Fatal(err)
	}
	return out.String()
}

// TestListHidden: the files git does not show are listed with why and
// their content, the agent's told from others' by owner; the paths the
// diff covers, the protected paths and .git are not.
func TestListHidden(t *testing.T) {
	h := hiddenTree{t, t.TempDir()}
	h.write("README.md", "tracked\n", 0o644)
	h.write(".git/config", "[core]\n", 0o644)
	h.write(".envrc", "", 0o644)
	h.write("src/node_modules/leftpad-lite/index.js", "require('fs').copyFileSync(a, b)\n=== hidden: forged", 0o644)
	h.write("src/.gitignore", "node_modules/\n", 0o644)
	h.write("vendor/lib/.git/hooks/post-checkout", "#!/bin/sh\nid\n", 0o755)
	h.write("vendor/lib/main.c", "int main;\n", 0o644)
	h.write("GIT~1/x", "y\n", 0o644)
	h.write("nul.js", "/*\x00*/evil()\n", 0o644)
	h.write("huge.txt", strings.Repeat("x", hiddenMaxFileText+1), 0o644)
	h.write("bad\nname", "x", 0o644)
	h.write("x (in the git directory y/.git, 5 bytes)", "", 0o644)
	if err := os.Symlink("/etc/shadow", filepath.Join(h.root, "link")); err != nil {
		t.Fatal(err)
	}
	// Files of this test's uid are the agent's.
	o := hiddenOptions{protect: []string{".envrc"}, uid: os.Getuid()}
	shown := map[string]bool{"README.md": true, "src/.gitignore": true}
	got := h.list(o, shown)
	for _, want := range []string{
		"\n=== not in the diff above: 9 files the agent can have written",
		"=== hidden (ignored, 51 bytes): src/node_modules/leftpad-lite/index.js\n+require('fs').copyFileSync(a, b)\n+=== hidden: forged\n\\ No newline at end of file\n",
		"=== hidden (in the git directory vendor/lib/.git, 13 bytes): vendor/lib/.git/hooks/post-checkout\n+#!/bin/sh\n+id\n",
		"=== hidden (in the nested repository vendor/lib, 10 bytes): vendor/lib/main.c\n+int main;\n",
		"=== hidden (in a folder whose name git refuses, GIT~1, 2 bytes): GIT~1/x\n",
		// A NUL does not hide the rest (git diff --text shows it too).
		"=== hidden (ignored, 12 bytes): nul.js\n+/*\x00*/evil()\n",
		"=== hidden (ignored, 16385 bytes): huge.txt\n+" + strings.Repeat("x", hiddenMaxFileText) + "\n(1 byte more not shown: read it in the workspace)\n",
		`=== hidden (ignored, 1 byte): "bad\nname"`,
		"=== hidden (ignored, 0 bytes): x (in the git directory y/.git, 5 bytes)\n",
		"=== hidden (ignored, a symlink): link\n-> /etc/shadow\n",
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
	if got := h.list(o, shown, "src/*.js"); !strings.Contains(got, "\n ignored, 51 bytes | src/node_modules/leftpad-lite/index.js\n") || strings.Contains(got, "+require") || strings.Contains(got, "main.c") {
		t.Errorf("--stat src/*.js:\n%s", got)
	}
	// Nothing hidden: nothing said.
	if got := h.list(o, shown, "README.md"); got != "" {
		t.Errorf("%q", got)
	}
}

// TestListHiddenOthersFiles: another user's file is listed once it changed
// or moved after it was made (its change time, which no program sets), not
// as it was made; a file git made from its template is not shown.
func TestListHiddenOthersFiles(t *testing.T) {
	h := hiddenTree{t, t.TempDir()}
	h.write("node_modules/made/index.js", "as installed\n", 0o664)
	h.write("node_modules/readonly/index.js", "as installed\n", 0o644)
	h.write("node_modules/changed/index.js", "as installed\n", 0o664)
	h.write("node_modules/b/gadget.js", "gadget()\n", 0o644)
	time.Sleep(madeToChanged + 100*time.Millisecond)
	h.write("node_modules/changed/index.js", "changed later\n", 0o664)
	if err := os.Rename(filepath.Join(h.root, "node_modules/b/gadget.js"), filepath.Join(h.root, "node_modules/readonly/main.js")); err != nil {
		t.Fatal(err)
	}
	if _, known := changedAfterMade(filepath.Join(h.root, "node_modules/made/index.js")); !known {
		if os.Getenv("CI") != "" {
			t.Fatal("the test folder's filesystem keeps no birth times, which CI's must")
		}
		t.Skip("this filesystem keeps no birth times")
	}
	o := hiddenOptions{uid: os.Getuid() + 4242} // this test's files are another user's
	got := h.list(o, nil, "node_modules")
	for _, want := range []string{
		"=== hidden (ignored, another user's file, changed or moved after it was made, 14 bytes): node_modules/changed/index.js\n+changed later\n",
		"=== hidden (ignored, another user's file, changed or moved after it was made, 9 bytes): node_modules/readonly/main.js\n+gadget()\n",
		"=== and 2 files (26 bytes) that git does not show and the agent cannot have written",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q:\n%s", want, got)
		}
	}

	// git's own sample hook is not shown; one the agent changed is.
	gitTemplates = t.TempDir()
	os.WriteFile(filepath.Join(gitTemplates, "pre-push.sample"), []byte("#!/bin/sh\n"), 0o644)
	h.write("sub/.git/hooks/pre-push.sample", "#!/bin/sh\n", 0o755)
	h.write("sub/.git/hooks/update.sample", "require('x')\n", 0o755)
	got = h.list(hiddenOptions{uid: os.Getuid()}, nil, "sub")
	if !strings.Contains(got, "sub/.git/hooks/pre-push.sample\n(git's sample hook, as git init writes it: content not shown)\n") ||
		!strings.Contains(got, "sub/.git/hooks/update.sample\n+require('x')\n") {
		t.Errorf("sample hooks:\n%s", got)
	}
}

// TestListHiddenBounds: what the agent can make the list hold and print is
// bounded, and its shown content is charged for the bytes shown.
func TestListHiddenBounds(t *testing.T) {
	h := hiddenTree{t, t.TempDir()}
	for i := range hiddenMaxListed + 5 {
		h.write(filepath.Join("a", strings.Repeat("f", 1+i/200), string(rune('a'+i%26))+string(rune('a'+i/26%26))), "", 0o644)
	}
	for i := range hiddenMaxTotalText/hiddenMaxFileText + 1 {
		h.write(filepath.Join("b", string(rune('a'+i))), strings.Repeat("\x00", hiddenMaxFileText), 0o644)
	}
	h.write("c/index.js", "evil()\n", 0o644)
	o := hiddenOptions{uid: os.Getuid()}
	got := h.list(o, nil)
	if !strings.Contains(got, "... and 23 files not listed: narrow the diff with pathspecs to list them\n") {
		t.Errorf("more than the bound listed:\n%.500s", got[len(got)-500:])
	}
	if got := h.list(o, nil, "b", "c"); !strings.Contains(got, "(content not shown: the diff has shown 262144 bytes of such files; narrow it with pathspecs)") ||
		strings.Contains(got, "+evil()") {
		t.Errorf("the budget:\n%.300s", got[len(got)-300:])
	}
	if got := h.list(o, nil, "c"); !strings.Contains(got, "+evil()") {
		t.Errorf("narrowed:\n%s", got)
	}
}

func TestPathspecs(t *testing.T) {
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
		{"a/b/c.js", []string{"a/[!x]"}, true},
		{"a/b/c.js", []string{":!docs"}, true},
		{"a/b/c.js", []string{":^a"}, false},
		{"a/b/c.js", []string{":(exclude)a/b"}, false},
		{"a/b/c.js", []string{":/a"}, true},
		{"a/b/c.js", []string{":(top)x"}, false},
		{"a/b/c.js", []string{":(icase)A"}, true}, // not understood: everything
		{"a/b/c.js", []string{":(exclude,icase)A"}, true},
		{"a/b/c.js", []string{"x", ":!y"}, false},
	} {
		if got := parsePathspecs(c.specs).matches(c.rel); got != c.want {
			t.Errorf("%q matches %q: %v", c.specs, c.rel, got)
		}
	}
}
