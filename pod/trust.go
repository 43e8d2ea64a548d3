package pod

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/devaipod/devaipod/pod/source"
)

// A repository is untrusted until the person says otherwise, as editors
// treat a folder they open: its devcontainer's lifecycle commands, image,
// Dockerfile and features run in the workspace, so an untrusted
// repository's pod gets none of the person's trusted values, host paths or
// host variables (plan.PlanInput.Untrusted). Only a local checkout, the
// person's own folder, is remembered as trusted (devaipod trust); the code
// of a URL or a pull request is someone else's, trusted for one up at a
// time.

// Trust is what an up decided about its repository.
type Trust struct {
	Trusted bool `json:"trusted"`
	// How it was decided: TrustRemembered, TrustForThisUp or
	// TrustAnsweredYes; "" when untrusted.
	How string `json:"how,omitempty"`
	// Since is when the person trusted a remembered repository.
	Since time.Time `json:"since,omitzero"`
	// Rememberable says whether the repository can be remembered as
	// trusted: a local checkout (not a URL or a pull request).
	Rememberable bool `json:"rememberable"`
}

// How a repository came to be trusted.
const (
	TrustRemembered  = "remembered"   // devaipod trust
	TrustForThisUp   = "for this up"  // the request said so (Request.Trust)
	TrustAnsweredYes = "answered yes" // the person, asked (Request.AskTrust)
)

// TrustAnswer is a person's answer to TrustQuestion.
type TrustAnswer int

const (
	TrustNo TrustAnswer = iota
	TrustOnce
	// TrustAlways trusts it for this up and remembers it.
	TrustAlways
)

// TrustQuestion asks a person whether to trust a repository.
type TrustQuestion struct {
	// Repo is the repository as the person knows it.
	Repo string
	// PR is the pull request's number (0 for none).
	PR int
	// Rememberable: TrustAlways can be answered (a local checkout).
	Rememberable bool
}

// TrustedRepo is a repository the person trusts: a local checkout.
type TrustedRepo struct {
	// Dir is the checkout's top folder, symlinks resolved.
	Dir string    `json:"dir"`
	At  time.Time `json:"at"`
}

// TrustStore is the file of trusted repositories in devaipod's state
// directory.
type TrustStore struct{ Path string }

// DefaultTrustStore is $XDG_STATE_HOME/devaipod/trusted.json, else
// ~/.local/state/devaipod/trusted.json.
func DefaultTrustStore() *TrustStore {
	return &TrustStore{Path: filepath.Join(stateDir(), "trusted.json")}
}

func (s *TrustStore) file() listFile[TrustedRepo] { return listFile[TrustedRepo]{path: s.Path} }

// List returns every trusted repository.
func (s *TrustStore) List() ([]TrustedRepo, error) { return s.file().load() }

// NotRememberableError says a source cannot be remembered as trusted: its
// code is not the person's folder (a URL, a pull request).
type NotRememberableError struct {
	Source string
	PR     bool
}

func (e *NotRememberableError) Error() string {
	what := "a git URL"
	if e.PR {
		what = "a pull request"
	}
	return fmt.Sprintf("%s is %s: only a local checkout is remembered as trusted; the code of a URL or a pull request is trusted for one up at a time", e.Source, what)
}

// trustKey is the folder a local checkout is trusted by.
func trustKey(src *source.Source) (string, error) {
	if !src.Local || src.PR > 0 {
		return "", &NotRememberableError{Source: src.Display, PR: src.PR > 0}
	}
	dir, err := filepath.EvalSymlinks(src.Dir)
	if err != nil {
		return "", err
	}
	return filepath.Abs(dir)
}

// resolveLocal resolves what the person named (a path in a checkout) as
// up would, without cloning.
func resolveLocal(ctx context.Context, what string) (*source.Source, string, error) {
	if source.IsGitURL(what) { // nothing to ask a forge: it is not remembered
		return nil, "", &NotRememberableError{Source: source.RedactURL(what), PR: strings.Contains(what, "/pull/")}
	}
	src, err := source.Resolve(ctx, what, source.Options{})
	if err != nil {
		return nil, "", err
	}
	key, err := trustKey(src)
	return src, key, err
}

