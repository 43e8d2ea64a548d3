package pod

import (
	"net/url"
	"strings"

	"github.com/devaipod/devaipod/gator/policy"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

// gatorScopes decides the gator's scopes for an up: --gator flags and
// [gator.github] repos; without either, read and create-draft on the
// source's own repository when it is on the forge and a token is there.
// Malformed scopes fail here, before anything is created.
func gatorScopes(flags []string, cfg *config.Config, src *source.Source, forge string, hostEnv map[string]string) ([]string, error) {
	explicit, err := policy.ParseScopes(flags)
	if err != nil {
		return nil, &InputError{Field: "gator", Err: err}
	}
	configured, err := policy.ScopesFromConfig(cfg.Gator.GitHub.Repos)
	if err != nil {
		return nil, err // it names [gator.github] repos
	}
	scopes := append(explicit, configured...)
	if len(scopes) == 0 && hasForgeToken(cfg, hostEnv) {
		if owner, repo, ok := forgeRepo(src, forge); ok {
			scopes = policy.DefaultScopes(owner, repo)
		}
	}
	out := make([]string, len(scopes))
	for i, s := range scopes {
		out[i] = s.String()
	}
	return out, nil
}

// forgeAPIURL is the forge's REST API: [forge] api_url, else
// HOST/api/v3/ for a GitHub Enterprise forge (so that its token never goes
// to api.github.com), else "" (api.github.com).
func forgeAPIURL(configured, forge string) string {
	if configured != "" || forge == "" || strings.TrimSuffix(forge, "/") == source.DefaultForgeURL {
		return configured
	}
	return strings.TrimSuffix(forge, "/") + "/api/v3/"
}

// hasForgeToken tells whether [trusted.env] gives the gator a token.
func hasForgeToken(cfg *config.Config, hostEnv map[string]string) bool {
	t := cfg.Trusted.Env
	for _, v := range plan.TokenVars {
		if t.Vars[v] != "" {
			return true
		}
		for _, a := range t.Allowlist {
			if a == v && hostEnv[v] != "" {
				return true
			}
		}
		for _, s := range t.Secrets {
			if strings.HasPrefix(s, v+"=") {
				return true
			}
		}
	}
	return false
}

// forgeRepo finds OWNER/REPO of a source on the forge: a pull request's
// base, or a remote on the forge's host (https or scp-like ssh); not a
// name the gator would refuse (policy.SplitRepo), which would keep it from
// starting.
func forgeRepo(src *source.Source, forge string) (owner, repo string, ok bool) {
	if forge == "" {
		forge = source.DefaultForgeURL
	}
	name, ok := forgeRepoName(src, forge)
	if !ok {
		return "", "", false
	}
	owner, repo, err := policy.SplitRepo(name)
	return owner, repo, err == nil
}

// forgeRepoName is forgeRepo's OWNER/REPO, unchecked.
func forgeRepoName(src *source.Source, forge string) (string, bool) {
	if src.PR > 0 {
		pr, err := source.ParsePRURL(src.PRURL, forge)
		return pr.Owner + "/" + pr.Repo, err == nil
	}
	f, err := url.Parse(forge)
	if err != nil || src.Remote == "" {
		return "", false
	}
	host, path := "", ""
	if u, err := url.Parse(src.Remote); err == nil && u.Host != "" {
		host, path = u.Hostname(), u.Path
	} else if at, rest, found := strings.Cut(src.Remote, "@"); found && !strings.Contains(at, "/") {
		host, path, _ = strings.Cut(rest, ":")
	}
	if !strings.EqualFold(host, f.Hostname()) {
		return "", false
	}
	return strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(path, f.Path), "/"), ".git"), true
}
