package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// A git config file read as git reads it (config.c's parser): a leading
// byte-order mark, comments, [section], [section "subsection"] (quoted,
// with backslash escapes) and the older [section.subsection], a key on the
// header's line, values with quotes, escapes and continued lines, keys
// without a value (true). inspect-git judges what git would read, so it
// must not read it otherwise: FuzzGitConfig holds it to git's own reading.

// gitConfigEntry is one variable of a config file.
type gitConfigEntry struct {
	// Section and Key are lower case; Subsection is as written (lower
	// case in the older [section.subsection] syntax), when HasSubsection.
	Section, Subsection, Key string
	HasSubsection            bool
	Value                    string
	// NoValue: the key stands alone (a boolean true).
	NoValue bool
}

// Name is the entry as git config --list names it.
func (e gitConfigEntry) Name() string {
	switch {
	case e.HasSubsection:
		return e.Section + "." + e.Subsection + "." + e.Key
	case e.Section == "":
		return e.Key // before any section header
	}
	return e.Section + "." + e.Key
}

// errBadConfig is a file git refuses to read.
var errBadConfig = errors.New("git refuses this configuration")

// parseGitConfig reads a config file's entries, or fails where git fails.
func parseGitConfig(data []byte) ([]gitConfigEntry, error) {
	p := &gitConfigParser{data: bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")), line: 1}
	var entries []gitConfigEntry
	var section, subsection string
	var hasSubsection bool
	comment := false
	for {
		c, ok := p.next()
		if !ok {
			return entries, nil
		}
		switch {
		case c == '\n':
			comment = false
			continue
		case comment || isConfigSpace(c):
			continue
		case c == '#' || c == ';':
			comment = true
			continue
		case c == '[':
			var err error
			if section, subsection, hasSubsection, err = p.header(); err != nil {
				return nil, err
			}
			continue
		case !isAlpha(c):
			return nil, p.bad()
		}
		key := []byte{lower(c)}
		for {
			c, ok = p.next()
			if !ok || !(isAlnum(c) || c == '-') {
				break
			}
			key = append(key, lower(c))
		}
		for ok && (c == ' ' || c == '\t') {
			c, ok = p.next()
		}
		e := gitConfigEntry{Section: section, Subsection: subsection, HasSubsection: hasSubsection, Key: string(key)}
		switch {
		case !ok || c == '\n':
			e.NoValue = true
		case c == '=':
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			e.Value = v
		default:
			return nil, p.bad()
		}
		entries = append(entries, e)
	}
}

type gitConfigParser struct {
	data []byte
	pos  int
	line int
}

// next is the next byte, "\r\n" read as "\n"; false at the end.
func (p *gitConfigParser) next() (byte, bool) {
	if p.pos >= len(p.data) {
		return 0, false
	}
	c := p.data[p.pos]
	p.pos++
	if c == '\r' && p.pos < len(p.data) && p.data[p.pos] == '\n' {
		c = '\n'
		p.pos++
	}
	if c == '\n' {
		p.line++
	}
	return c, true
}

func (p *gitConfigParser) bad() error {
	return fmt.Errorf("line %d: %w", p.line, errBadConfig)
}

// header reads a section header after its '['.
func (p *gitConfigParser) header() (section, subsection string, hasSubsection bool, err error) {
	var name []byte
	for {
		c, ok := p.next()
		switch {
		case !ok:
			return "", "", false, p.bad()
		case c == ']':
			if len(name) == 0 {
				return "", "", false, p.bad()
			}
			// [section.subsection], the older syntax: lower case.
			s := strings.ToLower(string(name))
			base, sub, dotted := strings.Cut(s, ".")
			return base, sub, dotted, nil
		case isConfigSpace(c) || c == '\n':
			if c == '\n' {
				return "", "", false, p.bad()
			}
			sub, err := p.subsection()
			// [ "sub"] is the section "" as git reads it: refused
			// below by the empty name check of the caller's key.
			return strings.ToLower(string(name)), sub, true, err
		case isAlnum(c) || c == '-' || c == '.':
			name = append(name, c)
		default:
			return "", "", false, p.bad()
		}
	}
}

// subsection reads ` "subsection"]` after a section's name.
func (p *gitConfigParser) subsection() (string, error) {
	c, ok := p.next()
	for ok && isConfigSpace(c) {
		c, ok = p.next()
	}
	if !ok || c != '"' {
		return "", p.bad()
	}
	var sub []byte
	for {
		c, ok = p.next()
		if !ok || c == '\n' {
			return "", p.bad()
		}
		if c == '"' {
			break
		}
		if c == '\\' {
			if c, ok = p.next(); !ok || c == '\n' {
				return "", p.bad()
			}
		}
		sub = append(sub, c)
	}
	if c, ok = p.next(); !ok || c != ']' {
		return "", p.bad()
	}
	return string(sub), nil
}

// value reads a value after its '=', to the end of its line.
func (p *gitConfigParser) value() (string, error) {
	var v, spaces []byte
	quote, comment := false, false
	for {
		c, ok := p.next()
		if !ok || c == '\n' {
			if quote {
				return "", p.bad()
			}
			return string(v), nil
		}
		if comment {
			continue
		}
		if !quote {
			if isConfigSpace(c) {
				if len(v) > 0 {
					spaces = append(spaces, ' ') // as git 2.39 does, whatever the space
				}
				continue
			}
			if c == ';' || c == '#' {
				comment = true
				continue
			}
		}
		v, spaces = append(v, spaces...), spaces[:0]
		switch c {
		case '\\':
			c, ok = p.next()
			switch {
			case !ok || c == '\n':
				continue // a continued line (git reads the end as one)
			case c == 't':
				c = '\t'
			case c == 'b':
				c = '\b'
			case c == 'n':
				c = '\n'
			case c == '\\' || c == '"':
			default:
				return "", p.bad()
			}
		case '"':
			quote = !quote
			continue
		}
		v = append(v, c)
	}
}

// isConfigSpace is git's isspace but for '\n' (git's own ctype: not \v
// nor \f).
func isConfigSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }
func isAlpha(c byte) bool       { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isAlnum(c byte) bool       { return isAlpha(c) || c >= '0' && c <= '9' }
func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
