package gator

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/devaipod/devaipod/internal/gitpack"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
)

// objectReader reads the objects of the workspace's repository itself,
// loose and packed, instead of go-git's storage: go-git inflates an
// object's zlib stream to its end whatever size the object's header says,
// and applies a delta past the size it says it makes, so a loose object
// of a few kilobytes, or a delta of a few bytes, made the gator take
// gigabytes. Here every object is at most max bytes, as its header says,
// and is read as exactly that many: a stream that inflates to more, a
// delta that makes more or copies outside its base, a chain of deltas
// longer than git makes or that loops, and a pack index whose size does
// not match the objects it counts, are errors. What is read is still only
// what the agent wrote: verifiedStorage checks it against its id.
type objectReader struct {
	dir *rootFS // the .git directory
	max int64

	once  sync.Once
	packs []*packFile
	err   error
}

// maxDeltaChain bounds a chain of deltas: git never writes one longer
// (pack.depth is at most 4095).
const maxDeltaChain = 4096

// hashLen is a SHA-1 object id's length: go-git v5 reads no other.
const hashLen = 20

// errObjectNotFound is go-git's, which its callers test for.
var errObjectNotFound = plumbing.ErrObjectNotFound

// read returns the type and content of the object h, from its loose file
// or a pack.
func (r *objectReader) read(h plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	t, data, err := r.readLoose(h)
	if !errors.Is(err, errObjectNotFound) {
		return t, data, err
	}
	p, offset, err := r.find(h)
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	return r.readPacked(p, offset)
}

// has reports whether the repository holds h, without reading it.
func (r *objectReader) has(h plumbing.Hash) error {
	if _, err := r.dir.Stat(loosePath(h)); err == nil {
		return nil
	}
	_, _, err := r.find(h)
	return err
}

func loosePath(h plumbing.Hash) string {
	s := h.String()
	return path.Join("objects", s[:2], s[2:])
}

// readLoose reads a loose object: a zlib stream of "TYPE SIZE\0" and
// SIZE bytes, and nothing after them.
func (r *objectReader) readLoose(h plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	f, err := r.dir.open(loosePath(h))
	if errors.Is(err, fs.ErrNotExist) {
		return plumbing.InvalidObject, nil, errObjectNotFound
	}
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	defer f.Close()
	zr, err := zlib.NewReader(bufio.NewReader(f))
	if err != nil {
		return plumbing.InvalidObject, nil, fmt.Errorf("%w: %w", gitpack.ErrMalformed, err)
	}
	br := bufio.NewReaderSize(zr, 64)
	head, err := br.ReadSlice(0)
	if err != nil {
		return plumbing.InvalidObject, nil, fmt.Errorf("%w: a loose object's header: %w", gitpack.ErrMalformed, err)
	}
	name, sizeText, _ := strings.Cut(string(head[:len(head)-1]), " ")
	size, err := strconv.ParseInt(sizeText, 10, 64)
	t := objectType(name)
	if err != nil || size < 0 || t == plumbing.InvalidObject {
		return plumbing.InvalidObject, nil, fmt.Errorf("%w: a loose object's header %q", gitpack.ErrMalformed, head)
	}
	data, err := inflateExactly(br, size, r.max)
	return t, data, err
}

// objectType is the type a loose object's header names, or InvalidObject.
func objectType(name string) plumbing.ObjectType {
	switch name {
	case "commit":
		return plumbing.CommitObject
	case "tree":
		return plumbing.TreeObject
	case "blob":
		return plumbing.BlobObject
	case "tag":
		return plumbing.TagObject
	}
	return plumbing.InvalidObject
}

// inflateExactly reads size bytes from zr, a zlib stream, which must end
// right after them (its checksum checked); size must be at most max.
func inflateExactly(zr io.Reader, size, max int64) ([]byte, error) {
	if size > max {
		return nil, &gitpack.TooLargeError{Size: size, Max: max}
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(zr, data); err != nil {
		return nil, fmt.Errorf("%w: an object shorter than its header says: %w", gitpack.ErrMalformed, err)
	}
	var more [1]byte
	if n, err := zr.Read(more[:]); n > 0 || !errors.Is(err, io.EOF) {
		if n > 0 {
			err = errors.New("it inflates to more")
		}
		return nil, fmt.Errorf("%w: an object is not the size its header says: %w", gitpack.ErrMalformed, err)
	}
	return data, nil
}

// packFile is one pack of the repository, with its index.
type packFile struct {
	name string // objects/pack/pack-*.pack
	idx  *idxfile.MemoryIndex
}

// find returns the pack that holds h, and where.
func (r *objectReader) find(h plumbing.Hash) (*packFile, int64, error) {
	r.once.Do(func() { r.packs, r.err = r.loadPacks() })
	if r.err != nil {
		return nil, 0, r.err
	}
	for _, p := range r.packs {
		if offset, err := p.idx.FindOffset(h); err == nil {
			return p, offset, nil
		}
	}
	return nil, 0, errObjectNotFound
}

// loadPacks reads the index of every pack.
func (r *objectReader) loadPacks() ([]*packFile, error) {
	entries, err := r.dir.ReadDir("objects/pack")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the workspace's packs: %w", err)
	}
	var packs []*packFile
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".idx")
		if !ok || !strings.HasPrefix(base, "pack-") {
			continue
		}
		idx, err := r.loadIndex(path.Join("objects/pack", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read the workspace's pack index %s: %w", e.Name(), err)
		}
		packs = append(packs, &packFile{name: path.Join("objects/pack", base+".pack"), idx: idx})
	}
	return packs, nil
}

