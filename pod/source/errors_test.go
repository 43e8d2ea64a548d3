package source

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/internal/gittest"
)

// TestCloneErrorSaysWhy: a failed clone shows git's own reason, not the
// last line of its advice ("and the repository exists.").
func TestCloneErrorSaysWhy(t *testing.T) {
	ctx := context.Background()
	missing := filepath.Join(t.TempDir(), "nonexistent")
	src, err := Resolve(ctx, "file://"+missing, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = src.Checkout(ctx, filepath.Join(t.TempDir(), "co"))
	if err == nil {
		t.Fatal("clone of a missing repository succeeded")
	}
	msg := err.Error()
	first, _, _ := strings.Cut(msg, "\n")
	for _, want := range []string{"clone file://" + missing, "'" + missing + "' does not appear to be a git repository"} {
		if !strings.Contains(first, want) {
			t.Errorf("first line of the error %q lacks %q", first, want)
		}
	}
	for _, want := range []string{"Could not read from remote repository.", "Please make sure you have the correct access rights and the repository exists."} {
		if !strings.Contains(msg, "\n  "+want) {
			t.Errorf("error %q lacks the indented line %q", msg, want)
		}
	}
	if strings.Contains(msg, "fatal:") || strings.Contains(msg, "\n\n") {
		t.Errorf("error %q keeps git's prefixes or blank lines", msg)
	}
}

func TestGitReason(t *testing.T) {
	for _, tt := range []struct{ stderr, want string }{
		{"fatal: repository '/x' does not exist\n", "repository '/x' does not exist"},
		{"Cloning into 'co'...\nhint: use --foo\nfatal: unable to access 'https://h/x/': Could not resolve host: h\n",
			"unable to access 'https://h/x/': Could not resolve host: h"},
		{"git@h: Permission denied (publickey).\r\nfatal: Could not read from remote repository.\n\nPlease make sure you have the correct access rights\nand the repository exists.\n",
			"git@h: Permission denied (publickey).\n  Could not read from remote repository.\n  Please make sure you have the correct access rights and the repository exists."},
		{"warning: redirecting to https://h/y/\nremote: Repository not found.\nfatal: repository 'https://h/x/' not found\n",
			"warning: redirecting to https://h/y/\n  remote: Repository not found.\n  repository 'https://h/x/' not found"},
		{"error: 1\nerror: 2\nerror: 3\nerror: 4\nerror: 5\nerror: 6\nfatal: 7\n", "2\n  3\n  4\n  5\n  6\n  7"},
		{"\n\n", ""},
	} {
		if got := gitReason(tt.stderr); got != tt.want {
			t.Errorf("gitReason(%q) =\n%q\nwant\n%q", tt.stderr, got, tt.want)
		}
	}
}

// TestDubiousOwnership: a repository git will not read because another
// user owns it is reported as that, with what to do, not as "not a git
// repository". GIT_TEST_ASSUME_DIFFERENT_OWNER makes git see another owner
// (git 2.35.2 and later); the global config is emptied so that a
// safe.directory of the user running the test does not let it through.
func TestDubiousOwnership(t *testing.T) {
	ctx := context.Background()
	repo := gittest.Repo(t)
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	t.Setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")

	_, err := Resolve(ctx, repo, Options{})
	var oe *OwnershipError
	if !errors.As(err, &oe) {
		t.Fatalf("Resolve of a repository owned by another user: %v; want an *OwnershipError", err)
	}
	if oe.Dir != repo {
		t.Errorf("OwnershipError.Dir = %q; want %q", oe.Dir, repo)
	}
	for _, want := range []string{"belongs to another user", "dubious ownership", "git config --global --add safe.directory " + repo} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "not a git repository") {
		t.Errorf("error %q still says the repository is not one", err)
	}

	// A clone of it by URL: git refuses it too (its .git is what it
	// names), and says so through the same error.
	src, err := Resolve(ctx, "file://"+repo, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = src.Checkout(ctx, filepath.Join(t.TempDir(), "co"))
	if !errors.As(err, &oe) || !strings.HasPrefix(oe.Dir, repo) {
		t.Errorf("clone of a repository owned by another user: %v; want an *OwnershipError naming %s", err, repo)
	}
}
