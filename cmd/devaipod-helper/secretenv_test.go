package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The helper subprocesses of the --user tests resolve users against the
// test's passwd and group files, named by these variables.
const (
	testPasswdEnv = "DEVAIPOD_HELPER_TEST_PASSWD"
	testGroupEnv  = "DEVAIPOD_HELPER_TEST_GROUP"
)

func init() {
	if p := os.Getenv(testPasswdEnv); p != "" {
		passwdPath = p
	}
	if p := os.Getenv(testGroupEnv); p != "" {
		groupPath = p
	}
}

func TestSecretEnv(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "GH_TOKEN"), []byte("ghp_x"), 0o400)
	os.WriteFile(filepath.Join(dir, "not-a-var"), []byte("ignored"), 0o400)
	os.Mkdir(filepath.Join(dir, "SUBDIR"), 0o755)
	got, err := secretEnv([]string{"A=1", "GH_TOKEN=old"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A=1", "GH_TOKEN=ghp_x"}
	if !slices.Equal(got, want) {
		t.Errorf("secretEnv() = %v; want %v", got, want)
	}
	got, err = secretEnv([]string{"A=1"}, filepath.Join(dir, "missing"))
	if err != nil || !slices.Equal(got, []string{"A=1"}) {
		t.Errorf("missing dir: %v, %v", got, err)
	}
}

func TestSecretEnvExec(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "E2E_VAR"), []byte("from-file"), 0o400)
	cmd := exec.Command(os.Args[0], "secret-env", "--dir", dir, "--umask", "0002", "--", "sh", "-c", "printf %s \"$E2E_VAR\"; umask")
	cmd.Env = append(os.Environ(), asHelperEnv+"=1")
	out, err := cmd.Output()
	if err != nil || string(out) != "from-file0002\n" {
		t.Errorf("secret-env output = %q, %v; want from-file and umask 0002", out, err)
	}
}

const testPasswd = `root:x:0:0:root:/root:/bin/bash
# a comment, and a blank line

vscode:x:1000:1000:,,,:/home/vscode:/bin/bash
nohome:x:1001:1001:::/bin/sh
second:x:1000:5:same uid as vscode, later:/second:/bin/sh
`

const testGroup = `root:x:0:
wheel:x:10:root,vscode
staff:x:50:
docker:x:998:other,vscode
vscode:x:1000:
`

func TestResolveUser(t *testing.T) {
	vscode := runAs{name: "vscode", uid: 1000, gid: 1000, groups: []int{10, 998}, home: "/home/vscode"}
	tests := []struct {
		spec          string
		passwd, group string // "-": no such file
		want          runAs
		wantErr       string // substring; "" for no error
	}{
		{spec: "vscode", want: vscode},
		// A UID with entries: the first, with its name, GID and groups.
		{spec: "1000", want: vscode},
		{spec: "root", want: runAs{name: "root", uid: 0, gid: 0, groups: []int{10}, home: "/root"}},
		// An explicit group replaces the primary one, and (as with runc and
		// podman) the member groups are not added.
		{spec: "vscode:staff", want: runAs{name: "vscode", uid: 1000, gid: 50, home: "/home/vscode"}},
		{spec: "vscode:4242", want: runAs{name: "vscode", uid: 1000, gid: 4242, home: "/home/vscode"}},
		{spec: "1000:1000", want: runAs{name: "vscode", uid: 1000, gid: 1000, home: "/home/vscode"}},
		{spec: "0:docker", want: runAs{name: "root", uid: 0, gid: 998, home: "/root"}},
		// A UID without an entry: GID 0, HOME /, no name, no groups.
		{spec: "4242", want: runAs{uid: 4242, gid: 0, home: "/"}},
		{spec: "4242:7", want: runAs{uid: 4242, gid: 7, home: "/"}},
		{spec: "4242", passwd: "-", group: "-", want: runAs{uid: 4242, gid: 0, home: "/"}},
		// An empty home field is /.
		{spec: "nohome", want: runAs{name: "nohome", uid: 1001, gid: 1001, home: "/"}},
		// No group file: no supplementary groups, a group name is unknown.
		{spec: "vscode", group: "-", want: runAs{name: "vscode", uid: 1000, gid: 1000, home: "/home/vscode"}},
		{spec: "vscode:staff", group: "-", wantErr: "staff"},
		{spec: "nobody", wantErr: "nobody"},
		{spec: "vscode", passwd: "-", wantErr: "vscode"},
		{spec: "vscode:nogroup", wantErr: "nogroup"},
		{spec: "-1", wantErr: "range"},
		{spec: "a:b:c", wantErr: "is not NAME, UID"},
		{spec: ":staff", wantErr: "is not NAME, UID"},
		{spec: "vscode:", wantErr: "is not NAME, UID"},
	}
	for _, tt := range tests {
		name := tt.spec
		if tt.passwd == "-" {
			name += " without passwd"
		}
		if tt.group == "-" {
			name += " without group"
		}
		t.Run(name, func(t *testing.T) {
			passwd, group := []byte(testPasswd), []byte(testGroup)
			if tt.passwd == "-" {
				passwd = nil
			}
			if tt.group == "-" {
				group = nil
			}
			got, err := resolveUser(tt.spec, passwd, group)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("resolveUser(%q) = %+v, %v; want an error naming %q", tt.spec, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("resolveUser(%q): %v", tt.spec, err)
			}
			if got.name != tt.want.name || got.uid != tt.want.uid || got.gid != tt.want.gid ||
				got.home != tt.want.home || !slices.Equal(got.groups, tt.want.groups) {
				t.Errorf("resolveUser(%q) = %+v; want %+v", tt.spec, got, tt.want)
			}
		})
	}
}

