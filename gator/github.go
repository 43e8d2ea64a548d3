package gator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/devaipod/devaipod/gator/policy"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-github/v74/github"
)

// DefaultAPIURL is github.com's REST API.
const DefaultAPIURL = "https://api.github.com/"

// Limits on what a tool hands back, so that one call cannot flood the
// agent's context (or the gator's memory).
const (
	maxFileBytes    = 512 << 10 // file content returned by get_file_contents
	maxDiffBytes    = 512 << 10 // diff returned by get_pull_request
	maxComments     = 300       // comments returned by get_issue and get_pull_request
	defaultPerPage  = 30
	maxPerPage      = 100
	apiTimeout      = 60 * time.Second
	userAgentPrefix = "devaipod-gator"
)

// parseAPIURL checks an API base URL and gives it the trailing slash
// go-github requires.
func parseAPIURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("API URL %q: %w", s, err)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("API URL %q: want https://HOST/[PATH/]", s)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("API URL %q: no user, query or fragment, please", s)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u, nil
}

// gitURLFor derives the base URL of git pushes from the API URL:
// api.github.com pushes to github.com, and GitHub Enterprise's
// https://HOST/api/v3/ to https://HOST/. Anything else needs --git-url.
func gitURLFor(api *url.URL) (*url.URL, error) {
	switch {
	case strings.EqualFold(api.Host, "api.github.com"):
		return &url.URL{Scheme: "https", Host: "github.com", Path: "/"}, nil
	case strings.HasSuffix(api.Path, "/api/v3/"):
		return &url.URL{Scheme: api.Scheme, Host: api.Host, Path: strings.TrimSuffix(api.Path, "api/v3/")}, nil
	}
	return nil, fmt.Errorf("cannot derive the git URL from the API URL %s (it is neither api.github.com nor https://HOST/api/v3/); give the git URL (--git-url)", api)
}

// parseGitURL checks a git base URL.
func parseGitURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("git URL %q: %w", s, err)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("git URL %q: want https://HOST/[PATH/] without credentials", s)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u, nil
}

// authTransport adds the token to requests for the API's own scheme and
// host, and to nothing else: a redirect to another host (or anything else
// that makes the client talk elsewhere) does not carry it. go-github's
// WithAuthToken sets it on every request, which is why it is not used.
type authTransport struct {
	base   http.RoundTripper
	scheme string
	host   string
	token  string
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == t.scheme && strings.EqualFold(req.URL.Host, t.host) {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	return t.base.RoundTrip(req)
}

func newGitHubClient(api *url.URL, token string, base http.RoundTripper, version string) *github.Client {
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	hc := &http.Client{
		Transport:     &authTransport{base: base, scheme: api.Scheme, host: api.Host, token: token},
		Timeout:       apiTimeout,
		CheckRedirect: refuseRedirect,
	}
	c := github.NewClient(hc)
	c.BaseURL = api
	c.UploadURL = api // no tool uploads; set so nothing defaults to github.com
	c.UserAgent = userAgentPrefix + "/" + version
	return c
}

// refuseRedirect is the redirect policy of the gator's HTTP clients (the
// API's and git's): none is followed. GitHub redirects a renamed or
// transferred repository's old name to its new owner and name, which the
// scopes, the audit and a person's approval never named.
func refuseRedirect(req *http.Request, _ []*http.Request) error {
	return fmt.Errorf("refused: the server redirected the call to %s%s (a renamed or transferred repository?); call the repository by its current name",
		req.URL.Host, req.URL.EscapedPath())
}

// ghError turns go-github's errors into one line the agent can act on.
func ghError(what string, err error) error {
	var er *github.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		msg := er.Message
		for _, e := range er.Errors {
			if e.Message != "" {
				msg += "; " + e.Message
			} else if e.Code != "" {
				msg += fmt.Sprintf("; %s %s", e.Field, e.Code)
			}
		}
		return fmt.Errorf("%s: GitHub answered %d: %s", what, er.Response.StatusCode, msg)
	}
	var rl *github.RateLimitError
	if errors.As(err, &rl) {
		return fmt.Errorf("%s: GitHub rate limit reached, resets at %s", what, rl.Rate.Reset.Format(time.RFC3339))
	}
	return fmt.Errorf("%s: %w", what, err)
}

