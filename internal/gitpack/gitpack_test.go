package gitpack

import (
	"bytes"
	"errors"
	"testing"

	"github.com/devaipod/devaipod/internal/gittest"
)

func TestPatch(t *testing.T) {
	base := []byte("0123456789")
	big := bytes.Repeat([]byte("0123456789abcdef"), 0x2000) // 128 KiB
	for _, tt := range []struct {
		name  string
		base  []byte // base if nil
		delta []byte
		want  string // "" for an error
		large bool   // a *TooLargeError
	}{
		// 0x80 alone: offset 0 and size 0, which means 0x10000.
		{name: "a copy of size 0 is one of 0x10000", base: big, delta: append(gittest.DeltaHeader(int64(len(big)), 0x10000), 0x80), want: string(big[:0x10000])},
		// 0xff: four offset bytes and three size bytes, least significant
		// first: offset 0x10001, size 3.
		{name: "a copy with every byte", base: big, delta: append(gittest.DeltaHeader(int64(len(big)), 3), 0xff, 1, 0, 1, 0, 3, 0, 0), want: string(big[0x10001:0x10004])},
		// copy 4 bytes at offset 2 (0x91: one offset byte, one size
		// byte), insert "ab", copy the first byte.
		{name: "copies and inserts", delta: append(gittest.DeltaHeader(10, 7), 0x91, 2, 4, 2, 'a', 'b', 0x90, 1), want: "2345ab0"},
		{name: "a copy of size 0, which means 0x10000, past its base", delta: append(gittest.DeltaHeader(10, 3), 0x80)},
		{name: "the wrong base size", delta: append(gittest.DeltaHeader(9, 1), 1, 'a')},
		{name: "makes less than it says", delta: append(gittest.DeltaHeader(10, 5), 1, 'a')},
		{name: "copies past its base", delta: append(gittest.DeltaHeader(10, 4), 0x91, 8, 4)},
		{name: "copies past what it says it makes", delta: append(gittest.DeltaHeader(10, 3), 0x91, 0, 2, 0x91, 0, 2)},
		{name: "inserts past its end", delta: append(gittest.DeltaHeader(10, 3), 3, 'a')},
		{name: "inserts past what it says it makes", delta: append(gittest.DeltaHeader(10, 1), 2, 'a', 'b')},
		{name: "instruction 0", delta: append(gittest.DeltaHeader(10, 1), 0, 1, 'a')},
		{name: "says it makes more than max", delta: append(gittest.DeltaHeader(10, 1<<31), 0x91, 0, 1), large: true},
		{name: "cut in its header", delta: []byte{0x8a}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := base
			if tt.base != nil {
				b = tt.base
			}
			got, err := Patch(b, tt.delta, 1<<30)
			var large *TooLargeError
			switch {
			case tt.want != "":
				if err != nil || string(got) != tt.want {
					t.Errorf("Patch = %q, %v; want %q", got, err, tt.want)
				}
			case tt.large:
				if !errors.As(err, &large) || large.Size != 1<<31 {
					t.Errorf("Patch = %q, %v; want a TooLargeError of 2 GiB", got, err)
				}
			case err == nil || !errors.Is(err, ErrMalformed):
				t.Errorf("Patch = %q, %v; want ErrMalformed", got, err)
			}
		})
	}
}

func TestReadEntry(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   []byte
		want Entry
		bad  bool
	}{
		{name: "a small blob", in: []byte{0x35}, want: Entry{Type: Blob, Size: 5}},
		// 0x9f: commit (1), size 15, more; then 1<<4.
		{name: "a larger commit", in: []byte{0x9f, 0x01}, want: Entry{Type: Commit, Size: 31}},
		// Distance 0x80 is written 0x80 0x00 (one added per continuation).
		{name: "an offset delta", in: []byte{0x61, 0x80, 0x00}, want: Entry{Type: OfsDelta, Size: 1, BaseDistance: 128}},
		{name: "a reference delta", in: append([]byte{0x71}, bytes.Repeat([]byte{7}, 20)...),
			want: Entry{Type: RefDelta, Size: 1, BaseHash: bytes.Repeat([]byte{7}, 20)}},
		{name: "type 5", in: []byte{0x51}, bad: true},
		{name: "a size that overflows", in: append(bytes.Repeat([]byte{0xff}, 10), 1), bad: true},
		{name: "an offset that overflows", in: append([]byte{0x61}, bytes.Repeat([]byte{0xff}, 10)...), bad: true},
		{name: "cut short", in: []byte{0x71, 1, 2}, bad: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, err := ReadEntry(bytes.NewReader(tt.in), 20)
			if tt.bad {
				if !errors.Is(err, ErrMalformed) {
					t.Errorf("ReadEntry = %+v, %v; want ErrMalformed", e, err)
				}
				return
			}
			if err != nil || e.Type != tt.want.Type || e.Size != tt.want.Size || e.BaseDistance != tt.want.BaseDistance || !bytes.Equal(e.BaseHash, tt.want.BaseHash) {
				t.Errorf("ReadEntry = %+v, %v; want %+v", e, err, tt.want)
			}
		})
	}
}

// FuzzPatch: whatever the delta, Patch makes exactly the size the delta
// says, at most max, or fails.
func FuzzPatch(f *testing.F) {
	f.Add([]byte("0123456789"), append(gittest.DeltaHeader(10, 7), 0x91, 2, 4, 2, 'a', 'b', 0x90, 1))
	f.Add([]byte("x"), append(gittest.DeltaHeader(1, 3<<29), bytes.Repeat([]byte{0x91, 0, 1}, 100)...))
	f.Fuzz(func(t *testing.T, base, delta []byte) {
		const max = 1 << 20
		out, err := Patch(base, delta, max)
		if err != nil {
			return
		}
		r := &byteReader{b: delta}
		DeltaSize(r)
		size, _ := DeltaSize(r)
		if int64(len(out)) != size || size > max {
			t.Fatalf("Patch made %d bytes; the delta says %d (max %d)", len(out), size, max)
		}
	})
}

// FuzzReadEntry: whatever the bytes, ReadEntry returns a known type with a
// size and base that fit, or fails.
func FuzzReadEntry(f *testing.F) {
	f.Add([]byte{0x35})
	f.Add([]byte{0x61, 0x80, 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := ReadEntry(bytes.NewReader(in), 20)
		if err != nil {
			return
		}
		if e.Size < 0 || e.BaseDistance < 0 || e.Type < Commit || e.Type > RefDelta || e.Type == 5 ||
			(e.Type == RefDelta) != (len(e.BaseHash) == 20) {
			t.Fatalf("ReadEntry(%x) = %+v", in, e)
		}
	})
}