func TestResolveUserFiles(t *testing.T) {
	dir := t.TempDir()
	passwd, group := filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	os.WriteFile(passwd, []byte(testPasswd), 0o644)
	os.WriteFile(group, []byte(testGroup), 0o644)
	got, err := resolveUserFiles("vscode", passwd, group)
	if err != nil || got.uid != 1000 || !slices.Equal(got.groups, []int{10, 998}) {
		t.Errorf("resolveUserFiles(vscode) = %+v, %v", got, err)
	}
	// Missing files have no entries.
	got, err = resolveUserFiles("77", filepath.Join(dir, "none"), filepath.Join(dir, "none"))
	if err != nil || got.uid != 77 || got.home != "/" {
		t.Errorf("resolveUserFiles(77) without files = %+v, %v", got, err)
	}
	if _, err := resolveUserFiles("vscode", filepath.Join(dir, "none"), group); err == nil {
		t.Error("resolveUserFiles(vscode) without passwd: no error")
	}
	// A path that cannot be read is an error, not an empty file.
	if _, err := resolveUserFiles("77", dir, group); err == nil {
		t.Error("resolveUserFiles with a directory as passwd: no error")
	}
}

func TestCommandEnv(t *testing.T) {
	base := []string{"PATH=/usr/bin", "HOME=/root", "USER=root", "LOGNAME=root", "GH_TOKEN=inherited", "KEEP=1"}
	vscode := &runAs{name: "vscode", uid: 1000, gid: 1000, home: "/home/vscode"}
	tests := []struct {
		name           string
		as             *runAs
		extra, secrets []string
		want           []string
	}{
		{name: "inherited only", want: base},
		{
			name: "user", as: vscode,
			want: []string{"PATH=/usr/bin", "GH_TOKEN=inherited", "KEEP=1", "HOME=/home/vscode", "USER=vscode", "LOGNAME=vscode"},
		},
		{
			// Inherited USER and LOGNAME would name root.
			name: "uid without a name", as: &runAs{uid: 4242, home: "/"},
			want: []string{"PATH=/usr/bin", "GH_TOKEN=inherited", "KEEP=1", "HOME=/"},
		},
		{
			name: "env over user over inherited", as: vscode, extra: []string{"HOME=/work", "PATH=/opt/bin:/usr/bin", "EMPTY="},
			want: []string{"GH_TOKEN=inherited", "KEEP=1", "USER=vscode", "LOGNAME=vscode", "HOME=/work", "PATH=/opt/bin:/usr/bin", "EMPTY="},
		},
		{
			// The repository's devcontainer.json cannot replace a secret.
			name: "secrets over env", as: vscode, extra: []string{"GH_TOKEN=from-repo", "USER=dev"},
			secrets: []string{"GH_TOKEN=secret", "OTHER=s"},
			want:    []string{"KEEP=1", "PATH=/usr/bin", "HOME=/home/vscode", "LOGNAME=vscode", "USER=dev", "GH_TOKEN=secret", "OTHER=s"},
		},
		{
			name: "secrets without user", secrets: []string{"GH_TOKEN=secret"},
			want: []string{"PATH=/usr/bin", "HOME=/root", "USER=root", "LOGNAME=root", "KEEP=1", "GH_TOKEN=secret"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			baseCopy := slices.Clone(base)
			got := commandEnv(baseCopy, tt.as, tt.extra, tt.secrets)
			if !slices.Equal(baseCopy, base) {
				t.Errorf("commandEnv changed its base: %v", baseCopy)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tt.want))
			if !slices.Equal(got, want) {
				t.Errorf("commandEnv() = %v\nwant %v", got, want)
			}
		})
	}
}