func timeString(t *github.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func listOptions(page, perPage int) (github.ListOptions, error) {
	if page < 0 || perPage < 0 {
		return github.ListOptions{}, errors.New("page and per_page must not be negative")
	}
	if perPage == 0 {
		perPage = defaultPerPage
	}
	return github.ListOptions{Page: page, PerPage: min(perPage, maxPerPage)}, nil
}

func checkState(state string) (string, error) {
	switch state {
	case "":
		return "open", nil
	case "open", "closed", "all":
		return state, nil
	}
	return "", fmt.Errorf("state %q: want open, closed or all", state)
}

func checkNumber(n int) error {
	if n <= 0 {
		return fmt.Errorf("number %d: want the (positive) issue or pull request number", n)
	}
	return nil
}

func (s *Server) getFileContents(ctx context.Context, in getFileArgs) (any, string, error) {
	p := strings.Trim(in.Path, "/")
	if strings.Contains("/"+p+"/", "/../") || strings.Contains("/"+p+"/", "/./") {
		return nil, "", fmt.Errorf("path %q: no . or .. components, please", in.Path)
	}
	file, dir, _, err := s.gh.Repositories.GetContents(ctx, in.Owner, in.Repo, p, &github.RepositoryContentGetOptions{Ref: in.Ref})
	if err != nil {
		return nil, "", ghError(fmt.Sprintf("read %q", p), err)
	}
	if dir != nil || file == nil {
		res := fileResult{Type: "dir", Path: p, Ref: in.Ref, Entries: []dirEntry{}}
		for _, e := range dir {
			res.Entries = append(res.Entries, dirEntry{Name: e.GetName(), Path: e.GetPath(), Type: e.GetType(), Size: e.GetSize()})
		}
		return res, "", nil
	}
	res := fileResult{Type: file.GetType(), Path: file.GetPath(), Ref: in.Ref, SHA: file.GetSHA(), Size: file.GetSize(), Target: file.GetTarget()}
	if res.Type != "file" {
		return res, "", nil
	}
	if file.GetEncoding() == "none" {
		return nil, "", fmt.Errorf("read %q: the file is %d bytes, too large for GitHub's contents API", p, file.GetSize())
	}
	content, err := file.GetContent()
	if err != nil {
		return nil, "", fmt.Errorf("read %q: %w", p, err)
	}
	switch {
	case !utf8.ValidString(content) || strings.ContainsRune(content, 0):
		res.Binary = true
	case len(content) > maxFileBytes:
		res.Content, res.Truncated = clip(content, maxFileBytes), true
	default:
		res.Content = content
	}
	return res, "", nil
}

func issueFrom(i *github.Issue) issueResult {
	r := issueResult{
		Number: i.GetNumber(), Title: i.GetTitle(), State: i.GetState(), User: i.GetUser().GetLogin(),
		Comments: i.GetComments(), CreatedAt: timeString(i.CreatedAt), UpdatedAt: timeString(i.UpdatedAt),
		URL: i.GetHTMLURL(),
	}
	for _, l := range i.Labels {
		r.Labels = append(r.Labels, l.GetName())
	}
	return r
}

func (s *Server) listIssues(ctx context.Context, in listIssuesArgs) (any, string, error) {
	state, err := checkState(in.State)
	if err != nil {
		return nil, "", err
	}
	lo, err := listOptions(in.Page, in.PerPage)
	if err != nil {
		return nil, "", err
	}
	issues, _, err := s.gh.Issues.ListByRepo(ctx, in.Owner, in.Repo, &github.IssueListByRepoOptions{State: state, Labels: in.Labels, ListOptions: lo})
	if err != nil {
		return nil, "", ghError("list issues", err)
	}
	out := []issueResult{}
	for _, i := range issues {
		if i.IsPullRequest() {
			continue // the issues API lists pull requests too; list_pull_requests has them
		}
		out = append(out, issueFrom(i))
	}
	return out, "", nil
}

// thread reads an issue's or pull request's conversation, oldest first.
func (s *Server) thread(ctx context.Context, owner, repo string, number int) ([]commentResult, error) {
	var out []commentResult
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: maxPerPage}}
	for len(out) < maxComments {
		comments, resp, err := s.gh.Issues.ListComments(ctx, owner, repo, number, opts)
		if err != nil {
			return nil, ghError("read the comments", err)
		}
		for _, c := range comments {
			out = append(out, commentResult{ID: c.GetID(), User: c.GetUser().GetLogin(), CreatedAt: timeString(c.CreatedAt), Body: c.GetBody(), URL: c.GetHTMLURL()})
		}
		if resp == nil || resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	if len(out) > maxComments {
		out = out[:maxComments]
	}
	return out, nil
}

