package source

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// MaskedRemote is the promisor remote of the agent's repository: it has no
// URL, so a git command that needs a left-out object fails instead of
// reporting a corrupt repository.
const MaskedRemote = "devaipod-masked"

// AgentGitDir makes, at out, the git directory the agent works with, from
// the clone in dir (see Checkout). The agent never shares a git directory
// with the trusted side: whatever it writes there (config, hooks,
// commondir, modules, index) is read by no git but its own.
//
// It holds the clone's refs, remotes and index, and every object of its
// history except the blobs of files whose names match mask (as ScanTree
// matches them), at any commit: a masked file's content is in neither the
// agent's working tree nor its object store. The pack is a promisor pack
// of a partial clone, so git treats the left-out blobs as not fetched yet
// (and fails to fetch them) rather than as corruption.
func AgentGitDir(ctx context.Context, dir, out string, mask []string) error {
	objects, err := keptObjects(ctx, dir, mask)
	if err != nil {
		return err
	}
	// No template: the user's init.templateDir (hooks) has no place here.
	if _, err := git(ctx, "", "init", "--quiet", "--bare", "--template=", "--", out); err != nil {
		return err
	}
	inOut := func(args ...string) (string, error) { return gitAt(ctx, out, args...) }
	pack := gitCommand(ctx, dir, "pack-objects", "--stdout", "--quiet")
	pack.Stdin = strings.NewReader(objects)
	var packData, stderr bytes.Buffer
	pack.Stdout, pack.Stderr = &packData, &stderr
	if err := pack.Run(); err != nil {
		return gitError("pack-objects", err, stderr.String())
	}
	index := gitCommand(ctx, "", "--git-dir="+out, "index-pack", "--stdin")
	index.Stdin = &packData
	outText, err := index.Output()
	if err != nil {
		return gitError("index-pack", err, "")
	}
	// index-pack prints "pack\t<hash>"; the .promisor file beside the
	// pack marks its objects as a partial clone's.
	_, hash, _ := strings.Cut(strings.TrimSpace(string(outText)), "\t")
	promisor := filepath.Join(out, "objects", "pack", "pack-"+hash+".promisor")
	if err := os.WriteFile(promisor, nil, 0o644); err != nil {
		return err
	}
	for _, kv := range [][2]string{
		{"core.bare", "false"},
		{"core.repositoryformatversion", "1"},
		{"extensions.partialClone", MaskedRemote},
		{"remote." + MaskedRemote + ".promisor", "true"},
	} {
		if _, err := inOut("config", kv[0], kv[1]); err != nil {
			return err
		}
	}
	if err := copyRefs(ctx, dir, out); err != nil {
		return err
	}
	if err := agentIndex(ctx, dir, filepath.Join(out, "index"), mask); err != nil {
		return err
	}
	// The placeholders' excludes, when TarTree made any.
	exclude, err := os.ReadFile(filepath.Join(dir, ".git", "info", "exclude"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, d := range []string{"info", "hooks"} { // as git init makes them, without samples
		if err := os.MkdirAll(filepath.Join(out, d), 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(out, "info", "exclude"), exclude, 0o644)
}

// agentIndex writes the index of HEAD at index, made where every object
// is, so that the agent's git sees the checkout as clean. The masked files
// of HEAD are marked skip-worktree: git then ignores what stands in for
// them in the working tree (/dev/null), and in a partial clone it does not
// try to fetch a skip-worktree entry's blob when it builds a commit's tree
// (cache-tree.c, must_check_existence), so the agent can commit.
func agentIndex(ctx context.Context, dir, index string, mask []string) error {
	run := func(stdin string, args ...string) (string, error) {
		cmd := gitCommand(ctx, dir, args...)
		cmd.Env = append(cmd.Environ(), "GIT_INDEX_FILE="+index)
		cmd.Stdin = strings.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return "", gitError(args[0], err, stderr.String())
		}
		return stdout.String(), nil
	}
	if _, err := run("", "read-tree", "HEAD"); err != nil {
		return err
	}
	files, err := run("", "ls-files", "-z")
	if err != nil {
		return err
	}
	var masked strings.Builder
	for _, name := range strings.Split(files, "\x00") {
		if name != "" && MatchesMask(mask, path.Base(name)) {
			masked.WriteString(name + "\x00")
		}
	}
	if masked.Len() == 0 {
		return nil
	}
	_, err = run(masked.String(), "update-index", "--skip-worktree", "-z", "--stdin")
	return err
}

// keptObjects lists, one id a line, the objects of every ref of dir but the
// blobs at masked paths.
func keptObjects(ctx context.Context, dir string, mask []string) (string, error) {
	list := gitCommand(ctx, dir, "rev-list", "--objects", "--all")
	check := gitCommand(ctx, dir, "cat-file", "--batch-check=%(objectname) %(objecttype) %(rest)")
	pipe, err := list.StdoutPipe()
	if err != nil {
		return "", err
	}
	check.Stdin = pipe
	// A buffer each: the two run at once.
	var checked, listErr, checkErr bytes.Buffer
	check.Stdout, check.Stderr, list.Stderr = &checked, &checkErr, &listErr
	if err := check.Start(); err != nil {
		return "", err
	}
	if err := list.Run(); err != nil {
		check.Wait()
		return "", gitError("rev-list", err, listErr.String())
	}
	if err := check.Wait(); err != nil {
		return "", gitError("cat-file", err, checkErr.String())
	}
	var kept strings.Builder
	sc := bufio.NewScanner(&checked)
	for sc.Scan() {
		// rev-list names each object by the first path it met it at.
		id, rest, _ := strings.Cut(sc.Text(), " ")
		kind, name, _ := strings.Cut(rest, " ")
		if kind == "blob" && MatchesMask(mask, path.Base(name)) {
			continue
		}
		kept.WriteString(id + "\n")
	}
	return kept.String(), sc.Err()
}

// copyRefs gives out dir's branches, tags, remote-tracking refs, HEAD and
// remotes (their URLs carry no credentials: Checkout strips them).
func copyRefs(ctx context.Context, dir, out string) error {
	inOut := func(args ...string) (string, error) { return gitAt(ctx, out, args...) }
	refs, err := git(ctx, dir, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags", "refs/remotes")
	if err != nil {
		return err
	}
	var updates strings.Builder
	for _, line := range strings.Split(refs, "\n") {
		if id, ref, ok := strings.Cut(line, " "); ok {
			fmt.Fprintf(&updates, "create %s %s\n", ref, id)
		}
	}
	update := gitCommand(ctx, "", "--git-dir="+out, "update-ref", "--stdin")
	update.Stdin = strings.NewReader(updates.String())
	if msg, err := update.CombinedOutput(); err != nil {
		return gitError("update-ref", err, string(msg))
	}
	if head, err := git(ctx, dir, "symbolic-ref", "--quiet", "HEAD"); err == nil {
		_, err = inOut("symbolic-ref", "HEAD", head)
		if err != nil {
			return err
		}
	} else {
		id, err := git(ctx, dir, "rev-parse", "--verify", "HEAD^{commit}")
		if err != nil {
			return err
		}
		if _, err := inOut("update-ref", "--no-deref", "HEAD", id); err != nil {
			return err
		}
	}
	remotes, _ := git(ctx, dir, "config", "--get-regexp", `^remote\.`)
	for _, line := range strings.Split(remotes, "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			if _, err := inOut("config", "--add", k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// gitAt runs git on the git directory gitDir, named explicitly: it is a
// bare directory until it is mounted as the agent's .git.
func gitAt(ctx context.Context, gitDir string, args ...string) (string, error) {
	return git(ctx, "", append([]string{"--git-dir=" + gitDir}, args...)...)
}
