package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"github.com/devaipod/devaipod/internal/cmdline"
)

// hidden-files runs in the workspace container, as root, at the end of
// devaipod diff: it lists the files of the work tree that the diff above it
// did not show (an ignore rule hid them, they are in a nested repository or
// a git directory) and that the agent can have written. Such a file runs
// as root as easily as a tracked one: a src/node_modules/x/index.js that
// Node resolves, a hook in a nested repository's .git. Which files are the
// agent's is told by what the agent cannot forge: their owner (the agent's
// uid; it cannot chown) or a mode that lets the agent write them. A file the
// person made as root in the workspace (an npm install) is neither, and is
// only counted.
//
// Standard input is the NUL-separated list of the paths the diff covers
// (git ls-tree -r -z --name-only of the agent's work); the arguments are
// pathspecs, read as folders, files or globs.

// Bounds on what the agent can make this print: it decides how many files
// there are and how large.
const (
	hiddenMaxListed    = 1000      // files listed one by one; the rest counted
	hiddenMaxFileText  = 16 << 10  // a text file's content shown up to this size
	hiddenMaxTotalText = 256 << 10 // contents shown in all
	hiddenMaxPathsIn   = 64 << 20  // the list of the diff's paths on standard input
)

type hiddenOptions struct {
	workspace string
	protect   []string
	stat      bool
	uid, gid  int
}

func newHiddenFilesFlagSet(o *hiddenOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("hidden-files", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper hidden-files [flags] [PATHSPEC...] < PATHS

List the files under --workspace that are not among PATHS (NUL-separated, on
standard input: the paths a diff covers) and that the user --uid owns or can
write: name, size, why git does not show them, and the content of text files
up to a bound. Files of other owners are only counted.
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.workspace, "workspace", "", "the repository's `FOLDER`")
	fs.Func("protect", "a `PATH` the agent cannot write, left out (repeatable)", func(s string) error {
		o.protect = append(o.protect, strings.TrimSuffix(s, "/"))
		return nil
	})
	fs.BoolVar(&o.stat, "stat", false, "names and sizes only")
	fs.IntVar(&o.uid, "uid", -1, "the agent's `UID`")
	fs.IntVar(&o.gid, "gid", -1, "the agent's `GID`")
	return fs
}

func runHiddenFiles(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o hiddenOptions
	fs := newHiddenFilesFlagSet(&o)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	if o.workspace == "" || o.uid < 0 || o.gid < 0 {
		fmt.Fprintf(stderr, "%shidden-files needs --workspace, --uid and --gid\n", logPrefix)
		return 2
	}
	shown, err := readPathList(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "%shidden-files: the diff's paths: %v\n", logPrefix, err)
		return 1
	}
	w := bufio.NewWriter(stdout)
	err = listHidden(w, o, shown, fs.Args())
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(stderr, "%shidden-files: %v\n", logPrefix, err)
		return 1
	}
	return 0
}

func readPathList(r io.Reader) (map[string]bool, error) {
	data, err := io.ReadAll(io.LimitReader(r, hiddenMaxPathsIn+1))
	if err != nil {
		return nil, err
	}
	if len(data) > hiddenMaxPathsIn {
		return nil, fmt.Errorf("more than %d bytes", hiddenMaxPathsIn)
	}
	shown := map[string]bool{}
	for _, p := range bytes.Split(data, []byte{0}) {
		if len(p) > 0 {
			shown[string(p)] = true
		}
	}
	return shown, nil
}

// hiddenFile is one file the diff did not show.
type hiddenFile struct {
	rel, why string
	info     fs.FileInfo
}

