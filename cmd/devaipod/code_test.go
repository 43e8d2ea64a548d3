package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod"
	"github.com/spf13/cobra"
)

func TestVSCodeURI(t *testing.T) {
	// The hex of {"containerName":"/devaipod-myproject-workspace"}, made
	// apart from the code under test.
	const golden = "vscode-remote://attached-container+" +
		"7b22636f6e7461696e65724e616d65223a222f6465766169706f642d6d7970726f6a6563742d776f726b7370616365227d" +
		"/workspaces/myproject"
	if got := vscodeURI("devaipod-myproject-workspace", "/workspaces/myproject"); got != golden {
		t.Errorf("vscodeURI =\n  %s\nwant\n  %s", got, golden)
	}
	if got := vscodeURI("devaipod-a-workspace", "/workspaces/my project"); !strings.HasSuffix(got, "/workspaces/my%20project") {
		t.Errorf("a folder with a space: %s; want it escaped", got)
	}
}

func codeCmd() (*cobra.Command, *bytes.Buffer) {
	var errOut bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetContext(context.Background())
	cmd.SetErr(&errOut)
	return cmd, &errOut
}

func TestOpenVSCode(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	cmd, _ := codeCmd()
	err := openVSCode(cmd, "p", "vscode-remote://x/y")
	var he *hintError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), `"code" command is not on PATH`) || !strings.Contains(he.hint, "devaipod code p --print") {
		t.Fatalf("without code on PATH: %v; want an error with a hint to --print", err)
	}

	args := filepath.Join(dir, "args")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + args + "\necho opened >&2\n"
	if err := os.WriteFile(filepath.Join(dir, "code"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd, errOut := codeCmd()
	if err := openVSCode(cmd, "p", "vscode-remote://x/y"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(args); string(got) != "--folder-uri\nvscode-remote://x/y\n" {
		t.Errorf("code ran with %q; want --folder-uri and the URI", got)
	}
	if errOut.String() != "opened\n" {
		t.Errorf("code's output %q did not reach standard error", errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, "code"), []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := openVSCode(cmd, "p", "vscode-remote://x/y"); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("failing code: %v; want its exit status", err)
	}
}

func TestPrintErrorExistingPod(t *testing.T) {
	for _, tc := range []struct {
		err  *pod.ExistingPodError
		hint string
	}{
		{&pod.ExistingPodError{Name: "p", Reason: pod.ReasonSource, Have: "https://h/o/r", Want: "https://h/o/s"}, "pick another name with --name"},
		{&pod.ExistingPodError{Name: "p", Reason: pod.ReasonIncomplete, State: "created"}, "`devaipod gc`"},
		{&pod.ExistingPodError{Name: "p", Reason: pod.ReasonState, State: "paused"}, "podman pod unpause devaipod-p"},
		{&pod.ExistingPodError{Name: "p", Reason: pod.ReasonState, State: "error"}, "`devaipod status p`"},
	} {
		var b bytes.Buffer
		printError(&b, tc.err)
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[1], "Hint: ") || !strings.Contains(lines[1], tc.hint) {
			t.Errorf("printError(%v) =\n%s\nwant one hint with %q", tc.err, b.String(), tc.hint)
		}
	}
}