func TestLookPathIn(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "only-here")
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	t.Setenv("PATH", os.Getenv("PATH")) // lookPathIn changes it; restore it
	got, err := lookPathIn("only-here", []string{"PATH=/nonexistent:" + dir})
	if err != nil || got != bin {
		t.Errorf("lookPathIn(only-here) = %q, %v; want %q", got, err, bin)
	}
	if got, err := lookPathIn("only-here", []string{"HOME=/"}); err == nil {
		t.Errorf("lookPathIn without PATH = %q; want an error", got)
	}
}

// TestSecretEnvFlags runs secret-env in this process, only with arguments
// that fail before any user switch or exec.
func TestSecretEnvFlags(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "passwd"), []byte(testPasswd), 0o644)
	os.WriteFile(filepath.Join(dir, "group"), []byte(testGroup), 0o644)
	oldPasswd, oldGroup := passwdPath, groupPath
	passwdPath, groupPath = filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	t.Cleanup(func() { passwdPath, groupPath = oldPasswd, oldGroup })
	secrets := filepath.Join(dir, "none")

	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string // substring
		wantStderr string // substring
	}{
		{name: "env without =", args: []string{"--env", "FOO", "--", "true"}, wantCode: 2, wantStderr: "want NAME=VALUE"},
		{name: "env empty name", args: []string{"--env", "=x", "--", "true"}, wantCode: 2, wantStderr: "empty variable name"},
		{name: "user bad spec", args: []string{"--user", "a:b:c", "--", "true"}, wantCode: 2, wantStderr: `--user "a:b:c" is not NAME, UID`},
		{name: "unknown user", args: []string{"--dir", secrets, "--user", "nosuchuser", "--", "true"}, wantCode: 1, wantStderr: "nosuchuser"},
		{name: "unknown group", args: []string{"--dir", secrets, "--user", "vscode:nosuchgroup", "--", "true"}, wantCode: 1, wantStderr: "nosuchgroup"},
		{name: "hashes with user", args: []string{"--print-hashes", "--user", "vscode"}, wantCode: 2, wantStderr: "--user, --group-add and --env do not apply"},
		{name: "hashes with env", args: []string{"--print-hashes", "--env", "A=1"}, wantCode: 2, wantStderr: "--user, --group-add and --env do not apply"},
		{name: "hashes with group-add", args: []string{"--print-hashes", "--group-add", "1000"}, wantCode: 2, wantStderr: "do not apply"},
		{name: "group-add not a number", args: []string{"--user", "vscode", "--group-add", "agent", "--", "true"}, wantCode: 2, wantStderr: `"agent" is not a numeric group id`},
		{name: "group-add without user", args: []string{"--group-add", "1000", "--", "true"}, wantCode: 2, wantStderr: "--group-add needs --user"},
		{name: "no command", args: []string{"--user", "vscode"}, wantCode: 2, wantStderr: "no command given"},
		{name: "-h", args: []string{"-h"}, wantCode: 0, wantStderr: "-env NAME=VALUE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"secret-env"}, tt.args...), &stdout, &stderr)
			if code != tt.wantCode || !strings.Contains(stdout.String(), tt.wantStdout) || !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("secret-env %q = %d\nstdout: %s\nstderr: %s\nwant %d, stdout %q, stderr %q",
					tt.args, code, stdout.String(), stderr.String(), tt.wantCode, tt.wantStdout, tt.wantStderr)
			}
		})
	}

	var stdout bytes.Buffer
	if code := run(context.Background(), []string{"help", "secret-env"}, &stdout, &stdout); code != 0 {
		t.Fatalf("help secret-env = %d", code)
	}
	for _, want := range []string{"-user SPEC", "-group-add GID", "-env NAME=VALUE", "NAME, UID, NAME:GROUP or UID:GID", "lowest to highest precedence"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help secret-env lacks %q:\n%s", want, stdout.String())
		}
	}
}

