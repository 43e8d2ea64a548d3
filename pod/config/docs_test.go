package config

import (
	"encoding"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// The keys config.Config accepts and the ones docs/configuration.md
// documents are the same: each table of the file is a heading
// "### `[section]`" (or "### `[[section]]`" for an array of tables, and
// "[section.NAME]" for a map of tables) followed by a table whose rows'
// first column is "`key`".

var (
	unmarshalerType     = reflect.TypeOf((*toml.Unmarshaler)(nil)).Elem()
	textUnmarshalerType = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()
)

// acceptedKeys walks the toml tags of t: tables (as their docs heading:
// "[agent.limits]", "[[mounts]]", "[credentials.NAME]") to their keys.
// A struct is a table, a map of structs a table per name, a slice of
// structs an array of tables; everything else (scalars, arrays, maps of
// scalars, types that decode themselves) is a key.
func acceptedKeys(t reflect.Type, path string, array bool, out map[string][]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "-" || (name == "" && !f.IsExported()) {
			continue
		}
		if name == "" {
			name = f.Name
		}
		sub := strings.TrimPrefix(path+"."+name, ".")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		elem := ft
		if ft.Kind() == reflect.Map || ft.Kind() == reflect.Slice {
			elem = ft.Elem()
		}
		for elem.Kind() == reflect.Pointer {
			elem = elem.Elem()
		}
		decodesItself := func(t reflect.Type) bool {
			p := reflect.PointerTo(t)
			return p.Implements(unmarshalerType) || p.Implements(textUnmarshalerType)
		}
		switch {
		case decodesItself(ft):
		case ft.Kind() == reflect.Struct:
			acceptedKeys(ft, sub, false, out)
			continue
		case ft.Kind() == reflect.Map && elem.Kind() == reflect.Struct && !decodesItself(elem):
			acceptedKeys(elem, sub+".NAME", false, out)
			continue
		case ft.Kind() == reflect.Slice && elem.Kind() == reflect.Struct && !decodesItself(elem):
			acceptedKeys(elem, sub, true, out)
			continue
		}
		heading := "[" + path + "]"
		if array {
			heading = "[[" + path + "]]"
		}
		out[heading] = append(out[heading], name)
	}
}

var (
	docTableHeading = regexp.MustCompile("^### `(\\[\\[?[A-Za-z0-9_.]+\\]\\]?)`\\s*$")
	docKey          = regexp.MustCompile("`([^`]+)`")
	tableSeparator  = regexp.MustCompile(`^\|[\s:|-]+\|\s*$`)
)

// documentedKeys reads the key tables of docs/configuration.md: heading
// to the keys in the first column of the first table under it.
func documentedKeys(t *testing.T, doc string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	heading, rows, fenced := "", 0, false
	for n, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		switch {
		case fenced:
		case strings.HasPrefix(line, "#"):
			if heading != "" && rows == 0 {
				t.Errorf("docs/configuration.md:%d: ### `%s` has no table of keys", n, heading)
			}
			heading, rows = "", 0
			if m := docTableHeading.FindStringSubmatch(line); m != nil {
				heading = m[1]
				if _, dup := out[heading]; dup {
					t.Errorf("docs/configuration.md:%d: `%s` is documented twice", n+1, heading)
				}
				out[heading] = nil
			}
		case heading == "" || !strings.HasPrefix(line, "|"):
			if rows > 0 {
				heading = "" // the first table under the heading is over
			}
		case rows == 0:
			rows++ // the header row
		case tableSeparator.MatchString(line):
		default:
			rows++
			first, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
			keys := docKey.FindAllStringSubmatch(first, -1)
			if len(keys) == 0 {
				t.Errorf("docs/configuration.md:%d: a row of `%s` without a `key` in its first column: %s", n+1, heading, line)
			}
			for _, k := range keys {
				out[heading] = append(out[heading], k[1])
			}
		}
	}
	if heading != "" && rows == 0 {
		t.Errorf("docs/configuration.md: ### `%s` has no table of keys", heading)
	}
	return out
}

func readDocFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDocsConfigurationKeys(t *testing.T) {
	accepted := map[string][]string{}
	acceptedKeys(reflect.TypeOf(Config{}), "", false, accepted)
	if len(accepted["[agent]"]) == 0 || len(accepted["[[mounts]]"]) == 0 || len(accepted["[credentials.NAME]"]) == 0 {
		t.Fatalf("the walk of config.Config is broken: %v", accepted)
	}
	documented := documentedKeys(t, readDocFile(t, "configuration.md"))
	for _, table := range sortedKeys(accepted) {
		if table == "[]" {
			t.Errorf("config.Config has top-level keys %v: docs/configuration.md documents keys only in tables", accepted[table])
			continue
		}
		doc, ok := documented[table]
		if !ok {
			t.Errorf("docs/configuration.md has no ### `%s` with a table of its keys %v", table, accepted[table])
			continue
		}
		for _, k := range accepted[table] {
			if !slices.Contains(doc, k) {
				t.Errorf("docs/configuration.md does not document `%s` of `%s` (a row of the table under ### `%s`)", k, table, table)
			}
		}
		for _, k := range doc {
			if !slices.Contains(accepted[table], k) {
				t.Errorf("docs/configuration.md documents `%s` of `%s`, which config.Config does not accept", k, table)
			}
		}
	}
	for _, table := range sortedKeys(documented) {
		if _, ok := accepted[table]; !ok {
			t.Errorf("docs/configuration.md documents table `%s` (keys %v), which config.Config does not have", table, documented[table])
		}
	}
}

// TestDocsConfigurationExample parses the complete example of
// docs/configuration.md: every key in it exists and every value is valid.
func TestDocsConfigurationExample(t *testing.T) {
	doc := readDocFile(t, "configuration.md")
	_, after, ok := strings.Cut(doc, "```toml\n")
	example, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("docs/configuration.md has no ```toml example")
	}
	if _, err := ParseConfig("docs/configuration.md's example", []byte(example)); err != nil {
		t.Errorf("the example does not parse: %v", err)
	}
}

// docMention is "`[table] key`", as the docs name a key in prose and
// tables (docs/network.md's "`[network] allow`").
var docMention = regexp.MustCompile("`\\[([A-Za-z0-9_.]+)\\] ([a-z_]+)`")

// TestDocsKeysMentionedExist checks every "`[table] key`" in docs/*.md and
// README.md against the keys config.Config accepts.
func TestDocsKeysMentionedExist(t *testing.T) {
	accepted := map[string][]string{}
	acceptedKeys(reflect.TypeOf(Config{}), "", false, accepted)
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	files = append(files, filepath.Join("..", "..", "README.md"))
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docMention.FindAllStringSubmatch(string(b), -1) {
			seen++
			table := "[" + m[1] + "]"
			if strings.HasPrefix(m[1], "credentials.") {
				table = "[credentials.NAME]"
			}
			if !slices.Contains(accepted[table], m[2]) && !slices.Contains(accepted["[["+m[1]+"]]"], m[2]) {
				t.Errorf("%s names `%s %s`, which config.Config does not accept", filepath.Base(f), "["+m[1]+"]", m[2])
			}
		}
	}
	if seen < 10 {
		t.Errorf("only %d mentions of `[table] key` found: the pattern is broken", seen)
	}
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
