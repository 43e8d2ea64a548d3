package policy

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The tools the gator offers, by MCP name.
const (
	ToolStatus                 = "status"
	ToolGetFileContents        = "get_file_contents"
	ToolListIssues             = "list_issues"
	ToolGetIssue               = "get_issue"
	ToolListPullRequests       = "list_pull_requests"
	ToolGetPullRequest         = "get_pull_request"
	ToolCreateDraftPullRequest = "create_draft_pull_request"
	ToolAddIssueComment        = "add_issue_comment"
	ToolPushBranch             = "push_branch"
	ToolCreatePendingReview    = "create_pending_review"
)

// ToolPermissions maps every repository tool to the permission it needs.
// status is not here: it touches no repository and is always allowed.
var ToolPermissions = map[string]Permission{
	ToolGetFileContents:        PermRead,
	ToolListIssues:             PermRead,
	ToolGetIssue:               PermRead,
	ToolListPullRequests:       PermRead,
	ToolGetPullRequest:         PermRead,
	ToolCreateDraftPullRequest: PermCreateDraft,
	ToolAddIssueComment:        PermComment,
	ToolPushBranch:             PermPushBranch,
	ToolCreatePendingReview:    PermPendingReview,
}

// AgentBranchPrefix is the only prefix push_branch pushes to.
const AgentBranchPrefix = "agent/"

// DefaultProtectedPaths are the files a push may not touch unless the
// user's configuration says otherwise: CI definitions, which run with the
// repository's secrets once pushed ("dir/**" is everything under dir).
var DefaultProtectedPaths = []string{
	".github/workflows/**", ".github/actions/**", ".gitlab-ci.yml", ".gitlab/**", ".circleci/**",
	".travis.yml", "Jenkinsfile", "azure-pipelines.yml", ".azure-pipelines/**", ".buildkite/**",
	".drone.yml", "bitbucket-pipelines.yml",
}

