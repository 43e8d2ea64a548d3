package gator

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/internal/gitpack"
	"github.com/devaipod/devaipod/internal/gittest"

	"github.com/go-git/go-git/v5/plumbing"
)

// TestObjectReaderReadsWhatGitWrote: every object of repositories git
// wrote (loose, packed with offset deltas, packed with reference deltas)
// reads back whole and matches its id.
func TestObjectReaderReadsWhatGitWrote(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		repack []string
		delta  byte // a type of delta the pack must have
	}{
		{name: "loose"},
		{name: "offset deltas", repack: []string{"repack", "-q", "-adf", "--depth=50", "--window=50"}, delta: gitpack.OfsDelta},
		{name: "reference deltas", repack: []string{"-c", "repack.useDeltaBaseOffset=false", "repack", "-q", "-adf", "--depth=50", "--window=50"}, delta: gitpack.RefDelta},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			repo := gittest.Repo(t)
			text := strings.Repeat("a line of text that repeats in every version\n", 300)
			for i := range 20 {
				gittest.WriteFile(t, filepath.Join(repo, "big.txt"), text+strings.Repeat(fmt.Sprintf("line %d\n", i), i))
				gittest.WriteFile(t, filepath.Join(repo, fmt.Sprintf("dir/f%d", i%3)), fmt.Sprint("version ", i))
				gittest.Git(t, repo, []string{"add", "-A"}, []string{"commit", "-q", "-m", fmt.Sprint("v", i)})
			}
			if tt.repack != nil {
				gittest.Git(t, repo, tt.repack)
			}
			out, err := exec.Command("git", "-C", repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype) %(objectsize)").Output()
			if err != nil {
				t.Fatal(err)
			}
			st, done, err := openWorkspace(repo)
			if err != nil {
				t.Fatal(err)
			}
			defer done()
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) < 60 {
				t.Fatalf("git lists %d objects", len(lines))
			}
			for _, line := range lines {
				var id, typ string
				var size int64
				fmt.Sscan(line, &id, &typ, &size)
				o, err := st.EncodedObject(plumbing.AnyObject, plumbing.NewHash(id))
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				if o.Type().String() != typ || o.Size() != size {
					t.Errorf("%s: read a %s of %d bytes", line, o.Type(), o.Size())
				}
			}
			if tt.delta != 0 && !slices.Contains(entryTypes(t, st), tt.delta) {
				t.Errorf("the pack has no delta of type %d: the test reads no delta", tt.delta)
			}
		})
	}
}