// listHidden walks o.workspace and writes what runHiddenFiles says.
func listHidden(w io.Writer, o hiddenOptions, shown map[string]bool, specs []string) error {
	var agents []hiddenFile
	others, otherBytes := 0, int64(0)
	err := filepath.WalkDir(o.workspace, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == o.workspace {
				return err
			}
			// A folder the walk cannot read: said, not skipped silently.
			agents = append(agents, hiddenFile{rel: relTo(o.workspace, p), why: "unreadable: " + bareError(err)})
			return nil
		}
		rel := relTo(o.workspace, p)
		if rel == "." {
			return nil
		}
		if rel == ".git" || isProtected(rel, o.protect) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || shown[rel] || !matchesPathspecs(rel, specs) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone since the walk read its folder
		}
		why := whyHidden(o.workspace, rel)
		switch agentCanHaveWritten(p, info, o.uid, o.gid) {
		case ownedByAgent:
		case changedByOthers:
			why += ", another user's file the agent can write, changed after it was made"
		default:
			others++
			otherBytes += info.Size()
			return nil
		}
		agents = append(agents, hiddenFile{rel: rel, why: why, info: info})
		return nil
	})
	if err != nil {
		return err
	}
	if len(agents) == 0 && others == 0 {
		return nil
	}
	var total int64
	for _, f := range agents {
		if f.info != nil {
			total += f.info.Size()
		}
	}
	fmt.Fprintf(w, "\n=== not in the diff above: %s the agent can have written (%s), which git does not show\n", plural(len(agents), "file"), byteCount(total))
	budget := int64(hiddenMaxTotalText)
	for i, f := range agents {
		if i == hiddenMaxListed {
			var rest int64
			for _, f := range agents[i:] {
				if f.info != nil {
					rest += f.info.Size()
				}
			}
			fmt.Fprintf(w, "... and %s more (%s): narrow the diff with pathspecs to list them\n", plural(len(agents)-i, "file"), byteCount(rest))
			break
		}
		if o.stat {
			fmt.Fprintf(w, " %s | %s\n", quotePath(f.rel), describeHidden(f))
			continue
		}
		fmt.Fprintf(w, "=== hidden: %s (%s)\n", quotePath(f.rel), describeHidden(f))
		budget -= showHiddenText(w, filepath.Join(o.workspace, f.rel), f.info, budget)
	}
	if others > 0 {
		fmt.Fprintf(w, "=== and %s (%s) that git does not show and the agent cannot have written (another user's: the workspace's own, such as an install you ran there): not listed\n",
			plural(others, "file"), byteCount(otherBytes))
	}
	return nil
}

func relTo(root, p string) string {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(rel)
}

