package devcontainer

import (
	"encoding/csv"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/devaipod/devaipod/internal/size"
)

// ParseMount parses the string form of a mount, the syntax of
// `docker run --mount`: comma-separated key=value fields (a field may be
// quoted as in CSV). type defaults to volume; source/src, target/dst/
// destination and readonly/ro are read; other fields are kept in Options.
// The mount is not validated here: see the rules in checkMount.
func ParseMount(s string) (Mount, error) {
	if strings.TrimSpace(s) == "" {
		return Mount{}, errors.New("empty mount: give type=...,source=...,target=...")
	}
	if strings.ContainsAny(s, "\r\n") {
		return Mount{}, fmt.Errorf("%q is not a mount: it spans several lines", s)
	}
	r := csv.NewReader(strings.NewReader(s))
	r.FieldsPerRecord = -1
	fields, err := r.Read()
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return Mount{}, fmt.Errorf("%q is not a mount (type=...,source=...,target=...): %v", s, err)
	}
	m := Mount{Type: MountVolume}
	for _, f := range fields {
		if strings.TrimSpace(f) == "" {
			continue
		}
		k, v, hasValue := strings.Cut(f, "=")
		switch strings.ToLower(k) {
		case "type":
			m.Type = v
		case "source", "src":
			m.Source = v
		case "target", "destination", "dst":
			m.Target = v
		case "readonly", "ro":
			if !hasValue {
				m.ReadOnly = true
				continue
			}
			switch strings.ToLower(v) {
			case "true", "1":
				m.ReadOnly = true
			case "false", "0":
				m.ReadOnly = false
			default:
				return Mount{}, fmt.Errorf("%s=%s: readonly takes true or false", k, v)
			}
		default:
			m.Options = append(m.Options, f)
		}
	}
	return m, nil
}

// parseVolume parses `-v SOURCE:TARGET[:OPTIONS]` or `-v TARGET` (an
// anonymous volume). A source starting with / is a host path (bind),
// anything else a volume name.
func parseVolume(s string) (Mount, error) {
	parts := strings.Split(s, ":")
	var m Mount
	switch len(parts) {
	case 1:
		m = Mount{Type: MountVolume, Target: parts[0]}
	case 2, 3:
		m = Mount{Type: MountVolume, Source: parts[0], Target: parts[1]}
		if strings.HasPrefix(parts[0], "/") {
			m.Type = MountBind
		}
		if len(parts) == 3 {
			for _, o := range strings.Split(parts[2], ",") {
				switch o {
				case "ro":
					m.ReadOnly = true
				case "rw", "":
				default:
					m.Options = append(m.Options, o)
				}
			}
		}
	default:
		return Mount{}, fmt.Errorf("%q is not a volume (SOURCE:TARGET[:OPTIONS])", s)
	}
	return m, nil
}

var volumeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// checkMount validates a mount. Without strict, values that still hold
// ${...} variables are not checked yet (Substitute checks them).
func checkMount(m Mount, strict bool) error {
	unresolved := func(s string) bool { return !strict && strings.Contains(s, "${") }
	switch m.Type {
	case MountBind, MountVolume, MountTmpfs:
	default:
		if !unresolved(m.Type) {
			return fmt.Errorf("type %q is not supported: use bind, volume or tmpfs", m.Type)
		}
	}
	if !unresolved(m.Target) {
		if err := checkContainerPath(m.Target); err != nil {
			return fmt.Errorf("target %w", err)
		}
	}
	if unresolved(m.Source) {
		return nil
	}
	switch m.Type {
	case MountBind:
		if m.Source == "" {
			return errors.New("a bind mount needs a source (the host path)")
		}
		if !strings.HasPrefix(m.Source, "/") {
			return fmt.Errorf("bind source %q must be an absolute host path", m.Source)
		}
	case MountVolume:
		if m.Source != "" && !volumeName.MatchString(m.Source) {
			if strings.Contains(m.Source, "/") {
				return fmt.Errorf("source %q is not a volume name; for a host path set type=bind", m.Source)
			}
			return fmt.Errorf("source %q is not a volume name (letters, digits, '_', '.', '-')", m.Source)
		}
	case MountTmpfs:
		if m.Source != "" {
			return fmt.Errorf("a tmpfs mount takes no source (got %q)", m.Source)
		}
		return checkTmpfsSize(m.Options, strict)
	}
	return nil
}

// checkTmpfsSize checks the size a tmpfs's options ask for (tmpfs-size=,
// or size= as --tmpfs takes it) with the one size parser, rather than let
// the plan fall back to its default size for a size it cannot read.
func checkTmpfsSize(opts []string, strict bool) error {
	for _, o := range opts {
		for _, k := range []string{"tmpfs-size=", "size="} {
			if v, ok := strings.CutPrefix(o, k); ok && (strict || !strings.Contains(v, "${")) {
				if _, err := size.Parse(v); err != nil {
					return fmt.Errorf("%s: %w", strings.TrimSuffix(k, "="), err)
				}
			}
		}
	}
	return nil
}

// checkContainerPath refuses what could not be a plain path in the
// container: relative paths and ".." elements.
func checkContainerPath(p string) error {
	if p == "" {
		return errors.New("is empty: it must be an absolute path in the container")
	}
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q must be an absolute path in the container", p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return fmt.Errorf("%q must not contain \"..\"", p)
		}
	}
	if path.Clean(p) == "/" {
		return fmt.Errorf("%q is the container's root directory", p)
	}
	return nil
}
