package main

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod"
)

func TestKeyQuotaCheck(t *testing.T) {
	defaults := pod.KeyQuota{UID: 1001, Keys: 4, MaxKeys: 200, Bytes: 280, MaxBytes: 20000}
	raised := pod.KeyQuota{UID: 1001, Keys: 4, MaxKeys: 2000, Bytes: 280, MaxBytes: 2000000}
	full := pod.KeyQuota{UID: 1001, Keys: 198, MaxKeys: 200, Bytes: 13860, MaxBytes: 20000}
	for _, tc := range []struct {
		q      pod.KeyQuota
		pods   int
		status string
		says   []string
	}{
		{defaults, 10, "ok", []string{"4 of 200 keys", "280 of 20000 bytes", "uid 1001", "room for about 39 more pods"}},
		{defaults, 100, "warn", []string{"room for only 39 more pods, fewer than 100", "disk quota exceeded",
			"sysctl -w kernel.keys.maxkeys=2000 kernel.keys.maxbytes=2000000", "/etc/sysctl.d/"}},
		{raised, 100, "ok", []string{"room for about 399 more pods"}},
		{full, 1, "fail", []string{"no room for another pod", "sysctl -w kernel.keys.maxkeys="}},
	} {
		c := keyQuotaCheck(tc.q, tc.pods)
		if c.Name != "keys" || c.Status != tc.status {
			t.Errorf("keyQuotaCheck(%+v, %d) = %s %s, want keys %s: %s", tc.q, tc.pods, c.Name, c.Status, tc.status, c.Detail)
		}
		for _, s := range tc.says {
			if !strings.Contains(c.Detail, s) {
				t.Errorf("keyQuotaCheck(%+v, %d) does not say %q: %s", tc.q, tc.pods, s, c.Detail)
			}
		}
	}
}

func TestServiceUID(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "podman.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, tc := range []struct {
		uri      string
		rootless bool
		uid      int
		ok       bool
	}{
		{"unix://" + sock, false, os.Getuid(), true}, // the socket's owner, whatever the mode
		{"unix:///nonexistent/podman.sock", true, os.Getuid(), true},
		{"unix:///nonexistent/podman.sock", false, 0, true},
		{"ssh://core@host.example.test/run/podman/podman.sock", true, 0, false},
		{"tcp://127.0.0.1:8080", false, 0, false},
	} {
		uid, ok := serviceUID(tc.uri, tc.rootless)
		if uid != tc.uid || ok != tc.ok {
			t.Errorf("serviceUID(%q, %v) = %d, %v; want %d, %v", tc.uri, tc.rootless, uid, ok, tc.uid, tc.ok)
		}
	}
}

func TestPrintErrorKeyQuota(t *testing.T) {
	var b strings.Builder
	printError(&b, errors.New(`create container devaipod-p-agent: runc: unable to join session keyring: unable to create session key: disk quota exceeded`))
	if !strings.Contains(b.String(), "Hint:") || !strings.Contains(b.String(), "doctor --pods") {
		t.Errorf("printError:\n%s", b.String())
	}
}