// isProtected: rel is a protected path or under one. They are read-only to
// the agent, and up made empty ones where the repository has none.
func isProtected(rel string, protect []string) bool {
	for _, p := range protect {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}

// matchesPathspecs reads git's plain pathspecs: a path, a folder (all
// under it) or a glob whose * also crosses /. None match everything.
func matchesPathspecs(rel string, specs []string) bool {
	if len(specs) == 0 {
		return true
	}
	for _, s := range specs {
		s = strings.TrimPrefix(path.Clean(strings.TrimPrefix(s, "./")), "/")
		if s == "." || rel == s || strings.HasPrefix(rel, s+"/") {
			return true
		}
		if strings.ContainsAny(s, "*?[") && globMatch(s, rel) {
			return true
		}
	}
	return false
}

// globMatch matches as fnmatch without FNM_PATHNAME, as git's pathspecs
// do: * matches / too. A folder matched matches what is under it.
func globMatch(pattern, rel string) bool {
	re := strings.ReplaceAll(pattern, "/", "\x00")
	for p := rel; ; {
		if ok, _ := path.Match(re, strings.ReplaceAll(p, "/", "\x00")); ok {
			return true
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return false
		}
		p = p[:i]
	}
}

// Whose a hidden file is, as far as the agent can have written it.
const (
	notAgents       = iota // another user's, which the agent cannot write
	ownedByAgent           // made by the agent (or chowned to it, which only root can)
	changedByOthers        // another user's that the agent can write, changed after it was made
)

// agentCanHaveWritten tells, by what the agent cannot forge, whether the
// user uid (of group gid) can have written the file at p: its owner, or
// its mode and its change time. The repository's folders are setgid and
// the workspace's umask 0002, so files another user makes there are
// writable by the agent's group; one changed after it was made (its change
// time past its birth time) may hold the agent's change. A symlink's mode
// is always rwx: only its owner counts.
func agentCanHaveWritten(p string, info fs.FileInfo, uid, gid int) int {
	st, ok := info.Sys().(*syscall.Stat_t)
	switch {
	case !ok || int(st.Uid) == uid:
		return ownedByAgent // unknown: shown, the safe side
	case info.Mode()&fs.ModeSymlink != 0:
		return notAgents
	}
	perm := info.Mode().Perm()
	if perm&0o002 == 0 && (int(st.Gid) != gid || perm&0o020 == 0) {
		return notAgents
	}
	if changed, known := changedAfterMade(p); changed || !known {
		return changedByOthers
	}
	return notAgents
}

// whyHidden says why git leaves rel out of the diff.
func whyHidden(root, rel string) string {
	parts := strings.Split(rel, "/")
	for i, part := range parts[:len(parts)-1] {
		if strings.EqualFold(part, ".git") {
			return "in the git directory " + quotePath(strings.Join(parts[:i+1], "/"))
		}
	}
	for i := len(parts) - 1; i > 0; i-- {
		dir := strings.Join(parts[:i], "/")
		if _, err := os.Lstat(filepath.Join(root, dir, ".git")); err == nil {
			return "in the nested repository " + quotePath(dir)
		}
	}
	return "ignored"
}

func describeHidden(f hiddenFile) string {
	if f.info == nil {
		return f.why
	}
	switch m := f.info.Mode(); {
	case m.IsRegular():
		return f.why + ", " + byteCount(f.info.Size())
	case m&fs.ModeSymlink != 0:
		return f.why + ", a symlink"
	default:
		return f.why + ", " + m.Type().String()
	}
}

// showHiddenText writes a hidden file's content, each line after a "+" (as
// a new file's in a patch, so no line of it reads as a header), if it is
// text within the bounds; else why not. It returns the bytes shown.
func showHiddenText(w io.Writer, name string, info fs.FileInfo, budget int64) int64 {
	if info == nil {
		return 0
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(name)
		if err != nil {
			fmt.Fprintf(w, "(the symlink cannot be read: %s)\n", bareError(err))
			return 0
		}
		fmt.Fprintf(w, "-> %s\n", quotePath(target))
		return 0
	}
	if !info.Mode().IsRegular() {
		return 0
	}
	if isSampleHook(name) {
		fmt.Fprintln(w, "(a sample hook, which git does not run: content not shown)")
		return 0
	}
	size := info.Size()
	switch {
	case size == 0:
		return 0
	case size > hiddenMaxFileText:
		fmt.Fprintf(w, "(content not shown: larger than %s)\n", byteCount(hiddenMaxFileText))
		return 0
	case size > budget:
		fmt.Fprintf(w, "(content not shown: the diff has shown %s of such files; narrow it with pathspecs)\n", byteCount(hiddenMaxTotalText))
		return 0
	}
	// Not followed, not waited on: the agent may have swapped the file
	// for a symlink or a fifo since the walk.
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		fmt.Fprintf(w, "(content not shown: %s)\n", bareError(err))
		return 0
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		fmt.Fprintln(w, "(content not shown: no longer a regular file)")
		return 0
	}
	data, err := io.ReadAll(io.LimitReader(f, hiddenMaxFileText))
	if err != nil {
		fmt.Fprintf(w, "(content not shown: %v)\n", err)
		return 0
	}
	// As git tells binary from text: a NUL in the first 8000 bytes.
	if bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0 {
		fmt.Fprintln(w, "(binary, not shown)")
		return int64(len(data))
	}
	text := string(data)
	for line := range strings.Lines(text) {
		fmt.Fprint(w, "+"+line)
	}
	if !strings.HasSuffix(text, "\n") {
		fmt.Fprint(w, "\n\\ No newline at end of file\n")
	}
	return int64(len(data))
}

// bareError is err without the path a *fs.PathError repeats.
func bareError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// isSampleHook: p is a hook of a git directory as git init writes them,
// named *.sample so that git does not run it: every nested repository has a
// dozen, of no interest.
func isSampleHook(p string) bool {
	dir, file := filepath.Split(p)
	return strings.HasSuffix(file, ".sample") && filepath.Base(dir) == "hooks" && strings.EqualFold(filepath.Base(filepath.Dir(filepath.Clean(dir))), ".git")
}

// quotePath shows a path on one line, as git does with core.quotePath:
// quoted, with escapes, when it holds anything but printable characters.
func quotePath(p string) string {
	for _, r := range p {
		if !unicode.IsPrint(r) || r == '"' || r == '\\' {
			return strconv.Quote(p)
		}
	}
	return p
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func byteCount(n int64) string {
	if n == 1 {
		return "1 byte"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
