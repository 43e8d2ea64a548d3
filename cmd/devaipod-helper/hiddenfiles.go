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
	"unicode/utf8"

	"github.com/devaipod/devaipod/internal/cmdline"
)

// hidden-files runs in the workspace container, as root, at the end of
// devaipod diff: it lists the files of the work tree that the diff above it
// did not show (an ignore rule hid them, they are in a nested repository or
// a git directory) and that the agent can have written. Such a file runs
// as root as easily as a tracked one: a src/node_modules/x/index.js that
// Node resolves, a hook in a nested repository's .git. Which files are the
// agent's is told by what the agent cannot forge: their owner (the agent's
// uid; it cannot chown) or, for another user's, a change time past the
// birth time (see agentCanHaveWritten). A file the person made as root in
// the workspace (an npm install) and nobody touched since is only counted.
//
// Standard input is the NUL-separated list of the paths the diff covers
// (git ls-tree -r -z --name-only of the agent's work); the arguments are
// pathspecs (see parsePathspecs).

// Bounds on what the agent can make this print: it decides how many files
// there are and how large.
const (
	hiddenMaxListed    = 1000      // files listed one by one; the rest counted
	hiddenMaxFileText  = 16 << 10  // of a file's content shown
	hiddenMaxTotalText = 256 << 10 // contents shown in all
	hiddenMaxPathsIn   = 64 << 20  // the list of the diff's paths on standard input
)

type hiddenOptions struct {
	workspace string
	protect   []string
	stat      bool
	uid       int
}

