package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultForgeURL is the web address that pull request URLs are recognised
// on unless the forge URL is configured (GitHub Enterprise, tests).
const DefaultForgeURL = "https://github.com"

// ErrNotPullRequest is returned by ParsePRURL for input that is not meant as
// a pull request URL at all (a plain git URL, a path); the caller treats it
// as an ordinary source.
var ErrNotPullRequest = errors.New("not a pull request URL")

// PullRequest names a pull request on a GitHub-like forge.
type PullRequest struct {
	// Forge is the forge's web base URL without a trailing slash, with the
	// credentials of the input URL if it had any (host side only).
	Forge  string
	Owner  string
	Repo   string // without .git
	Number int
}

// RepoURL is the base repository's git URL; the forge serves the pull
// request's head from it as refs/pull/N/head, for forks too.
func (p PullRequest) RepoURL() string { return p.Forge + "/" + p.Owner + "/" + p.Repo + ".git" }

// URL is the pull request's canonical web address.
func (p PullRequest) URL() string {
	return p.Forge + "/" + p.Owner + "/" + p.Repo + "/pull/" + strconv.Itoa(p.Number)
}

// LocalBranch is the branch the workspace checks the pull request out on.
func (p PullRequest) LocalBranch() string { return prBranch(p.Number) }

func prBranch(n int) string { return "pr-" + strconv.Itoa(n) }

