package source

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// Source is the repository a pod works on, resolved on the host.
type Source struct {
	// Input is what the user passed: a path or a git URL. It may hold
	// credentials (https://user:token@host/...): it is used for the clone
	// on the host only, never shown or passed to a container.
	Input string `json:"-"`
	// Display is Input without credentials.
	Display string `json:"input"`
	// Local is true for a local checkout, false for a git URL.
	Local bool `json:"local"`
	// Dir is the top of the local checkout.
	Dir string `json:"dir,omitempty"`
	// Project names the folder under /workspaces.
	Project string `json:"project"`
	// Remote becomes origin in the workspace ("" when the checkout has
	// none), without credentials.
	Remote string `json:"remote,omitempty"`
	// Branch is the local checkout's branch ("" when detached); for a pull
	// request, the workspace's branch (pr-N).
	Branch string `json:"branch,omitempty"`
	// Ref is the branch or tag to clone from a URL ("" for the default).
	Ref string `json:"ref,omitempty"`
	// Commit is the commit the workspace starts at (local sources only;
	// for URLs it is known after the clone).
	Commit string `json:"commit,omitempty"`
	// RemoteCommits are commits of Commit's history that the forge
	// repository had when the source was resolved, for the gator to ask
	// the forge about (see gator.Options.KnownCommits): for a URL, the
	// commit cloned; for a pull request, where its head meets the base's
	// default branch (both known after the clone); for a local checkout,
	// where HEAD's history meets its refs under refs/remotes/REMOTE/ (none
	// when it has none).
	RemoteCommits []string `json:"remote_commits,omitempty"`
	// LeftOut lists uncommitted paths of a local checkout that the
	// workspace will not have.
	LeftOut []string `json:"left_out,omitempty"`

	// PR is the number of the pull request the source is (0 for none).
	// Its head is checked out on Branch; Remote (origin) is the head
	// repository when the forge's API named it, else the base repository.
	PR int `json:"pr,omitempty"`
	// PRURL is the pull request's web address, without credentials.
	PRURL string `json:"pr_url,omitempty"`
	// PRTitle is the pull request's title (known only through the API).
	PRTitle string `json:"pr_title,omitempty"`
	// Upstream is the pull request's base repository, which becomes remote
	// upstream in the workspace, without credentials.
	Upstream string `json:"upstream,omitempty"`
	// HeadBranch is the pull request's branch in the head repository (known
	// only through the API); a plain `git push` of Branch goes there.
	HeadBranch string `json:"head_branch,omitempty"`
	// Warnings are things the user should know about the source, such as
	// an API lookup that failed.
	Warnings []string `json:"warnings,omitempty"`

	// fetchURL is the base repository's URL for the clone on the host,
	// with the credentials the input URL carried.
	fetchURL string
}

// Options tune Resolve.
type Options struct {
	// Ref is the branch or tag to clone from a git URL.
	Ref string
	// ForgeURL is the forge's web base (DefaultForgeURL when ""): pull
	// request URLs are recognised on it, and their repositories cloned
	// from it.
	ForgeURL string
	// APIURL is the forge's REST API, e.g. https://api.github.com or
	// https://HOST/api/v3 for GitHub Enterprise. Optional: when set,
	// resolving a pull request asks it for the head repository and branch,
	// so that origin is the fork and `git push` updates the pull request;
	// when unset or unreachable, git alone is enough.
	APIURL string
	// APIToken authenticates API requests (optional; public repositories
	// need none). It is used on the host only.
	APIToken string
	// HTTPClient makes the API requests (http.DefaultClient when nil).
	HTTPClient *http.Client
}

// scpLike matches git's scp-like syntax: [user@]host:path.
var scpLike = regexp.MustCompile(`^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:[^/\\].*$|^(?:[A-Za-z0-9._-]+@)[A-Za-z0-9.-]+:/.*$`)

// IsGitURL tells whether input is meant as a git URL rather than a path.
func IsGitURL(input string) bool {
	if strings.Contains(input, "://") {
		return true
	}
	if strings.HasPrefix(input, "/") || strings.HasPrefix(input, ".") {
		return false
	}
	return scpLike.MatchString(input)
}

