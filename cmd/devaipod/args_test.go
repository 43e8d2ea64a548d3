package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// cliNoPodman runs devaipod's command line in the test, against a podman
// service that does not exist: what fails before podman is reached shows
// how the command line was read.
func cliNoPodman(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("CONTAINER_CONNECTION", "")
	t.Setenv("CONTAINER_HOST", "")
	var out, errOut bytes.Buffer
	args = append([]string{"--connection", "unix:///nonexistent/devaipod-test/podman.sock"}, args...)
	code = run(context.Background(), args, streams{in: strings.NewReader(""), out: &out, err: &errOut})
	return code, out.String(), errOut.String()
}

// TestExecArguments: exec's flags stop at the command, so that the
// command's own flags are its own (devaipod exec NAME ls -la), while exec's
// flags right after NAME, and "--", still work.
func TestExecArguments(t *testing.T) {
	const unreachable = "cannot reach the podman service"
	for _, tt := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"exec", "p", "ls", "-la"}, unreachable},
		{[]string{"exec", "p", "ls", "-c", "nope"}, unreachable}, // the command's -c
		{[]string{"exec", "p", "-c", "nope", "ls", "-la"}, `unknown container "nope"`},
		{[]string{"exec", "-c", "nope", "p", "ls"}, `unknown container "nope"`},
		{[]string{"exec", "p", "--container=nope", "--", "ls"}, `unknown container "nope"`},
		{[]string{"exec", "p", "-c", "agent", "--", "-x"}, unreachable},
		{[]string{"exec", "p", "--", "ls", "-c", "nope"}, unreachable},
		{[]string{"exec", "p", "-la"}, "unknown shorthand flag: 'l' in -la"},
		{[]string{"exec", "p", "-o", "yaml", "ls"}, "--output must be text or json"},
		{[]string{"exec"}, "missing pod NAME"},
	} {
		code, _, stderr := cliNoPodman(t, tt.args...)
		if code == 0 || !strings.Contains(stderr, tt.want) {
			t.Errorf("devaipod %s: exit %d, stderr %q; want %q", strings.Join(tt.args, " "), code, stderr, tt.want)
		}
	}
	code, stdout, _ := cliNoPodman(t, "exec", "p", "-h")
	if code != 0 || !strings.Contains(stdout, "devaipod exec NAME [CMD...]") {
		t.Errorf("exec NAME -h: exit %d, %q; want the help", code, stdout)
	}
}

// TestAllowBreadth: devaipod allow refuses a rule over a whole public
// suffix unless --force, before it reaches podman; deny takes any rule.
func TestAllowBreadth(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"allow", "p", "*.com"}, `rule "*.com" opens every host under "com"`},
		{[]string{"allow", "p", "*"}, "would allow every host"},
		{[]string{"allow", "p", "*", "--force"}, "would allow every host"},
		{[]string{"allow", "p", "*.com", "--force"}, "cannot reach the podman service"},
		{[]string{"allow", "p", "*.github.io"}, "cannot reach the podman service"},
		{[]string{"deny", "p", "*.com"}, "cannot reach the podman service"},
		{[]string{"deny", "p", "x", "--force"}, "unknown flag: --force"},
	} {
		code, _, stderr := cliNoPodman(t, tt.args...)
		if code == 0 || !strings.Contains(stderr, tt.want) {
			t.Errorf("devaipod %s: exit %d, stderr %q; want %q", strings.Join(tt.args, " "), code, stderr, tt.want)
		}
	}
	_, _, stderr := cliNoPodman(t, "allow", "p", "*.com", "--force")
	if !strings.Contains(stderr, "Warning: rule \"*.com\"") {
		t.Errorf("allow '*.com' --force: no warning in %q", stderr)
	}
}

// TestMissingArguments: a verb says which argument is missing, and where
// to find it, or which one is too many.
func TestMissingArguments(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"status"}, "missing pod NAME (see `devaipod list`)"},
		{[]string{"delete"}, "missing pod NAME"},
		{[]string{"verify"}, "missing pod NAME"},
		{[]string{"diff"}, "missing pod NAME"},
		{[]string{"fetch"}, "missing pod NAME"},
		{[]string{"allow"}, "missing pod NAME"},
		{[]string{"allow", "p"}, "missing HOST (usage: devaipod allow NAME HOST)"},
		{[]string{"share", "p"}, "missing PATH"},
		{[]string{"approve"}, "missing request ID (see `devaipod approvals`)"},
		{[]string{"revoke"}, "missing GRANT"},
		{[]string{"stop", "a", "b"}, `too many arguments: stop takes NAME, and "b" is one more`},
	} {
		code, _, stderr := cliNoPodman(t, tt.args...)
		if code == 0 || !strings.Contains(stderr, tt.want) {
			t.Errorf("devaipod %s: exit %d, stderr %q; want %q", strings.Join(tt.args, " "), code, stderr, tt.want)
		}
	}
}

