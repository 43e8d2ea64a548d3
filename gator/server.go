package gator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/devaipod/devaipod/gator/policy"
	"github.com/devaipod/devaipod/internal/approval"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-github/v74/github"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCPPath is where the gator serves MCP (streamable HTTP).
const MCPPath = "/mcp"

// HealthPath answers 200 once the gator serves, for readiness checks.
const HealthPath = "/healthz"

// sessionTimeout closes MCP sessions idle for this long; a client whose
// session is gone gets a 404 and starts a new one, as the spec says.
const sessionTimeout = 30 * time.Minute

// maxSessions caps the open MCP sessions: each holds memory until it ends
// or idles out, and the agent could open them by the thousand (an agent's
// MCP client uses one or two).
const maxSessions = 64

// Options configure a Server.
type Options struct {
	// Scopes are what the gator grants. None means every repository tool
	// is denied (status still answers).
	Scopes []policy.Scope
	// Token is the GitHub token. It is sent to the API's host and, as the
	// basic-auth password of pushes, to the git host, and nowhere else.
	Token string
	// APIURL is the REST API's base URL: DefaultAPIURL when empty, or
	// https://HOST/api/v3/ for GitHub Enterprise Server.
	APIURL string
	// GitURL is the base URL pushes go to (BASE/OWNER/REPO.git); derived
	// from APIURL when empty (see gitURLFor).
	GitURL string
	// Workspace is the git work tree whose HEAD push_branch pushes; empty
	// turns push_branch off.
	Workspace string
	// Audit receives one JSON line per call (see policy.Record). Required.
	Audit io.Writer
	// Pod names the pod in audit records.
	Pod string
	// Logger gets operational messages; nil discards them.
	Logger *slog.Logger
	// Transport carries API requests; nil means a clone of
	// http.DefaultTransport. Pushes use go-git's own HTTP client.
	Transport http.RoundTripper
	// Version goes into the MCP implementation info and the User-Agent.
	Version string
	// ProtectedPaths are the path patterns no pushed commit may touch;
	// nil means policy.DefaultProtectedPaths.
	ProtectedPaths []string
	// KnownCommits are commits that should be in repositories' histories,
	// each OWNER/REPO@SHA (see ParseKnownCommit): devaipod gives the
	// commit the workspace started from, so that a push whose base is no
	// longer a branch's tip (main moved while the agent worked) is not
	// taken for a push of the repository's whole history. Each counts
	// only once GitHub confirms it is in the default branch's history
	// (knownOnDefault).
	KnownCommits []string
	// ApprovalDir is the approvals folder (internal/approval) where calls
	// that need a person's approval (ask: permissions) are filed; empty
	// refuses such calls.
	ApprovalDir string
	// AskTimeout is how long such a call waits for the decision;
	// DefaultAskTimeout when zero.
	AskTimeout time.Duration
}

// Server is the gator: an MCP server whose tools call GitHub within the
// policy's scopes.
type Server struct {
	policy *policy.Policy
	gh     *github.Client
	pusher *pusher
	audit  *auditor
	token  string
	log    *slog.Logger
	mcp    *mcp.Server
	tools  map[string]bool
	pod    string

	// approvals is where calls that need a person's approval are filed
	// (nil: no approvals folder, such calls are refused); askTimeout how
	// long they wait; asking holds a slot per call waiting; grants are
	// the approvals for the pod's life.
	approvals  *approval.Store
	askTimeout time.Duration
	asking     chan struct{}
	grants     podGrants
}