// A version 2 pack index: magic and version, 256 fanout counts, then per
// object its id, CRC and 32-bit offset, 8 bytes per offset past 2 GiB, and
// two checksums.
const (
	idxHeaderLen  = 8 + 256*4
	idxPerObject  = hashLen + 4 + 4
	idxTrailerLen = 2 * hashLen
)

// maxIndex bounds a pack index: one of a repository of some 38 million
// objects (Linux's has about 10 million).
const maxIndex = 1 << 30

// loadIndex reads a pack index after checking that its size matches the
// count of objects it says it has: go-git's decoder allocates as the
// counts say, so an index of a kilobyte that counts billions of objects
// would take gigabytes.
func (r *objectReader) loadIndex(name string) (*idxfile.MemoryIndex, error) {
	f, err := r.dir.open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var head [idxHeaderLen]byte
	if _, err := io.ReadFull(f, head[:]); err != nil || !bytes.Equal(head[:8], []byte{0xff, 't', 'O', 'c', 0, 0, 0, 2}) {
		return nil, fmt.Errorf("%w: not a version 2 pack index", gitpack.ErrMalformed)
	}
	var count uint32
	for i := range 256 {
		n := binary.BigEndian.Uint32(head[8+4*i:])
		if n < count {
			return nil, fmt.Errorf("%w: a pack index's counts go down", gitpack.ErrMalformed)
		}
		count = n
	}
	least := int64(idxHeaderLen) + int64(count)*idxPerObject + idxTrailerLen
	if size := fi.Size(); size < least || size > least+int64(count)*8 || size > maxIndex {
		return nil, fmt.Errorf("%w: a pack index of %d bytes for %d objects", gitpack.ErrMalformed, size, count)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	idx := idxfile.NewMemoryIndex()
	if err := idxfile.NewDecoder(bufio.NewReader(f)).Decode(idx); err != nil {
		return nil, fmt.Errorf("%w: %w", gitpack.ErrMalformed, err)
	}
	return idx, nil
}

// place is where an entry is: a pack, and an offset in it.
type place struct {
	pack   *packFile
	offset int64
}

// readPacked reads the object at offset in p: it follows its chain of
// deltas down to the base, reading only their headers, then inflates the
// base and applies the deltas one after the other, so that no more than
// a base, a delta and what it makes are held at once.
func (r *objectReader) readPacked(p *packFile, offset int64) (plumbing.ObjectType, []byte, error) {
	files := map[*packFile]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	// entry reads the header of the entry at at, leaving the reader at
	// its zlib stream.
	entry := func(at place) (gitpack.Entry, *bufio.Reader, error) {
		f, ok := files[at.pack]
		if !ok {
			var err error
			if f, err = r.dir.open(at.pack.name); err != nil {
				return gitpack.Entry{}, nil, err
			}
			files[at.pack] = f
		}
		if at.offset < 12 {
			return gitpack.Entry{}, nil, fmt.Errorf("%w: an object inside a pack's header", gitpack.ErrMalformed)
		}
		br := bufio.NewReader(io.NewSectionReader(f, at.offset, 1<<62))
		e, err := gitpack.ReadEntry(br, hashLen)
		return e, br, err
	}

	var (
		deltas []place // from the object down to its base
		t      plumbing.ObjectType
		data   []byte
		at     = place{p, offset}
		seen   = map[place]bool{}
	)
	for data == nil {
		if len(deltas) >= maxDeltaChain {
			return plumbing.InvalidObject, nil, fmt.Errorf("%w: a chain of more than %d deltas", gitpack.ErrMalformed, maxDeltaChain)
		}
		if seen[at] {
			return plumbing.InvalidObject, nil, fmt.Errorf("%w: a chain of deltas that loops", gitpack.ErrMalformed)
		}
		seen[at] = true
		e, br, err := entry(at)
		if err != nil {
			return plumbing.InvalidObject, nil, err
		}
		switch e.Type {
		case gitpack.OfsDelta:
			if e.BaseDistance <= 0 || e.BaseDistance >= at.offset {
				return plumbing.InvalidObject, nil, fmt.Errorf("%w: a delta's base outside its pack", gitpack.ErrMalformed)
			}
			deltas = append(deltas, at)
			at.offset -= e.BaseDistance
		case gitpack.RefDelta:
			deltas = append(deltas, at)
			base := plumbing.Hash(e.BaseHash)
			t, data, err = r.readLoose(base)
			if errors.Is(err, errObjectNotFound) {
				at.pack, at.offset, err = r.find(base)
			}
			if err != nil {
				return plumbing.InvalidObject, nil, err
			}
		default:
			t = plumbing.ObjectType(e.Type) // the same numbers
			if data, err = inflatePacked(br, e.Size, r.max); err != nil {
				return plumbing.InvalidObject, nil, err
			}
		}
	}
	for i := len(deltas) - 1; i >= 0; i-- {
		e, br, err := entry(deltas[i])
		if err != nil {
			return plumbing.InvalidObject, nil, err
		}
		delta, err := inflatePacked(br, e.Size, r.max)
		if err != nil {
			return plumbing.InvalidObject, nil, err
		}
		if data, err = gitpack.Patch(data, delta, r.max); err != nil {
			return plumbing.InvalidObject, nil, err
		}
	}
	return t, data, nil
}

// inflatePacked reads a pack entry's zlib stream from br: exactly size
// bytes, at most max.
func inflatePacked(br *bufio.Reader, size, max int64) ([]byte, error) {
	if size > max {
		return nil, &gitpack.TooLargeError{Size: size, Max: max}
	}
	zr, err := zlib.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", gitpack.ErrMalformed, err)
	}
	return inflateExactly(zr, size, max)
}
