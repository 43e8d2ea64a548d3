package devcontainer

// decoder walks a parsed JSONC document and records errors by key and line.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/tailscale/hujson"
)

var hujsonErr = regexp.MustCompile(`^hujson: line (\d+), column (\d+): (.*)$`)

func syntaxError(file string, err error) error {
	e := &Error{File: file, Msg: "syntax error: " + err.Error()}
	if m := hujsonErr.FindStringSubmatch(err.Error()); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Column, _ = strconv.Atoi(m[2])
		e.Msg = "syntax error: " + m[3]
	}
	return e
}

// tooDeep reports the position of the first bracket nested deeper than
// maxDepth, skipping strings and comments; hujson recurses once per level.
func tooDeep(b []byte) (line, col int, deep bool) {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case c == '/' && i+1 < len(b) && b[i+1] == '/':
			for i < len(b) && b[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			end := bytes.Index(b[i+2:], []byte("*/"))
			if end < 0 {
				return 0, 0, false // hujson reports the unterminated comment
			}
			i += end + 3
		case c == '{' || c == '[':
			depth++
			if depth > maxDepth {
				line = 1 + bytes.Count(b[:i], []byte("\n"))
				col = i - bytes.LastIndexByte(b[:i], '\n')
				return line, col, true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return 0, 0, false
}

// blank reports whether b holds only whitespace and comments.
func blank(b []byte) bool {
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n':
		case bytes.HasPrefix(b[i:], []byte("//")):
			for i < len(b) && b[i] != '\n' {
				i++
			}
		case bytes.HasPrefix(b[i:], []byte("/*")):
			end := bytes.Index(b[i+2:], []byte("*/"))
			if end < 0 {
				return false
			}
			i += end + 3
		default:
			return false
		}
	}
	return true
}

