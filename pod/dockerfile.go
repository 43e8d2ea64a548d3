package pod

import (
	"bufio"
	"bytes"
	"os"
	"regexp"
	"strings"
)

// An untrusted repository's Dockerfile build pulls nothing itself (podman
// would pull its base images with the user's registry logins): up pulls
// the base images its FROM lines name without logins first, then builds
// with pulls off. A base image this reading misses makes the build fail,
// naming it, rather than pulled with the logins.

// dockerfileBases are the images a Dockerfile's FROM lines (and COPY
// --from) name, with the
// ARGs declared before the first FROM (their defaults, or args) put in;
// earlier stages, scratch and names still holding a variable are left out.
func dockerfileBases(path string, args map[string]string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseDockerfileBases(data, args), nil
}

func parseDockerfileBases(data []byte, args map[string]string) []string {
	global := map[string]string{}
	stages := map[string]bool{}
	var bases []string
	seenFrom := false
	for _, line := range dockerfileInstructions(data) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "ARG":
			if seenFrom {
				continue
			}
			for _, decl := range fields[1:] {
				k, v, hasDefault := strings.Cut(decl, "=")
				if a, ok := args[k]; ok {
					global[k] = a
				} else if hasDefault {
					global[k] = strings.Trim(v, `"'`)
				}
			}
		case "FROM":
			seenFrom = true
			rest := fields[1:]
			for len(rest) > 0 && strings.HasPrefix(rest[0], "--") {
				rest = rest[1:] // --platform=...
			}
			if len(rest) == 0 {
				continue
			}
			image := expandArgs(rest[0], global)
			if image != "" && !strings.EqualFold(image, "scratch") && !stages[strings.ToLower(image)] && !strings.Contains(image, "$") {
				bases = append(bases, image)
			}
			if len(rest) >= 3 && strings.EqualFold(rest[1], "AS") {
				stages[strings.ToLower(rest[2])] = true
			}
		case "COPY":
			// COPY --from=IMAGE copies from an image too (a stage's name or
			// index otherwise).
			for _, f := range fields[1:] {
				from, ok := strings.CutPrefix(f, "--from=")
				if !ok || stages[strings.ToLower(from)] || strings.Trim(from, "0123456789") == "" || strings.Contains(from, "$") {
					continue
				}
				bases = append(bases, from)
			}
		}
	}
	return bases
}

var argRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[-+]([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// expandArgs puts the ARG values into s ($X, ${X}, ${X:-default}); a name
// without a value stays as written.
func expandArgs(s string, vars map[string]string) string {
	return argRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := argRef.FindStringSubmatch(m)
		name := sub[1] + sub[3]
		if v, ok := vars[name]; ok && v != "" {
			return v
		}
		if strings.HasPrefix(m, "${") && strings.Contains(m, ":-") {
			return sub[2]
		}
		return m
	})
}

// dockerfileInstructions are a Dockerfile's instructions, one a string:
// comments and blank lines dropped, continued lines joined.
func dockerfileInstructions(data []byte) []string {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}
