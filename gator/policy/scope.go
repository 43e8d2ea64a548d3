package policy

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Permission is one kind of operation a scope grants on a repository.
type Permission string

// The permissions, in their canonical order.
const (
	// PermRead allows reading files, issues and pull requests.
	PermRead Permission = "read"
	// PermComment allows commenting on issues and pull requests.
	PermComment Permission = "comment"
	// PermCreateDraft allows opening pull requests, always as drafts.
	PermCreateDraft Permission = "create-draft"
	// PermPushBranch allows pushing the workspace's HEAD to a branch named
	// agent/..., never to the default branch or any other, never forced.
	PermPushBranch Permission = "push-branch"
	// PermPendingReview allows creating a pending (unsubmitted) review.
	PermPendingReview Permission = "pending-review"
)

// Permissions lists every permission in canonical order.
var Permissions = []Permission{PermRead, PermComment, PermCreateDraft, PermPushBranch, PermPendingReview}

func (p Permission) rank() int { return slices.Index(Permissions, p) }

// AskPrefix marks a permission granted only call by call, with a person's
// approval: "ask:push-branch". Every permission but read may be asked for.
const AskPrefix = "ask:"

// scopeForms is the syntax, quoted in every parse error.
const scopeForms = "github:OWNER/REPO[:PERMS], github:OWNER/*[:PERMS] or github:readonly-all"

// Scope grants permissions on one repository, on every repository of an
// owner (Repo "*"), or read on every repository (ReadOnlyAll).
type Scope struct {
	// ReadOnlyAll is github:readonly-all: read on every repository the
	// token can see. Owner, Repo and Perms are then empty.
	ReadOnlyAll bool
	Owner       string
	Repo        string // a repository name, or "*" for all of Owner's
	// Perms is sorted in canonical order, without duplicates.
	Perms []Permission
	// Ask are the permissions granted only with a person's approval of each
	// call (ask:PERM): sorted in canonical order, without duplicates, none
	// of them read and none of them in Perms.
	Ask []Permission
}

// String returns the scope in the syntax ParseScope reads, with the
// permissions in canonical order; ParseScope(s.String()) gives s back.
func (s Scope) String() string {
	if s.ReadOnlyAll {
		return "github:readonly-all"
	}
	return "github:" + s.Owner + "/" + s.Repo + ":" + strings.Join(permNames(s.Perms, s.Ask), ",")
}

// permNames names granted permissions, then asked ones with AskPrefix.
func permNames(perms, ask []Permission) []string {
	names := make([]string, 0, len(perms)+len(ask))
	for _, p := range perms {
		names = append(names, string(p))
	}
	for _, p := range ask {
		names = append(names, AskPrefix+string(p))
	}
	return names
}

// Allows reports whether s grants perm on the repository owner/repo. Names
// compare case-insensitively, as GitHub's do.
func (s Scope) Allows(perm Permission, owner, repo string) bool {
	if s.ReadOnlyAll {
		return perm == PermRead
	}
	return s.covers(owner, repo) && slices.Contains(s.Perms, perm)
}

// Asks reports whether s grants perm on owner/repo with a person's
// approval of each call (ask:PERM).
func (s Scope) Asks(perm Permission, owner, repo string) bool {
	return !s.ReadOnlyAll && s.covers(owner, repo) && slices.Contains(s.Ask, perm)
}

// covers reports whether s names the repository owner/repo.
func (s Scope) covers(owner, repo string) bool {
	return strings.EqualFold(s.Owner, owner) && (s.Repo == "*" || strings.EqualFold(s.Repo, repo))
}

// ParseScope parses a scope as given to devaipod up --gator and to
// devaipod-gator --scope:
//
//	github:OWNER/REPO             read on that repository
//	github:OWNER/REPO:PERMS       PERMS (comma-separated) on that repository
//	github:OWNER/*[:PERMS]        read, or PERMS, on every repository of OWNER
//	github:readonly-all           read on every repository
//
// PERMS are read, comment, create-draft, push-branch and pending-review;
// ask:PERM (any but read) grants PERM only with a person's approval of
// each call.
func ParseScope(s string) (Scope, error) {
	sc, err := parseScope(strings.TrimSpace(s))
	if err != nil {
		return Scope{}, fmt.Errorf("scope %q: %w", s, err)
	}
	return sc, nil
}

func parseScope(s string) (Scope, error) {
	forge, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Scope{}, fmt.Errorf("want %s", scopeForms)
	}
	if forge != "github" {
		return Scope{}, fmt.Errorf("unsupported forge %q (only github is supported); want %s", forge, scopeForms)
	}
	if rest == "readonly-all" {
		return Scope{ReadOnlyAll: true}, nil
	}
	target, permPart, hasPerms := strings.Cut(rest, ":")
	if target == "readonly-all" {
		return Scope{}, errors.New("readonly-all takes no permissions")
	}
	perms := []string{string(PermRead)}
	if hasPerms {
		perms = strings.Split(permPart, ",")
	}
	return repoScope(target, perms)
}

// repoScope builds the scope of target (OWNER/REPO or OWNER/*) with the
// named permissions.
func repoScope(target string, names []string) (Scope, error) {
	owner, repo, ok := strings.Cut(target, "/")
	if !ok {
		return Scope{}, fmt.Errorf("missing \"/\" between owner and repository; want %s", scopeForms)
	}
	if err := checkOwner(owner); err != nil {
		return Scope{}, err
	}
	if repo != "*" {
		if err := checkRepo(repo); err != nil {
			return Scope{}, err
		}
	}
	perms, ask, err := parsePerms(names)
	if err != nil {
		return Scope{}, err
	}
	return Scope{Owner: owner, Repo: repo, Perms: perms, Ask: ask}, nil
}