// Resolve checks input (a local checkout, a git URL or a pull
// request URL on the forge) and gathers what the plan needs. It runs git on
// the host but changes nothing; for a pull request with o.APIURL set, it
// also asks the forge's API.
func Resolve(ctx context.Context, input string, o Options) (*Source, error) {
	if input == "" {
		return nil, errors.New("no repository given")
	}
	// git's "transport::address" syntax (ext::, fd::) runs commands or
	// reaches file descriptors; only plain URLs and paths are sources.
	if strings.Contains(input, "::") {
		return nil, fmt.Errorf("unsupported git source %q: transport syntax (X::...) is not allowed", RedactURL(input))
	}
	forge := o.ForgeURL
	if forge == "" {
		forge = DefaultForgeURL
	}
	fu, err := parseForgeURL(forge)
	if err != nil {
		return nil, err
	}
	if IsGitURL(input) {
		pr, err := ParsePRURL(input, forge)
		if err == nil {
			return resolvePR(ctx, input, pr, o)
		}
		if !errors.Is(err, ErrNotPullRequest) {
			return nil, err
		}
		return resolveURL(input, o.Ref)
	}
	if o.Ref != "" {
		return nil, errors.New("--ref applies to git URLs; for a local checkout, check the ref out first")
	}
	// "github.com/o/r/pull/7" is a path to git; say what was meant.
	if _, err := os.Stat(input); errors.Is(err, fs.ErrNotExist) {
		if pr, err := ParsePRURL(fu.Scheme+"://"+input, forge); err == nil {
			return nil, fmt.Errorf("%s is not a local directory; for pull request #%d of %s/%s, pass its full URL: %s",
				input, pr.Number, pr.Owner, pr.Repo, RedactURL(pr.URL()))
		}
	}
	return resolveLocal(ctx, input)
}

func resolveURL(input, ref string) (*Source, error) {
	var repoPath string
	display := input
	if strings.Contains(input, "://") {
		u, err := url.Parse(input)
		if err != nil {
			return nil, fmt.Errorf("malformed git URL: %w", redactErr(err, input))
		}
		switch u.Scheme {
		case "https", "http", "ssh", "git":
			if u.Host == "" {
				return nil, fmt.Errorf("malformed git URL %q: no host", RedactURL(input))
			}
		case "file":
			if u.Path == "" {
				return nil, fmt.Errorf("malformed git URL %q: no path", input)
			}
		default:
			return nil, fmt.Errorf("unsupported git URL scheme %q in %q: use https, ssh, git or file", u.Scheme, RedactURL(input))
		}
		repoPath = u.Path
		display = RedactURL(input)
	} else {
		_, repoPath, _ = strings.Cut(input, ":")
	}
	project := strings.TrimSuffix(path.Base(strings.TrimRight(repoPath, "/")), ".git")
	if !validProject.MatchString(project) {
		return nil, fmt.Errorf("malformed git URL %q: no usable repository name at the end of its path", display)
	}
	return &Source{Input: input, Display: display, Project: project, Remote: display, Ref: ref}, nil
}

// validProject keeps the workspace folder a plain name (no "..", no
// hidden or odd names).
var validProject = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*$`)

// RedactURL drops the password of a URL; the user name stays (ssh needs it,
// and it is not a secret), unless it looks like a token (no password).
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Unparsable (a bad %-escape) but perhaps with a password: drop
		// whatever sits between "://" and the first "@" of the authority.
		return unparsedUserinfo.ReplaceAllString(raw, "$1")
	}
	if u.User == nil {
		return raw
	}
	if _, hasPassword := u.User.Password(); hasPassword || u.Scheme == "https" || u.Scheme == "http" {
		u.User = nil
	}
	return u.String()
}

var unparsedUserinfo = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@`)

func redactErr(err error, raw string) error {
	if r := RedactURL(raw); r != raw {
		return errors.New(strings.ReplaceAll(err.Error(), raw, r))
	}
	return err
}

// AccessError: the user devaipod runs as cannot read a local checkout:
// Dir is the first folder on its path that it cannot enter.
type AccessError struct{ Path, Dir string }

func (e *AccessError) Error() string {
	who := "this user"
	if u, err := user.Current(); err == nil {
		who = "the user " + u.Username
	}
	return fmt.Sprintf("%s cannot read %s: it cannot enter %s", who, e.Path, e.Dir)
}