// TestUpFlagsCheckedFirst: up refuses a bad --name or --timeout before it
// reaches podman (or starts a podman service).
func TestUpFlagsCheckedFirst(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"up", ".", "--name", "Bad Name"}, "--name:"},
		{[]string{"up", ".", "--timeout", "-5s"}, "--timeout -5s: give at least 1s"},
		{[]string{"up", ".", "--timeout", "0"}, "--timeout 0s"},
		{[]string{"pool", ".", "--timeout", "0"}, "--timeout 0s"},
	} {
		code, _, stderr := cliNoPodman(t, tt.args...)
		if code == 0 || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, "podman service") {
			t.Errorf("devaipod %s: exit %d, stderr %q; want %q, before podman", strings.Join(tt.args, " "), code, stderr, tt.want)
		}
	}
}

// TestCompletion: scripts for the shells cobra knows, an error for another,
// and the values of --workspace-access.
func TestCompletion(t *testing.T) {
	if code, stdout, _ := cliNoPodman(t, "completion", "bash"); code != 0 || !strings.Contains(stdout, "bash completion") {
		t.Errorf("completion bash: exit %d, %.60q", code, stdout)
	}
	if code, _, stderr := cliNoPodman(t, "completion", "ksh"); code == 0 || !strings.Contains(stderr, `unknown command "ksh"`) {
		t.Errorf("completion ksh: exit %d, %q; want a refusal", code, stderr)
	}
	if code, stdout, _ := cliNoPodman(t, "__complete", "up", ".", "--workspace-access", ""); code != 0 || !strings.Contains(stdout, "rw\nro\n") {
		t.Errorf("completion of --workspace-access: exit %d, %q", code, stdout)
	}
	// exec's flags after NAME, which cobra takes for arguments.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "p", "-c", ""}, "workspace\nagent\n:4\n"},
		{[]string{"exec", "p", "-u", "root", "--container", ""}, "workspace\nagent\n:4\n"},
		{[]string{"exec", "p", "--conta"}, "--container\t"},
		{[]string{"exec", "p", "-c", "agent", "ls", ""}, ":0\n"},
	} {
		if code, stdout, _ := cliNoPodman(t, append([]string{"__complete"}, c.args...)...); code != 0 || !strings.HasPrefix(stdout, c.want) {
			t.Errorf("completion of %q: exit %d, %q; want %q", c.args, code, stdout, c.want)
		}
	}
}

// TestJSONErrors: with --output json an error is one JSON object on
// standard error, its hint apart; without, the text as always.
func TestJSONErrors(t *testing.T) {
	code, stdout, stderr := cliNoPodman(t, "-o", "json", "status", "p")
	var e jsonError
	if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || json.Unmarshal([]byte(stderr), &e) != nil ||
		!strings.HasPrefix(e.Error, "cannot reach the podman service") || !strings.Contains(e.Hint, "podman system service") {
		t.Errorf("status -o json: exit %d, stdout %q, stderr %q; want one JSON error with its hint", code, stdout, stderr)
	}
	_, _, stderr = cliNoPodman(t, "status", "p")
	if !strings.HasPrefix(stderr, "Error: cannot reach the podman service") || !strings.Contains(stderr, "\nHint: ") {
		t.Errorf("status: stderr %q; want the text", stderr)
	}
	// The error's lines are the error's, whatever they say; a hint is
	// what printError wrote after it.
	err := errors.New("up failed\nHint: a line of the agent's")
	var w bytes.Buffer
	writeJSONError(&w, err, "Error: up failed\nHint: a line of the agent's\nLast lines of the agent's log:\n  Hint: boom\nHint: check [agent] command\n")
	if got, want := w.String(), `{"error":"up failed\nHint: a line of the agent's","hint":"check [agent] command","detail":["Last lines of the agent's log:","  Hint: boom"]}`+"\n"; got != want {
		t.Errorf("writeJSONError = %s, want %s", got, want)
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int]string{0: "0 files", 1: "1 file", 2: "2 files"} {
		if got := count(n, "file"); got != want {
			t.Errorf("count(%d) = %q", n, got)
		}
	}
	if got := count(3, "git directory"); got != "3 git directories" {
		t.Errorf("%q", got)
	}
}