// Protected tells whether a repository path matches one of patterns: a
// path.Match pattern of the whole path, or "dir/**" for everything under
// dir. A path that names dir itself or a folder above it is protected too:
// in a pushed tree it can only be a file, a symlink or a submodule that
// takes the folder's place (.github/workflows as a symlink to a folder of
// the agent's choosing).
func Protected(patterns []string, name string) bool {
	for _, p := range patterns {
		if dir, ok := strings.CutSuffix(p, "/**"); ok {
			if strings.HasPrefix(name, dir+"/") || coversAncestor(strings.Split(dir, "/"), strings.Split(name, "/")) {
				return true
			}
		} else if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// coversAncestor tells whether name is the folder dir, or a folder above
// it, component by component (dir's may be patterns).
func coversAncestor(dir, name []string) bool {
	if len(name) > len(dir) {
		return false
	}
	for i, n := range name {
		if ok, _ := path.Match(dir[i], n); !ok {
			return false
		}
	}
	return true
}

// CheckProtectedPattern checks a protected-path pattern as configured.
func CheckProtectedPattern(p string) error {
	if _, err := path.Match(strings.TrimSuffix(p, "/**"), ""); err != nil || p == "" || strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q is not a path pattern relative to the repository (such as .github/workflows/** or Jenkinsfile)", p)
	}
	return nil
}

// Policy decides tool calls from a fixed set of scopes. It is safe for
// concurrent use (it never changes after New).
type Policy struct {
	scopes []Scope
}

// New returns the policy granting the union of scopes.
func New(scopes []Scope) *Policy {
	return &Policy{scopes: append([]Scope(nil), scopes...)}
}

// Scopes returns the scopes the policy grants.
func (p *Policy) Scopes() []Scope { return append([]Scope(nil), p.scopes...) }

// Decision is the policy's answer to one call.
type Decision struct {
	Allowed bool
	// Ask says the permission is granted only with a person's approval of
	// the call (ask:PERM): the call may go ahead once a person approves it.
	// Allowed is then false, so a caller that does not ask denies.
	Ask bool
	// Reason says why: for an allowed call the scope that grants it, for
	// an asked one the scope that asks, for a denied one what is missing
	// and how to grant it.
	Reason string
	// Permission is the permission the tool needs ("" for status and for
	// unknown tools).
	Permission Permission
}

// Decide checks one call of tool on repo ("OWNER/REPO") with its arguments
// (the tool's JSON arguments; only push_branch's "branch" is looked at).
// It denies unknown tools, malformed repository names, missing permissions
// and, for push_branch, any branch not named agent/... . A permission that
// a scope grants outright wins over one that another scope asks for; the
// rules on arguments (the branch) apply to asked calls too, so that nobody
// is asked about a call that would be refused anyway.
func (p *Policy) Decide(tool, repo string, args map[string]any) Decision {
	if tool == ToolStatus {
		return Decision{Allowed: true, Reason: "status is always allowed"}
	}
	need, ok := ToolPermissions[tool]
	if !ok {
		return Decision{Reason: fmt.Sprintf("denied: unknown tool %q", tool)}
	}
	owner, name, err := SplitRepo(repo)
	if err != nil {
		return Decision{Permission: need, Reason: fmt.Sprintf("denied: %s: %v", tool, err)}
	}
	var granting, asking *Scope
	for i := range p.scopes {
		if p.scopes[i].Allows(need, owner, name) {
			granting = &p.scopes[i]
			break
		}
		if asking == nil && p.scopes[i].Asks(need, owner, name) {
			asking = &p.scopes[i]
		}
	}
	if granting == nil && asking == nil {
		return Decision{Permission: need, Reason: p.denyText(tool, owner, name, need)}
	}
	if tool == ToolPushBranch {
		branch, _ := args["branch"].(string)
		if err := CheckAgentBranch(branch); err != nil {
			return Decision{Permission: need, Reason: fmt.Sprintf("denied: push_branch on %s/%s: %v", owner, name, err)}
		}
	}
	if granting == nil {
		return Decision{Ask: true, Permission: need, Reason: fmt.Sprintf("ask: %s on %s/%s needs a person's approval (%s%s of %s)",
			tool, owner, name, AskPrefix, need, asking)}
	}
	return Decision{Allowed: true, Permission: need, Reason: "allowed by " + granting.String()}
}

// Granted returns the permissions the policy grants on owner/repo, in
// canonical order.
func (p *Policy) Granted(owner, repo string) []Permission {
	var perms []Permission
	for _, perm := range Permissions {
		for _, s := range p.scopes {
			if s.Allows(perm, owner, repo) {
				perms = append(perms, perm)
				break
			}
		}
	}
	return perms
}

// Asked returns the permissions the policy grants on owner/repo only with
// a person's approval of each call (and not outright), in canonical order.
func (p *Policy) Asked(owner, repo string) []Permission {
	granted := p.Granted(owner, repo)
	var perms []Permission
	for _, perm := range Permissions {
		if slices.Contains(granted, perm) {
			continue
		}
		for _, s := range p.scopes {
			if s.Asks(perm, owner, repo) {
				perms = append(perms, perm)
				break
			}
		}
	}
	return perms
}

// denyText explains a missing permission and shows both ways to grant it,
// keeping what is granted (or asked for) already so that pasting the hint
// loses nothing.
func (p *Policy) denyText(tool, owner, repo string, need Permission) string {
	perms := append(p.Granted(owner, repo), need)
	sortPerms(perms)
	names := permNames(perms, p.Asked(owner, repo))
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	full := owner + "/" + repo
	return fmt.Sprintf("denied: %s on %s needs scope %s; grant it with `devaipod up ... --gator github:%s:%s` or [gator.github] repos = { %q = [%s] }",
		tool, full, need, full, strings.Join(names, ","), full, strings.Join(quoted, ", "))
}

// CheckAgentBranch accepts a branch name that starts with agent/ and is a
// valid git branch name (the rules of git check-ref-format). Such a branch
// is never a repository's default branch in practice; push_branch checks
// that too, against the API, before pushing.
func CheckAgentBranch(branch string) error {
	if branch == "" {
		return fmt.Errorf("missing branch; the gator pushes only to branches named %s...", AgentBranchPrefix)
	}
	if !strings.HasPrefix(branch, AgentBranchPrefix) || len(branch) == len(AgentBranchPrefix) {
		return fmt.Errorf("branch %q: the gator pushes only to branches named %sNAME, never to the default or any other branch", branch, AgentBranchPrefix)
	}
	if err := checkRefName(branch); err != nil {
		return fmt.Errorf("branch %q: %w", branch, err)
	}
	// A name a person reads in a pull request, a log, a terminal: nothing
	// that can hide or reorder what they see.
	if i := strings.IndexFunc(branch, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._/-", r))
	}); i >= 0 {
		return fmt.Errorf("branch %q: only letters, digits and . _ / - are allowed (%q is not)", branch, []rune(branch[i:])[0])
	}
	return nil
}

// checkRefName applies git's check-ref-format rules to a branch name.
func checkRefName(name string) error {
	switch {
	case len(name) > 200:
		return fmt.Errorf("longer than 200 bytes")
	case !utf8.ValidString(name):
		return fmt.Errorf("not valid UTF-8")
	case strings.Contains(name, ".."):
		return fmt.Errorf(`contains ".."`)
	case strings.Contains(name, "@{"):
		return fmt.Errorf(`contains "@{"`)
	case strings.Contains(name, "//"):
		return fmt.Errorf(`contains "//"`)
	case strings.HasSuffix(name, "/"), strings.HasSuffix(name, "."):
		return fmt.Errorf(`ends with "/" or "."`)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || unicode.IsSpace(r) || strings.ContainsRune(`~^:?*[\`, r) {
			return fmt.Errorf("character %q not allowed in a branch name", r)
		}
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".") || strings.HasSuffix(part, ".lock") {
			return fmt.Errorf(`component %q starts with "." or ends with ".lock"`, part)
		}
	}
	return nil
}