// unreachable is the first folder on abs's path, from the root down, that
// this process cannot search (abs itself when it can search them all).
func unreachable(abs string) string {
	prefix := string(filepath.Separator)
	for _, part := range strings.Split(strings.Trim(abs, string(filepath.Separator)), string(filepath.Separator)) {
		if syscall.Access(prefix, 1 /* X_OK */) != nil {
			return prefix
		}
		prefix = filepath.Join(prefix, part)
	}
	return abs
}

func resolveLocal(ctx context.Context, input string) (*Source, error) {
	abs, err := filepath.Abs(input)
	if err != nil {
		return nil, fmt.Errorf("resolve %q: %w", input, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s does not exist", abs)
		}
		if errors.Is(err, fs.ErrPermission) {
			return nil, &AccessError{Path: abs, Dir: unreachable(abs)}
		}
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", abs)
	}
	top, err := git(ctx, abs, "rev-parse", "--show-toplevel")
	if err != nil {
		if errors.As(err, new(*OwnershipError)) {
			return nil, err
		}
		return nil, fmt.Errorf("%s is not a git repository (devaipod copies the committed HEAD of a git checkout)", abs)
	}
	commit, err := git(ctx, top, "rev-parse", "--verify", "HEAD^{commit}")
	if err != nil {
		return nil, fmt.Errorf("%s has no commits yet: commit something first", top)
	}
	remoteName := "origin"
	remote, _ := git(ctx, top, "remote", "get-url", remoteName)
	if remote == "" {
		if remotes, _ := git(ctx, top, "remote"); remotes != "" {
			remoteName, _, _ = strings.Cut(remotes, "\n")
			remote, _ = git(ctx, top, "remote", "get-url", remoteName)
		}
	}
	var remoteCommits []string
	var warnings []string
	if remote != "" {
		// Only a hint for the gator, which asks the forge about each: a
		// checkout whose refs git cannot walk still makes a pod.
		if remoteCommits, err = commitsOnRemote(ctx, top, remoteName, commit); err != nil {
			warnings = append(warnings, fmt.Sprintf("could not tell which commits %s has (%v): the gator checks every commit a push carries back to the forge's branches", remoteName, err))
		}
	}
	status, err := gitOutput(ctx, top, "status", "--porcelain", "-z", "--untracked-files=all")
	if err != nil {
		return nil, fmt.Errorf("git status in %s: %w", top, err)
	}
	leftOut := porcelainPaths(status)
	project := filepath.Base(top)
	if !validProject.MatchString(project) {
		project = "project"
	}
	branch, _ := git(ctx, top, "symbolic-ref", "--quiet", "--short", "HEAD")
	return &Source{Input: input, Display: top, Local: true, Dir: top, Project: project,
		Remote: RedactURL(remote), Branch: branch, Commit: commit, RemoteCommits: remoteCommits, LeftOut: leftOut,
		Warnings: warnings}, nil
}

// maxRemoteCommits bounds Source.RemoteCommits: a history that meets its
// remote's in more places than that is rare, and the gator then only
// checks more commits than it needs to.
const maxRemoteCommits = 16

// commitsOnRemote finds where the history of head, a commit of the local
// checkout top, meets what its refs under refs/remotes/REMOTE/ hold: head
// itself when they hold it, else the commits they hold that head's new
// commits (those they do not) are made on. Those refs may hold more than
// the remote's branches (a fetch refspec of refs/pull/*): the gator takes
// none of these commits before the forge confirms it is in the default
// branch's history. (No --max-count: with it, --boundary would name
// commits of head's own that the walk cut off.)
func commitsOnRemote(ctx context.Context, top, remote, head string) ([]string, error) {
	refs, err := git(ctx, top, "for-each-ref", "--count=1", "--format=%(refname)", "refs/remotes/"+remote+"/")
	if err != nil || refs == "" {
		return nil, err
	}
	out, err := git(ctx, top, "rev-list", "--boundary", head, "--not", "--remotes="+remote, "--")
	if err != nil {
		return nil, fmt.Errorf("find the commits %s has: %w", remote, err)
	}
	if out == "" {
		return []string{head}, nil
	}
	var known []string
	for line := range strings.SplitSeq(out, "\n") {
		if c, ok := strings.CutPrefix(line, "-"); ok && len(known) < maxRemoteCommits {
			known = append(known, c)
		}
	}
	return known, nil
}

