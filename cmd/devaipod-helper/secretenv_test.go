package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

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
