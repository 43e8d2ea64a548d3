package pod

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A /proc/key-users as the kernel writes it: root, and a rootless user
// running one pod of four containers.
const keyUsersSample = `    0:     9 8/8 3/1000000 40/25000000
 1001:     4 4/4 4/200 280/20000
`

func TestParseKeyUsers(t *testing.T) {
	q, found, err := parseKeyUsers(strings.NewReader(keyUsersSample), 1001)
	if err != nil || !found {
		t.Fatalf("parseKeyUsers = %+v, %v, %v", q, found, err)
	}
	want := KeyQuota{UID: 1001, Keys: 4, MaxKeys: 200, Bytes: 280, MaxBytes: 20000}
	if q != want {
		t.Errorf("parseKeyUsers = %+v, want %+v", q, want)
	}
	// 196 keys left: 39 pods; 19720 bytes left: 56 pods.
	if n := q.PodsLeft(); n != 39 {
		t.Errorf("PodsLeft = %d, want 39", n)
	}
	if _, found, err := parseKeyUsers(strings.NewReader(keyUsersSample), 100); found || err != nil {
		t.Errorf("uid 100 found = %v, %v; want no line", found, err)
	}
	if _, _, err := parseKeyUsers(strings.NewReader(" 1001:  4 4/4 4-200 280/20000\n"), 1001); err == nil {
		t.Error("a malformed line was accepted")
	}
}

func TestKeyQuotaFix(t *testing.T) {
	for _, tc := range []struct {
		q    KeyQuota
		pods int
		want string
	}{
		{KeyQuota{UID: 1001, Keys: 4, MaxKeys: 200, Bytes: 280, MaxBytes: 20000}, 10, ""},
		{KeyQuota{UID: 1001, Keys: 4, MaxKeys: 200, Bytes: 280, MaxBytes: 20000}, 100,
			"sysctl -w kernel.keys.maxkeys=2000 kernel.keys.maxbytes=2000000"},
		// Bytes are short, keys are not: the keys' limit stays as it is.
		{KeyQuota{UID: 1001, Keys: 0, MaxKeys: 5000, Bytes: 0, MaxBytes: 20000}, 100,
			"sysctl -w kernel.keys.maxkeys=5000 kernel.keys.maxbytes=5000000"},
		{KeyQuota{UID: 1001, Keys: 10, MaxKeys: 2000, Bytes: 700, MaxBytes: 2000000}, 1000,
			"sysctl -w kernel.keys.maxkeys=6000 kernel.keys.maxbytes=6000000"},
		{KeyQuota{UID: 0, Keys: 10, MaxKeys: 200, Bytes: 700, MaxBytes: 20000}, 100,
			"sysctl -w kernel.keys.root_maxkeys=2000 kernel.keys.root_maxbytes=2000000"},
	} {
		got := tc.q.Fix(tc.pods)
		if tc.want == "" && got != "" || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%+v.Fix(%d) = %q, want %q...", tc.q, tc.pods, got, tc.want)
		}
		if got != "" && !(KeyQuota{UID: tc.q.UID, Keys: tc.q.Keys, Bytes: tc.q.Bytes, MaxKeys: atoiAfter(got, "maxkeys="),
			MaxBytes: atoiAfter(got, "maxbytes=")}).fits(tc.pods) {
			t.Errorf("%+v.Fix(%d) = %q does not make room", tc.q, tc.pods, got)
		}
	}
}

func (q KeyQuota) fits(pods int) bool { return q.PodsLeft() >= pods }

func atoiAfter(s, key string) int {
	_, rest, _ := strings.Cut(s, key)
	n := 0
	for _, c := range rest {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func TestReadKeyQuota(t *testing.T) {
	dir := t.TempDir()
	oldUsers, oldDir := keyUsersFile, keySysctlDir
	t.Cleanup(func() { keyUsersFile, keySysctlDir = oldUsers, oldDir })
	keyUsersFile, keySysctlDir = filepath.Join(dir, "key-users"), dir
	for name, v := range map[string]string{"key-users": keyUsersSample, "maxkeys": "300\n", "maxbytes": "30000\n",
		"root_maxkeys": "1000000\n", "root_maxbytes": "25000000\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for uid, want := range map[int]KeyQuota{
		1001: {UID: 1001, Keys: 4, MaxKeys: 200, Bytes: 280, MaxBytes: 20000},
		// A user without keys has no line: the sysctls give its limits.
		1002: {UID: 1002, MaxKeys: 300, MaxBytes: 30000},
	} {
		if q, err := ReadKeyQuota(uid); err != nil || q != want {
			t.Errorf("ReadKeyQuota(%d) = %+v, %v; want %+v", uid, q, err, want)
		}
	}
	// The real files, where there are some.
	if _, err := os.Stat(oldUsers); err == nil {
		keyUsersFile, keySysctlDir = oldUsers, oldDir
		if q, err := ReadKeyQuota(os.Getuid()); err != nil || q.MaxKeys <= 0 || q.MaxBytes <= 0 {
			t.Errorf("ReadKeyQuota(%d) on this host = %+v, %v", os.Getuid(), q, err)
		}
	}
}