// entryTypes lists the types of the entries of st's packs.
func entryTypes(t *testing.T, st *verifiedStorage) []byte {
	t.Helper()
	r := st.objects
	r.find(plumbing.ZeroHash)
	var types []byte
	for _, p := range r.packs {
		f, err := r.dir.open(p.name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for i := range p.count() {
			offset, err := p.offset(i)
			if err != nil {
				t.Fatal(err)
			}
			e, _, err := entryAt(f, offset)
			if err != nil {
				t.Fatal(err)
			}
			types = append(types, e.Type)
		}
	}
	return types
}

// handEntry is an entry of a hand-made pack: its id in the index, its
// header, what follows the header (a delta's base) and its data.
type handEntry struct {
	id   plumbing.Hash
	typ  byte
	size int64
	base []byte
	data []byte
}

// ofsBase is the base of an offset delta distance bytes before it, as git
// writes it.
func ofsBase(distance int64) []byte {
	b := []byte{byte(distance & 0x7f)}
	for distance >>= 7; distance > 0; distance >>= 7 {
		distance--
		b = append([]byte{0x80 | byte(distance&0x7f)}, b...)
	}
	return b
}

// packOffsets returns where each entry will start in a hand-made pack.
func packOffsets(entries []handEntry) []int64 {
	offsets := make([]int64, len(entries))
	var pack bytes.Buffer
	writeEntries(&pack, entries, offsets)
	return offsets
}

func writeEntries(b *bytes.Buffer, entries []handEntry, offsets []int64) {
	b.WriteString("PACK")
	binary.Write(b, binary.BigEndian, uint32(2))
	binary.Write(b, binary.BigEndian, uint32(len(entries)))
	for i, e := range entries {
		offsets[i] = int64(b.Len())
		size := e.size
		c := e.typ<<4 | byte(size&15)
		for size >>= 4; size > 0; size >>= 7 {
			b.WriteByte(c | 0x80)
			c = byte(size & 0x7f)
		}
		b.WriteByte(c)
		b.Write(e.base)
		zw := zlib.NewWriter(b)
		zw.Write(e.data)
		zw.Close()
	}
}

// writeHandPack writes entries as a pack, and its version 2 index, into
// the repository dir's .git.
func writeHandPack(t *testing.T, dir string, entries []handEntry) {
	t.Helper()
	writePackFiles(t, dir, entries, false)
}

// writePackFiles writes entries as a pack and its index, every offset in
// the index's table of 64-bit offsets if large, and returns the index's
// path.
func writePackFiles(t *testing.T, dir string, entries []handEntry, large bool) string {
	t.Helper()
	var pack bytes.Buffer
	offsets := make([]int64, len(entries))
	writeEntries(&pack, entries, offsets)
	sum := sha1.Sum(pack.Bytes())
	pack.Write(sum[:])

	order := make([]int, len(entries))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(entries[a].id[:], entries[b].id[:]) })
	var idx bytes.Buffer
	idx.Write([]byte{0xff, 't', 'O', 'c', 0, 0, 0, 2})
	for k := range 256 {
		n := 0
		for _, e := range entries {
			if int(e.id[0]) <= k {
				n++
			}
		}
		binary.Write(&idx, binary.BigEndian, uint32(n))
	}
	for _, i := range order {
		idx.Write(entries[i].id[:])
	}
	idx.Write(make([]byte, 4*len(entries))) // CRCs, unchecked
	for k, i := range order {
		if large {
			binary.Write(&idx, binary.BigEndian, uint32(0x80000000|k))
		} else {
			binary.Write(&idx, binary.BigEndian, uint32(offsets[i]))
		}
	}
	if large {
		for _, i := range order {
			binary.Write(&idx, binary.BigEndian, uint64(offsets[i]))
		}
	}
	idx.Write(sum[:])
	isum := sha1.Sum(idx.Bytes())
	idx.Write(isum[:])

	packDir := filepath.Join(dir, ".git", "objects", "pack")
	os.MkdirAll(packDir, 0o755)
	name := filepath.Join(packDir, "pack-"+hex.EncodeToString(sum[:]))
	if err := os.WriteFile(name+".pack", pack.Bytes(), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name+".idx", idx.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return name + ".idx"
}

// putLoose writes the zlib stream of parts, one after the other, as the
// loose object file of id in repo's .git, in the place of any there.
func putLoose(t *testing.T, repo, id string, parts ...[]byte) {
	t.Helper()
	var b bytes.Buffer
	zw := zlib.NewWriter(&b)
	for _, p := range parts {
		zw.Write(p)
	}
	zw.Close()
	path := filepath.Join(repo, ".git", "objects", id[:2], id[2:])
	os.MkdirAll(filepath.Dir(path), 0o755)
	os.Remove(path)
	if err := os.WriteFile(path, b.Bytes(), 0o444); err != nil {
		t.Fatal(err)
	}
}

// handWorkspace makes a workspace with a .git folder that write fills, and
// opens it for the length of the test.
func handWorkspace(t *testing.T, write func(t *testing.T, dir string)) *verifiedStorage {
	t.Helper()
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, ".git"), 0o755)
	write(t, dir)
	st, done, err := openWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(done)
	return st
}

