package policy

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// allRepoTools lists every tool that needs a permission, in a stable order.
func allRepoTools() []string {
	var tools []string
	for tool := range ToolPermissions {
		tools = append(tools, tool)
	}
	sort.Strings(tools)
	return tools
}

// TestDecideTable runs every tool against a policy granting exactly one
// permission on octo/app, for every permission, on the granted repository
// (in two spellings) and on repositories it does not cover.
func TestDecideTable(t *testing.T) {
	t.Parallel()
	if len(ToolPermissions) != 9 {
		t.Fatalf("%d repository tools; update this test and docs/gator.md", len(ToolPermissions))
	}
	repos := []struct {
		name    string
		covered bool
	}{
		{"octo/app", true},
		{"OCTO/App", true}, // GitHub names are case-insensitive
		{"octo/other", false},
		{"evil/app", false},
		{"octo/app-fork", false},
	}
	for _, perm := range Permissions {
		policy := New([]Scope{{Owner: "octo", Repo: "app", Perms: []Permission{perm}}})
		for _, tool := range allRepoTools() {
			for _, repo := range repos {
				name := fmt.Sprintf("%s/%s/%s", perm, tool, repo.name)
				args := map[string]any{"branch": "agent/fix"}
				d := policy.Decide(tool, repo.name, args)
				need := ToolPermissions[tool]
				want := need == perm && repo.covered
				if d.Allowed != want {
					t.Errorf("%s: allowed = %v, want %v (reason %q)", name, d.Allowed, want, d.Reason)
				}
				if d.Permission != need {
					t.Errorf("%s: permission %q, want %q", name, d.Permission, need)
				}
				switch {
				case want && d.Reason != "allowed by github:octo/app:"+string(perm):
					t.Errorf("%s: reason %q", name, d.Reason)
				case !want && !strings.HasPrefix(d.Reason, "denied: "+tool+" on "+repo.name+" needs scope "+string(need)+"; grant it with `devaipod up ... --gator github:"):
					t.Errorf("%s: reason %q", name, d.Reason)
				}
			}
		}
		// status needs nothing.
		if d := policy.Decide(ToolStatus, "", nil); !d.Allowed {
			t.Errorf("%s: status denied: %s", perm, d.Reason)
		}
	}
}