func newHiddenFilesFlagSet(o *hiddenOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("hidden-files", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper hidden-files [flags] [PATHSPEC...] < PATHS

List the files under --workspace that are not among PATHS (NUL-separated, on
standard input: the paths a diff covers) and that the user --uid owns, or that
changed or moved after they were made: name, size, why git does not show them,
and their content up to a bound. Other files are only counted.
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
	return fs
}

func runHiddenFiles(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o hiddenOptions
	fs := newHiddenFilesFlagSet(&o)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	if o.workspace == "" || o.uid < 0 {
		fmt.Fprintf(stderr, "%shidden-files needs --workspace and --uid\n", logPrefix)
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
	info     fs.FileInfo // nil when it could not be read
}

// listHidden walks o.workspace and writes what runHiddenFiles says. The
// walk goes through an os.Root: a folder the agent swaps for a symlink
// while it runs does not take it out of the workspace.
func listHidden(w io.Writer, o hiddenOptions, shown map[string]bool, specs []string) error {
	root, err := os.OpenRoot(o.workspace)
	if err != nil {
		return err
	}
	defer root.Close()
	filter := parsePathspecs(specs)
	var listed []hiddenFile
	agents, others := 0, 0
	var agentBytes, otherBytes int64
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			if rel == "." {
				return err
			}
			if filter.matches(rel) {
				// Said, not skipped silently.
				agents++
				if len(listed) < hiddenMaxListed {
					listed = append(listed, hiddenFile{rel: rel, why: "unreadable: " + bareError(err)})
				}
			}
			return nil
		}
		if rel == "." {
			return nil
		}
		if rel == ".git" || isProtected(rel, o.protect) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || shown[rel] || !filter.matches(rel) {
			return nil
		}
		f := hiddenFile{rel: rel, why: whyHidden(root, rel)}
		info, err := d.Info()
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil // gone since the walk read its folder
		case err != nil:
			f.why = "unreadable: " + bareError(err)
		default:
			f.info = info
			switch agentCanHaveWritten(filepath.Join(o.workspace, rel), info, o.uid) {
			case ownedByAgent:
			case changedByOthers:
				f.why += ", another user's file, changed or moved after it was made"
			default:
				others++
				otherBytes += info.Size()
				return nil
			}
			agentBytes += info.Size()
		}
		agents++
		if len(listed) < hiddenMaxListed {
			listed = append(listed, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if agents > 0 {
		fmt.Fprintf(w, "\n=== not in the diff above: %s the agent can have written (%s), which git does not show\n", plural(agents, "file"), byteCount(agentBytes))
	}
	budget := int64(hiddenMaxTotalText)
	for _, f := range listed {
		if o.stat {
			fmt.Fprintf(w, " %s | %s\n", describeHidden(f), quotePath(f.rel))
			continue
		}
		// The path last: whatever it says, it cannot pass for the why.
		fmt.Fprintf(w, "=== hidden (%s): %s\n", describeHidden(f), quotePath(f.rel))
		budget -= showHiddenText(w, root, f, budget)
	}
	if rest := agents - len(listed); rest > 0 {
		fmt.Fprintf(w, "... and %s not listed: narrow the diff with pathspecs to list them\n", plural(rest, "file"))
	}
	if others > 0 {
		fmt.Fprintf(w, "\n=== and %s (%s) that git does not show and the agent cannot have written (another user's, unchanged since made: the workspace's own, such as an install you ran there): not listed\n",
			plural(others, "file"), byteCount(otherBytes))
	}
	return nil
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

// pathspecFilter reads git's pathspecs as far as the list needs them: a
// path, a folder (all under it) or a glob whose * also crosses /, each
// maybe with the exclude magic (:!, :^, :(exclude)) or top (:/, :(top));
// any other magic matches everything, so that a spec never hides more from
// the list than from git.
type pathspecFilter struct{ include, exclude []string }

func parsePathspecs(specs []string) pathspecFilter {
	var f pathspecFilter
	for _, s := range specs {
		exclude := false
		if rest, ok := strings.CutPrefix(s, ":"); ok {
			switch {
			case strings.HasPrefix(rest, "!") || strings.HasPrefix(rest, "^"):
				exclude, s = true, rest[1:]
			case strings.HasPrefix(rest, "/"):
				s = rest[1:]
			case strings.HasPrefix(rest, "("):
				magic, path, ok := strings.Cut(rest[1:], ")")
				if !ok {
					s = "."
					break
				}
				s = path
				for _, m := range strings.Split(magic, ",") {
					switch m {
					case "exclude":
						exclude = true
					case "top":
					default:
						s = "." // not understood: everything
					}
				}
			default:
				s = rest
			}
		}
		s = strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(s, "./")), "/")
		if s == "" {
			s = "."
		}
		if exclude {
			if s != "." {
				f.exclude = append(f.exclude, s)
			}
		} else {
			f.include = append(f.include, s)
		}
	}
	return f
}

func (f pathspecFilter) matches(rel string) bool {
	for _, s := range f.exclude {
		if pathspecMatch(s, rel) {
			return false
		}
	}
	if len(f.include) == 0 {
		return true
	}
	for _, s := range f.include {
		if pathspecMatch(s, rel) {
			return true
		}
	}
	return false
}

func pathspecMatch(spec, rel string) bool {
	if spec == "." || rel == spec || strings.HasPrefix(rel, spec+"/") {
		return true
	}
	return strings.ContainsAny(spec, "*?[") && globMatch(spec, rel)
}

// globMatch matches as fnmatch without FNM_PATHNAME, as git's pathspecs
// do: * matches / too, [!a] is [^a]. A folder matched matches what is
// under it.
func globMatch(pattern, rel string) bool {
	re := strings.ReplaceAll(strings.ReplaceAll(pattern, "[!", "[^"), "/", "\x00")
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
	notAgents       = iota // another user's, as it was made
	ownedByAgent           // made by the agent (or chowned to it, which only root can)
	changedByOthers        // another user's, changed or moved after it was made
)

// agentCanHaveWritten tells, by what the agent cannot forge, whether the
// user uid can have written the file at p, or put it there: its owner, or
// its change time. The repository's folders are setgid and group-writable
// and the workspace's umask 0002, so the agent can change a file another
// user makes there, or move or link one into another place; either moves
// the file's change time past its birth time, which no program can set.
func agentCanHaveWritten(p string, info fs.FileInfo, uid int) int {
	if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) == uid {
		return ownedByAgent // unknown: shown, the safe side
	}
	if changed, known := changedAfterMade(p); changed || !known {
		return changedByOthers
	}
	return notAgents
}