// statusScript prints the ids, groups and capabilities of the process that
// the helper runs, its user variables, and whether it can read the secret.
const statusScript = `grep -E '^(Uid|Gid|Groups|CapEff):' /proc/self/status
echo "HOME=$HOME"
echo "USER=${USER-unset}"
echo "LOGNAME=${LOGNAME-unset}"
echo "TOKEN=$TOKEN"
echo "FROM_ENV=$FROM_ENV"
tr '\0' '\n' </proc/$$/environ | grep '^MY-VAR=' || echo MY-VAR=unset
if cat "$1" >/dev/null 2>&1; then echo secret-file=readable; else echo secret-file=unreadable; fi`

// runSecretEnvAs runs the helper's secret-env in a subprocess with --user
// spec, a secret TOKEN file (root-only), --env values and the flags extra,
// and returns its exit code, its output's lines as a map (KEY: or KEY=
// prefix -> value) and its stderr.
func runSecretEnvAs(t *testing.T, spec string, extra ...string) (int, map[string]string, string) {
	t.Helper()
	etc := t.TempDir()
	passwd := "root:x:0:0:root:/root:/bin/sh\n" +
		"tester:x:65534:65533:Tester:/home/tester:/bin/sh\n"
	group := "tgrp:x:65533:\nextra:x:4242:someone,tester\nother:x:4343:someone\n"
	os.WriteFile(filepath.Join(etc, "passwd"), []byte(passwd), 0o644)
	os.WriteFile(filepath.Join(etc, "group"), []byte(group), 0o644)
	// Only the file's mode keeps the secret from other users.
	secrets := t.TempDir()
	os.Chmod(filepath.Dir(secrets), 0o755)
	os.Chmod(secrets, 0o755)
	secret := filepath.Join(secrets, "TOKEN")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o400); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"secret-env", "--dir", secrets, "--user", spec,
		"--env", "TOKEN=from-repo", "--env", "FROM_ENV=yes", "--env", "MY-VAR=dashed"}, extra...)
	cmd := exec.Command(os.Args[0], append(args, "--", "sh", "-c", statusScript, "sh", secret)...)
	cmd.Env = append(os.Environ(), asHelperEnv+"=1",
		testPasswdEnv+"="+filepath.Join(etc, "passwd"), testGroupEnv+"="+filepath.Join(etc, "group"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		exitErr, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = exitErr.ExitCode()
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.Contains(k, "=") {
			got[k] = strings.Join(strings.Fields(v), " ")
		} else if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	return code, got, stderr.String()
}

// TestSecretEnvUser switches users for real when the tests run as root (as
// in the dev container), and checks the refusal when they do not (as in an
// unprivileged CI job): in either case it asserts what happens.
func TestSecretEnvUser(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()

	t.Run("already that user", func(t *testing.T) {
		// Nothing is switched, so this works for any user; the groups stay.
		spec := fmt.Sprintf("%d:%d", uid, gid)
		code, got, stderr := runSecretEnvAs(t, spec)
		if code != 0 {
			t.Fatalf("secret-env --user %s = %d: %s", spec, code, stderr)
		}
		ids := func(id int) string { s := strconv.Itoa(id); return strings.Join([]string{s, s, s, s}, " ") }
		// As runSecretEnvAs's passwd has it.
		wantHome, wantUser := "/", "unset"
		switch uid {
		case 0:
			wantHome, wantUser = "/root", "root"
		case 65534:
			wantHome, wantUser = "/home/tester", "tester"
		}
		if got["Uid"] != ids(uid) || got["Gid"] != ids(gid) || got["HOME"] != wantHome ||
			got["USER"] != wantUser || got["LOGNAME"] != wantUser {
			t.Errorf("secret-env --user %s ran with %v", spec, got)
		}
		if got["TOKEN"] != "s3cret" || got["FROM_ENV"] != "yes" || got["MY-VAR"] != "dashed" {
			t.Errorf("secret-env --user %s: TOKEN=%q FROM_ENV=%q MY-VAR=%q; want the secret over --env, and --env (any name without =)",
				spec, got["TOKEN"], got["FROM_ENV"], got["MY-VAR"])
		}
	})

	if uid != 0 {
		t.Run("not root", func(t *testing.T) {
			code, got, stderr := runSecretEnvAs(t, "root")
			want := fmt.Sprintf("cannot run as root: secret-env runs as uid %d, not root", os.Geteuid())
			if code != 1 || !strings.Contains(stderr, want) || len(got) > 0 && got["Uid"] != "" {
				t.Errorf("secret-env --user root as uid %d = %d, %v, %q; want 1 and %q", uid, code, got, stderr, want)
			}
		})
		return
	}

	t.Run("switch", func(t *testing.T) {
		code, got, stderr := runSecretEnvAs(t, "tester")
		if !canSwitchTo(t, []int{65534}, []int{65533, 4242}) {
			// A user namespace without these ids, or a root without
			// CAP_SETUID/CAP_SETGID: the switch must fail, and say so.
			if code != 1 || !strings.Contains(stderr, "cannot run as tester: set") {
				t.Errorf("secret-env --user tester where it cannot switch = %d, %q; want 1 and the failed call", code, stderr)
			}
			return
		}
		if code != 0 {
			t.Fatalf("secret-env --user tester = %d: %s", code, stderr)
		}
		want := map[string]string{
			"Uid":    "65534 65534 65534 65534",
			"Gid":    "65533 65533 65533 65533",
			"Groups": "4242", // root's groups are gone; not "other"
			"CapEff": "0000000000000000",
			"HOME":   "/home/tester", "USER": "tester", "LOGNAME": "tester",
			"TOKEN":       "s3cret", // read as root, before the switch
			"FROM_ENV":    "yes",
			"secret-file": "unreadable", // but not readable by the command
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("secret-env --user tester: %s = %q; want %q (all: %v)", k, got[k], v, got)
			}
		}
	})

	t.Run("switch with group-add", func(t *testing.T) {
		// 4242 the user has already; 4343 is added (the agent's group, in
		// devaipod's use).
		code, got, stderr := runSecretEnvAs(t, "tester", "--group-add", "4343", "--group-add", "4242")
		if !canSwitchTo(t, []int{65534}, []int{65533, 4242, 4343}) {
			if code != 1 || !strings.Contains(stderr, "cannot run as tester: set") {
				t.Errorf("secret-env --user tester --group-add where it cannot switch = %d, %q; want 1 and the failed call", code, stderr)
			}
			return
		}
		if code != 0 || got["Groups"] != "4242 4343" || got["Uid"] != "65534 65534 65534 65534" {
			t.Errorf("secret-env --user tester --group-add 4343 --group-add 4242 = %d, %v, %q; want Groups 4242 4343", code, got, stderr)
		}
	})

	t.Run("uid without entry", func(t *testing.T) {
		code, got, stderr := runSecretEnvAs(t, "4321")
		if !canSwitchTo(t, []int{4321}, []int{0}) {
			if code != 1 || !strings.Contains(stderr, "cannot run as 4321: set") {
				t.Errorf("secret-env --user 4321 where it cannot switch = %d, %q; want 1 and the failed call", code, stderr)
			}
			return
		}
		if code != 0 {
			t.Fatalf("secret-env --user 4321 = %d: %s", code, stderr)
		}
		want := map[string]string{"Uid": "4321 4321 4321 4321", "Gid": "0 0 0 0", "Groups": "", "HOME": "/", "USER": "unset", "LOGNAME": "unset"}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("secret-env --user 4321: %s = %q; want %q (all: %v)", k, got[k], v, got)
			}
		}
	})
}

// canSwitchTo reports whether this (root) process can take those uids and
// gids: they are mapped in its user namespace and it has CAP_SETUID and
// CAP_SETGID.
func canSwitchTo(t *testing.T, uids, gids []int) bool {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			const capSetgid, capSetuid = 6, 7
			if caps&(1<<capSetgid) == 0 || caps&(1<<capSetuid) == 0 {
				return false
			}
		}
	}
	return idsMapped(t, "/proc/self/uid_map", uids) && idsMapped(t, "/proc/self/gid_map", gids)
}

func idsMapped(t *testing.T, mapFile string, ids []int) bool {
	t.Helper()
	b, err := os.ReadFile(mapFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		mapped := false
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var inside, outside, count int
			if _, err := fmt.Sscan(line, &inside, &outside, &count); err == nil && id >= inside && id-inside < count {
				mapped = true
			}
		}
		if !mapped {
			return false
		}
	}
	return true
}
