package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/devaipod/devaipod/internal/cmdline"
)

// inspect-git looks at the trusted side's git directory the way a
// suspicious reviewer would, with plain file reads: it never runs git,
// which would act on what it is inspecting. It prints one problem a line
// (nothing when all is well); devaipod verify hands them to the agent's
// battery as its trusted-git row. The agent cannot write this directory
// (it has one of its own); a problem here means someone or something did.
func runInspectGit(args []string, stdout, stderr io.Writer) int {
	fl := newInspectGitFlagSet()
	fl.SetOutput(stderr)
	if err := fl.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	if fl.NArg() != 1 {
		fmt.Fprintf(stderr, "%sinspect-git takes the repository's folder\n", logPrefix)
		return 2
	}
	for _, p := range inspectGit(fl.Arg(0)) {
		fmt.Fprintln(stdout, p)
	}
	return 0
}

func newInspectGitFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("inspect-git", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper inspect-git REPOSITORY

Report, one a line, what in REPOSITORY/.git could make git run a program or
read another directory's configuration: commondir, alternates, hooks, risky
configuration keys (here, in .git/modules and in nested repositories that
the index holds as gitlinks). It reads files only and never runs git.
`)
	}
	return fs
}

// inspectGit lists what in repo/.git could make a git command there run a
// program or read another directory's configuration.
func inspectGit(repo string) []string {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	gitDir := filepath.Join(repo, ".git")
	st, err := os.Lstat(gitDir)
	switch {
	case err != nil:
		return []string{".git: " + errText(err)}
	case !st.IsDir():
		return []string{".git is not a directory (a gitfile or a symlink points git elsewhere)"}
	}
	for _, f := range []string{"commondir", "objects/info/alternates", "config.worktree", "info/attributes"} {
		if _, err := os.Lstat(filepath.Join(gitDir, f)); err == nil {
			add(".git/%s exists: git reads another directory's configuration, objects or attributes through it", f)
		}
	}
	inspectGitConfig(filepath.Join(gitDir, "config"), ".git/config", add)
	inspectHooks(filepath.Join(gitDir, "hooks"), ".git/hooks", add)
	modules, _ := filepath.Glob(filepath.Join(gitDir, "modules", "*"))
	for _, m := range modules {
		rel := ".git/modules/" + filepath.Base(m)
		inspectGitConfig(filepath.Join(m, "config"), rel+"/config", add)
		inspectHooks(filepath.Join(m, "hooks"), rel+"/hooks", add)
	}
	gitlinks, err := indexGitlinks(filepath.Join(gitDir, "index"))
	if err != nil {
		add(".git/index: %v", err)
	}
	if len(gitlinks) == 0 {
		return problems
	}
	// A gitlink's path is in the shared tree, which the agent writes: read
	// under it without leaving the repository (a symlink the agent put
	// there would have this root process read elsewhere).
	tree, err := os.OpenRoot(repo)
	if err != nil {
		return append(problems, "the repository: "+errText(err))
	}
	defer tree.Close()
	for _, p := range gitlinks {
		nested := filepath.Join(filepath.FromSlash(p), ".git")
		st, err := tree.Lstat(nested)
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			// No nested repository there (its folder is a file now).
		case err != nil:
			add("%s/.git, a gitlink of the index: %s", p, errText(err))
		case !st.IsDir():
			add("%s/.git, a gitlink of the index, is not a directory", p)
		default:
			f, err := tree.OpenFile(filepath.Join(nested, "config"), openConfig, 0)
			data, err := readConfig(f, err)
			inspectConfigText(data, err, p+"/.git/config (a gitlink of the index)", add)
		}
	}
	return problems
}

// riskyConfig are the configuration keys (lower-case section.key, or
// section.*.key for subsections) that make git run a program, read other
// files as configuration or credentials, or work on another tree
// (shared/notes/git-trust.md's section 2).
var riskyConfig = []string{
	"core.fsmonitor", "core.hookspath", "core.worktree", "core.sshcommand", "core.pager", "core.editor",
	"core.askpass", "core.gitproxy", "core.alternaterefscommand", "sequence.editor", "diff.external",
	"include.path", "includeif.*.path", "filter.*.clean", "filter.*.smudge", "filter.*.process",
	"diff.*.textconv", "diff.*.command", "merge.*.driver", "credential.helper", "credential.*.helper",
	"gpg.program", "gpg.ssh.program", "gpg.x509.program", "gpg.ssh.defaultkeycommand",
	"extensions.worktreeconfig", "extensions.partialclone", "remote.*.uploadpack", "remote.*.receivepack",
	"remote.*.vcs", "uploadpack.packobjectshook", "hook.*.command", "mergetool.*.cmd", "difftool.*.cmd",
	"interactive.difffilter", "sendemail.*cmd", "sendemail.*.*cmd", "pager.*", "http.cookiefile",
	"http.*.cookiefile", "http.sslcert", "http.*.sslcert", "http.sslkey", "http.*.sslkey",
	"http.sslcainfo", "http.*.sslcainfo", "http.sslcapath", "http.*.sslcapath", "http.proxy", "http.*.proxy",
}

// riskyValue says whether an entry that no key of riskyConfig names is
// risky by its value: a URL that runs a command (ext::), the protocol
// that runs it allowed, a submodule's or alias's command (!).
func riskyValue(e gitConfigEntry) bool {
	v := strings.ToLower(strings.TrimSpace(e.Value))
	switch {
	case e.Section == "remote" && (e.Key == "url" || e.Key == "pushurl"):
		return strings.HasPrefix(v, "ext::")
	case e.Section == "url" && (e.Key == "insteadof" || e.Key == "pushinsteadof"):
		return strings.HasPrefix(strings.ToLower(e.Subsection), "ext::")
	case e.Section == "protocol" && e.Key == "allow":
		return v == "always"
	case e.Section == "submodule" && e.Key == "update", e.Section == "alias":
		return strings.HasPrefix(v, "!")
	}
	return false
}

// harmless says whether a risky key's value turns what it does off:
// core.fsmonitor=false, pager.CMD=false (or true: git's own pager).
func harmless(e gitConfigEntry, key string) bool {
	if key != "core.fsmonitor" && e.Section != "pager" {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(e.Value)) {
	case "false", "no", "off", "0", "":
		return !e.NoValue
	case "true", "yes", "on", "1":
		return e.Section == "pager"
	}
	return false
}

// inspectGitConfig reports the risky keys that the git config file at file
// sets (name is how to call it). core.fsmonitor=false is fine.
func inspectGitConfig(file, name string, add func(string, ...any)) {
	data, err := readConfig(os.OpenFile(file, openConfig, 0))
	inspectConfigText(data, err, name, add)
}

// openConfig opens a config file without following a symlink or waiting
// for a FIFO's writer.
const openConfig = os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOFOLLOW

// maxConfig bounds a git config file that inspect-git reads: the agent
// may write one, and this runs as root in the workspace.
const maxConfig = 1 << 20

// readConfig reads a config file opened with openConfig: a regular file of
// at most maxConfig bytes.
func readConfig(f *os.File, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfig+1))
	if err == nil && len(data) > maxConfig {
		err = fmt.Errorf("larger than %d bytes", maxConfig)
	}
	return data, err
}

// inspectConfigText is inspectGitConfig of a file read already (err from
// reading it).
func inspectConfigText(data []byte, err error, name string, add func(string, ...any)) {
	if errors.Is(err, fs.ErrNotExist) {
		return
	} else if err != nil {
		add("%s: %s", name, errText(err))
		return
	}
	// Read as git reads it (parseGitConfig): what git would not read,
	// git refuses, and what it reads is judged as it is.
	entries, err := parseGitConfig(data)
	if err != nil {
		add("%s: %s", name, errText(err))
		return
	}
	for _, e := range entries {
		key := e.Section + "." + e.Key
		if e.HasSubsection {
			key = e.Section + ".*." + e.Key
		}
		risky := riskyValue(e)
		for _, r := range riskyConfig {
			if ok, _ := path.Match(r, key); ok && !harmless(e, key) {
				risky = true
			}
		}
		if risky {
			add("%s sets %s", name, key)
		}
	}
}

// inspectHooks reports the hooks in dir that git would run: every file but
// the samples git ships (devaipod's clone has none).
func inspectHooks(dir, name string, add func(string, ...any)) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sample") {
			add("%s/%s is a hook", name, e.Name())
		}
	}
}

// indexGitlinks returns the paths of the gitlinks (mode 160000) in a git
// index of version 2 or 3 (what git writes unless told otherwise), which
// make status and diff run git in the nested repository.
func indexGitlinks(file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	if len(data) < 12 || string(data[:4]) != "DIRC" {
		return nil, errors.New("not an index file")
	}
	version := binary.BigEndian.Uint32(data[4:8])
	if version != 2 && version != 3 {
		return nil, fmt.Errorf("index version %d is not inspected (2 and 3 are)", version)
	}
	const oidLen = 20 // SHA-1; a SHA-256 index fails the bounds checks below
	var links []string
	off := 12
	for n := binary.BigEndian.Uint32(data[8:12]); n > 0; n-- {
		start := off
		fixed := 40 + oidLen + 2 // stat data, mode, ids, size; the oid; the flags
		if off+fixed > len(data) {
			return links, errors.New("index is truncated")
		}
		mode := binary.BigEndian.Uint32(data[off+24 : off+28])
		flags := binary.BigEndian.Uint16(data[off+40+oidLen : off+fixed])
		off += fixed
		if flags&0x4000 != 0 { // extended flags (version 3)
			off += 2
		}
		end := bytes.IndexByte(data[off:], 0)
		if end < 0 {
			return links, errors.New("index is truncated")
		}
		name := string(data[off : off+end])
		// The entry is padded with 1 to 8 NULs to a multiple of 8 bytes.
		off = start + (off-start+end+8)/8*8
		if mode>>12 == 0o16 { // 0160000
			links = append(links, name)
		}
	}
	return links, nil
}