// Owner and repository names as GitHub (and GitHub Enterprise, whose managed
// users have an _suffix) allows them, limited to what is safe in a path.
var (
	validOwner = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$`)
	validRepo  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	prNumber   = regexp.MustCompile(`^[0-9]{1,10}$`)
)

// maxPR keeps the number an int32, as GitHub's are.
const maxPR = 1<<31 - 1

// ValidateForgeURL checks a configured forge web base URL, such as
// https://github.com or https://ghe.example.test (a path prefix is allowed).
func ValidateForgeURL(raw string) error {
	_, err := parseForgeURL(raw)
	return err
}

func parseForgeURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil {
		return nil, fmt.Errorf("forge URL: %w", redactErr(err, raw))
	}
	shown := RedactURL(raw)
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, fmt.Errorf("forge URL %q: use an http or https URL such as %s", shown, DefaultForgeURL)
	case u.Host == "" || u.Opaque != "":
		return nil, fmt.Errorf("forge URL %q: no host", shown)
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return nil, fmt.Errorf("forge URL %q: a query or fragment does not belong in it", shown)
	}
	return u, nil
}

// ParsePRURL reads a pull request URL on the forge whose web base is forge
// (DefaultForgeURL when ""): FORGE/OWNER/REPO/pull/N, with anything after
// the number (/files, /commits, a query, a fragment), REPO.git, N.diff or
// N.patch accepted. Input that is no pull request URL gives an error
// wrapping ErrNotPullRequest; a pull request URL that is malformed or on
// another host gives an error saying what to fix.
func ParsePRURL(raw, forge string) (PullRequest, error) {
	if forge == "" {
		forge = DefaultForgeURL
	}
	fu, err := parseForgeURL(forge)
	if err != nil {
		return PullRequest{}, err
	}
	notPR := fmt.Errorf("%q: %w", RedactURL(raw), ErrNotPullRequest)
	if !strings.Contains(raw, "://") {
		return PullRequest{}, notPR
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Opaque != "" || u.Host == "" {
		return PullRequest{}, notPR // resolveURL reports what is wrong
	}
	shown := RedactURL(raw)
	segs := pathSegments(u.Path)
	if !sameHost(u, fu) {
		for i := 2; i+1 < len(segs); i++ {
			if segs[i] == "pull" && prNumber.MatchString(trimPRSuffix(segs[i+1])) {
				return PullRequest{}, fmt.Errorf("%s looks like a pull request on %s, but pull request URLs are recognised on %s only: set the forge URL (--forge-url) to %s://%s",
					shown, u.Host, RedactURL(fu.String()), u.Scheme, u.Host)
			}
		}
		return PullRequest{}, notPR
	}
	prefix := pathSegments(fu.Path)
	if len(segs) < len(prefix) || strings.Join(segs[:len(prefix)], "/") != strings.Join(prefix, "/") {
		return PullRequest{}, notPR
	}
	segs = segs[len(prefix):]
	if len(segs) < 3 {
		return PullRequest{}, notPR
	}
	switch {
	case segs[2] == "pull":
	case segs[2] == "pulls":
		return PullRequest{}, fmt.Errorf("%s is a list of pull requests: pass one pull request, %s/%s/%s/pull/NUMBER", shown, RedactURL(fu.String()), segs[0], segs[1])
	case segs[2] == "-" && len(segs) > 3 && segs[3] == "merge_requests":
		return PullRequest{}, fmt.Errorf("%s: GitLab merge requests are not supported; pull requests are, on a GitHub-like forge", shown)
	default:
		return PullRequest{}, notPR
	}
	if len(segs) < 4 {
		return PullRequest{}, fmt.Errorf("%s: no pull request number after /pull/", shown)
	}
	owner, repo, num := segs[0], strings.TrimSuffix(segs[1], ".git"), trimPRSuffix(segs[3])
	if !prNumber.MatchString(num) {
		return PullRequest{}, fmt.Errorf("%s: pull request number %q is not a number", shown, segs[3])
	}
	n, _ := strconv.Atoi(num)
	if n < 1 || n > maxPR {
		return PullRequest{}, fmt.Errorf("%s: pull request number %s is out of range", shown, num)
	}
	if !validOwner.MatchString(owner) || strings.Contains(owner, "..") {
		return PullRequest{}, fmt.Errorf("%s: %q is not a valid owner name", shown, owner)
	}
	if !validRepo.MatchString(repo) || repo == "." || repo == ".." {
		return PullRequest{}, fmt.Errorf("%s: %q is not a valid repository name", shown, segs[1])
	}
	base := url.URL{Scheme: fu.Scheme, User: fu.User, Host: fu.Host, Path: strings.TrimRight(fu.Path, "/")}
	if base.User == nil {
		base.User = u.User
	}
	return PullRequest{Forge: base.String(), Owner: owner, Repo: repo, Number: n}, nil
}

// pathSegments splits a URL path, dropping empty segments ("//", a
// trailing slash).
func pathSegments(p string) []string {
	var segs []string
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			segs = append(segs, s)
		}
	}
	return segs
}

// trimPRSuffix accepts GitHub's /pull/N.diff and /pull/N.patch, and .git.
func trimPRSuffix(s string) string {
	for _, suffix := range []string{".diff", ".patch", ".git"} {
		if t, ok := strings.CutSuffix(s, suffix); ok {
			return t
		}
	}
	return s
}

// sameHost compares host names case-insensitively, and ports when the input
// names one (http and https addresses of the same forge both match).
func sameHost(in, forge *url.URL) bool {
	if !strings.EqualFold(in.Hostname(), forge.Hostname()) {
		return false
	}
	if in.Port() == "" {
		return true
	}
	return in.Port() == effectivePort(forge)
}

func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "http" {
		return "80"
	}
	return "443"
}

// resolvePR makes the Source of a pull request. Without an API URL nothing
// is fetched: the head commit is known after Checkout.
func resolvePR(ctx context.Context, raw string, pr PullRequest, o Options) (*Source, error) {
	if o.Ref != "" {
		return nil, errors.New("--ref does not apply to a pull request: devaipod checks out the pull request's head")
	}
	project := strings.TrimLeft(pr.Repo, ".-")
	if !validProject.MatchString(project) {
		project = "project"
	}
	base := RedactURL(pr.RepoURL())
	src := &Source{Input: raw, Display: RedactURL(pr.URL()), Project: project, Remote: base,
		Upstream: base, Branch: pr.LocalBranch(), PR: pr.Number, PRURL: RedactURL(pr.URL()), fetchURL: pr.RepoURL()}
	if o.APIURL == "" {
		return src, nil
	}
	info, err := lookupPR(ctx, o, pr)
	if err != nil {
		src.Warnings = append(src.Warnings, fmt.Sprintf("pull request #%d: %v; origin is the base repository and the branch has no push target", pr.Number, err))
		return src, nil
	}
	src.PRTitle = info.Title
	switch head := info.Head.Repo; {
	case head == nil:
		src.Warnings = append(src.Warnings, fmt.Sprintf("pull request #%d: its head repository was deleted; origin is the base repository", pr.Number))
		return src, nil
	case !validFullName(head.FullName):
		src.Warnings = append(src.Warnings, fmt.Sprintf("pull request #%d: the API names head repository %q, which is not OWNER/REPO; origin is the base repository", pr.Number, head.FullName))
		return src, nil
	default:
		// The fork's URL is built on the forge's base, not taken from the
		// API's clone_url: the workspace's origin stays on the forge.
		src.Remote = RedactURL(pr.Forge + "/" + head.FullName + ".git")
	}
	if _, err := git(ctx, "", "check-ref-format", "refs/heads/"+info.Head.Ref); err != nil || strings.HasPrefix(info.Head.Ref, "-") {
		src.Warnings = append(src.Warnings, fmt.Sprintf("pull request #%d: the API names head branch %q, which is not a valid branch name; the branch has no push target", pr.Number, info.Head.Ref))
		return src, nil
	}
	src.HeadBranch = info.Head.Ref
	return src, nil
}

func validFullName(s string) bool {
	owner, repo, ok := strings.Cut(s, "/")
	return ok && validOwner.MatchString(owner) && !strings.Contains(owner, "..") &&
		validRepo.MatchString(repo) && repo != "." && repo != ".."
}

// prInfo is the part of GitHub's pull request object devaipod uses.
type prInfo struct {
	Title string `json:"title"`
	Head  struct {
		Ref  string `json:"ref"`
		SHA  string `json:"sha"`
		Repo *struct {
			FullName string `json:"full_name"`
		} `json:"repo"`
	} `json:"head"`
}

// prAPITimeout bounds the optional API lookup: an unreachable API must not
// hold up `up` for long.
const prAPITimeout = 10 * time.Second

// lookupPR asks the forge's REST API (GET /repos/OWNER/REPO/pulls/N) for the
// pull request's head repository and branch.
func lookupPR(ctx context.Context, o Options, pr PullRequest) (prInfo, error) {
	var info prInfo
	api, err := url.Parse(strings.TrimRight(o.APIURL, "/"))
	if err != nil || (api.Scheme != "https" && api.Scheme != "http") || api.Host == "" {
		return info, fmt.Errorf("forge API URL %q is not an http or https URL", RedactURL(o.APIURL))
	}
	ctx, cancel := context.WithTimeout(ctx, prAPITimeout)
	defer cancel()
	endpoint := api.JoinPath("repos", pr.Owner, pr.Repo, "pulls", strconv.Itoa(pr.Number))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint.String(), nil)
	if err != nil {
		return info, err
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("User-Agent", "devaipod")
	if o.APIToken != "" {
		req.Header.Set("Authorization", "Bearer "+o.APIToken)
	}
	client := o.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return info, fmt.Errorf("forge API: %w", redactErr(err, endpoint.String()))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return info, fmt.Errorf("forge API answered %s for %s", resp.Status, RedactURL(endpoint.String()))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&info); err != nil {
		return info, fmt.Errorf("forge API: read the pull request: %w", err)
	}
	return info, nil
}

// checkoutPR clones the base repository as remote upstream, with the pull
// request's head (refs/pull/N/head, which the forge serves for forks too)
// fetched alongside, and checks the head out on branch pr-N.
func (s *Source) checkoutPR(ctx context.Context, dir string) error {
	n := strconv.Itoa(s.PR)
	pullRef := "refs/pull/" + n + "/head"
	tracking := "refs/remotes/upstream/pull/" + n
	branch := s.Branch
	if branch == "" {
		branch = prBranch(s.PR)
	}
	fetchURL := s.fetchURL
	if fetchURL == "" {
		fetchURL = s.Upstream
	}
	// The configured refspec stays: a later `git fetch upstream` (or `git
	// pull` on the branch) brings the pull request's new commits.
	args := []string{"clone", "--quiet", "--no-checkout", "--template=", "--origin", "upstream",
		"--config", "remote.upstream.fetch=+" + pullRef + ":" + tracking, "--", fetchURL, dir}
	if _, err := git(ctx, "", args...); err != nil {
		if strings.Contains(err.Error(), "couldn't find remote ref "+pullRef) {
			return fmt.Errorf("pull request #%d not found: %s has no %s", s.PR, s.Upstream, pullRef)
		}
		return fmt.Errorf("clone %s: %w", s.Upstream, err)
	}
	commit, err := git(ctx, dir, "rev-parse", "--verify", "--quiet", tracking+"^{commit}")
	if err != nil {
		return fmt.Errorf("pull request #%d: %s did not bring %s", s.PR, s.Upstream, pullRef)
	}
	defaultRef, _ := git(ctx, dir, "symbolic-ref", "--quiet", "HEAD")
	// Where the head's history meets the base's default branch: the
	// base repository's, for the gator to ask the forge about (the head's
	// own commits are anyone's, and are checked).
	var remoteCommits []string
	if defaultRef != "" {
		if base, err := git(ctx, dir, "merge-base", commit, defaultRef); err == nil {
			remoteCommits = []string{base}
		}
	}
	steps := [][]string{
		{"update-ref", "refs/heads/" + branch, commit},
		{"symbolic-ref", "HEAD", "refs/heads/" + branch},
		// git pull on the branch follows the pull request; git status
		// compares with upstream/pull/N.
		{"config", "branch." + branch + ".remote", "upstream"},
		{"config", "branch." + branch + ".merge", pullRef},
	}
	// Only the pull request's branch is local; the base branches stay
	// reachable as upstream/*.
	if d, ok := strings.CutPrefix(defaultRef, "refs/heads/"); ok && d != branch {
		steps = append(steps, []string{"branch", "--quiet", "-D", d})
	}
	steps = append(steps, []string{"read-tree", "HEAD"}, []string{"remote", "set-url", "upstream", s.Upstream})
	if s.Remote != "" {
		steps = append(steps, []string{"remote", "add", "origin", s.Remote})
		if s.HeadBranch != "" {
			// A plain `git push` on the branch updates the pull request.
			steps = append(steps,
				[]string{"config", "branch." + branch + ".pushRemote", "origin"},
				[]string{"config", "remote.origin.push", "refs/heads/" + branch + ":refs/heads/" + s.HeadBranch})
		}
	}
	for _, step := range steps {
		if _, err := git(ctx, dir, step...); err != nil {
			return fmt.Errorf("check out pull request #%d: %w", s.PR, err)
		}
	}
	s.Commit, s.RemoteCommits = commit, remoteCommits
	return nil
}