// New checks the options and builds the server. It writes the audit log's
// start record.
func New(o Options) (*Server, error) {
	if o.Audit == nil {
		return nil, errors.New("gator: no audit writer")
	}
	if err := checkToken(o.Token); err != nil {
		return nil, err
	}
	if o.APIURL == "" {
		o.APIURL = DefaultAPIURL
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.AskTimeout < 0 {
		return nil, fmt.Errorf("gator: ask timeout %v: want a positive duration", o.AskTimeout)
	}
	if o.AskTimeout == 0 {
		o.AskTimeout = DefaultAskTimeout
	}
	api, err := parseAPIURL(o.APIURL)
	if err != nil {
		return nil, err
	}
	s := &Server{
		policy:     policy.New(o.Scopes),
		gh:         newGitHubClient(api, o.Token, o.Transport, o.Version),
		token:      o.Token,
		log:        o.Logger,
		tools:      map[string]bool{},
		pod:        o.Pod,
		askTimeout: o.AskTimeout,
		asking:     make(chan struct{}, maxPendingAsks),
	}
	if o.ApprovalDir != "" {
		if err := os.MkdirAll(o.ApprovalDir, 0o700); err != nil {
			return nil, fmt.Errorf("gator: the approvals folder: %w", err)
		}
		s.approvals = &approval.Store{Dir: o.ApprovalDir}
		// What an earlier run left waiting waits for nothing now.
		if err := s.approvals.Reset(); err != nil {
			return nil, fmt.Errorf("gator: the approvals folder: %w", err)
		}
	}
	s.audit = newAuditor(o.Pod, s.redact, o.Logger, o.Audit, func(tool string) bool { return s.tools[tool] })
	if o.Workspace != "" {
		gitURL, err := gitBaseURL(api, o.GitURL)
		if err != nil {
			return nil, err
		}
		s.pusher = &pusher{workspace: o.Workspace, gitURL: gitURL, token: o.Token, protected: o.ProtectedPaths,
			known: map[string][]plumbing.Hash{}}
		for _, k := range o.KnownCommits {
			repo, h, err := ParseKnownCommit(k)
			if err != nil {
				return nil, err
			}
			s.pusher.known[repo] = append(s.pusher.known[repo], h)
		}
		if o.ProtectedPaths == nil {
			s.pusher.protected = policy.DefaultProtectedPaths
		}
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "devaipod-gator", Version: o.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       o.Logger,
	})
	s.addTools()
	s.mcp.AddReceivingMiddleware(s.auditUnknownTools)
	s.audit.write(policy.Record{Event: policy.EventStart, Scopes: scopeStrings(o.Scopes)})
	return s, nil
}

func gitBaseURL(api *url.URL, given string) (*url.URL, error) {
	if given != "" {
		return parseGitURL(given)
	}
	return gitURLFor(api)
}

const instructions = `GitHub through devaipod's gator: the token stays here, you never need one.
Every tool but status takes owner and repo, and is checked against the scopes
this pod was granted; call status to see them. A denied call says which scope
is missing. Pull requests are always drafts. push_branch pushes the
workspace's current commit (commit first) to a branch named agent/..., never
force-pushing. Calls that status lists under "ask" wait (up to a minute or
so) for a person to approve them; a rejection says why.`

// checkToken refuses tokens that could not be one, or that redaction would
// mangle output over.
func checkToken(token string) error {
	switch {
	case token == "":
		return errors.New("gator: no GitHub token")
	case len(token) < 8:
		return fmt.Errorf("gator: the GitHub token is %d characters; that is no GitHub token", len(token))
	case strings.IndexFunc(token, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
	}) >= 0:
		// GitHub's tokens are letters, digits and underscores. Anything
		// that JSON or a URL escapes would escape redaction too.
		return errors.New("gator: the GitHub token has characters other than letters, digits, '_', '-' and '.'")
	}
	return nil
}

// redact scrubs the token from text bound for the agent or the audit log.
func (s *Server) redact(text string) string {
	return strings.ReplaceAll(text, s.token, "[redacted]")
}

// Handler serves MCP at MCPPath and a health check at HealthPath.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(MCPPath, s.limitSessions(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp },
		&mcp.StreamableHTTPOptions{Logger: s.log, SessionTimeout: sessionTimeout})))
	mux.HandleFunc("GET "+HealthPath, func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	return mux
}