// Checkout makes the workspace's copy of the source in dir (which must not
// exist): a clone with history, origin pointing at the real remote. It uses
// the host's git and so the user's own credentials.
//
// A pull request is cloned from its base repository (remote upstream) with
// its head checked out on branch pr-N; see Source.PR.
func (s *Source) Checkout(ctx context.Context, dir string) error {
	if s.PR > 0 {
		return s.checkoutPR(ctx, dir)
	}
	// --no-checkout: the files go into the workspace straight from the
	// object store (see TarTree), not through the host's disk first.
	// --template=: no hooks, not even git's samples, and none from the
	// user's init.templateDir: any hook in the workspace's .git is one
	// somebody put there (verify's trusted-git row reports it).
	if s.Local {
		// Only HEAD's branch (and its history): other local branches may
		// hold work the agent should not see.
		args := []string{"clone", "--quiet", "--no-checkout", "--template=", "--no-local", "--no-hardlinks", "--single-branch"}
		if s.Branch != "" {
			args = append(args, "--branch", s.Branch)
		}
		if _, err := git(ctx, "", append(args, "--", s.Dir, dir)...); err != nil {
			return fmt.Errorf("clone %s: %w", s.Dir, err)
		}
		// Pin the commit resolved earlier, on the branch or detached.
		head := []string{"update-ref", "--no-deref", "HEAD", s.Commit}
		if s.Branch != "" {
			head = []string{"update-ref", "refs/heads/" + s.Branch, s.Commit}
		}
		if _, err := git(ctx, dir, head...); err != nil {
			return fmt.Errorf("check out %s: %w", s.Commit, err)
		}
	} else {
		args := []string{"clone", "--quiet", "--no-checkout", "--template="}
		if s.Ref != "" {
			args = append(args, "--branch", s.Ref)
		}
		if _, err := git(ctx, "", append(args, "--", s.Input, dir)...); err != nil {
			return fmt.Errorf("clone %s: %w", s.Display, err)
		}
		commit, err := git(ctx, dir, "rev-parse", "HEAD")
		if err != nil {
			return err
		}
		s.Commit = commit
		s.RemoteCommits = []string{commit}
	}
	// An index for HEAD, so the workspace's git sees a clean checkout.
	if _, err := git(ctx, dir, "read-tree", "HEAD"); err != nil {
		return err
	}
	// The refs the clone made name the host-side copy (or carry the URL's
	// credentials); the workspace gets origin = the real remote, without
	// credentials, and no stale remote-tracking refs.
	refs, err := git(ctx, dir, "for-each-ref", "--format=%(refname)", "refs/remotes/origin")
	if err != nil {
		return err
	}
	for _, ref := range strings.Fields(refs) {
		if _, err := git(ctx, dir, "update-ref", "-d", ref); err != nil {
			return err
		}
	}
	if s.Remote == "" {
		_, err := git(ctx, dir, "remote", "remove", "origin")
		return err
	}
	_, err = git(ctx, dir, "remote", "set-url", "origin", s.Remote)
	return err
}

// gitCommand prepares git in dir. The repository is untrusted: its config
// must not make host git run anything (core.fsmonitor runs a command on
// status), and git never prompts: a clone that needs credentials the user
// has not set up fails.
func gitCommand(ctx context.Context, dir string, args ...string) *exec.Cmd {
	args = append([]string{"-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "protocol.ext.allow=never"}, args...)
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "LC_ALL=C")
	return cmd
}

// porcelainPaths reads `git status --porcelain -z`: "XY PATH" entries,
// NUL-separated, a rename's or copy's source in the entry after it.
func porcelainPaths(status string) []string {
	var paths []string
	entries := strings.Split(status, "\x00")
	for i := 0; i < len(entries); i++ {
		e := entries[i]
		if len(e) < 4 {
			continue
		}
		paths = append(paths, e[3:])
		if strings.ContainsAny(e[:2], "RC") {
			i++ // the source
		}
	}
	return paths
}

// git runs git in dir and returns its output, trimmed.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	out, err := gitOutput(ctx, dir, args...)
	return strings.TrimSpace(out), err
}

// gitOutput runs git in dir and returns its output as it is.
func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := gitCommand(ctx, dir, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", gitError(args[0], err, stderr.String())
	}
	return stdout.String(), nil
}