func TestDecideScopes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		scopes []string
		tool   string
		repo   string
		branch string
		allow  bool
		reason string
	}{
		{"owner wildcard reads any repo of owner", []string{"github:octo/*"}, ToolGetIssue, "octo/anything", "", true, "allowed by github:octo/*:read"},
		{"owner wildcard is not other owners", []string{"github:octo/*"}, ToolGetIssue, "octocat/app", "", false, "needs scope read"},
		{"owner wildcard with perms", []string{"github:octo/*:comment"}, ToolAddIssueComment, "octo/x", "", true, ""},
		{"owner wildcard without the perm", []string{"github:octo/*:comment"}, ToolGetIssue, "octo/x", "", false, ""},
		{"readonly-all reads anything", []string{"github:readonly-all"}, ToolGetFileContents, "someone/else", "", true, "allowed by github:readonly-all"},
		{"readonly-all lists PRs", []string{"github:readonly-all"}, ToolListPullRequests, "a/b", "", true, ""},
		{"readonly-all never writes", []string{"github:readonly-all"}, ToolCreateDraftPullRequest, "a/b", "", false, "needs scope create-draft"},
		{"readonly-all never comments", []string{"github:readonly-all"}, ToolAddIssueComment, "a/b", "", false, ""},
		{"readonly-all never pushes", []string{"github:readonly-all"}, ToolPushBranch, "a/b", "agent/x", false, ""},
		{"readonly-all never reviews", []string{"github:readonly-all"}, ToolCreatePendingReview, "a/b", "", false, ""},
		{"union of scopes", []string{"github:octo/app", "github:octo/app:comment"}, ToolAddIssueComment, "octo/app", "", true, ""},
		{"no scopes", nil, ToolGetIssue, "octo/app", "", false, "needs scope read"},
		{"unknown tool", []string{"github:readonly-all"}, "delete_repository", "octo/app", "", false, `denied: unknown tool "delete_repository"`},
		{"empty repo", []string{"github:readonly-all"}, ToolGetIssue, "", "", false, "want OWNER/REPO"},
		{"path in repo", []string{"github:octo/*"}, ToolGetIssue, "octo/app/../../orgs/x", "", false, "not allowed"},
		{"dot-dot repo", []string{"github:octo/*"}, ToolGetIssue, "octo/..", "", false, "not allowed"},
		{"push agent branch", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "agent/fix-1", true, ""},
		{"push nested agent branch", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "agent/issue-5/try-2", true, ""},
		{"push main", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "main", false, "pushes only to branches named agent/NAME"},
		{"push other prefix", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "feature/agent/x", false, "agent/NAME"},
		{"push bare prefix", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "agent/", false, "agent/NAME"},
		{"push no branch", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "", false, "missing branch"},
		{"push full ref", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "refs/heads/agent/x", false, "agent/NAME"},
		{"push dot-dot", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "agent/../main", false, `contains ".."`},
		{"push lock", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "agent/x.lock", false, ".lock"},
		{"push space", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "agent/a b", false, "not allowed"},
		{"push colon", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "agent/x:main", false, "not allowed"},
		{"push reflog syntax", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "agent/x@{1}", false, `"@{"`},
		{"push trailing slash", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "agent/x/", false, "ends with"},
		{"push hidden component", []string{"github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "agent/.x", false, `starts with "."`},
		{"branch not checked before scope", []string{"github:octo/app:read"}, ToolPushBranch, "octo/app", "main", false, "needs scope push-branch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			scopes, err := ParseScopes(c.scopes)
			if err != nil {
				t.Fatal(err)
			}
			d := New(scopes).Decide(c.tool, c.repo, map[string]any{"branch": c.branch})
			if d.Allowed != c.allow {
				t.Errorf("allowed = %v, want %v (reason %q)", d.Allowed, c.allow, d.Reason)
			}
			if !strings.Contains(d.Reason, c.reason) {
				t.Errorf("reason %q, want it to contain %q", d.Reason, c.reason)
			}
		})
	}
}

func TestDenyText(t *testing.T) {
	t.Parallel()
	p := New([]Scope{{Owner: "octo", Repo: "app", Perms: []Permission{PermRead}}})
	d := p.Decide(ToolCreateDraftPullRequest, "octo/app", nil)
	want := "denied: create_draft_pull_request on octo/app needs scope create-draft; grant it with " +
		"`devaipod up ... --gator github:octo/app:read,create-draft` or " +
		`[gator.github] repos = { "octo/app" = ["read", "create-draft"] }`
	if d.Reason != want {
		t.Errorf("reason\n got %s\nwant %s", d.Reason, want)
	}
	// The hint's scope must parse, and grant what was missing.
	hint := strings.TrimSuffix(strings.SplitAfter(d.Reason, "--gator ")[1], "` or "+`[gator.github] repos = { "octo/app" = ["read", "create-draft"] }`)
	sc, err := ParseScope(hint)
	if err != nil {
		t.Fatalf("the hint's scope %q: %v", hint, err)
	}
	if !New([]Scope{sc}).Decide(ToolCreateDraftPullRequest, "octo/app", nil).Allowed {
		t.Errorf("the hint's scope %q does not grant the call", hint)
	}
	// An ungranted repository: the hint names only the missing permission.
	d = p.Decide(ToolGetIssue, "octo/other", nil)
	if !strings.Contains(d.Reason, "--gator github:octo/other:read`") || !strings.Contains(d.Reason, `{ "octo/other" = ["read"] }`) {
		t.Errorf("reason %q", d.Reason)
	}
}

