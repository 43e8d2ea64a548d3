package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The docs and the command tree are kept in step here: every command and
// every flag is in docs/commands.md (a global flag may be in README.md
// instead), and every command and flag the docs name exists.
//
// docs/commands.md has one "## " section per command or group of commands
// ("## up", "## stop, start"); its ### subsections belong to it. A flag is
// documented when its long name (and its shorthand, if it has one) appears
// in its command's section. What the docs name is read from their flag
// tables (a table whose first header cell is "flag"), from the headings, and
// from synopses: code spans and code-block lines that start with
// "devaipod VERB" (up to a standalone "--", after which a command's own flags
// follow, or a "#" comment).

// docCommand is a command of the tree with the flags it defines.
type docCommand struct {
	path  string // "up", or "a b" for a subcommand
	cmd   *cobra.Command
	flags []*pflag.Flag
}

// cobraCommands are the commands cobra adds by itself at Execute, which the
// docs may mention.
var cobraCommands = []string{"help", "completion"}

// treeCommands walks newRootCommand's tree: every command but the hidden
// ones and cobra's own, with the flags each defines (local and persistent;
// not cobra's --help and --version).
func treeCommands(t *testing.T) (*cobra.Command, []docCommand) {
	t.Helper()
	root := newRootCommand(streams{in: strings.NewReader(""), out: io.Discard, err: io.Discard})
	var out []docCommand
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Deprecated != "" || (c.Parent() == root && slices.Contains(cobraCommands, c.Name())) {
			return
		}
		dc := docCommand{path: strings.TrimPrefix(c.CommandPath(), root.Name()+" "), cmd: c}
		if c == root {
			dc.path = ""
		}
		add := func(f *pflag.Flag) {
			if !f.Hidden && f.Name != "help" && f.Name != "version" {
				dc.flags = append(dc.flags, f)
			}
		}
		c.LocalNonPersistentFlags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		out = append(out, dc)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	if len(out) < 10 {
		t.Fatalf("the command tree has %d commands: the walk is broken", len(out))
	}
	return root, out
}

// docSection is a "## " section of a markdown file, its subsections
// included. commands are the command paths its heading names (nil for a
// heading that is not a list of commands); the preamble before the first
// heading has heading "".
type docSection struct {
	heading  string
	commands []string
	lines    []string
}

func (s docSection) text() string { return strings.Join(s.lines, "\n") }

var commandHeading = regexp.MustCompile(`^[a-z][a-z0-9-]*( [a-z][a-z0-9-]*)*$`)

func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sections cuts a markdown file at its "## " headings (not inside code
// blocks).
func sections(doc string) []docSection {
	out := []docSection{{}}
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "## ") {
			s := docSection{heading: strings.TrimSpace(line[3:])}
			for _, item := range strings.Split(s.heading, ",") {
				item = strings.TrimSpace(item)
				if !commandHeading.MatchString(item) {
					s.commands = nil
					break
				}
				s.commands = append(s.commands, item)
			}
			out = append(out, s)
		}
		out[len(out)-1].lines = append(out[len(out)-1].lines, line)
	}
	return out
}

// mentions tells whether text has the flag token tok ("--name", "-n") as a
// word of its own (not part of a longer flag or word).
func mentions(text, tok string) bool {
	re := regexp.MustCompile(`(^|[^A-Za-z0-9-])` + regexp.QuoteMeta(tok) + `($|[^A-Za-z0-9-])`)
	return re.MatchString(text)
}

