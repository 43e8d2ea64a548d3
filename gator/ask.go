package gator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/devaipod/devaipod/gator/policy"
	"github.com/devaipod/devaipod/internal/approval"
)

// DefaultAskTimeout is how long a call that needs a person's approval
// (an ask: permission) waits for the decision before it is refused.
const DefaultAskTimeout = time.Minute

// maxPendingAsks bounds the calls held for a decision at once: each holds
// a goroutine, an open workspace (push_branch) and a file in the approvals
// folder, and a person does not read more than a few at a time. The next
// one is refused at once rather than queued.
const maxPendingAsks = 16

// Bounds of what a request shows a person.
const (
	maxAskReason   = 300  // a person's reason, as the agent gets it
	maxAskCommits  = 20   // commits listed by a push_branch request
	maxAskFiles    = 1000 // files listed by a push_branch request
	maxAskSubject  = 72   // a commit's subject line
	maxAskFileName = 200  // a path in the file list
	// maxAskText bounds a text that a person reads whole before approving
	// it (a comment's or a pull request's body, a review's comments):
	// GitHub's own bound on a body is 65,536 characters. A call whose text
	// is longer is refused rather than shown in part, so that nobody
	// approves what they were not shown.
	maxAskText = 64 << 10
)

// askRequest is what a tool shows a person before the step that changes
// something on the forge: What in one line, Details the exact arguments
// that matter.
type askRequest struct {
	What    string
	Details map[string]string
	// Commit is the commit a push would push, for the audit record.
	Commit string
}

// podGrant is an approval for the pod's life of a tool on a repository.
type podGrant struct {
	ID, By string
	At     time.Time
}

// grantKey is the key of a pod grant: "TOOL OWNER/REPO", which is also the
// Rule of the requests (case-folded, as GitHub's names are).
func grantKey(tool, owner, repo string) string {
	return tool + " " + strings.ToLower(owner+"/"+repo)
}

// podGrants are the approvals for the pod's life, in memory: they end
// with the gator.
type podGrants struct {
	mu sync.Mutex
	m  map[string]podGrant
}

func (g *podGrants) get(key string) (podGrant, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.m[key]
	return p, ok
}

func (g *podGrants) add(key string, p podGrant) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]podGrant{}
	}
	g.m[key] = p
}

func (g *podGrants) keys() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.m))
}

// gate is one call's way past a person: the tool calls confirm (through
// Server.confirm) right before it changes anything on the forge, after its
// own checks. When the policy granted the call outright, confirm lets it
// through; when it granted it as ask:PERM, confirm files a request, waits
// for the decision and notes it in the call's audit record.
type gate struct {
	s           *Server
	tool        string
	owner, repo string
	perm        policy.Permission
	needed      bool // the call needs a person's approval
	confirmed   bool // confirm was called (at most once per call)
	rec         *policy.Record
	start       time.Time
}

type gateKey struct{}

// confirm asks a person, when the call needs it, whether it may go ahead
// with what a describes. It returns whether it asked (and so waited), and
// a deniedError when the call may not go ahead. A tool calls it once, at
// the last moment before it changes something on the forge; everything
// after it must do what a describes and nothing else.
func (s *Server) confirm(ctx context.Context, a askRequest) (asked bool, err error) {
	g, ok := ctx.Value(gateKey{}).(*gate)
	if !ok {
		// Every call goes through addTool, which sets the gate; without
		// one, refuse rather than let a call by unasked.
		return false, errors.New("internal error: a call without its approval gate")
	}
	return g.confirm(ctx, a)
}