func (s *Server) getIssue(ctx context.Context, in numberArgs) (any, string, error) {
	if err := checkNumber(in.Number); err != nil {
		return nil, "", err
	}
	i, _, err := s.gh.Issues.Get(ctx, in.Owner, in.Repo, in.Number)
	if err != nil {
		return nil, "", ghError(fmt.Sprintf("read issue %d", in.Number), err)
	}
	res := issueFrom(i)
	res.Body = i.GetBody()
	if res.Thread, err = s.thread(ctx, in.Owner, in.Repo, in.Number); err != nil {
		return nil, "", err
	}
	return res, "", nil
}

func pullFrom(p *github.PullRequest) pullResult {
	return pullResult{
		Number: p.GetNumber(), Title: p.GetTitle(), State: p.GetState(), Draft: p.GetDraft(), Merged: p.GetMerged(),
		User: p.GetUser().GetLogin(), Head: p.GetHead().GetLabel(), HeadSHA: p.GetHead().GetSHA(),
		Base: p.GetBase().GetRef(), URL: p.GetHTMLURL(),
		CreatedAt: timeString(p.CreatedAt), UpdatedAt: timeString(p.UpdatedAt),
	}
}

func (s *Server) listPullRequests(ctx context.Context, in listArgs) (any, string, error) {
	state, err := checkState(in.State)
	if err != nil {
		return nil, "", err
	}
	lo, err := listOptions(in.Page, in.PerPage)
	if err != nil {
		return nil, "", err
	}
	pulls, _, err := s.gh.PullRequests.List(ctx, in.Owner, in.Repo, &github.PullRequestListOptions{State: state, ListOptions: lo})
	if err != nil {
		return nil, "", ghError("list pull requests", err)
	}
	out := []pullResult{}
	for _, p := range pulls {
		out = append(out, pullFrom(p))
	}
	return out, "", nil
}

func (s *Server) getPullRequest(ctx context.Context, in numberArgs) (any, string, error) {
	if err := checkNumber(in.Number); err != nil {
		return nil, "", err
	}
	p, _, err := s.gh.PullRequests.Get(ctx, in.Owner, in.Repo, in.Number)
	if err != nil {
		return nil, "", ghError(fmt.Sprintf("read pull request %d", in.Number), err)
	}
	res := pullFrom(p)
	res.Body, res.Additions, res.Deletions, res.ChangedFiles = p.GetBody(), p.GetAdditions(), p.GetDeletions(), p.GetChangedFiles()
	diff, _, err := s.gh.PullRequests.GetRaw(ctx, in.Owner, in.Repo, in.Number, github.RawOptions{Type: github.Diff})
	if err != nil {
		return nil, "", ghError(fmt.Sprintf("read the diff of pull request %d", in.Number), err)
	}
	res.DiffBytes = len(diff)
	res.Diff = diff
	if len(diff) > maxDiffBytes {
		res.Diff, res.DiffTruncated = clip(diff, maxDiffBytes), true
	}
	if res.Thread, err = s.thread(ctx, in.Owner, in.Repo, in.Number); err != nil {
		return nil, "", err
	}
	return res, "", nil
}

// defaultBranch asks GitHub for the repository's default branch.
func (s *Server) defaultBranch(ctx context.Context, owner, repo string) (string, error) {
	r, _, err := s.gh.Repositories.Get(ctx, owner, repo)
	if err != nil {
		return "", ghError("read the repository", err)
	}
	if r.GetDefaultBranch() == "" {
		return "", errors.New("read the repository: GitHub named no default branch")
	}
	return r.GetDefaultBranch(), nil
}

func (s *Server) createDraftPullRequest(ctx context.Context, in createDraftArgs) (any, string, error) {
	if strings.TrimSpace(in.Title) == "" {
		return nil, "", errors.New("missing title")
	}
	if in.Head == "" {
		return nil, "", errors.New("missing head: the branch with the changes (push it first with push_branch)")
	}
	// The head is a branch the gator pushes, in this repository (not
	// OWNER:BRANCH of a fork, which the scope does not cover); the base
	// is the default branch.
	if err := policy.CheckAgentBranch(in.Head); err != nil {
		return nil, "", &deniedError{reason: fmt.Sprintf("refused: the head must be an %s branch of %s/%s pushed with push_branch: %v",
			policy.AgentBranchPrefix, in.Owner, in.Repo, err)}
	}
	base, err := s.defaultBranch(ctx, in.Owner, in.Repo)
	if err != nil {
		return nil, "", err
	}
	if in.Base != "" && in.Base != base {
		return nil, "", &deniedError{reason: fmt.Sprintf("refused: draft pull requests go to the default branch %s, not %q", base, in.Base)}
	}
	if _, err := s.confirm(ctx, askRequest{
		What: fmt.Sprintf("create_draft_pull_request %s/%s %s", in.Owner, in.Repo, in.Head),
		Details: map[string]string{"title": in.Title, "head": in.Head, "base": base,
			"body": in.Body},
	}); err != nil {
		return nil, "", err
	}
	// Draft is not the agent's to choose: create-draft grants drafts only,
	// and a human marks one ready for review.
	pr, _, err := s.gh.PullRequests.Create(ctx, in.Owner, in.Repo, &github.NewPullRequest{
		Title: github.Ptr(in.Title), Body: github.Ptr(in.Body), Head: github.Ptr(in.Head), Base: github.Ptr(base),
		Draft: github.Ptr(true),
	})
	if err != nil {
		return nil, "", ghError("create the draft pull request", err)
	}
	return createdResult{Number: pr.GetNumber(), URL: pr.GetHTMLURL(), Draft: pr.GetDraft()}, pr.GetHTMLURL(), nil
}