func gitError(sub string, err error, stderr string) error {
	if errors.Is(err, exec.ErrNotFound) {
		return errors.New("git is not installed on this host: install git")
	}
	if oe := ownershipError(stderr); oe != nil {
		return oe
	}
	if msg := gitReason(stderr); msg != "" {
		return fmt.Errorf("git %s: %s", sub, msg)
	}
	return fmt.Errorf("git %s: %w", sub, err)
}

// maxReasonLines bounds what gitReason keeps of git's complaint: its last
// lines, where git puts the fatal ones.
const maxReasonLines = 6

// gitReason is what git said on its standard error, without the noise:
// progress ("Cloning into"), hints and blank lines go; "fatal: " and
// "error: " prefixes go (the error says git failed); a paragraph that git
// wraps over lines ("Please make sure you have the correct access
// rights / and the repository exists.") becomes one line. The first line
// is the message, the others (at most maxReasonLines in all) follow
// indented on lines of their own.
func gitReason(stderr string) string {
	var out []string
	joinable := false // the last line kept may go on on the next one
	for _, line := range strings.Split(stderr, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == "":
			joinable = false
			continue
		case strings.HasPrefix(t, "hint:"), strings.HasPrefix(t, "Cloning into "):
			joinable = false
			continue
		}
		prefixed := false
		for _, p := range []string{"fatal: ", "error: ", "warning: ", "remote: "} {
			if rest, ok := strings.CutPrefix(t, p); ok {
				prefixed = true
				if p == "fatal: " || p == "error: " {
					t = rest
				}
				break
			}
		}
		if !prefixed && joinable && len(out) > 0 {
			out[len(out)-1] += " " + t
			continue
		}
		out = append(out, t)
		joinable = !prefixed
	}
	if len(out) > maxReasonLines {
		out = out[len(out)-maxReasonLines:]
	}
	return strings.Join(out, "\n  ")
}

// OwnershipError is git's refusal to read a repository that another user
// owns ("detected dubious ownership"): its config could make git run
// commands as the reader. Whether to trust it is the user's decision.
type OwnershipError struct {
	// Dir is the directory git names, as safe.directory would take it.
	Dir string
}

func (e *OwnershipError) Error() string {
	return fmt.Sprintf("git refuses to read %s: it belongs to another user (git's \"dubious ownership\" check: "+
		"a repository's config can make git run commands as whoever reads it). If you trust its owner, "+
		"`git config --global --add safe.directory %s` lets your git read it (devaipod never changes your git config); "+
		"else work on a clone that you own (its owner can make one for you)", e.Dir, e.Dir)
}

var (
	dubiousOwnership = regexp.MustCompile(`detected dubious ownership in repository at '([^'\n]*)'`)
	safeDirectoryAdd = regexp.MustCompile(`git config --global --add safe\.directory (\S.*)`)
)

// ownershipError recognises git's "dubious ownership" refusal in its
// standard error (nil for any other).
func ownershipError(stderr string) *OwnershipError {
	m := dubiousOwnership.FindStringSubmatch(stderr)
	if m == nil {
		return nil
	}
	dir := m[1]
	// git's own suggestion names the path safe.directory needs (a
	// repository's .git, when that is the part owned by another user).
	if s := safeDirectoryAdd.FindStringSubmatch(stderr); s != nil {
		dir = strings.TrimSpace(s[1])
	}
	return &OwnershipError{Dir: dir}
}

// TarTree writes the clone in dir (made by Checkout, without a work tree)
// as a tar stream: HEAD's files, taken from git's object store by `git
// archive`, and the .git directory. Entries sit under prefix and are owned
// by uid:gid, so that the copy in the volume belongs to the agent user
// whatever owned the files on the host. Directories are setgid and group
// writable: new files inherit the agent's group and, with the workspace's
// umask 0002 (WorkspaceUmask), stay writable by the agent even when root in
// the workspace creates them.
//
// placeholders are paths absent from HEAD to create empty, directories
// with a trailing slash (see PlaceHolders); placeholder files are listed in
// .git/info/exclude so that git does not report them.
func TarTree(ctx context.Context, w io.Writer, dir, prefix string, uid, gid int, placeholders []string) error {
	tw := tar.NewWriter(w)
	add := tarAdder(tw, prefix, uid, gid)
	if err := add(&tar.Header{Typeflag: tar.TypeDir, Name: ".", Mode: 0o755}, nil); err != nil {
		return err
	}
	if err := archiveHEAD(ctx, dir, add); err != nil {
		return fmt.Errorf("archive %s: %w", dir, err)
	}
	if err := addPlaceholders(dir, placeholders, add); err != nil {
		return err
	}
	if err := addGitDir(filepath.Join(dir, ".git"), ".git", add); err != nil {
		return err
	}
	return tw.Close()
}

