package plan

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/devcontainer"
	"github.com/devaipod/devaipod/pod/source"
)

func TestNormalizeName(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"foo", "foo", true},
		{"devaipod-foo", "foo", true},
		{"foo-1a2b3c", "foo-1a2b3c", true},
		{"", "", false},
		{"devaipod-", "", false},
		{"Foo", "", false},
		{"foo_bar", "", false},
		{"-foo", "", false},
		{"foo-", "", false},
		{"a/b", "", false},
		{"x123456789012345678901234567890123456789012345678901", "", false},
	}
	for _, tt := range tests {
		got, err := NormalizeName(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("NormalizeName(%q) = %q, %v; want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestDeriveName(t *testing.T) {
	pattern := regexp.MustCompile(`^my-project-[0-9a-f]{6}$`)
	for _, in := range []string{"My_Project", "my project", "--my..project--"} {
		got := DeriveName(in)
		if !pattern.MatchString(got) {
			t.Errorf("DeriveName(%q) = %q; want my-project-XXXXXX", in, got)
		}
		if _, err := NormalizeName(got); err != nil {
			t.Errorf("DeriveName(%q) = %q is not a valid name: %v", in, got, err)
		}
	}
	if a, b := DeriveName("x"), DeriveName("x"); a == b {
		t.Errorf("DeriveName gave %q twice", a)
	}
	if got := DeriveName("___"); !regexp.MustCompile(`^project-`).MatchString(got) {
		t.Errorf("DeriveName(___) = %q; want project-...", got)
	}
}

func FuzzNormalizeName(f *testing.F) {
	f.Add("devaipod-foo")
	f.Add("a-b-c")
	f.Fuzz(func(t *testing.T, in string) {
		short, err := NormalizeName(in)
		if err != nil {
			return
		}
		if again, err := NormalizeName(PodName(short)); err != nil || again != short {
			t.Fatalf("NormalizeName(PodName(%q)) = %q, %v", short, again, err)
		}
		if _, err := NormalizeName(DeriveName(short)); err != nil {
			t.Fatalf("DeriveName(%q) invalid: %v", short, err)
		}
	})
}

func TestDeriveNameFor(t *testing.T) {
	shape := regexp.MustCompile(`^my-repo-pr7-[0-9a-f]{6}$`)
	if got := DeriveNameFor(&source.Source{Project: "My_Repo", PR: 7}); !shape.MatchString(got) {
		t.Errorf("DeriveNameFor(PR 7 of My_Repo) = %q; want my-repo-pr7-XXXXXX", got)
	}
	if got := DeriveNameFor(&source.Source{Project: "My_Repo"}); !regexp.MustCompile(`^my-repo-[0-9a-f]{6}$`).MatchString(got) {
		t.Errorf("DeriveNameFor(My_Repo) = %q; want my-repo-XXXXXX", got)
	}
	for _, src := range []*source.Source{
		{Project: strings.Repeat("abc-", 30), PR: 2147483647},
		{Project: strings.Repeat("x", 60), PR: 12},
		{Project: "___", PR: 1},
	} {
		got := DeriveNameFor(src)
		if _, err := NormalizeName(got); err != nil {
			t.Errorf("DeriveNameFor(%q, PR %d) = %q: %v", src.Project, src.PR, got, err)
		}
		if !strings.Contains(got, fmt.Sprintf("-pr%d-", src.PR)) {
			t.Errorf("DeriveNameFor(%q, PR %d) = %q lost the PR number", src.Project, src.PR, got)
		}
	}
}

func TestTaskLabel(t *testing.T) {
	long := strings.Repeat("é", MaxTaskLabel)
	got := TaskLabel(long)
	if len(got) > MaxTaskLabel || !strings.HasSuffix(got, "…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Errorf("TaskLabel cut badly: %d bytes", len(got))
	}
	if TaskLabel("short") != "short" {
		t.Error("short tasks must stay as they are")
	}
}

// TestDevcontainerProjectReservesDevaipodNames: a workspaceFolder named as
// one of devaipod's own files in /workspaces (the file the agent's init
// waits for) is not taken: the repository would lie where that file goes.
func TestDevcontainerProjectReservesDevaipodNames(t *testing.T) {
	for folder, want := range map[string]string{
		"/workspaces/app":                  "app",
		"/workspaces/.devaipod-setup-done": "",
		"/workspaces/.devaipod-anything":   "",
		"/workspaces/.devaipodish":         ".devaipodish",
		"/elsewhere/app":                   "",
	} {
		if got := DevcontainerProject(&devcontainer.Config{WorkspaceFolder: folder}); got != want {
			t.Errorf("workspaceFolder %s: project %q; want %q", folder, got, want)
		}
	}
}