func TestDocsCommandsDocumented(t *testing.T) {
	_, cmds := treeCommands(t)
	secs := sections(readDoc(t, "docs/commands.md"))
	readme := readDoc(t, "README.md")
	for _, c := range cmds {
		if c.path == "" {
			// The global flags: commands.md's preamble (its table of them)
			// or README.md.
			for _, f := range c.flags {
				if !mentions(secs[0].text(), "--"+f.Name) && !mentions(readme, "--"+f.Name) {
					t.Errorf("global flag --%s is in neither docs/commands.md's table of global flags nor README.md", f.Name)
				}
				if f.Shorthand != "" && !mentions(secs[0].text(), "-"+f.Shorthand) {
					t.Errorf("global flag --%s: docs/commands.md's table of global flags does not give its shorthand -%s", f.Name, f.Shorthand)
				}
			}
			continue
		}
		i := slices.IndexFunc(secs, func(s docSection) bool { return slices.Contains(s.commands, c.path) })
		if i < 0 {
			t.Errorf("docs/commands.md has no section for `devaipod %s`: add a heading `## %s` (or add %s to a heading such as `## stop, start`)", c.path, c.path, c.path)
			continue
		}
		text := secs[i].text()
		for _, f := range c.flags {
			if !mentions(text, "--"+f.Name) {
				t.Errorf("`devaipod %s --%s` is not documented in its section of docs/commands.md (## %s)", c.path, f.Name, secs[i].heading)
			}
			if f.Shorthand != "" && !mentions(text, "-"+f.Shorthand) {
				t.Errorf("`devaipod %s --%s`: its shorthand -%s is not in its section of docs/commands.md (## %s)", c.path, f.Name, f.Shorthand, secs[i].heading)
			}
		}
	}
}

var (
	longFlag   = regexp.MustCompile(`(?:^|[^A-Za-z0-9-])--([a-z0-9][a-z0-9-]*)`)
	codeSpan   = regexp.MustCompile("`([^`]+)`")
	synopsis   = regexp.MustCompile(`(?:^|[^A-Za-z0-9./-])devaipod((?: [a-z][a-z0-9-]*)*)(?:[ ` + "`" + `\])]|$)`)
	tableSep   = regexp.MustCompile(`^\|[\s:|-]+\|\s*$`)
	flagHeader = regexp.MustCompile(`^\|\s*flags?\s*\|`)
)

// knownFlag tells whether the command at path (root for "") has the flag
// name, its own or inherited, or cobra's --help and --version.
func knownFlag(root *cobra.Command, byPath map[string]*cobra.Command, path, name string) bool {
	c := byPath[path]
	if name == "help" || (c == root && name == "version") {
		return true
	}
	return c.Flag(name) != nil
}

// synopses finds "devaipod VERB ..." in code spans and code blocks: the
// command path (the longest run of words that is a command) and the text
// that follows, up to the next synopsis, a standalone "--" or a comment.
func synopses(doc string, byPath map[string]*cobra.Command) (found [][2]string, unknown []string) {
	var chunks []string
	// A code span may run over the lines of a paragraph: prose is read a
	// paragraph at a time, table rows and headings a line at a time.
	var para []string
	flush := func() {
		for _, m := range codeSpan.FindAllStringSubmatch(strings.Join(para, " "), -1) {
			chunks = append(chunks, m[1])
		}
		para = nil
	}
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			flush()
			fenced = !fenced
			continue
		}
		if fenced {
			if i := strings.Index(line, " #"); i >= 0 {
				line = line[:i]
			}
			if len(chunks) > 0 && strings.HasPrefix(line, "  ") && strings.Contains(chunks[len(chunks)-1], "devaipod ") && !strings.Contains(line, "devaipod") {
				chunks[len(chunks)-1] += " " + strings.TrimSpace(line) // a continuation line
				continue
			}
			chunks = append(chunks, line)
			continue
		}
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case strings.HasPrefix(line, "|") || strings.HasPrefix(line, "#"):
			flush()
			para = []string{line}
			flush()
		default:
			para = append(para, line)
		}
	}
	flush()
	for _, chunk := range chunks {
		locs := synopsis.FindAllStringSubmatchIndex(chunk, -1)
		for i, loc := range locs {
			end := len(chunk)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			words := strings.Fields(chunk[loc[2]:loc[3]])
			// The longest prefix of words that is a command; no word (the
			// next is in upper case, or a flag) is the root.
			path := ""
			for n := len(words); n > 0; n-- {
				if _, ok := byPath[strings.Join(words[:n], " ")]; ok {
					path = strings.Join(words[:n], " ")
					break
				}
			}
			if path == "" && len(words) > 0 && !slices.Contains(cobraCommands, words[0]) {
				unknown = append(unknown, "devaipod "+words[0]+" (in `"+chunk+"`)")
				continue
			}
			rest := chunk[loc[3]:end]
			if j := strings.Index(rest+" ", " -- "); j >= 0 {
				rest = rest[:j]
			}
			found = append(found, [2]string{path, rest})
		}
	}
	return found, unknown
}

