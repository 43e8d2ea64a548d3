package pod

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/config"

	"github.com/devaipod/devaipod/internal/gittest"
	"github.com/devaipod/devaipod/pod/plan"
)

func TestResolveMounts(t *testing.T) {
	home := t.TempDir()
	for _, d := range []string{".ssh", "cache/go", "work"} {
		os.MkdirAll(filepath.Join(home, d), 0o755)
	}
	os.Symlink(filepath.Join(home, ".ssh"), filepath.Join(home, "innocent"))
	configFile := filepath.Join(home, ".config", "devaipod.toml")
	os.MkdirAll(filepath.Dir(configFile), 0o755)
	gittest.WriteFile(t, configFile, "")
	forbidden := ForbiddenMounts(home, configFile, "/run/user/1000")

	ok, err := ResolveMounts([]config.MountConfig{{Source: filepath.Join(home, "cache/go"), Target: "/cache"}}, forbidden)
	if err != nil || len(ok) != 1 || ok[0].RW || strings.Join(ok[0].Containers, ",") != plan.RoleWorkspace {
		t.Errorf("plain mount: %+v %v; want read-only, workspace only", ok, err)
	}
	for _, tt := range []struct{ source, rule string }{
		{filepath.Join(home, ".ssh"), `".ssh"`},
		{filepath.Join(home, "innocent"), `".ssh"`}, // resolved through the symlink
		{home, "contains"},                          // a parent of credentials
		{filepath.Dir(configFile), "devaipod.toml"},
		{"/run/user/1000/podman", "podman"},
		{"/", "root"},
	} {
		_, err := ResolveMounts([]config.MountConfig{{Source: tt.source, Target: "/x"}}, forbidden)
		var me *MountError
		if tt.source == "/run/user/1000/podman" && errors.Is(err, os.ErrNotExist) {
			continue // not on this host; the rule is checked below without resolving
		}
		if !errors.As(err, &me) || !strings.Contains(me.Error(), tt.rule) {
			t.Errorf("mount %s: err %v; want a refusal naming %s", tt.source, err, tt.rule)
		}
	}
	if rule := blockedRule("/run/user/1000/podman/podman.sock", forbidden); !strings.Contains(rule, "podman") {
		t.Errorf("podman socket rule = %q", rule)
	}
}
