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

// dockerfileBases are the images a Dockerfile takes from outside (FROM,
// COPY --from, RUN --mount=from=), with the ARGs declared before the
// first FROM (their defaults, or args) put in; earlier stages and scratch
// are left out. unknown are those it cannot tell: a name still holding a
// variable.
func dockerfileBases(path string, args map[string]string) (bases, unknown []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	bases, unknown = parseDockerfileBases(data, args)
	return bases, unknown, nil
}

func parseDockerfileBases(data []byte, args map[string]string) (bases, unknown []string) {
	if escapeDirective.Match(data) {
		// Lines continue at another character: what is an instruction
		// is not what this reading takes for one.
		return nil, []string{"(its # escape= directive)"}
	}
	// The ARGs before the first FROM are FROM's; a stage sees those it
	// declares again, and its own.
	global, stage := map[string]string{}, map[string]string{}
	stages := map[string]bool{}
	seenFrom := false
	// image takes a name from outside the build: a stage's name or index
	// is not.
	image := func(ref string, vars map[string]string) {
		ref = expandArgs(ref, vars)
		switch {
		case ref == "" || strings.EqualFold(ref, "scratch") || stages[strings.ToLower(ref)] || strings.Trim(ref, "0123456789") == "":
		case strings.Contains(ref, "$"):
			unknown = append(unknown, ref)
		default:
			bases = append(bases, ref)
		}
	}
	for _, line := range dockerfileInstructions(data) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "ARG":
			vars := global
			if seenFrom {
				vars = stage
			}
			for _, decl := range fields[1:] {
				k, v, hasDefault := strings.Cut(decl, "=")
				g, isGlobal := global[k]
				switch a, ok := args[k]; {
				case ok:
					vars[k] = a
				case hasDefault:
					vars[k] = expandArgs(strings.Trim(v, `"'`), vars)
				case seenFrom && isGlobal:
					vars[k] = g
				}
			}
		case "ONBUILD":
			unknown = append(unknown, "(an ONBUILD instruction)")
		case "FROM":
			seenFrom = true
			rest := fields[1:]
			for len(rest) > 0 && strings.HasPrefix(rest[0], "--") {
				rest = rest[1:] // --platform=...
			}
			if len(rest) == 0 {
				continue
			}
			image(rest[0], global)
			stage = map[string]string{}
			if len(rest) >= 3 && strings.EqualFold(rest[1], "AS") {
				stages[strings.ToLower(rest[2])] = true
			}
		case "COPY", "RUN":
			for _, f := range fields[1:] {
				if from, ok := strings.CutPrefix(f, "--from="); ok {
					image(from, stage)
				}
				if mount, ok := strings.CutPrefix(f, "--mount="); ok {
					for _, opt := range strings.Split(mount, ",") {
						if from, ok := strings.CutPrefix(opt, "from="); ok {
							image(from, stage)
						}
					}
				}
			}
		}
	}
	return bases, unknown
}

// escapeDirective is the parser directive that changes the escape
// character: a comment before the first instruction.
var escapeDirective = regexp.MustCompile(`(?im)\A(\s*#[^\n]*\n)*\s*#\s*escape\s*=`)

var argRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// expandArgs puts the ARG values into s as the Dockerfile's shell-like
// expansion does ($X, ${X}, ${X:-default}, ${X:+alternative}); a name
// without a value and without a default stays as written.
func expandArgs(s string, vars map[string]string) string {
	return argRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := argRef.FindStringSubmatch(m)
		v, set := vars[sub[1]+sub[4]]
		set = set && v != ""
		switch sub[2] {
		case "-":
			if !set {
				return sub[3]
			}
		case "+":
			if set {
				return sub[3]
			}
			return ""
		}
		if set {
			return v
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