// commandNames names command paths for messages ("" is the root: the
// global flags).
func commandNames(paths []string) string {
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = "`devaipod " + p + "`"
		if p == "" {
			names[i] = "devaipod (its global flags)"
		}
	}
	return strings.Join(names, " or ")
}

func TestDocsCommandsExist(t *testing.T) {
	root, cmds := treeCommands(t)
	byPath := map[string]*cobra.Command{}
	for _, c := range cmds {
		byPath[c.path] = c.cmd
	}
	// Headings and flag tables of docs/commands.md.
	doc := readDoc(t, "docs/commands.md")
	for _, s := range sections(doc) {
		owners := s.commands
		where := "## " + s.heading
		if s.heading == "" {
			owners, where = []string{""}, "the table of global flags"
		}
		for _, c := range s.commands {
			if _, ok := byPath[c]; !ok && !slices.Contains(cobraCommands, c) {
				t.Errorf("docs/commands.md has a section for `devaipod %s` (## %s), which is no command", c, s.heading)
			}
		}
		if owners == nil {
			continue // a section about something else
		}
		// A flag is known when one of the section's commands has it (cobra's
		// own commands are not checked).
		has := func(name string) bool {
			return slices.ContainsFunc(owners, func(p string) bool {
				_, ok := byPath[p]
				return slices.Contains(cobraCommands, p) || ok && knownFlag(root, byPath, p, name)
			})
		}
		check := func(line, what string) {
			for _, m := range longFlag.FindAllStringSubmatch(line, -1) {
				if !has(m[1]) {
					t.Errorf("docs/commands.md (%s) documents --%s in %s, which %s does not have", where, m[1], what, commandNames(owners))
				}
			}
		}
		inTable, fenced := false, false
		for _, line := range s.lines {
			if strings.HasPrefix(line, "```") {
				fenced = !fenced
			}
			switch {
			case fenced:
			case strings.HasPrefix(line, "#"):
				check(line, "a heading")
			case flagHeader.MatchString(line):
				inTable = true
			case inTable && tableSep.MatchString(line):
			case inTable && strings.HasPrefix(line, "|"):
				cells := strings.Split(strings.TrimPrefix(line, "|"), "|")
				// A \| inside a cell is an escaped pipe, part of the cell.
				first := cells[0]
				for k := 1; strings.HasSuffix(first, `\`) && k < len(cells); k++ {
					first += "|" + cells[k]
				}
				check(first, "its flag table")
			default:
				inTable = false
			}
		}
	}
	// Synopses: "devaipod VERB [--flag]" in commands.md and README.md.
	for _, rel := range []string{"docs/commands.md", "README.md"} {
		found, unknown := synopses(readDoc(t, rel), byPath)
		for _, u := range unknown {
			t.Errorf("%s names %s, which is no command", rel, u)
		}
		if len(found) < 10 {
			t.Errorf("%s: only %d synopses (devaipod VERB ...) found: the parser is broken", rel, len(found))
		}
		for _, f := range found {
			for _, m := range longFlag.FindAllStringSubmatch(f[1], -1) {
				if !knownFlag(root, byPath, f[0], m[1]) {
					t.Errorf("%s: `devaipod %s ... --%s`: %s has no flag --%s (write \" -- \" before a command's own flags)", rel, f[0], m[1], commandNames([]string{f[0]}), m[1])
				}
			}
		}
	}
}
