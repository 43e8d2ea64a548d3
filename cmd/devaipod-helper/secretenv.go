package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/devaipod/devaipod/internal/cmdline"
	"github.com/moby/sys/user"
)

// secret-env runs a command with variables read from files: one file per
// variable, named after it. devaipod mounts the trusted side's secrets as
// such files (root-only, in the workspace) instead of as environment, because
// podman 4.3's inspect shows the values of environment secrets.
//
// `devaipod exec` runs it as root (podman exec --user 0) so that it can read
// those files, and has it switch to the devcontainer's remoteUser (--user)
// before it runs the command (remoteEnv is in the container's environment).

var envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// The container's account files, which --user is resolved against. Tests
// point them elsewhere.
var (
	passwdPath = "/etc/passwd"
	groupPath  = "/etc/group"
)

// secretEnvOptions are secret-env's flags.
type secretEnvOptions struct {
	dir, umask, user string
	env, groupAdd    []string
	hashes           bool
}

func newSecretEnvFlagSet(o *secretEnvOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("secret-env", flag.ContinueOnError)
	fs.StringVar(&o.dir, "dir", "/run/devaipod/secrets", "directory holding one file per variable (\"\": none)")
	fs.StringVar(&o.umask, "umask", "", "octal umask for CMD (default: unchanged)")
	fs.StringVar(&o.user, "user", "",
		"run CMD as `SPEC`: NAME, UID, NAME:GROUP or UID:GID, after DIR is read (default: this process's user)")
	fs.Var(cmdline.ListFlag(&o.groupAdd, checkGID), "group-add",
		"with --user, also give CMD the supplementary group `GID` (repeatable)")
	fs.Var(cmdline.ListFlag(&o.env, checkEnvFlag), "env",
		"set `NAME=VALUE` in CMD's environment (repeatable); DIR's variables win over it")
	fs.BoolVar(&o.hashes, "print-hashes", false, "print NAME SHA256 of each variable instead of running a command (for devaipod verify)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper secret-env [--dir DIR] [--umask MASK] [--user SPEC]
         [--group-add GID]... [--env NAME=VALUE]... -- CMD [ARGS...]
       devaipod-helper secret-env [--dir DIR] --print-hashes

Run CMD with each file of DIR as a variable (file name = variable name). A
missing DIR, or --dir "", means no variables. CMD is looked up in the PATH of
its own environment.

With --user, DIR is read first (its files are root-only), then the process
becomes SPEC, resolved as podman exec --user resolves it, against /etc/passwd
and /etc/group: a NAME must have a passwd entry; a UID need not (it then gets
GID 0 and HOME /); the GID is the passwd entry's unless GROUP (a name from
/etc/group, or a number) is given; the supplementary groups are the /etc/group
entries that list the user, when no GROUP is given, and none else, plus each
--group-add GID (devaipod adds the agent's group, which owns the shared copy
of the repository). CMD gets HOME, USER and LOGNAME of SPEC (no USER and
LOGNAME for a UID without an entry). Switching needs root, unless the process
already runs as SPEC's uid and gid, in which case nothing is switched (and no
group is added).

CMD's environment, from lowest to highest precedence: this process's
environment, HOME/USER/LOGNAME of --user, --env values, DIR's variables.

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

// checkGID checks a --group-add value: a numeric group id.
func checkGID(s string) error {
	if _, err := strconv.ParseUint(s, 10, 32); err != nil {
		return fmt.Errorf("%q is not a numeric group id", s)
	}
	return nil
}

// checkEnvFlag checks an --env value: NAME=VALUE, VALUE possibly empty.
// NAME is anything without "=", as podman and the devcontainer spec allow
// (remoteEnv names such as "npm_config_cache" or "MY-VAR" both occur).
func checkEnvFlag(s string) error {
	name, _, ok := strings.Cut(s, "=")
	if !ok {
		return errors.New("want NAME=VALUE")
	}
	if name == "" {
		return errors.New("empty variable name")
	}
	return nil
}