func TestGranted(t *testing.T) {
	t.Parallel()
	scopes, err := ParseScopes([]string{"github:octo/app:create-draft", "github:octo/*:comment", "github:readonly-all"})
	if err != nil {
		t.Fatal(err)
	}
	p := New(scopes)
	if got, want := p.Granted("octo", "app"), []Permission{PermRead, PermComment, PermCreateDraft}; !reflect.DeepEqual(got, want) {
		t.Errorf("Granted(octo/app) = %v, want %v", got, want)
	}
	if got, want := p.Granted("x", "y"), []Permission{PermRead}; !reflect.DeepEqual(got, want) {
		t.Errorf("Granted(x/y) = %v, want %v", got, want)
	}
}

func TestProtected(t *testing.T) {
	for name, want := range map[string]bool{
		".github/workflows/ci.yml":   true,
		".github/workflows/a/b.yml":  true,
		".github/workflows":          true, // a symlink or submodule in the folder's place
		".github":                    true, // the same, one level up
		".github/CODEOWNERS":         false,
		".github/workflowsx":         false,
		"Jenkinsfile":                true,
		"sub/Jenkinsfile":            false,
		".gitlab-ci.yml":             true,
		"docs/.github/workflows/x":   false,
		".circleci":                  true,
		"src/main.go":                false,
		".buildkite/pipeline.yml":    true,
		".azure-pipelines/steps.yml": true,
	} {
		if got := Protected(DefaultProtectedPaths, name); got != want {
			t.Errorf("Protected(%q) = %v, want %v", name, got, want)
		}
	}
	if !Protected([]string{"ci/*/**"}, "ci/x") || Protected([]string{"ci/*/**"}, "cd") {
		t.Error("a pattern folder's ancestors")
	}
}

// TestDecideAsk: a permission granted as ask:PERM makes the call an ask
// (not allowed, not denied); granted outright it is allowed; neither, it
// is denied. Argument rules apply before any ask.
func TestDecideAsk(t *testing.T) {
	t.Parallel()
	const (
		allow = "allow"
		ask   = "ask"
		deny  = "deny"
	)
	cases := []struct {
		name   string
		scopes []string
		tool   string
		repo   string
		branch string
		want   string
		reason string
	}{
		{"asked push", []string{"github:octo/app:read,ask:push-branch"}, ToolPushBranch, "octo/app", "agent/fix", ask,
			"ask: push_branch on octo/app needs a person's approval (ask:push-branch of github:octo/app:read,ask:push-branch)"},
		{"asked push, other case", []string{"github:octo/app:ask:push-branch"}, ToolPushBranch, "OCTO/App", "agent/fix", ask, "ask: push_branch on OCTO/App"},
		{"asked draft", []string{"github:octo/app:ask:create-draft"}, ToolCreateDraftPullRequest, "octo/app", "", ask, "ask:create-draft"},
		{"asked comment by wildcard", []string{"github:octo/*:ask:comment"}, ToolAddIssueComment, "octo/any", "", ask, "github:octo/*:ask:comment"},
		{"asked review", []string{"github:octo/app:ask:pending-review"}, ToolCreatePendingReview, "octo/app", "", ask, ""},
		{"ask is not read", []string{"github:octo/app:ask:push-branch"}, ToolGetIssue, "octo/app", "", deny, "needs scope read"},
		{"ask covers only its repo", []string{"github:octo/app:ask:push-branch"}, ToolPushBranch, "octo/other", "agent/x", deny, "needs scope push-branch"},
		{"ask covers only its permission", []string{"github:octo/app:ask:push-branch"}, ToolAddIssueComment, "octo/app", "", deny, "needs scope comment"},
		{"granted wins over asked", []string{"github:octo/*:ask:push-branch", "github:octo/app:push-branch"}, ToolPushBranch, "octo/app", "agent/x", allow,
			"allowed by github:octo/app:push-branch"},
		{"granted wins, either order", []string{"github:octo/app:push-branch", "github:octo/*:ask:push-branch"}, ToolPushBranch, "octo/app", "agent/x", allow, ""},
		{"asked elsewhere still asks", []string{"github:octo/*:ask:push-branch", "github:octo/app:push-branch"}, ToolPushBranch, "octo/lib", "agent/x", ask, ""},
		{"asked push to main: denied, not asked", []string{"github:octo/app:ask:push-branch"}, ToolPushBranch, "octo/app", "main", deny,
			"denied: push_branch on octo/app: branch \"main\": the gator pushes only to branches named agent/NAME"},
		{"asked push, bad name: denied", []string{"github:octo/app:ask:push-branch"}, ToolPushBranch, "octo/app", "agent/\u202efix", deny, "only letters, digits"},
		{"asked push, no branch: denied", []string{"github:octo/app:ask:push-branch"}, ToolPushBranch, "octo/app", "", deny, "missing branch"},
		{"asked, malformed repo: denied", []string{"github:octo/*:ask:comment"}, ToolAddIssueComment, "octo/../x", "", deny, "not allowed"},
		{"status needs nothing", []string{"github:octo/app:ask:comment"}, ToolStatus, "", "", allow, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			scopes, err := ParseScopes(c.scopes)
			if err != nil {
				t.Fatal(err)
			}
			d := New(scopes).Decide(c.tool, c.repo, map[string]any{"branch": c.branch})
			got := deny
			switch {
			case d.Allowed && d.Ask:
				t.Fatalf("both allowed and asked: %+v", d)
			case d.Allowed:
				got = allow
			case d.Ask:
				got = ask
			}
			if got != c.want || !strings.Contains(d.Reason, c.reason) {
				t.Errorf("Decide = %s (%q), want %s with %q", got, d.Reason, c.want, c.reason)
			}
			if c.tool != ToolStatus && d.Permission != ToolPermissions[c.tool] {
				t.Errorf("permission %q", d.Permission)
			}
		})
	}
}