// whyHidden says why git leaves rel out of the diff.
func whyHidden(root *os.Root, rel string) string {
	parts := strings.Split(rel, "/")
	for i, part := range parts[:len(parts)-1] {
		if strings.EqualFold(part, ".git") {
			return "in the git directory " + quotePath(strings.Join(parts[:i+1], "/"))
		}
		// git refuses these names (core.protectNTFS, on by default).
		if strings.EqualFold(strings.TrimRight(part, ". "), ".git") || strings.EqualFold(part, "git~1") {
			return "in a folder whose name git refuses, " + quotePath(strings.Join(parts[:i+1], "/"))
		}
	}
	for i := len(parts) - 1; i > 0; i-- {
		dir := strings.Join(parts[:i], "/")
		if _, err := root.Lstat(dir + "/.git"); err == nil {
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
// a new file's in a patch, so no line of it reads as a header), as git diff
// --text shows any file: at most hiddenMaxFileText bytes of it, within
// budget; a symlink's target. It returns the bytes shown.
func showHiddenText(w io.Writer, root *os.Root, f hiddenFile, budget int64) int64 {
	if f.info == nil {
		return 0
	}
	if f.info.Mode()&fs.ModeSymlink != 0 {
		target, err := root.Readlink(f.rel)
		if err != nil {
			fmt.Fprintf(w, "(the symlink cannot be read: %s)\n", bareError(err))
			return 0
		}
		fmt.Fprintf(w, "-> %s\n", quotePath(target))
		return 0
	}
	if !f.info.Mode().IsRegular() || f.info.Size() == 0 {
		return 0
	}
	if budget <= 0 {
		fmt.Fprintf(w, "(content not shown: the diff has shown %s of such files; narrow it with pathspecs)\n", byteCount(hiddenMaxTotalText))
		return 0
	}
	if isGitTemplate(root, f.rel) {
		fmt.Fprintln(w, "(git's sample hook, as git init writes it: content not shown)")
		return 0
	}
	// Not followed, not waited on: the agent may have swapped the file
	// for a symlink or a fifo since the walk.
	file, err := root.OpenFile(f.rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		fmt.Fprintf(w, "(content not shown: %s)\n", bareError(err))
		return 0
	}
	defer file.Close()
	if st, err := file.Stat(); err != nil || !st.Mode().IsRegular() {
		fmt.Fprintln(w, "(content not shown: no longer a regular file)")
		return 0
	}
	data, err := io.ReadAll(io.LimitReader(file, min(budget, hiddenMaxFileText)))
	if err != nil {
		fmt.Fprintf(w, "(content not shown: %v)\n", err)
		return 0
	}
	text := string(data)
	for line := range strings.Lines(text) {
		fmt.Fprint(w, "+"+line)
	}
	if rest := f.info.Size() - int64(len(data)); rest > 0 {
		fmt.Fprintf(w, "\n(%s more not shown: read it in the workspace)\n", byteCount(rest))
	} else if !strings.HasSuffix(text, "\n") {
		fmt.Fprint(w, "\n\\ No newline at end of file\n")
	}
	return int64(len(data))
}

// gitTemplates is where git init takes a new repository's sample hooks
// from, in the workspace's image.
var gitTemplates = "/usr/share/git-core/templates/hooks"

// isGitTemplate: rel is a sample hook of a git directory (.git/hooks/
// NAME.sample), byte for byte the one git init writes: every nested
// repository has a dozen, of no interest. A changed one is shown: a
// program can load it by its path.
func isGitTemplate(root *os.Root, rel string) bool {
	dir, name := path.Split(rel)
	if !strings.HasSuffix(name, ".sample") || !strings.HasSuffix(strings.ToLower(dir), ".git/hooks/") {
		return false
	}
	want, err := os.ReadFile(filepath.Join(gitTemplates, name))
	if err != nil {
		return false
	}
	got, err := root.ReadFile(rel)
	return err == nil && bytes.Equal(got, want)
}

// bareError is err without the path a *fs.PathError repeats.
func bareError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// quotePath shows a path on one line, as git does with core.quotePath:
// quoted, with escapes, when it holds anything but printable characters.
func quotePath(p string) string {
	if !utf8.ValidString(p) {
		return strconv.Quote(p)
	}
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
