package source

import (
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/internal/gitpack"
	"github.com/devaipod/devaipod/internal/gittest"
)

// gitBundle is a bundle git made of a repository with two versions of a
// file, so that its pack has a delta.
func gitBundle(t testing.TB) []byte {
	t.Helper()
	repo := gittest.Repo(t)
	text := strings.Repeat("a line of text that repeats\n", 500)
	for i, extra := range []string{"one more line\n", "and another\n"} {
		gittest.WriteFile(t, filepath.Join(repo, "big.txt"), text+extra)
		gittest.Git(t, repo, []string{"add", "big.txt"}, []string{"commit", "-q", "-m", fmt.Sprint("v", i)})
	}
	path := filepath.Join(t.TempDir(), "b.bundle")
	gittest.Git(t, repo, []string{"bundle", "create", "-q", path, "--all"})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// packEntry is one entry of a hand-made pack: its header's type and size,
// what follows the header (a delta's base), and the inflated data.
type packEntry struct {
	typ  byte
	size int64
	base []byte
	data []byte
}

// handBundle makes a v2 bundle with one ref and a pack of entries, as git
// lays them out (no trailer checksum: CheckBundle does not read it).
func handBundle(entries ...packEntry) []byte {
	var b bytes.Buffer
	b.WriteString("# v2 git bundle\n" + strings.Repeat("1", 40) + " refs/heads/main\n\n")
	b.WriteString("PACK")
	binary.Write(&b, binary.BigEndian, uint32(2))
	binary.Write(&b, binary.BigEndian, uint32(len(entries)))
	for _, e := range entries {
		size := e.size
		c := e.typ<<4 | byte(size&15)
		size >>= 4
		for size > 0 {
			b.WriteByte(c | 0x80)
			c = byte(size & 0x7f)
			size >>= 7
		}
		b.WriteByte(c)
		b.Write(e.base)
		zw := zlib.NewWriter(&b)
		zw.Write(e.data)
		zw.Close()
	}
	return b.Bytes()
}

func writeBundle(t *testing.T, b []byte) string {
	path := filepath.Join(t.TempDir(), "work.bundle")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckBundle(t *testing.T) {
	if err := CheckBundle(context.Background(), writeBundle(t, gitBundle(t)), MaxObjectSize); err != nil {
		t.Errorf("a bundle git made: %v", err)
	}
	blob := []byte("x")
	oid := sha1.Sum([]byte("blob 1\x00x"))
	// A delta of a few bytes that says it makes 1.5 GiB: copy the base's
	// byte (instruction 0x91: offset byte, size byte), over and over.
	bomb := append(gittest.DeltaHeader(1, 3<<29), bytes.Repeat([]byte{0x91, 0, 1}, 100)...)
	for _, tt := range []struct {
		name    string
		bundle  []byte
		tooBig  int64 // the size refused; 0: a malformed bundle
		allowed bool
	}{
		{name: "a blob and a delta of it", allowed: true, bundle: handBundle(
			packEntry{typ: gitpack.Blob, size: 1, data: blob},
			packEntry{typ: gitpack.RefDelta, size: 5, base: oid[:], data: append(gittest.DeltaHeader(1, 1), 0x91, 0, 1)})},
		{name: "a delta that makes 1.5 GiB", tooBig: 3 << 29, bundle: handBundle(
			packEntry{typ: gitpack.Blob, size: 1, data: blob},
			packEntry{typ: gitpack.RefDelta, size: int64(len(bomb)), base: oid[:], data: bomb})},
		{name: "an offset delta too", tooBig: 3 << 29, bundle: handBundle(
			packEntry{typ: gitpack.Blob, size: 1, data: blob},
			packEntry{typ: gitpack.OfsDelta, size: int64(len(bomb)), base: []byte{0x0c}, data: bomb})},
		{name: "a blob over the bound", tooBig: MaxObjectSize + 1, bundle: handBundle(
			packEntry{typ: gitpack.Blob, size: MaxObjectSize + 1, data: blob})},
		{name: "a blob larger than its header says", bundle: handBundle(
			packEntry{typ: gitpack.Blob, size: 1, data: []byte("xy")})},
		{name: "a blob smaller than its header says", bundle: handBundle(
			packEntry{typ: gitpack.Blob, size: 3, data: blob})},
		{name: "an unknown type", bundle: handBundle(packEntry{typ: 5, size: 1, data: blob})},
		{name: "not a bundle", bundle: []byte("PACK\x00\x00\x00\x02")},
		{name: "a header cut short", bundle: handBundle(packEntry{typ: gitpack.Blob, size: 1, data: blob})[:70]},
		{name: "a pack cut short", bundle: cut(handBundle(packEntry{typ: gitpack.Blob, size: 1, data: blob}), 3)},
	} {
		err := CheckBundle(context.Background(), writeBundle(t, tt.bundle), MaxObjectSize)
		var te *ObjectTooLargeError
		switch {
		case tt.allowed:
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
		case tt.tooBig > 0:
			if !errors.As(err, &te) || te.Size != tt.tooBig {
				t.Errorf("%s: %v; want an ObjectTooLargeError of %d", tt.name, err, tt.tooBig)
			}
		case !errors.Is(err, errBadBundle):
			t.Errorf("%s: %v; want it refused as malformed", tt.name, err)
		}
	}
}

// cut is b without its last n bytes.
func cut(b []byte, n int) []byte { return b[:len(b)-n] }

// TestCheckBundleEndsWithItsContext: reading a bundle of large objects
// takes a while; Ctrl-C (the context) ends it.
func TestCheckBundleEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	path := writeBundle(t, handBundle(packEntry{typ: gitpack.Blob, size: 1, data: []byte("x")}))
	if err := CheckBundle(ctx, path, MaxObjectSize); !errors.Is(err, context.Canceled) {
		t.Errorf("CheckBundle with its context done: %v", err)
	}
}

func FuzzCheckBundle(f *testing.F) {
	f.Add(gitBundle(f))
	f.Add(handBundle(packEntry{typ: gitpack.Blob, size: 1, data: []byte("x")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "b")
		os.WriteFile(path, b, 0o600)
		CheckBundle(context.Background(), path, 1<<20) // must end, without a panic
	})
}