func (s *Server) addIssueComment(ctx context.Context, in commentArgs) (any, string, error) {
	if err := checkNumber(in.Number); err != nil {
		return nil, "", err
	}
	if strings.TrimSpace(in.Body) == "" {
		return nil, "", errors.New("missing body")
	}
	if _, err := s.confirm(ctx, askRequest{
		What:    fmt.Sprintf("add_issue_comment %s/%s #%d", in.Owner, in.Repo, in.Number),
		Details: map[string]string{"number": strconv.Itoa(in.Number), "body": in.Body},
	}); err != nil {
		return nil, "", err
	}
	c, _, err := s.gh.Issues.CreateComment(ctx, in.Owner, in.Repo, in.Number, &github.IssueComment{Body: github.Ptr(in.Body)})
	if err != nil {
		return nil, "", ghError(fmt.Sprintf("comment on %d", in.Number), err)
	}
	return createdResult{ID: c.GetID(), URL: c.GetHTMLURL()}, c.GetHTMLURL(), nil
}

func (s *Server) createPendingReview(ctx context.Context, in reviewArgs) (any, string, error) {
	if err := checkNumber(in.Number); err != nil {
		return nil, "", err
	}
	if strings.TrimSpace(in.Body) == "" && len(in.Comments) == 0 {
		return nil, "", errors.New("an empty review: give a body, comments or both")
	}
	// No Event: GitHub leaves a review without one PENDING, visible only to
	// the token's user until a human submits it.
	req := &github.PullRequestReviewRequest{}
	if in.Body != "" {
		req.Body = github.Ptr(in.Body)
	}
	if in.CommitID != "" {
		req.CommitID = github.Ptr(in.CommitID)
	}
	for i, c := range in.Comments {
		switch {
		case c.Path == "" || strings.TrimSpace(c.Body) == "":
			return nil, "", fmt.Errorf("comment %d: path and body are required", i+1)
		case c.Line <= 0:
			return nil, "", fmt.Errorf("comment %d: line %d: want a positive line of the diff", i+1, c.Line)
		case c.StartLine < 0 || c.StartLine > c.Line:
			return nil, "", fmt.Errorf("comment %d: start_line %d must be between 1 and line %d", i+1, c.StartLine, c.Line)
		}
		side := strings.ToUpper(c.Side)
		if side == "" {
			side = "RIGHT"
		}
		if side != "RIGHT" && side != "LEFT" {
			return nil, "", fmt.Errorf("comment %d: side %q: want RIGHT or LEFT", i+1, c.Side)
		}
		dc := &github.DraftReviewComment{Path: github.Ptr(c.Path), Body: github.Ptr(c.Body), Line: github.Ptr(c.Line), Side: github.Ptr(side)}
		if c.StartLine > 0 && c.StartLine < c.Line {
			dc.StartLine, dc.StartSide = github.Ptr(c.StartLine), github.Ptr(side)
		}
		req.Comments = append(req.Comments, dc)
	}
	// The person reads the review as it would be: its body, and each
	// comment under the place it goes.
	var comments strings.Builder
	for i, c := range in.Comments {
		place := strconv.Itoa(c.Line)
		if c.StartLine > 0 && c.StartLine < c.Line {
			place = strconv.Itoa(c.StartLine) + "-" + place
		}
		fmt.Fprintf(&comments, "%d. %s, line %s (%s):\n%s\n", i+1, clip(printable(c.Path), maxAskFileName), place, cmp.Or(strings.ToUpper(c.Side), "RIGHT"), c.Body)
	}
	details := map[string]string{"number": strconv.Itoa(in.Number), "body": in.Body,
		"comments": strconv.Itoa(len(in.Comments))}
	if len(in.Comments) > 0 {
		details["comments"] = comments.String()
	}
	if in.CommitID != "" {
		details["commit_id"] = clip(printable(in.CommitID), maxArgSummary)
	}
	if _, err := s.confirm(ctx, askRequest{
		What:    fmt.Sprintf("create_pending_review %s/%s #%d", in.Owner, in.Repo, in.Number),
		Details: details,
	}); err != nil {
		return nil, "", err
	}
	r, _, err := s.gh.PullRequests.CreateReview(ctx, in.Owner, in.Repo, in.Number, req)
	if err != nil {
		return nil, "", ghError(fmt.Sprintf("create a pending review on %d", in.Number), err)
	}
	return createdResult{ID: r.GetID(), URL: r.GetHTMLURL(), State: r.GetState()}, r.GetHTMLURL(), nil
}