// TestDenyTextKeepsAsks: the hint of a denial keeps the ask: permissions,
// so that pasting it changes nothing but the missing one.
func TestDenyTextKeepsAsks(t *testing.T) {
	t.Parallel()
	scopes, err := ParseScopes([]string{"github:octo/app:read,ask:push-branch,ask:create-draft"})
	if err != nil {
		t.Fatal(err)
	}
	p := New(scopes)
	d := p.Decide(ToolAddIssueComment, "octo/app", nil)
	want := "`devaipod up ... --gator github:octo/app:read,comment,ask:create-draft,ask:push-branch` or " +
		`[gator.github] repos = { "octo/app" = ["read", "comment", "ask:create-draft", "ask:push-branch"] }`
	if !strings.HasSuffix(d.Reason, want) {
		t.Errorf("reason\n got %s\nwant ...%s", d.Reason, want)
	}
	hint := strings.TrimSuffix(strings.SplitAfter(d.Reason, "--gator ")[1], strings.SplitAfter(want, "` or ")[1])
	hint = strings.TrimSuffix(hint, "` or ")
	sc, err := ParseScope(hint)
	if err != nil {
		t.Fatalf("the hint's scope %q: %v", hint, err)
	}
	if d := New([]Scope{sc}).Decide(ToolPushBranch, "octo/app", map[string]any{"branch": "agent/x"}); !d.Ask {
		t.Errorf("the hint's scope %q lost ask:push-branch: %+v", hint, d)
	}
	if got, want := p.Asked("octo", "app"), []Permission{PermCreateDraft, PermPushBranch}; !reflect.DeepEqual(got, want) {
		t.Errorf("Asked = %v, want %v", got, want)
	}
	// Granted outright elsewhere: not asked.
	both := New(append(scopes, Scope{Owner: "octo", Repo: "*", Perms: []Permission{PermPushBranch}}))
	if got, want := both.Asked("octo", "app"), []Permission{PermCreateDraft}; !reflect.DeepEqual(got, want) {
		t.Errorf("Asked with push-branch granted = %v, want %v", got, want)
	}
}