// limitSessions refuses a new session (a request without a session id)
// while maxSessions are open. Concurrent first requests may pass the count
// together: the cap holds within the number of connections.
func (s *Server) limitSessions(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			n := 0
			for range s.mcp.Sessions() {
				n++
			}
			if n >= maxSessions {
				http.Error(w, fmt.Sprintf("too many MCP sessions (%d are open): end one (DELETE with its Mcp-Session-Id) or wait %v for idle ones to expire",
					n, sessionTimeout), http.StatusServiceUnavailable)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// Serve serves Handler on ln until ctx is done, then shuts down, giving
// running calls a few seconds to finish.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	defer s.audit.finish()
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		hs.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// targeted is what every tool's arguments are: they name the repository
// (or, for status, none).
type targeted interface{ target() (owner, repo string) }

// toolFunc runs an allowed call. It returns the result (marshalled to JSON
// for the agent) and a short note for the audit record.
type toolFunc[In targeted] func(ctx context.Context, in In) (result any, note string, err error)

// addTool registers a tool whose every call goes through the same steps:
// parse the arguments, decide, audit, run, scrub the token, audit again.
// It uses the SDK's untyped AddTool so that even a call whose arguments are
// malformed reaches the gator's audit rather than failing in the SDK.
func addTool[In targeted](s *Server, tool *mcp.Tool, run toolFunc[In]) {
	schema, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("gator: schema of %s: %v", tool.Name, err)) // a programming error
	}
	tool.InputSchema = schema
	name := tool.Name
	s.tools[name] = true
	s.mcp.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		rec := policy.Record{Event: policy.EventCall, Tool: name}
		finish := func(text string, isError bool) (*mcp.CallToolResult, error) {
			rec.DurationMS = time.Since(start).Milliseconds()
			s.audit.write(rec)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s.redact(text)}}, IsError: isError}, nil
		}

		raw := req.Params.Arguments
		args, argErr := argsMap(raw)
		var in In
		if argErr == nil && len(raw) > 0 {
			if err := json.Unmarshal(raw, &in); err != nil {
				argErr = fmt.Errorf("bad arguments: %v", err)
			}
		}
		owner, repo := in.target()
		rec.Repo = repoOf(owner, repo)
		rec.Args = summarizeArgs(args)
		if argErr != nil {
			rec.Decision, rec.Reason = policy.DecisionDeny, "denied: "+name+": "+argErr.Error()
			return finish(rec.Reason, true)
		}
		d := s.policy.Decide(name, rec.Repo, args)
		rec.Permission, rec.Reason = string(d.Permission), d.Reason
		g := &gate{s: s, tool: name, owner: owner, repo: repo, perm: d.Permission, rec: &rec, start: start}
		switch {
		case d.Allowed:
			rec.Decision = policy.DecisionAllow
		case d.Ask:
			if p, ok := s.grants.get(grantKey(name, owner, repo)); ok {
				g.allowByGrant(p)
				break
			}
			if s.approvals == nil {
				rec.Decision = policy.DecisionDeny
				rec.Reason = fmt.Sprintf("denied: %s on %s needs a person's approval (%s%s), but this pod's gator has no approvals folder (--approval-dir), so nobody can be asked; grant %s (without %s), or start the gator with --approval-dir",
					name, rec.Repo, policy.AskPrefix, d.Permission, d.Permission, policy.AskPrefix)
				return finish(rec.Reason, true)
			}
			// Held: the tool asks (confirm) once its own checks pass,
			// right before it changes anything.
			g.needed, rec.Decision = true, policy.DecisionAsk
		default:
			rec.Decision = policy.DecisionDeny
			return finish(d.Reason, true)
		}
		ctx = context.WithValue(ctx, gateKey{}, g)

		var (
			result any
			note   string
			err    error
		)
		if !confirmsItself[name] {
			// A tool with no step of its own to ask at is asked about
			// as a whole, before it runs.
			details := map[string]string{}
			for k, v := range rec.Args {
				details[printable(k)] = printable(v)
			}
			_, err = s.confirm(ctx, askRequest{What: name + " " + rec.Repo, Details: details})
		}
		if err == nil {
			result, note, err = run(ctx, in)
		}
		var denied *deniedError
		switch {
		case errors.As(err, &denied):
			rec.Decision, rec.Reason = policy.DecisionDeny, denied.reason
			return finish(denied.reason, true)
		case err != nil:
			rec.Error = s.redact(err.Error())
			s.log.Debug("call failed", "tool", name, "repo", rec.Repo, "err", rec.Error)
			return finish(name+" failed: "+err.Error(), true)
		}
		b, err := json.Marshal(result)
		if err != nil {
			rec.Error = "encode the result: " + err.Error()
			return finish(rec.Error, true)
		}
		rec.Result = clip(note, maxArgSummary*2)
		return finish(string(b), false)
	})
}

// auditUnknownTools audits calls of tools the gator does not have, which
// the SDK refuses before any tool handler runs.
func (s *Server) auditUnknownTools(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "tools/call" {
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && !s.tools[p.Name] {
				s.audit.write(policy.Record{
					Event: policy.EventCall, Tool: clip(p.Name, maxArgSummary), Decision: policy.DecisionDeny,
					Reason: fmt.Sprintf("denied: unknown tool %q", clip(p.Name, maxArgSummary)),
				})
			}
		}
		return next(ctx, method, req)
	}
}

// confirmsItself are the tools that call Server.confirm themselves, at the
// step that changes something on the forge, once their own checks passed:
// a person is never asked about a call that would be refused anyway, and
// sees exactly what will be done.
var confirmsItself = map[string]bool{
	policy.ToolCreateDraftPullRequest: true,
	policy.ToolAddIssueComment:        true,
	policy.ToolPushBranch:             true,
	policy.ToolCreatePendingReview:    true,
}