func runSecretEnv(args []string, stdout, stderr io.Writer) int {
	var o secretEnvOptions
	fs := newSecretEnvFlagSet(&o)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	if o.hashes {
		if o.user != "" || len(o.env) > 0 || len(o.groupAdd) > 0 {
			fmt.Fprintf(stderr, "%ssecret-env: --print-hashes runs no command: --user, --group-add and --env do not apply\n", logPrefix)
			return 2
		}
		env, err := secretEnv(nil, o.dir)
		if err != nil {
			fmt.Fprintf(stderr, "%ssecret-env: %v\n", logPrefix, err)
			return 1
		}
		for _, kv := range env {
			name, value, _ := strings.Cut(kv, "=")
			fmt.Fprintf(stdout, "%s %x\n", name, sha256.Sum256([]byte(value)))
		}
		return 0
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintf(stderr, "%ssecret-env: no command given\n", logPrefix)
		return 2
	}
	if o.user != "" && !validUserSpec(o.user) {
		fmt.Fprintf(stderr, "%ssecret-env: --user %q is not NAME, UID, NAME:GROUP or UID:GID\n", logPrefix, o.user)
		return 2
	}
	if o.user == "" && len(o.groupAdd) > 0 {
		fmt.Fprintf(stderr, "%ssecret-env: --group-add needs --user\n", logPrefix)
		return 2
	}
	if o.umask != "" {
		mask, err := strconv.ParseUint(o.umask, 8, 32)
		if err != nil || mask > 0o777 {
			fmt.Fprintf(stderr, "%ssecret-env: --umask %q is not an octal mask\n", logPrefix, o.umask)
			return 2
		}
		syscall.Umask(int(mask))
	}
	// Everything that needs root is read before the switch.
	secrets, err := secretEnv(nil, o.dir)
	if err != nil {
		fmt.Fprintf(stderr, "%ssecret-env: %v\n", logPrefix, err)
		return 1
	}
	var as *runAs
	if o.user != "" {
		u, err := resolveUserFiles(o.user, passwdPath, groupPath)
		if err != nil {
			fmt.Fprintf(stderr, "%ssecret-env: %v\n", logPrefix, err)
			return 1
		}
		u.addGroups(o.groupAdd)
		if err := switchUser(o.user, u); err != nil {
			fmt.Fprintf(stderr, "%ssecret-env: %v\n", logPrefix, err)
			return 1
		}
		as = &u
	}
	env := commandEnv(os.Environ(), as, o.env, secrets)
	// Looked up after the switch, as the user, in CMD's own PATH (--env may
	// set it, as a remoteEnv often does).
	path, err := lookPathIn(argv[0], env)
	if err != nil {
		fmt.Fprintf(stderr, "%ssecret-env: %v\n", logPrefix, err)
		return 127
	}
	err = syscall.Exec(path, argv, env)
	fmt.Fprintf(stderr, "%ssecret-env: exec %s: %v\n", logPrefix, argv[0], err)
	return 126
}

// secretEnv returns base with one VAR=content entry per file of dir.
func secretEnv(base []string, dir string) ([]string, error) {
	if dir == "" {
		return base, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return base, nil
	}
	if err != nil {
		return nil, err
	}
	env := append([]string(nil), base...)
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !envVarName.MatchString(name) {
			continue
		}
		value, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		env = append(removeVar(env, name), name+"="+string(value))
	}
	return env, nil
}

// commandEnv returns CMD's environment. Each layer wins over the ones
// before it:
//
//  1. base, the environment secret-env inherited (podman exec's: the
//     container's, the devcontainer's containerEnv and remoteEnv among it,
//     which come from the repository's devcontainer.json);
//  2. HOME, USER and LOGNAME of as, when --user was given (as is not nil);
//  3. extra, the --env values;
//  4. secrets, the trusted side's variables from --dir.
//
// The secrets come last on purpose: a repository must not be able to
// replace the user's credentials with values of its choosing (its own
// token, an API base URL it controls) by naming them in its
// devcontainer.json.
func commandEnv(base []string, as *runAs, extra, secrets []string) []string {
	env := append([]string(nil), base...)
	if as != nil {
		env = setVar(env, "HOME="+as.home)
		if as.name != "" {
			env = setVar(env, "USER="+as.name)
			env = setVar(env, "LOGNAME="+as.name)
		} else {
			// Inherited ones would name another user (root).
			env = removeVar(removeVar(env, "USER"), "LOGNAME")
		}
	}
	for _, kv := range extra {
		env = setVar(env, kv)
	}
	for _, kv := range secrets {
		env = setVar(env, kv)
	}
	return env
}

// setVar returns env with kv (NAME=VALUE) replacing any NAME.
func setVar(env []string, kv string) []string {
	name, _, _ := strings.Cut(kv, "=")
	return append(removeVar(env, name), kv)
}

