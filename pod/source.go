package pod

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// Source is the repository a pod works on, resolved on the host.
type Source struct {
	// Input is what the user passed: a path or a git URL.
	Input string `json:"input"`
	// Local is true for a local checkout, false for a git URL.
	Local bool `json:"local"`
	// Dir is the top of the local checkout.
	Dir string `json:"dir,omitempty"`
	// Project names the folder under /workspaces.
	Project string `json:"project"`
	// Remote becomes origin in the workspace ("" when the checkout has none).
	Remote string `json:"remote,omitempty"`
	// Ref is the branch or tag to clone from a URL ("" for the default).
	Ref string `json:"ref,omitempty"`
	// Commit is the commit the workspace starts at (local sources only;
	// for URLs it is known after the clone).
	Commit string `json:"commit,omitempty"`
	// LeftOut lists uncommitted paths of a local checkout that the
	// workspace will not have.
	LeftOut []string `json:"left_out,omitempty"`
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

// ResolveSource checks input and gathers what the plan needs. It runs git on
// the host but changes nothing.
func ResolveSource(ctx context.Context, input, ref string) (*Source, error) {
	if input == "" {
		return nil, errors.New("no repository given")
	}
	if IsGitURL(input) {
		return resolveURL(input, ref)
	}
	if ref != "" {
		return nil, errors.New("--ref applies to git URLs; for a local checkout, check the ref out first")
	}
	return resolveLocal(ctx, input)
}

func resolveURL(input, ref string) (*Source, error) {
	var repoPath string
	if strings.Contains(input, "://") {
		u, err := url.Parse(input)
		if err != nil {
			return nil, fmt.Errorf("malformed git URL %q: %w", input, err)
		}
		switch u.Scheme {
		case "https", "http", "ssh", "git":
			if u.Host == "" {
				return nil, fmt.Errorf("malformed git URL %q: no host", input)
			}
		case "file":
			if u.Path == "" {
				return nil, fmt.Errorf("malformed git URL %q: no path", input)
			}
		default:
			return nil, fmt.Errorf("unsupported git URL scheme %q in %q: use https, ssh, git or file", u.Scheme, input)
		}
		repoPath = u.Path
	} else {
		_, repoPath, _ = strings.Cut(input, ":")
	}
	project := strings.TrimSuffix(path.Base(strings.TrimRight(repoPath, "/")), ".git")
	if project == "" || project == "." || project == "/" {
		return nil, fmt.Errorf("malformed git URL %q: no repository name in its path", input)
	}
	return &Source{Input: input, Project: project, Remote: input, Ref: ref}, nil
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
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", abs)
	}
	top, err := git(ctx, abs, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, fmt.Errorf("%s is not a git repository (devaipod copies the committed HEAD of a git checkout)", abs)
	}
	commit, err := git(ctx, top, "rev-parse", "--verify", "HEAD^{commit}")
	if err != nil {
		return nil, fmt.Errorf("%s has no commits yet: commit something first", top)
	}
	remote, _ := git(ctx, top, "remote", "get-url", "origin")
	if remote == "" {
		if remotes, _ := git(ctx, top, "remote"); remotes != "" {
			first, _, _ := strings.Cut(remotes, "\n")
			remote, _ = git(ctx, top, "remote", "get-url", first)
		}
	}
	status, err := git(ctx, top, "status", "--porcelain", "--untracked-files=all")
	if err != nil {
		return nil, fmt.Errorf("git status in %s: %w", top, err)
	}
	var leftOut []string
	for _, line := range strings.Split(status, "\n") {
		if len(line) > 3 {
			leftOut = append(leftOut, line[3:])
		}
	}
	return &Source{Input: input, Local: true, Dir: top, Project: filepath.Base(top),
		Remote: remote, Commit: commit, LeftOut: leftOut}, nil
}

// Checkout makes the workspace's copy of the source in dir (which must not
// exist): a clone with history, origin pointing at the real remote. It uses
// the host's git and so the user's own credentials.
func (s *Source) Checkout(ctx context.Context, dir string) error {
	if s.Local {
		if _, err := git(ctx, "", "clone", "--quiet", "--no-local", "--no-hardlinks", s.Dir, dir); err != nil {
			return fmt.Errorf("clone %s: %w", s.Dir, err)
		}
		if _, err := git(ctx, dir, "checkout", "--quiet", s.Commit); err != nil {
			return fmt.Errorf("check out %s: %w", s.Commit, err)
		}
		// Without this the branch would be detached at HEAD's commit.
		if branch, err := git(ctx, s.Dir, "symbolic-ref", "--quiet", "--short", "HEAD"); err == nil {
			if _, err := git(ctx, dir, "checkout", "--quiet", "-B", branch); err != nil {
				return fmt.Errorf("check out branch %s: %w", branch, err)
			}
		}
		if s.Remote == "" {
			_, err := git(ctx, dir, "remote", "remove", "origin")
			return err
		}
		_, err := git(ctx, dir, "remote", "set-url", "origin", s.Remote)
		return err
	}
	args := []string{"clone", "--quiet"}
	if s.Ref != "" {
		args = append(args, "--branch", s.Ref)
	}
	if _, err := git(ctx, "", append(args, "--", s.Input, dir)...); err != nil {
		return fmt.Errorf("clone %s: %w", s.Input, err)
	}
	commit, err := git(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	s.Commit = commit
	return nil
}

// git runs git in dir and returns its trimmed standard output. It never
// prompts: a clone that needs credentials the user has not set up fails.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "LC_ALL=C")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", errors.New("git is not installed on this host: install git")
		}
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			return "", fmt.Errorf("git %s: %w", args[0], err)
		}
		return "", fmt.Errorf("git %s: %s", args[0], lastLine(msg))
	}
	return strings.TrimSpace(stdout.String()), nil
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TarTree writes dir as a tar stream whose entries sit under prefix and are
// owned by uid:gid, so that the copy in the volume belongs to the agent user
// whatever owned the files on the host.
func TarTree(w io.Writer, dir, prefix string, uid, gid int) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
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
		hdr.Name = path.Join(prefix, filepath.ToSlash(rel))
		if d.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = uid, gid, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", dir, err)
	}
	return tw.Close()
}