func (s *Server) addTools() {
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}
	addTool(s, &mcp.Tool{Name: policy.ToolStatus, Annotations: readOnly,
		Description: "List the GitHub scopes this pod was granted, and which permission each tool needs."},
		s.status)
	addTool(s, &mcp.Tool{Name: policy.ToolGetFileContents, Annotations: readOnly,
		Description: "Read a file, or list a directory, of a repository at a branch, tag or commit (default: the default branch). Needs read."},
		s.getFileContents)
	addTool(s, &mcp.Tool{Name: policy.ToolListIssues, Annotations: readOnly,
		Description: "List a repository's issues (not pull requests). Needs read."},
		s.listIssues)
	addTool(s, &mcp.Tool{Name: policy.ToolGetIssue, Annotations: readOnly,
		Description: "Read an issue with its comments. Needs read."},
		s.getIssue)
	addTool(s, &mcp.Tool{Name: policy.ToolListPullRequests, Annotations: readOnly,
		Description: "List a repository's pull requests. Needs read."},
		s.listPullRequests)
	addTool(s, &mcp.Tool{Name: policy.ToolGetPullRequest, Annotations: readOnly,
		Description: "Read a pull request with its comments and its diff. Needs read."},
		s.getPullRequest)
	addTool(s, &mcp.Tool{Name: policy.ToolCreateDraftPullRequest,
		Description: "Open a draft pull request from a pushed branch (see push_branch). Pull requests are always drafts. Needs create-draft."},
		s.createDraftPullRequest)
	addTool(s, &mcp.Tool{Name: policy.ToolAddIssueComment,
		Description: "Comment on an issue or a pull request. Needs comment."},
		s.addIssueComment)
	addTool(s, &mcp.Tool{Name: policy.ToolPushBranch,
		Description: "Push the workspace's current commit (HEAD; commit your changes first) to a branch named agent/... . Creates the branch or fast-forwards it; never force-pushes, never pushes to the default branch. Needs push-branch."},
		s.pushBranch)
	addTool(s, &mcp.Tool{Name: policy.ToolCreatePendingReview,
		Description: "Create a pending (unsubmitted) review on a pull request, with line comments; a human submits it. Needs pending-review."},
		s.createPendingReview)
}

type statusResult struct {
	Scopes []string `json:"scopes"`
	// Ask maps each scope's target (OWNER/REPO, OWNER/*) to the permissions
	// it grants only with a person's approval of each call.
	Ask map[string][]string `json:"ask,omitempty"`
	// Approvals says how asked calls are decided (or that they cannot be).
	Approvals string `json:"approvals,omitempty"`
	// ApprovedForPod lists "TOOL OWNER/REPO" a person approved for the
	// pod's life: those calls no longer wait.
	ApprovedForPod []string `json:"approved_for_pod,omitempty"`
	// Tools maps each tool to the permission it needs.
	Tools map[string]string `json:"tools"`
	Push  string            `json:"push"`
}

func (s *Server) status(context.Context, statusArgs) (any, string, error) {
	res := statusResult{Scopes: scopeStrings(s.policy.Scopes()), Tools: map[string]string{policy.ToolStatus: "none"}}
	for tool, perm := range policy.ToolPermissions {
		res.Tools[tool] = string(perm)
	}
	for _, sc := range s.policy.Scopes() {
		for _, p := range sc.Ask {
			if res.Ask == nil {
				res.Ask = map[string][]string{}
			}
			target := sc.Owner + "/" + sc.Repo
			if !slices.Contains(res.Ask[target], string(p)) {
				res.Ask[target] = append(res.Ask[target], string(p))
			}
		}
	}
	for _, perms := range res.Ask {
		slices.SortFunc(perms, func(a, b string) int {
			return slices.Index(policy.Permissions, policy.Permission(a)) - slices.Index(policy.Permissions, policy.Permission(b))
		})
	}
	if res.Ask != nil {
		res.Approvals = fmt.Sprintf("calls that need an ask permission wait up to %v for a person's decision, and are refused without one", s.askTimeout)
		if s.approvals == nil {
			res.Approvals = "off: this pod's gator has no approvals folder, so calls that need an ask permission are refused"
		}
	}
	res.ApprovedForPod = s.grants.keys()
	res.Push = "off: no workspace"
	if s.pusher != nil {
		res.Push = "pushes the workspace's HEAD to agent/... branches of " + s.pusher.gitURL.Redacted()
	}
	return res, "", nil
}
