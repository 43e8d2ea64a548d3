package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitConfigSeeds are config files in the forms git reads, the ones that
// hid a risky key from inspect-git's earlier reading among them.
var gitConfigSeeds = []string{
	"\xef\xbb\xbf[core]\n\thooksPath = /tmp/h\n",
	"[core] fsmonitor = \"/tmp/x\" ; comment\n",
	"[remote \"x\"]\n\turl = ext::sh -c touch% /tmp/pwned\n[protocol \"ext\"]\n\tallow = always\n",
	"[pager]\n\tlog = \"sh -c 'id'\"\n",
	"[credential \"https://example.test\"]\n\thelper = !touch /tmp/p\n",
	"[Core]\nHooksPath=a\\\n b\n",
	"[section.Sub]\nkey\n[s \"Q\\\"u\\\\o\"]\nk = \"a # b\" # c\n",
	"[a]\nk = x\\ty\\nz\\b \n",
	"[a \"\"]\nk = 1\n",
	"[a]k=1\r\nj\r\n",
	"[a]\nk = \"unterminated\n",
	"[a]\nk = bad\\q\n",
	"k = 1\n",
	"[]\nk = 1\n",
	"[a]\n1k = 1\n",
	"[ \"s\"]\nk = 1\n",
	"[a]\nk =   spaced   value   \n",
	"[a]\nk = \"  \" x \t\n",
	"[a]\nk\t=\tv\n; [b]\n# k2 = v\n",
	"[a]\n\vk = 1\n",
}

func TestGitConfigAsGitReadsIt(t *testing.T) {
	for _, seed := range gitConfigSeeds {
		compareWithGit(t, []byte(seed))
	}
}

// FuzzGitConfig: parseGitConfig reads every file as git config --list
// does (the same entries, or a refusal where git refuses).
func FuzzGitConfig(f *testing.F) {
	for _, seed := range gitConfigSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if bytes.IndexByte(data, 0) >= 0 || len(data) > 4096 {
			return // git reads a NUL as the end of its input
		}
		compareWithGit(t, data)
	})
}

// compareWithGit holds parseGitConfig to git's own reading of data.
func compareWithGit(t *testing.T, data []byte) {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("git is needed to check the config reader against")
		}
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "config")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(git, "config", "--file", file, "--list", "-z")
	cmd.Env = []string{"HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "PATH=/usr/bin:/bin"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	gitErr := cmd.Run()
	entries, err := parseGitConfig(data)
	if gitErr != nil {
		if err == nil {
			t.Fatalf("git refuses %q (%v: %s); parseGitConfig read %+v", data, gitErr, stderr.String(), entries)
		}
		return
	}
	if err != nil {
		if !errors.Is(err, errBadConfig) {
			t.Fatal(err)
		}
		t.Fatalf("git reads %q as %q; parseGitConfig refuses it: %v", data, stdout.String(), err)
	}
	var ours strings.Builder
	for _, e := range entries {
		ours.WriteString(e.Name())
		if !e.NoValue {
			ours.WriteString("\n" + e.Value)
		}
		ours.WriteByte(0)
	}
	if ours.String() != stdout.String() {
		t.Fatalf("%q:\ngit reads  %q\nwe read    %q", data, stdout.String(), ours.String())
	}
}