func removeVar(env []string, name string) []string {
	out := env[:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// lookPathIn finds file as exec.LookPath does, in env's PATH rather than
// this process's (about to be replaced, so it is changed freely).
func lookPathIn(file string, env []string) (string, error) {
	path, ok := "", false
	for _, kv := range env {
		if v, found := strings.CutPrefix(kv, "PATH="); found {
			path, ok = v, true
		}
	}
	if ok {
		os.Setenv("PATH", path)
	} else {
		os.Unsetenv("PATH")
	}
	return exec.LookPath(file)
}

// runAs is the user that --user names, resolved.
type runAs struct {
	name   string // "" for a UID without a passwd entry
	uid    int
	gid    int
	groups []int // supplementary groups
	home   string
}

// addGroups adds the supplementary groups gids (checked by checkGID) that
// the user does not have yet.
func (as *runAs) addGroups(gids []string) {
	for _, s := range gids {
		gid, _ := strconv.Atoi(s)
		if !slices.Contains(as.groups, gid) {
			as.groups = append(as.groups, gid)
		}
	}
}

// validUserSpec reports whether spec has the shape NAME, UID, NAME:GROUP or
// UID:GID (GROUP a name or a number).
func validUserSpec(spec string) bool {
	u, g, hasGroup := strings.Cut(spec, ":")
	return u != "" && (!hasGroup || g != "" && !strings.Contains(g, ":"))
}

// resolveUserFiles resolves spec against the passwd and group files at
// those paths. A missing file has no entries.
func resolveUserFiles(spec, passwdPath, groupPath string) (runAs, error) {
	passwd, err := readAccountFile(passwdPath)
	if err != nil {
		return runAs{}, err
	}
	group, err := readAccountFile(groupPath)
	if err != nil {
		return runAs{}, err
	}
	return resolveUser(spec, passwd, group)
}

func readAccountFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// resolveUser resolves spec (NAME, UID, NAME:GROUP or UID:GID) against the
// text of a passwd and a group file (nil: no such file) the way podman exec
// --user and runc do, with runc's own resolver, github.com/moby/sys/user
// (which podman calls too): a pure-Go parser of the container's files. Go's
// os/user is not one: it may go through cgo and NSS, and it answers for the
// accounts this process sees through its resolver, not necessarily for the
// files of the image.
func resolveUser(spec string, passwd, group []byte) (runAs, error) {
	if !validUserSpec(spec) {
		return runAs{}, fmt.Errorf("--user %q is not NAME, UID, NAME:GROUP or UID:GID", spec)
	}
	// A numeric UID without an entry gets GID 0 and HOME /, as with podman.
	defaults := &user.ExecUser{Home: "/"}
	eu, err := user.GetExecUser(spec, defaults, readerOrNil(passwd), readerOrNil(group))
	if err != nil {
		return runAs{}, fmt.Errorf("--user %s: %w", spec, err)
	}
	as := runAs{uid: eu.Uid, gid: eu.Gid, groups: eu.Sgids, home: eu.Home}
	if as.home == "" {
		as.home = "/"
	}
	userPart, _, _ := strings.Cut(spec, ":")
	if _, err := strconv.Atoi(userPart); err != nil {
		as.name = userPart // GetExecUser found it
	} else if passwd != nil {
		// The first entry with the uid is the one GetExecUser used.
		users, err := user.ParsePasswdFilter(bytes.NewReader(passwd), func(u user.User) bool { return u.Uid == eu.Uid })
		if err == nil && len(users) > 0 {
			as.name = users[0].Name
		}
	}
	return as, nil
}

// readerOrNil returns a reader of b, or nil for nil b: GetExecUser tells a
// missing file (no entries) by a nil reader.
func readerOrNil(b []byte) io.Reader {
	if b == nil {
		return nil
	}
	return bytes.NewReader(b)
}

// switchUser makes this process as: supplementary groups, then GID, then
// UID, the order in which each step still has the privilege it needs. Go's
// syscall.Setgroups, Setgid and Setuid change every thread of the process
// (since Go 1.16), and leave no way back: as root they set the real,
// effective and saved ids, and the kernel drops the capabilities with the
// UID. spec is the user's name for it, for the error.
func switchUser(spec string, as runAs) error {
	if os.Getuid() == as.uid && os.Geteuid() == as.uid && os.Getgid() == as.gid && os.Getegid() == as.gid {
		return nil
	}
	if euid := os.Geteuid(); euid != 0 {
		return fmt.Errorf("cannot run as %s: secret-env runs as uid %d, not root", spec, euid)
	}
	groups := as.groups
	if groups == nil {
		groups = []int{} // setgroups(0): drop root's groups
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("cannot run as %s: setgroups %v: %w", spec, groups, err)
	}
	if err := syscall.Setgid(as.gid); err != nil {
		return fmt.Errorf("cannot run as %s: setgid %d: %w", spec, as.gid, err)
	}
	if err := syscall.Setuid(as.uid); err != nil {
		return fmt.Errorf("cannot run as %s: setuid %d: %w", spec, as.uid, err)
	}
	return nil
}