// TestObjectReaderBounds: objects the agent crafted so that reading them
// takes gigabytes, or never ends, are refused after reading no more than
// their headers say. go-git's own reader took the first three whole (1 to
// 1.5 GiB each) and overflowed its stack on the loop; the index's checks
// are the reader's own (go-git's decoder took the short index without
// harm, as measured).
func TestObjectReaderBounds(t *testing.T) {
	// Not parallel: it measures what the process allocates.
	const bomb = 256 << 20 // what go-git would have taken
	zeros := make([]byte, bomb)
	hello := plumbing.ComputeHash(plumbing.BlobObject, []byte("hello"))
	idA, idB := plumbing.NewHash(strings.Repeat("a", 40)), plumbing.NewHash(strings.Repeat("b", 40))
	base := bytes.Repeat([]byte("x"), 0x10000)
	// Says it makes 64 KiB; inserts one byte, then copies the whole base
	// over and over (go-git's patch went on past the 64 KiB).
	copies := append(append(gittest.DeltaHeader(0x10000, 0x10000), 1, 'y'), bytes.Repeat([]byte{0x80}, bomb/0x10000)...)
	chain := []handEntry{{id: idA, typ: gitpack.Blob, size: 1, data: []byte("x")}}
	for i := range maxDeltaChain + 1 {
		chain = append(chain, handEntry{id: plumbing.ComputeHash(plumbing.BlobObject, []byte(fmt.Sprint(i))), typ: gitpack.RefDelta, size: 4,
			base: chain[i].id[:], data: append(gittest.DeltaHeader(1, 1), 0x90, 1)})
	}
	for _, tt := range []struct {
		name  string
		write func(t *testing.T, dir string)
		read  plumbing.Hash
		want  string
	}{
		{name: "a loose object that inflates past its header's size", read: hello, want: "not the size its header says",
			write: func(t *testing.T, dir string) { putLoose(t, dir, hello.String(), []byte("blob 5\x00hello"), zeros) }},
		{name: "a packed object that inflates past its header's size", read: hello, want: "not the size its header says",
			write: func(t *testing.T, dir string) {
				writeHandPack(t, dir, []handEntry{{id: hello, typ: gitpack.Blob, size: 5, data: append([]byte("hello"), zeros...)}})
			}},
		{name: "a delta that makes more than it says", read: idB, want: "past the size it makes",
			write: func(t *testing.T, dir string) {
				entries := []handEntry{{id: idA, typ: gitpack.Blob, size: int64(len(base)), data: base},
					{id: idB, typ: gitpack.OfsDelta, size: int64(len(copies)), data: copies}}
				offsets := packOffsets(entries) // the base's bytes do not move the entry
				entries[1].base = ofsBase(offsets[1] - offsets[0])
				writeHandPack(t, dir, entries)
			}},
		{name: "deltas that are each other's base", read: idA, want: "a chain of deltas that loops",
			write: func(t *testing.T, dir string) {
				writeHandPack(t, dir, []handEntry{
					{id: idA, typ: gitpack.RefDelta, size: 4, base: idB[:], data: append(gittest.DeltaHeader(1, 1), 0x90, 1)},
					{id: idB, typ: gitpack.RefDelta, size: 4, base: idA[:], data: append(gittest.DeltaHeader(1, 1), 0x90, 1)}})
			}},
		{name: "a chain of deltas longer than git makes", read: chain[len(chain)-1].id, want: "a chain of more than 4095 deltas",
			write: func(t *testing.T, dir string) { writeHandPack(t, dir, chain) }},
		// The chain's ids are made up: a chain that is followed to its end
		// makes what does not match them.
		{name: "a chain of deltas as deep as git makes is followed", read: chain[len(chain)-2].id, want: "does not match its id",
			write: func(t *testing.T, dir string) { writeHandPack(t, dir, chain) }},
		{name: "a pack index whose offset is past its table of large ones", read: hello, want: "a pack index's offset past its table",
			write: func(t *testing.T, dir string) {
				idx := writePackFiles(t, dir, []handEntry{{id: hello, typ: gitpack.Blob, size: 5, data: []byte("hello")}}, true)
				b, _ := os.ReadFile(idx)
				binary.BigEndian.PutUint32(b[idxHeaderLen+hashLen+4:], 0x80000005)
				os.WriteFile(idx, b, 0o644)
			}},
		{name: "a pack index that counts more objects than it has", read: hello, want: "a pack index of 1072 bytes for 33554432 objects",
			write: func(t *testing.T, dir string) {
				idx := append([]byte{0xff, 't', 'O', 'c', 0, 0, 0, 2}, make([]byte, 1024+40)...)
				binary.BigEndian.PutUint32(idx[8+4*255:], 1<<25)
				packDir := filepath.Join(dir, ".git", "objects", "pack")
				os.MkdirAll(packDir, 0o755)
				if err := os.WriteFile(filepath.Join(packDir, "pack-1.idx"), idx, 0o444); err != nil {
					t.Fatal(err)
				}
				// An index without its pack is passed over.
				if err := os.WriteFile(filepath.Join(packDir, "pack-1.pack"), nil, 0o444); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := handWorkspace(t, tt.write)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			o, err := st.EncodedObject(plumbing.AnyObject, tt.read)
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("read %s: %v, %v; want an error saying %q", tt.read, o, err, tt.want)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
				t.Errorf("reading it allocated %d MiB", grew>>20)
			}
		})
	}
}

