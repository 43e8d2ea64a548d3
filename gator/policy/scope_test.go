package policy

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseScope(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want Scope
		str  string // canonical form
	}{
		{"github:octo/app", Scope{Owner: "octo", Repo: "app", Perms: []Permission{PermRead}}, "github:octo/app:read"},
		{"github:octo/app:read,create-draft", Scope{Owner: "octo", Repo: "app", Perms: []Permission{PermRead, PermCreateDraft}}, "github:octo/app:read,create-draft"},
		{"github:octo/app:create-draft,read,read", Scope{Owner: "octo", Repo: "app", Perms: []Permission{PermRead, PermCreateDraft}}, "github:octo/app:read,create-draft"},
		{"  github:octo/app:read, comment ", Scope{Owner: "octo", Repo: "app", Perms: []Permission{PermRead, PermComment}}, "github:octo/app:read,comment"},
		{"github:octo/app:pending-review,push-branch,comment,create-draft,read",
			Scope{Owner: "octo", Repo: "app", Perms: Permissions}, "github:octo/app:read,comment,create-draft,push-branch,pending-review"},
		{"github:octo/*", Scope{Owner: "octo", Repo: "*", Perms: []Permission{PermRead}}, "github:octo/*:read"},
		{"github:octo/*:push-branch", Scope{Owner: "octo", Repo: "*", Perms: []Permission{PermPushBranch}}, "github:octo/*:push-branch"},
		{"github:readonly-all", Scope{ReadOnlyAll: true}, "github:readonly-all"},
		{"github:Octo-Org/my.repo_1:pending-review", Scope{Owner: "Octo-Org", Repo: "my.repo_1", Perms: []Permission{PermPendingReview}}, "github:Octo-Org/my.repo_1:pending-review"},
		{"github:ghe_user/.dotfiles", Scope{Owner: "ghe_user", Repo: ".dotfiles", Perms: []Permission{PermRead}}, "github:ghe_user/.dotfiles:read"},
		// ask:PERM: granted call by call, listed after the granted ones.
		{"github:octo/app:read,ask:push-branch", Scope{Owner: "octo", Repo: "app", Perms: []Permission{PermRead}, Ask: []Permission{PermPushBranch}},
			"github:octo/app:read,ask:push-branch"},
		{"github:octo/app:ask:push-branch, ask:create-draft,read,ask:push-branch",
			Scope{Owner: "octo", Repo: "app", Perms: []Permission{PermRead}, Ask: []Permission{PermCreateDraft, PermPushBranch}},
			"github:octo/app:read,ask:create-draft,ask:push-branch"},
		{"github:octo/*:ask:comment", Scope{Owner: "octo", Repo: "*", Ask: []Permission{PermComment}}, "github:octo/*:ask:comment"},
		{"github:octo/app:ask:pending-review,ask:comment",
			Scope{Owner: "octo", Repo: "app", Ask: []Permission{PermComment, PermPendingReview}}, "github:octo/app:ask:comment,ask:pending-review"},
	}
	for _, c := range cases {
		got, err := ParseScope(c.in)
		if err != nil {
			t.Errorf("ParseScope(%q): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseScope(%q) = %#v, want %#v", c.in, got, c.want)
		}
		if got.String() != c.str {
			t.Errorf("ParseScope(%q).String() = %q, want %q", c.in, got.String(), c.str)
		}
	}
}

func TestParseScopeErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"", "want github:OWNER/REPO[:PERMS], github:OWNER/*[:PERMS] or github:readonly-all"},
		{"octo/app", "want github:OWNER/REPO"},
		{"gitlab:octo/app", `unsupported forge "gitlab"`},
		{"GitHub:octo/app", `unsupported forge "GitHub"`},
		{"github:", `missing "/" between owner and repository`},
		{"github:octo", `missing "/" between owner and repository`},
		{"github:/app", "empty owner"},
		{"github:octo/", "empty repository name"},
		{"github:octo/app:", "empty permission (a stray comma?)"},
		{"github:octo/app:read,,comment", "empty permission"},
		{"github:octo/app:read,", "empty permission"},
		{"github:octo/app:write", `unknown permission "write": want read, comment, create-draft, push-branch or pending-review`},
		{"github:octo/app:READ", `unknown permission "READ"`},
		{"github:octo/app:read:comment", `unknown permission "read:comment"`},
		{"github:octo/app/x", `character '/' not allowed`},
		{"github:octo/../x", `character '/' not allowed`},
		{"github:octo/..", `repository name ".." not allowed`},
		{"github:octo/.", `repository name "." not allowed`},
		{"github:-octo/app", "must start with a letter or digit"},
		{"github:octo/app.git", "write it without .git"},
		{"github:octo/a b", `character ' ' not allowed`},
		{"github:octo/app%2f", `character '%' not allowed`},
		{"github:oc.to/app", `character '.' not allowed`},
		{"github:*/*", "must start with a letter or digit"},
		{"github:octo/a*", `character '*' not allowed`},
		{"github:readonly-all:read", "readonly-all takes no permissions"},
		{"github:readonly-all:ask:comment", "readonly-all takes no permissions"},
		{"github:octo/app:ask:read", "ask:read: read cannot be asked for"},
		{"github:octo/app:ask:", `"ask:" names no permission`},
		{"github:octo/app:read,ask:", `"ask:" names no permission`},
		{"github:octo/app:ask:write", `unknown permission "ask:write"`},
		{"github:octo/app:ask:ask:comment", `unknown permission "ask:ask:comment"`},
		{"github:octo/app:Ask:comment", `unknown permission "Ask:comment"`},
		{"github:octo/app:comment,ask:comment", "both comment and ask:comment: grant it (comment) or have each call asked for (ask:comment), not both"},
		{"github:" + strings.Repeat("a", 101) + "/app", "longer than 100 characters"},
		{"github:octo/" + strings.Repeat("a", 101), "longer than 100 characters"},
	}
	for _, c := range cases {
		_, err := ParseScope(c.in)
		if err == nil {
			t.Errorf("ParseScope(%q): no error, want one containing %q", c.in, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseScope(%q) error %q, want it to contain %q", c.in, err, c.want)
		}
		if !strings.HasPrefix(err.Error(), "scope ") {
			t.Errorf("ParseScope(%q) error %q does not name the scope", c.in, err)
		}
	}
}

func TestScopesFromConfig(t *testing.T) {
	t.Parallel()
	got, err := ScopesFromConfig(map[string][]string{
		"octo/app":   {"ask:push-branch", "create-draft", "read"},
		"octo/*":     {"read"},
		"other/tool": {"comment", "pending-review"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"github:octo/*:read", "github:octo/app:read,create-draft,ask:push-branch", "github:other/tool:comment,pending-review"}
	var strs []string
	for _, s := range got {
		strs = append(strs, s.String())
	}
	if !reflect.DeepEqual(strs, want) {
		t.Errorf("ScopesFromConfig = %q, want %q", strs, want)
	}

	for _, c := range []struct {
		repos map[string][]string
		want  string
	}{
		{map[string][]string{"octo/app": {}}, `[gator.github] repos "octo/app": empty permission list`},
		{map[string][]string{"octo/app": {"admin"}}, `[gator.github] repos "octo/app": unknown permission "admin"`},
		{map[string][]string{"octo": {"read"}}, `[gator.github] repos "octo": missing "/"`},
		{map[string][]string{"readonly-all": {"read"}}, `[gator.github] repos "readonly-all": missing "/"`},
		{map[string][]string{"octo/app:read": {"read"}}, `character ':' not allowed`},
		{map[string][]string{"octo/app": {"ask:read"}}, `[gator.github] repos "octo/app": ask:read: read cannot be asked for`},
		{map[string][]string{"octo/app": {"push-branch", "ask:push-branch"}}, "both push-branch and ask:push-branch"},
	} {
		_, err := ScopesFromConfig(c.repos)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ScopesFromConfig(%v) error %v, want one containing %q", c.repos, err, c.want)
		}
	}
}

func TestDefaultScopes(t *testing.T) {
	t.Parallel()
	got := DefaultScopes("octo", "app")
	if len(got) != 1 || got[0].String() != "github:octo/app:read,create-draft" {
		t.Fatalf("DefaultScopes = %v, want [github:octo/app:read,create-draft]", got)
	}
	p := New(got)
	if d := p.Decide(ToolCreateDraftPullRequest, "octo/app", nil); !d.Allowed {
		t.Errorf("default scopes deny create_draft_pull_request: %s", d.Reason)
	}
	if d := p.Decide(ToolPushBranch, "octo/app", map[string]any{"branch": "agent/x"}); d.Allowed {
		t.Error("default scopes allow push_branch")
	}
}

func TestSplitRepo(t *testing.T) {
	t.Parallel()
	if o, r, err := SplitRepo("octo/app"); err != nil || o != "octo" || r != "app" {
		t.Errorf(`SplitRepo("octo/app") = %q, %q, %v`, o, r, err)
	}
	for _, bad := range []string{"", "octo", "/", "octo/", "/app", "octo/app/x", "octo/*", "../app", "octo/app?x=1", "octo/app#x", "octo/%2e%2e"} {
		if _, _, err := SplitRepo(bad); err == nil {
			t.Errorf("SplitRepo(%q): no error", bad)
		}
	}
}