func (g *gate) confirm(ctx context.Context, a askRequest) (bool, error) {
	if g.confirmed {
		return false, errors.New("internal error: a call confirmed twice")
	}
	g.confirmed = true
	if !g.needed {
		return false, nil
	}
	s := g.s
	full := g.owner + "/" + g.repo
	rule := g.tool + " " + full
	if p, ok := s.grants.get(grantKey(g.tool, g.owner, g.repo)); ok {
		// Approved for the pod's life while this call was on its way.
		g.allowByGrant(p)
		return false, nil
	}
	for k, v := range a.Details {
		if len(v) > maxAskText {
			g.rec.Decision = policy.DecisionDeny
			g.rec.Ask = &policy.AskNote{What: a.What, Commit: a.Commit, Outcome: policy.AskRefused}
			return false, &deniedError{reason: fmt.Sprintf(
				"refused: %s needs a person's approval, and its %s (%d bytes) is longer than the %d KiB a person is shown whole; make it shorter",
				rule, k, len(v), maxAskText>>10)}
		}
	}
	select {
	case s.asking <- struct{}{}:
		defer func() { <-s.asking }()
	default:
		g.rec.Decision = policy.DecisionDeny
		g.rec.Ask = &policy.AskNote{What: a.What, Commit: a.Commit, Outcome: policy.AskRefused}
		return false, &deniedError{reason: fmt.Sprintf(
			"refused: %s needs a person's approval, and %d calls wait for one already; call again once they are decided", rule, maxPendingAsks)}
	}
	req, err := s.approvals.File(approval.Request{Pod: s.pod, Kind: approval.KindGator, What: a.What, Rule: rule, Details: a.Details})
	if err != nil {
		return false, fmt.Errorf("file the request for a person's approval: %w", err)
	}
	note := &policy.AskNote{ID: req.ID, What: a.What, Commit: a.Commit}
	s.audit.write(policy.Record{
		Event: policy.EventAsk, Tool: g.tool, Repo: g.rec.Repo, Args: g.rec.Args, Decision: policy.DecisionAsk,
		Permission: g.rec.Permission, Reason: g.rec.Reason, Ask: note, DurationMS: time.Since(g.start).Milliseconds(),
	})
	s.log.Info("waiting for a person's decision", "id", req.ID, "what", a.What, "timeout", s.askTimeout)

	d, err := s.approvals.Wait(ctx, req.ID, s.askTimeout)
	done := *note
	g.rec.Ask = &done
	g.rec.Decision = policy.DecisionDeny
	switch {
	case errors.Is(err, approval.ErrTimeout):
		done.Outcome = policy.AskTimeout
		return true, &deniedError{reason: fmt.Sprintf(
			"no decision: %s waited %v for a person's approval (request %s) and none came, so nothing was done; ask the user to watch for it (devaipod approvals) and call again",
			a.What, s.askTimeout, req.ID)}
	case err != nil:
		done.Outcome = policy.AskWithdrawn
		return true, &deniedError{reason: fmt.Sprintf("withdrawn: %s ended before a person decided (request %s): %v", a.What, req.ID, err)}
	}
	done.By, done.Reason = clip(printable(d.By), maxRecordText/4), clip(printable(d.Reason), maxAskReason)
	if !d.Approve {
		done.Outcome = policy.AskRejected
		why := done.Reason
		if why == "" {
			why = "no reason given"
		}
		return true, &deniedError{reason: fmt.Sprintf("rejected: a person rejected %s (request %s): %s", a.What, req.ID, why)}
	}
	done.Outcome, done.For = policy.AskApproved, d.For
	if done.For == "" {
		done.For = approval.ForOnce
	}
	g.rec.Decision = policy.DecisionAllow
	if d.For == approval.ForPod {
		s.grants.add(grantKey(g.tool, g.owner, g.repo), podGrant{ID: req.ID, By: done.By, At: time.Now().UTC()})
		s.log.Info("approved for the pod's life", "rule", rule, "id", req.ID, "by", done.By)
	}
	return true, nil
}

// allowByGrant notes in the call's record that an approval for the pod's
// life lets it through.
func (g *gate) allowByGrant(p podGrant) {
	g.needed = false
	g.rec.Decision = policy.DecisionAllow
	g.rec.Reason = fmt.Sprintf("allowed by %s%s, approved for the pod's life by %s (request %s)", policy.AskPrefix, g.perm, cmp.Or(p.By, "a person"), p.ID)
}

// printable makes text fit one line a person reads: control and format
// characters (bidirectional overrides, zero-width ones) and line breaks
// become spaces, runs of spaces one, the ends are trimmed.
func printable(s string) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.In(r, unicode.Zl, unicode.Zp) || unicode.IsSpace(r) || r == unicode.ReplacementChar {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return b.String()
}

// listLines renders up to max of items, one a line, with a count of the
// rest.
func listLines(items []string, total, max int) string {
	if len(items) > max {
		items = items[:max]
	}
	// Within what a person is shown whole (confirm refuses more): a list
	// of names is cut, with how many more, rather than refused.
	size := 0
	for i, it := range items {
		if size += len(it) + 1; size > maxAskText-100 {
			items = items[:i]
			break
		}
	}
	out := strings.Join(items, "\n")
	if total > len(items) {
		out += fmt.Sprintf("\n... and %d more", total-len(items))
	}
	return out
}
