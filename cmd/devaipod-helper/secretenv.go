package main

import (
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// secret-env runs a command with variables read from files: one file per
// variable, named after it. devaipod mounts the trusted side's secrets as
// such files (root-only, in the workspace) instead of as environment, because
// podman 4.3's inspect shows the values of environment secrets.

var envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func newSecretEnvFlagSet(dir, umask *string, hashes *bool) *flag.FlagSet {
	fs := flag.NewFlagSet("secret-env", flag.ContinueOnError)
	fs.StringVar(dir, "dir", "/run/devaipod/secrets", "directory holding one file per variable")
	fs.StringVar(umask, "umask", "", "octal umask for CMD (default: unchanged)")
	fs.BoolVar(hashes, "print-hashes", false, "print NAME SHA256 of each variable instead of running a command (for devaipod verify)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: devaipod-helper secret-env [--dir DIR] [--umask MASK] -- CMD [ARGS...]\n"+
			"       devaipod-helper secret-env [--dir DIR] --print-hashes\n\n"+
			"Runs CMD with each file of DIR as a variable (file name = variable name).\n"+
			"A missing DIR means no variables.\n\n")
		fs.PrintDefaults()
	}
	return fs
}

func runSecretEnv(args []string, stdout, stderr io.Writer) int {
	var dir, umask string
	var hashes bool
	fs := newSecretEnvFlagSet(&dir, &umask, &hashes)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if hashes {
		env, err := secretEnv(nil, dir)
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
	if umask != "" {
		mask, err := strconv.ParseUint(umask, 8, 32)
		if err != nil || mask > 0o777 {
			fmt.Fprintf(stderr, "%ssecret-env: --umask %q is not an octal mask\n", logPrefix, umask)
			return 2
		}
		syscall.Umask(int(mask))
	}
	env, err := secretEnv(os.Environ(), dir)
	if err != nil {
		fmt.Fprintf(stderr, "%ssecret-env: %v\n", logPrefix, err)
		return 1
	}
	path, err := exec.LookPath(argv[0])
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

func removeVar(env []string, name string) []string {
	out := env[:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
