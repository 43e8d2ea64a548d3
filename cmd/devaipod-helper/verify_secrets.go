package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ---- host secrets ----

// homeSecrets are credential stores under a home directory (the list the
// host side refuses to mount, pod.HomeSecrets, plus devaipod's config
// folder).
var homeSecrets = []string{".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".gcloud", ".kube", ".docker",
	".netrc", ".npmrc", ".config/containers", ".local/share/containers", ".config/devaipod.toml",
	".config/devaipod", ".git-credentials", ".config/git/credentials", ".config/gh"}

// systemSecrets are secrets outside home directories: container storage
// and registry credentials, and where trusted secrets are mounted in the
// workspace container (podman's /run/secrets, devaipod's secret files).
var systemSecrets = []string{"/var/lib/containers", "/run/containers", "/run/user/*/containers",
	"/run/devaipod/secrets", "/run/secrets"}

func (v *verifier) hostSecrets(_ context.Context) (verifyResult, string) {
	homes := []string{"/root"}
	if v.home != "" {
		homes = append([]string{v.home}, homes...)
	}
	homes = append(homes, v.glob("/home/*")...)
	var candidates []string
	for _, h := range homes {
		for _, s := range homeSecrets {
			candidates = append(candidates, path.Join(h, s))
		}
	}
	if xdg := envValue(v.environ, "XDG_CONFIG_HOME"); xdg != "" && path.IsAbs(xdg) {
		candidates = append(candidates, path.Join(xdg, "devaipod.toml"), path.Join(xdg, "devaipod"))
	}
	for _, s := range systemSecrets {
		candidates = append(candidates, v.glob(s)...)
	}
	slices.Sort(candidates)
	candidates = slices.Compact(candidates)
	var exposed, unreadable []string
	for _, c := range candidates {
		switch readable, what := v.exposed(c); {
		case readable:
			exposed = append(exposed, what)
		case what != "":
			unreadable = append(unreadable, what)
		}
	}
	if len(exposed) > 0 {
		return verifyFail, "readable: " + listSome(exposed, 6)
	}
	detail := fmt.Sprintf("none of %d places is there with anything readable", len(candidates))
	if len(unreadable) > 0 {
		detail += "; present but unreadable or empty: " + listSome(unreadable, 4)
	}
	return verifyPass, detail
}

// glob expands a pattern in the container's view; a plain path comes back
// as is.
func (v *verifier) glob(pattern string) []string {
	if !strings.ContainsAny(pattern, "*?[") {
		return []string{pattern}
	}
	matches, _ := filepath.Glob(v.path(pattern))
	var out []string
	for _, m := range matches {
		out = append(out, "/"+filepath.ToSlash(strings.TrimPrefix(strings.TrimPrefix(m, v.root), "/")))
	}
	return out
}

// exposed tells whether p holds something readable: a non-empty file that
// opens, or a folder that lists with at least one entry. what names p for
// the report, "" when p does not exist.
func (v *verifier) exposed(p string) (readable bool, what string) {
	fi, err := os.Stat(v.path(p))
	if errors.Is(err, fs.ErrNotExist) {
		return false, ""
	}
	if err != nil {
		return false, p
	}
	if fi.IsDir() {
		entries, err := os.ReadDir(v.path(p))
		if err == nil && len(entries) > 0 {
			return true, fmt.Sprintf("%s (%d entries)", p, len(entries))
		}
		return false, p
	}
	f, err := os.Open(v.path(p))
	if err != nil {
		return false, p
	}
	f.Close()
	if fi.Size() > 0 {
		return true, fmt.Sprintf("%s (%d bytes)", p, fi.Size())
	}
	return false, p
}

// ---- trusted environment ----

func envValue(environ []string, name string) string {
	for _, kv := range environ {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			return val
		}
	}
	return ""
}

// secretMatcher finds trusted names and values without ever holding a
// value: values are compared by their SHA-256.
type secretMatcher struct {
	names  map[string]bool
	hashes map[string]bool
}

func newSecretMatcher(o *verifyOptions) secretMatcher {
	m := secretMatcher{names: map[string]bool{}, hashes: map[string]bool{}}
	for _, n := range o.secretVars {
		m.names[n] = true
	}
	for _, h := range o.secretHashes {
		m.hashes[h] = true
	}
	return m
}

func (m secretMatcher) empty() bool { return len(m.names) == 0 && len(m.hashes) == 0 }

func (m secretMatcher) hashMatches(s string) bool {
	if len(m.hashes) == 0 || s == "" {
		return false
	}
	sum := sha256.Sum256([]byte(s))
	return m.hashes[hex.EncodeToString(sum[:])]
}

// inEnviron looks at "NAME=VALUE" entries and says what it found, naming
// variables but never printing a value.
func (m secretMatcher) inEnviron(entries []string) []string {
	var found []string
	for _, kv := range entries {
		k, val, _ := strings.Cut(kv, "=")
		switch {
		case m.names[k]:
			found = append(found, k+" is set")
		case m.hashMatches(val):
			found = append(found, k+" holds a trusted value")
		}
	}
	return found
}

// inArgs looks at a command line: each argument, and what follows "=" in
// it (--token=VALUE).
func (m secretMatcher) inArgs(args []string) bool {
	for _, a := range args {
		_, after, _ := strings.Cut(a, "=")
		if m.hashMatches(a) || m.hashMatches(after) {
			return true
		}
	}
	return false
}