// parsePerms checks permission names and returns the granted and the
// asked ones (ask:PERM), each sorted and deduplicated.
func parsePerms(names []string) (perms, ask []Permission, err error) {
	for _, n := range names {
		n = strings.TrimSpace(n)
		name, asked := strings.CutPrefix(n, AskPrefix)
		p := Permission(strings.TrimSpace(name))
		switch {
		case n == "":
			return nil, nil, errors.New("empty permission (a stray comma?)")
		case p == "":
			return nil, nil, fmt.Errorf("%q names no permission: want %sPERM, such as ask:push-branch", n, AskPrefix)
		case p.rank() < 0:
			return nil, nil, fmt.Errorf("unknown permission %q: want %s, or ask:PERM for any but read", n, permList())
		case asked && p == PermRead:
			return nil, nil, errors.New("ask:read: read cannot be asked for, call by call (reads change nothing and come by the dozen); grant read or leave it out")
		}
		list := &perms
		if asked {
			list = &ask
		}
		if !slices.Contains(*list, p) {
			*list = append(*list, p)
		}
	}
	for _, p := range ask {
		if slices.Contains(perms, p) {
			return nil, nil, fmt.Errorf("both %s and %s%s: grant it (%s) or have each call asked for (%s%s), not both", p, AskPrefix, p, p, AskPrefix, p)
		}
	}
	if len(perms)+len(ask) == 0 {
		return nil, nil, errors.New("no permissions")
	}
	sortPerms(perms)
	sortPerms(ask)
	return perms, ask, nil
}

func sortPerms(perms []Permission) {
	sort.Slice(perms, func(i, j int) bool { return perms[i].rank() < perms[j].rank() })
}

func permList() string {
	names := make([]string, len(Permissions))
	for i, p := range Permissions {
		names[i] = string(p)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// ParseScopes parses several scopes, stopping at the first bad one.
func ParseScopes(specs []string) ([]Scope, error) {
	scopes := make([]Scope, 0, len(specs))
	for _, s := range specs {
		sc, err := ParseScope(s)
		if err != nil {
			return nil, err
		}
		scopes = append(scopes, sc)
	}
	return scopes, nil
}

// ScopesFromConfig turns the config form
//
//	[gator.github]
//	repos = { "octo/app" = ["read", "create-draft", "ask:push-branch"], "octo/*" = ["read"] }
//
// into scopes, sorted by repository so that the result does not depend on
// map order. A key may be OWNER/REPO or OWNER/*; an empty list is an error
// (it would grant nothing, which is surely not what was meant).
func ScopesFromConfig(repos map[string][]string) ([]Scope, error) {
	keys := make([]string, 0, len(repos))
	for k := range repos {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	scopes := make([]Scope, 0, len(keys))
	for _, k := range keys {
		if len(repos[k]) == 0 {
			return nil, fmt.Errorf("[gator.github] repos %q: empty permission list; want some of %s", k, permList())
		}
		sc, err := repoScope(k, repos[k])
		if err != nil {
			return nil, fmt.Errorf("[gator.github] repos %q: %w", k, err)
		}
		scopes = append(scopes, sc)
	}
	return scopes, nil
}

// DefaultScopes is what a pod gets for its own repository when nothing else
// is configured: read it and open draft pull requests on it.
func DefaultScopes(owner, repo string) []Scope {
	return []Scope{{Owner: owner, Repo: repo, Perms: []Permission{PermRead, PermCreateDraft}}}
}

// checkOwner accepts GitHub user and organisation names (letters, digits,
// hyphens; GitHub Enterprise also allows underscores). Being strict here is
// what keeps a name from smuggling a path ("octo/../orgs") into API URLs.
func checkOwner(owner string) error {
	switch {
	case owner == "":
		return errors.New("empty owner")
	case len(owner) > 100:
		return fmt.Errorf("owner %.20q... is longer than 100 characters", owner)
	case !isAlnum(owner[0]):
		return fmt.Errorf("owner %q must start with a letter or digit", owner)
	}
	for i := 0; i < len(owner); i++ {
		if c := owner[i]; !isAlnum(c) && c != '-' && c != '_' {
			return fmt.Errorf("owner %q: character %q not allowed (letters, digits, - and _ are)", owner, c)
		}
	}
	return nil
}

// checkRepo accepts GitHub repository names: letters, digits, '.', '-', '_'.
func checkRepo(repo string) error {
	switch {
	case repo == "":
		return errors.New("empty repository name")
	case repo == "." || repo == "..":
		return fmt.Errorf("repository name %q not allowed", repo)
	case len(repo) > 100:
		return fmt.Errorf("repository name %.20q... is longer than 100 characters", repo)
	case strings.HasSuffix(strings.ToLower(repo), ".git"):
		return fmt.Errorf("repository name %q: write it without .git", repo)
	}
	for i := 0; i < len(repo); i++ {
		if c := repo[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("repository name %q: character %q not allowed (letters, digits, ., - and _ are)", repo, c)
		}
	}
	return nil
}

// SplitRepo checks "OWNER/REPO" and returns its two parts.
func SplitRepo(fullName string) (owner, repo string, err error) {
	owner, repo, ok := strings.Cut(fullName, "/")
	if !ok {
		return "", "", fmt.Errorf("repository %q: want OWNER/REPO", fullName)
	}
	if err := checkOwner(owner); err != nil {
		return "", "", fmt.Errorf("repository %q: %w", fullName, err)
	}
	if err := checkRepo(repo); err != nil {
		return "", "", fmt.Errorf("repository %q: %w", fullName, err)
	}
	return owner, repo, nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