// Trust remembers the checkout that what names (a path in it) as trusted.
// It returns the entry, and whether it was trusted already (then unchanged).
func (s *TrustStore) Trust(ctx context.Context, what string) (entry TrustedRepo, already bool, err error) {
	_, key, err := resolveLocal(ctx, what)
	if err != nil {
		return TrustedRepo{}, false, err
	}
	err = s.file().update(func(list []TrustedRepo) ([]TrustedRepo, error) {
		if i := slices.IndexFunc(list, func(o TrustedRepo) bool { return o.Dir == key }); i >= 0 {
			entry, already = list[i], true
			return list, nil
		}
		entry = TrustedRepo{Dir: key, At: time.Now().UTC()}
		return append(list, entry), nil
	})
	return entry, already, err
}

// Revoke forgets a trusted checkout: what names it as Trust took it, or is
// the folder as List shows it (a checkout that is gone).
func (s *TrustStore) Revoke(ctx context.Context, what string) (gone TrustedRepo, err error) {
	keys := []string{filepath.Clean(what)}
	if abs, err := filepath.Abs(what); err == nil {
		keys = append(keys, abs)
	}
	if _, key, err := resolveLocal(ctx, what); err == nil {
		keys = append(keys, key)
	}
	err = s.file().update(func(list []TrustedRepo) ([]TrustedRepo, error) {
		i := slices.IndexFunc(list, func(o TrustedRepo) bool { return slices.Contains(keys, o.Dir) })
		if i < 0 {
			return nil, fmt.Errorf("%s is not trusted (devaipod trust --list shows which are): %w", what, ErrNotFound)
		}
		gone = list[i]
		return slices.Delete(list, i, i+1), nil
	})
	return gone, err
}

// lookup finds src among the trusted repositories.
func (s *TrustStore) lookup(src *source.Source) (TrustedRepo, bool, error) {
	key, err := trustKey(src)
	if err != nil {
		return TrustedRepo{}, false, nil // never remembered
	}
	list, err := s.List()
	if err != nil {
		return TrustedRepo{}, false, err
	}
	i := slices.IndexFunc(list, func(o TrustedRepo) bool { return o.Dir == key })
	if i < 0 {
		return TrustedRepo{}, false, nil
	}
	return list[i], true, nil
}

// decideTrust says whether the request's repository is trusted: named
// trusted by the request, remembered, or, asked, answered so (and
// remembered when the answer says always).
func (c *creation) decideTrust(ctx context.Context, src *source.Source) (Trust, error) {
	req := c.req
	_, keyErr := trustKey(src)
	var notRememberable *NotRememberableError
	t := Trust{Rememberable: !errors.As(keyErr, &notRememberable)}
	if req.Trust {
		t.Trusted, t.How = true, TrustForThisUp
		return t, nil
	}
	if req.Trusted != nil {
		entry, ok, err := req.Trusted.lookup(src)
		if err != nil {
			return t, fmt.Errorf("read the trusted repositories: %w", err)
		}
		if ok {
			t.Trusted, t.How, t.Since = true, TrustRemembered, entry.At
			return t, nil
		}
	}
	if req.AskTrust == nil || req.DryRun {
		return t, nil
	}
	answer, err := req.AskTrust(TrustQuestion{Repo: src.Display, PR: src.PR, Rememberable: t.Rememberable})
	if err != nil {
		return t, err
	}
	switch {
	case answer == TrustAlways && t.Rememberable && req.Trusted != nil:
		entry, _, err := req.Trusted.Trust(ctx, src.Dir)
		if err != nil {
			return t, fmt.Errorf("remember %s as trusted: %w", src.Display, err)
		}
		t.Trusted, t.How, t.Since = true, TrustRemembered, entry.At
	case answer != TrustNo:
		t.Trusted, t.How = true, TrustAnsweredYes
	}
	return t, nil
}