func (v *verifier) trustedEnv(_ context.Context) (verifyResult, string) {
	m := newSecretMatcher(v.opts)
	if m.empty() {
		return verifyNA, "nothing to look for: no --secret-var or --secret-value-sha256 given"
	}
	var found []string
	for _, f := range m.inEnviron(v.environ) {
		found = append(found, "own environment: "+f)
	}
	pids, err := v.listPIDs()
	if err != nil {
		return verifyFail, "cannot list /proc: " + errText(err)
	}
	readable, unreadable := 0, 0
	for _, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid)
		data, err := v.readFile(dir + "/environ")
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				unreadable++
			}
			continue
		}
		readable++
		who := fmt.Sprintf("PID %d (%s)", pid, v.comm(pid))
		for _, f := range m.inEnviron(strings.Split(string(data), "\x00")) {
			found = append(found, who+" environment: "+f)
		}
		if cmdline, err := v.readFile(dir + "/cmdline"); err == nil && m.inArgs(strings.Split(string(cmdline), "\x00")) {
			found = append(found, who+" command line holds a trusted value")
		}
	}
	if len(found) > 0 {
		return verifyFail, listSome(found, 5)
	}
	return verifyPass, fmt.Sprintf("%d names and %d hashes absent from this environment and %d readable /proc/*/environ (%d unreadable)",
		len(m.names), len(m.hashes), readable, unreadable)
}

// Bounds of the file scan: it must finish on a large repository.
const (
	scanMaxFiles    = 50000
	scanMaxFileSize = 1 << 20
	scanMaxBytes    = 256 << 20
	scanMaxTime     = 20 * time.Second
	// scanMinValue: shorter words are not hashed (a trusted value that
	// short is no secret).
	scanMinValue = 8
)

func (v *verifier) trustedEnvFiles(ctx context.Context) (verifyResult, string) {
	m := newSecretMatcher(v.opts)
	if len(m.hashes) == 0 {
		return verifyNA, "no hash of a trusted value given (--secret-value-sha256, --secret-hashes-file): files can only be searched for a value's hash"
	}
	roots := []string{"/tmp", "/run", "/etc", "/opt"}
	if v.home != "" {
		roots = append([]string{v.home}, roots...)
	}
	if v.opts.workspace != "" {
		roots = append([]string{v.opts.workspace}, roots...)
	}
	ctx, cancel := context.WithTimeout(ctx, scanMaxTime)
	defer cancel()
	var found []string
	files, skipped, total := 0, 0, int64(0)
	stopped := ""
	seen := map[string]bool{}
	for _, r := range roots {
		filepath.WalkDir(v.path(r), func(p string, d fs.DirEntry, err error) error {
			switch {
			case stopped != "":
				return filepath.SkipAll
			case ctx.Err() != nil:
				stopped = "time limit"
				return filepath.SkipAll
			case err != nil:
				return nil
			case d.IsDir():
				skip := d.Name() == "node_modules" || d.Name() == ".cache" || (d.Name() == "objects" && filepath.Base(filepath.Dir(p)) == ".git")
				if seen[p] || (skip && p != v.path(r)) {
					return filepath.SkipDir
				}
				seen[p] = true
				return nil
			case !d.Type().IsRegular():
				return nil
			}
			if files >= scanMaxFiles || total >= scanMaxBytes {
				stopped = "size limit"
				return filepath.SkipAll
			}
			fi, err := d.Info()
			if err != nil || fi.Size() > scanMaxFileSize {
				skipped++
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			files++
			total += int64(len(data))
			if m.inText(data) {
				found = append(found, "/"+filepath.ToSlash(strings.TrimPrefix(strings.TrimPrefix(p, v.root), "/")))
			}
			return nil
		})
	}
	if len(found) > 0 {
		return verifyFail, "a trusted value is in " + listSome(found, 5)
	}
	detail := fmt.Sprintf("not in %d files under %s (%d larger than %d MiB skipped)",
		files, strings.Join(roots, " "), skipped, scanMaxFileSize>>20)
	if stopped != "" {
		detail += "; stopped early at the " + stopped
	}
	return verifyPass, detail
}

// inText looks for a hashed value in a file: as a whole line, as a word
// (split at white space and quotes), or after the first "=" or ":" of
// either (NAME=VALUE, "key": "VALUE").
func (m secretMatcher) inText(data []byte) bool {
	check := func(s string) bool {
		s = strings.TrimRight(s, ",;")
		if len(s) < scanMinValue {
			return false
		}
		if m.hashMatches(s) {
			return true
		}
		for _, sep := range []string{"=", ":"} {
			if _, after, ok := strings.Cut(s, sep); ok && len(after) >= scanMinValue && m.hashMatches(strings.Trim(after, `"' `)) {
				return true
			}
		}
		return false
	}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 64<<10), scanMaxFileSize)
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export "))
		if check(line) {
			return true
		}
		for _, w := range strings.FieldsFunc(line, func(r rune) bool { return r == '"' || r == '\'' || r == '`' || r == ' ' || r == '\t' }) {
			if check(w) {
				return true
			}
		}
	}
	return false
}