// FuzzObjectReader: whatever a pack entry holds (after a blob it may
// name as its base), reading it neither panics nor takes more than its
// header allows.
func FuzzObjectReader(f *testing.F) {
	f.Add(byte(gitpack.Blob), int64(5), []byte{}, []byte("hello"))
	f.Add(byte(gitpack.OfsDelta), int64(4), []byte{0x0f}, append(gittest.DeltaHeader(1, 1), 0x90, 1))
	f.Add(byte(gitpack.RefDelta), int64(4), bytes.Repeat([]byte{0xaa}, 20), append(gittest.DeltaHeader(1, 1), 0x90, 1))
	f.Fuzz(func(t *testing.T, typ byte, size int64, base, data []byte) {
		if size < 0 || size > 1<<20 || len(data) > 1<<20 {
			return
		}
		first := plumbing.NewHash(strings.Repeat("a", 40))
		hello := plumbing.ComputeHash(plumbing.BlobObject, []byte("hello"))
		st := handWorkspace(t, func(t *testing.T, dir string) {
			writeHandPack(t, dir, []handEntry{{id: first, typ: gitpack.Blob, size: 1, data: []byte("x")},
				{id: hello, typ: typ & 7, size: size, base: base, data: data}})
		})
		if o, err := st.EncodedObject(plumbing.AnyObject, hello); err == nil && o.Size() != 5 {
			t.Fatalf("read %d bytes for hello", o.Size())
		}
	})
}

// TestObjectReaderFinds: objects that git may put where the simple case
// does not: an offset in the index's table of 64-bit ones, a reference
// delta's base loose or in another pack.
func TestObjectReaderFinds(t *testing.T) {
	t.Parallel()
	base := []byte("a base of some length")
	baseID := plumbing.ComputeHash(plumbing.BlobObject, base)
	made := []byte("a base")
	// Copy 6 bytes at offset 0 (0x90: one size byte).
	madeDelta := append(gittest.DeltaHeader(int64(len(base)), 6), 0x90, 6)
	madeID := plumbing.ComputeHash(plumbing.BlobObject, made)
	for _, tt := range []struct {
		name  string
		write func(t *testing.T, dir string)
		read  plumbing.Hash
		want  []byte // nil: an error
	}{
		{name: "an offset in the table of large ones", read: baseID, want: base,
			write: func(t *testing.T, dir string) {
				writePackFiles(t, dir, []handEntry{{id: baseID, typ: gitpack.Blob, size: int64(len(base)), data: base}}, true)
			}},
		{name: "a reference delta whose base is loose", read: madeID, want: made,
			write: func(t *testing.T, dir string) {
				putLoose(t, dir, baseID.String(), fmt.Appendf(nil, "blob %d\x00%s", len(base), base))
				writeHandPack(t, dir, []handEntry{{id: madeID, typ: gitpack.RefDelta, size: int64(len(madeDelta)), base: baseID[:], data: madeDelta}})
			}},
		{name: "a reference delta whose base is in another pack", read: madeID, want: made,
			write: func(t *testing.T, dir string) {
				writeHandPack(t, dir, []handEntry{{id: baseID, typ: gitpack.Blob, size: int64(len(base)), data: base}})
				writeHandPack(t, dir, []handEntry{{id: madeID, typ: gitpack.RefDelta, size: int64(len(madeDelta)), base: baseID[:], data: madeDelta}})
			}},
		{name: "an index without its pack", read: baseID,
			write: func(t *testing.T, dir string) {
				idx := writePackFiles(t, dir, []handEntry{{id: baseID, typ: gitpack.Blob, size: int64(len(base)), data: base}}, false)
				os.Remove(strings.TrimSuffix(idx, ".idx") + ".pack")
			}},
		{name: "an index without its pack, listed first, and the object in another pack", read: baseID, want: base,
			write: func(t *testing.T, dir string) {
				idx := writePackFiles(t, dir, []handEntry{{id: baseID, typ: gitpack.Blob, size: int64(len(base)), data: base}}, false)
				os.Remove(strings.TrimSuffix(idx, ".idx") + ".pack")
				if err := os.Rename(idx, filepath.Join(filepath.Dir(idx), "pack-"+strings.Repeat("0", 40)+".idx")); err != nil {
					t.Fatal(err)
				}
				writeHandPack(t, dir, []handEntry{{id: baseID, typ: gitpack.Blob, size: int64(len(base)), data: base}})
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := handWorkspace(t, tt.write)
			o, err := st.EncodedObject(plumbing.AnyObject, tt.read)
			if tt.want == nil {
				if err == nil {
					t.Errorf("read %s: no error", tt.read)
				}
				return
			}
			if err != nil {
				t.Fatalf("read %s: %v", tt.read, err)
			}
			r, _ := o.Reader()
			got, _ := io.ReadAll(r)
			if !bytes.Equal(got, tt.want) {
				t.Errorf("read %q, want %q", got, tt.want)
			}
		})
	}
}