func (s *Server) pushBranch(ctx context.Context, in pushArgs) (any, string, error) {
	if s.pusher == nil {
		return nil, "", errors.New("push_branch is off: the gator was started without a workspace")
	}
	def, err := s.defaultBranch(ctx, in.Owner, in.Repo)
	if err != nil {
		return nil, "", err
	}
	if strings.EqualFold(def, in.Branch) {
		return nil, "", &deniedError{reason: fmt.Sprintf("denied: push_branch on %s/%s: %q is the default branch; the gator never pushes to it", in.Owner, in.Repo, in.Branch)}
	}
	// Asked only when the push has something to send.
	known := func() []plumbing.Hash { return s.knownOnDefault(ctx, in.Owner, in.Repo, def) }
	pl, err := s.planPush(ctx, in.Owner, in.Repo, in.Branch, plumbing.ZeroHash, known)
	if err != nil {
		return nil, "", err
	}
	defer func() { pl.close() }()
	if pl.res.Action != "up-to-date" {
		// The commit is fixed now: a person approves the push of this one,
		// whatever HEAD becomes while they decide.
		asked, err := s.confirm(ctx, pl.ask())
		if err != nil {
			return nil, "", err
		}
		if asked {
			// The remote may have moved while a person decided: check again,
			// for the same commit, and push nothing the person did not see.
			again, err := s.planPush(ctx, in.Owner, in.Repo, in.Branch, pl.head.Hash, known)
			if err != nil {
				return nil, "", err
			}
			if extra := again.news.notIn(pl.news); extra != "" {
				again.close()
				return nil, "", &deniedError{reason: fmt.Sprintf(
					"refused: %s changed on the remote while a person decided, and the push would now also carry commit %s, which they were not shown; call again to ask again",
					pl.res.Repo, extra)}
			}
			pl.close()
			pl = again
		}
	}
	pctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	res, err := pl.push(pctx)
	if err != nil {
		return nil, "", err
	}
	return res, fmt.Sprintf("%s %s at %s", res.Action, res.Branch, res.Commit), nil
}

// planPush plans a push (pusher.plan) within pushTimeout.
func (s *Server) planPush(ctx context.Context, owner, repo, branch string, at plumbing.Hash, known func() []plumbing.Hash) (*pushPlan, error) {
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	return s.pusher.plan(ctx, owner, repo, branch, at, known)
}

// knownOnDefault returns those of the commits up named for owner/repo
// (Options.KnownCommits) that GitHub says are in the history of its
// default branch def. The host's word is checked, not taken: its
// remote-tracking refs may hold a pull request's head (a fetch refspec of
// refs/pull/*), which is on the forge, in no branch, and anyone's making.
// A commit GitHub does not confirm is left out: the push's commits are
// then checked back to the branches' tips, as without it. A confirmed one
// is not asked about again (the default branch does not lose history but
// by a force-push, which would only make the push fail as incomplete).
func (s *Server) knownOnDefault(ctx context.Context, owner, repo, def string) []plumbing.Hash {
	var known []plumbing.Hash
	name := strings.ToLower(owner + "/" + repo)
	for _, h := range s.pusher.known[name] {
		if s.pusher.isConfirmed(name, h) {
			known = append(known, h)
			continue
		}
		// Base...head: "ahead" (or "identical") is the default branch
		// holding h in its history.
		c, _, err := s.gh.Repositories.CompareCommits(ctx, owner, repo, h.String(), def, &github.ListOptions{PerPage: 1})
		if err != nil {
			s.log.Debug("compare a known commit with the default branch", "repo", name, "commit", h.String(), "err", err)
			continue
		}
		if st := c.GetStatus(); (st == "ahead" || st == "identical") && c.GetBehindBy() == 0 {
			s.pusher.confirm(name, h)
			known = append(known, h)
		}
	}
	return known
}

const pushTimeout = 5 * time.Minute