func lineStarts(b []byte) []int {
	starts := []int{0}
	for i, c := range b {
		if c == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// decoder walks hujson's syntax tree, which keeps byte offsets, so that
// every type error can name its line and key.
type decoder struct {
	file       string
	data       []byte
	lineStarts []int
	errs       Errors
	lines      map[string]int
}

func (d *decoder) line(off int) int {
	return sort.Search(len(d.lineStarts), func(i int) bool { return d.lineStarts[i] > off })
}

func (d *decoder) errorf(v *hujson.Value, key, format string, args ...any) {
	e := &Error{File: d.file, Key: key, Msg: fmt.Sprintf(format, args...)}
	if v != nil {
		e.Line = d.line(v.StartOffset)
	}
	d.errs = append(d.errs, e)
}

func (d *decoder) mark(key string, v *hujson.Value) {
	if _, ok := d.lines[key]; !ok {
		d.lines[key] = d.line(v.StartOffset)
	}
}

func kindName(v *hujson.Value) string {
	switch v.Value.Kind() {
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "a value"
}

func (d *decoder) wrongType(v *hujson.Value, key, want string) {
	d.errorf(v, key, "must be %s, not %s", want, kindName(v))
}

// member is one object member whose name is decoded.
type member struct {
	name  string
	key   string // the dotted key in error messages
	value *hujson.Value
}

// object returns v's members, refusing duplicate names: JSON parsers
// disagree on which duplicate wins, and a reviewer reads the first one.
func (d *decoder) object(v *hujson.Value, key string) ([]member, bool) {
	obj, ok := v.Value.(*hujson.Object)
	if !ok {
		d.wrongType(v, key, "an object")
		return nil, false
	}
	d.mark(key, v)
	seen := map[string]int{}
	var out []member
	for i := range obj.Members {
		m := &obj.Members[i]
		name := m.Name.Value.(hujson.Literal).String()
		k := name
		if key != "" {
			k = key + "." + name
		}
		if first, dup := seen[name]; dup {
			d.errorf(&m.Name, k, "set twice (first on line %d); remove one", first)
			continue
		}
		seen[name] = d.line(m.Name.StartOffset)
		d.mark(k, &m.Name)
		out = append(out, member{name: name, key: k, value: &m.Value})
	}
	return out, true
}

func (d *decoder) str(v *hujson.Value, key string) (string, bool) {
	lit, ok := v.Value.(hujson.Literal)
	if !ok || lit.Kind() != '"' {
		d.wrongType(v, key, "a string")
		return "", false
	}
	d.mark(key, v)
	s := lit.String()
	if strings.ContainsRune(s, 0) {
		d.errorf(v, key, "must not contain a NUL character")
		return "", false
	}
	return s, true
}

func (d *decoder) boolean(v *hujson.Value, key string) (bool, bool) {
	lit, ok := v.Value.(hujson.Literal)
	if !ok || (lit.Kind() != 't' && lit.Kind() != 'f') {
		d.wrongType(v, key, "true or false")
		return false, false
	}
	d.mark(key, v)
	return lit.Bool(), true
}

// integer accepts a JSON number without a fraction.
func (d *decoder) integer(v *hujson.Value, key string) (int64, bool) {
	lit, ok := v.Value.(hujson.Literal)
	if !ok || lit.Kind() != '0' {
		d.wrongType(v, key, "a number")
		return 0, false
	}
	d.mark(key, v)
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		d.errorf(v, key, "must be a whole number, not %s", lit)
		return 0, false
	}
	return int64(f), true
}

func (d *decoder) array(v *hujson.Value, key, want string) ([]*hujson.Value, bool) {
	arr, ok := v.Value.(*hujson.Array)
	if !ok {
		d.wrongType(v, key, want)
		return nil, false
	}
	d.mark(key, v)
	out := make([]*hujson.Value, len(arr.Elements))
	for i := range arr.Elements {
		out[i] = &arr.Elements[i]
		d.mark(fmt.Sprintf("%s[%d]", key, i), out[i])
	}
	return out, true
}

// elem returns element i of an array value (v itself when out of range).
func (d *decoder) elem(v *hujson.Value, i int) *hujson.Value {
	if arr, ok := v.Value.(*hujson.Array); ok && i >= 0 && i < len(arr.Elements) {
		return &arr.Elements[i]
	}
	return v
}

func (d *decoder) strList(v *hujson.Value, key string) ([]string, bool) {
	elems, ok := d.array(v, key, "an array of strings")
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(elems))
	good := true
	for i, e := range elems {
		s, ok := d.str(e, fmt.Sprintf("%s[%d]", key, i))
		good = good && ok
		out = append(out, s)
	}
	return out, good
}

// strOrList accepts a string (one element) or an array of strings.
func (d *decoder) strOrList(v *hujson.Value, key string) ([]string, bool) {
	if lit, ok := v.Value.(hujson.Literal); ok && lit.Kind() == '"' {
		s, ok := d.str(v, key)
		return []string{s}, ok
	}
	if _, ok := v.Value.(*hujson.Array); !ok {
		d.wrongType(v, key, "a string or an array of strings")
		return nil, false
	}
	return d.strList(v, key)
}

// envMap reads an object of variable names to strings; with allowNull,
// null values are returned separately (remoteEnv's "unset").
func (d *decoder) envMap(v *hujson.Value, key string, allowNull bool) (map[string]string, []string) {
	members, ok := d.object(v, key)
	if !ok {
		return nil, nil
	}
	env := map[string]string{}
	var unset []string
	for _, m := range members {
		if !validEnvName(m.name) {
			d.errorf(m.value, m.key, "%q is not a variable name (it must be non-empty, without '=' or NUL)", m.name)
			continue
		}
		if allowNull {
			if lit, ok := m.value.Value.(hujson.Literal); ok && lit.Kind() == 'n' {
				unset = append(unset, m.name)
				continue
			}
		}
		if s, ok := d.str(m.value, m.key); ok {
			env[m.name] = s
		}
	}
	sort.Strings(unset)
	return env, unset
}

func validEnvName(n string) bool {
	return n != "" && !strings.ContainsAny(n, "=\x00")
}

func findMember(ms []member, name string) (*member, bool) {
	for i := range ms {
		if ms[i].name == name {
			return &ms[i], true
		}
	}
	return nil, false
}

// plain converts a hujson subtree to the values encoding/json produces.
func plain(v *hujson.Value) (any, error) {
	c := v.Clone()
	c.Standardize()
	dec := json.NewDecoder(bytes.NewReader(c.Pack()))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}