// TarGitDir writes the git directory gitDir as a tar stream of its
// contents, owned as TarTree's entries are (the agent's own git directory,
// made by AgentGitDir, goes into its volume this way).
func TarGitDir(w io.Writer, gitDir string, uid, gid int) error {
	tw := tar.NewWriter(w)
	if err := addGitDir(gitDir, ".", tarAdder(tw, ".", uid, gid)); err != nil {
		return err
	}
	return tw.Close()
}

// tarAdder returns a function that writes an entry under prefix, owned by
// uid:gid, with group-shared directories.
func tarAdder(tw *tar.Writer, prefix string, uid, gid int) func(*tar.Header, io.Reader) error {
	return func(hdr *tar.Header, body io.Reader) error {
		hdr.Name = path.Join(prefix, strings.TrimSuffix(hdr.Name, "/"))
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
			hdr.Mode |= 0o2070
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = uid, gid, "", ""
		hdr.PAXRecords = nil
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			_, err := io.Copy(tw, body)
			return err
		}
		return nil
	}
}

// addGitDir passes the files of gitDir to add, named under/...
func addGitDir(gitDir, under string, add func(*tar.Header, io.Reader) error) error {
	err := filepath.WalkDir(gitDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(gitDir, p)
		if err != nil {
			return err
		}
		hdr.Name = path.Join(under, filepath.ToSlash(rel))
		if !info.Mode().IsRegular() {
			return add(hdr, nil)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return add(hdr, f)
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", gitDir, err)
	}
	return nil
}

// addPlaceholders adds empty directories and files (with their missing
// parents) after the archive, and excludes the files from git's view.
func addPlaceholders(dir string, placeholders []string, add func(*tar.Header, io.Reader) error) error {
	var exclude strings.Builder
	made := map[string]bool{}
	for _, p := range placeholders {
		name := strings.TrimSuffix(p, "/")
		var parents []string
		for d := path.Dir(name); d != "." && !made[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			made[d] = true
			if err := add(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}, nil); err != nil {
				return err
			}
		}
		if strings.HasSuffix(p, "/") {
			made[name] = true
			if err := add(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}, nil); err != nil {
				return err
			}
			continue
		}
		if err := add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644}, strings.NewReader("")); err != nil {
			return err
		}
		fmt.Fprintf(&exclude, "/%s\n", name)
	}
	if exclude.Len() == 0 {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(dir, ".git", "info"), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".git", "info", "exclude"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, "# empty placeholders that devaipod keeps read-only for the agent\n"+exclude.String())
	return errors.Join(err, f.Close())
}

// archiveHEAD passes every entry of `git archive HEAD` to add. In-tree
// .gitattributes could hide files (export-ignore) or rewrite them
// (export-subst); $GIT_DIR/info/attributes overrides them while it runs.
func archiveHEAD(ctx context.Context, dir string, add func(*tar.Header, io.Reader) error) error {
	attrs := filepath.Join(dir, ".git", "info", "attributes")
	if err := os.MkdirAll(filepath.Dir(attrs), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(attrs, []byte("* -export-ignore -export-subst\n"), 0o644); err != nil {
		return err
	}
	defer os.Remove(attrs)
	cmd := gitCommand(ctx, dir, "archive", "--format=tar", "HEAD")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return gitError("archive", err, "")
	}
	tr := tar.NewReader(out)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			// git pads the archive to its record size after the end
			// marker: read it, or git blocks on a full pipe (pipes can be
			// one page small) and Wait never returns.
			io.Copy(io.Discard, out)
			break
		}
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return err
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue // git's commit id comment
		}
		if err := add(hdr, tr); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return err
		}
	}
	if err := cmd.Wait(); err != nil {
		return gitError("archive", err, stderr.String())
	}
	return nil
}
