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
	"github.com/go-git/go-git/v5/plumbing/cache"
)

// objectReader reads the objects of the workspace's repository itself,
// loose and packed, instead of go-git's storage, which trusts them: it
// inflates an object's zlib stream to its end whatever size the object's
// header says, applies a delta past the size it says it makes, follows
// reference deltas without end, and indexes a pack index's tables as its
// entries say, so a loose object of a megabyte or a delta of a few
// kilobytes made the gator take gigabytes, two deltas that are each
// other's base overflowed its stack, and an offset past an index's table
// of large ones was a panic. Here every object is at most max bytes, as its
// header says, and is read as exactly that many; a delta copies only from
// inside its base and makes no more than it says; a chain of deltas is at
// most as deep as git makes one, never loops and makes at most
// maxChainWork bytes along the way; a pack index is looked up where it
// lies, in the file, and must be as large as the objects it counts. What
// is read is still what the agent wrote: verifiedStorage checks it
// against its id. Objects of other repositories (objects/info/alternates)
// are not read: devaipod's clones have none.
type objectReader struct {
	dir *rootFS // the .git directory
	max int64

	once  sync.Once
	packs []*packFile
	err   error

	// made keeps what pack entries made (by madeKey; the type, then the
	// content), so that the objects of one chain of deltas, which a walk
	// of the history reads one after the other, do not each apply the
	// whole chain again.
	made *cache.BufferLRU
}

// Bounds of a chain of deltas: git writes none deeper than 4095
// (pack.depth), and a chain that makes many times the largest object is
// work the agent made up.
const (
	maxDeltaChain = 4095
	maxChainWork  = 16 * maxObjectSize
)

// hashLen is a SHA-1 object id's length: go-git v5 reads no other.
const hashLen = 20

// read returns the type and content of the object h, from its loose file
// or a pack.
func (r *objectReader) read(h plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	t, data, err := r.readLoose(h)
	if !errors.Is(err, plumbing.ErrObjectNotFound) {
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

// close closes the packs and their indexes.
func (r *objectReader) close() {
	for _, p := range r.packs {
		p.idx.Close()
		if p.pack != nil {
			p.pack.Close()
		}
	}
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
		return plumbing.InvalidObject, nil, plumbing.ErrObjectNotFound
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

// packFile is one pack of the repository, and its version 2 index: magic
// and version, 256 fanout counts, then the objects' ids in order, their
// CRCs, their 32-bit offsets (or, top bit set, the number of an 8-byte
// offset in the table that follows), and two checksums.
type packFile struct {
	name   string   // objects/pack/pack-*.pack
	idx    *os.File // read where it is needed, never whole
	size   int64    // of idx, when it was opened
	fanout [256]uint32
	num    int // its place in objectReader.packs, for madeKey

	openPack sync.Once
	pack     *os.File // opened at the first read
	packErr  error
}

// file opens the pack, once.
func (p *packFile) file(dir *rootFS) (*os.File, error) {
	p.openPack.Do(func() { p.pack, p.packErr = dir.open(p.name) })
	return p.pack, p.packErr
}

// The cache of what pack entries made (objectReader.made): its size, and
// the sizes of what it keeps (an entry takes about 150 bytes of its own,
// so a cache of tiny ones would take several times its size; and a small
// object is quickly made again).
const (
	madeCacheSize = 32 * cache.MiByte
	madeMin       = 256
	madeMax       = 1 << 20
)

// madeKey is the key of the entry at offset of pack p in the cache.
func madeKey(p *packFile, offset int64) int64 { return int64(p.num)<<40 | offset }

const (
	idxHeaderLen  = 8 + 256*4
	idxTrailerLen = 2 * hashLen
)

// count is how many objects the index lists.
func (p *packFile) count() int64 { return int64(p.fanout[255]) }

// find returns the pack that holds h, and where.
func (r *objectReader) find(h plumbing.Hash) (*packFile, int64, error) {
	r.once.Do(func() { r.packs, r.err = r.openPacks() })
	if r.err != nil {
		return nil, 0, r.err
	}
	for _, p := range r.packs {
		offset, ok, err := p.find(h)
		if err != nil {
			return nil, 0, fmt.Errorf("read the workspace's pack index %s: %w", path.Base(p.idx.Name()), err)
		}
		if ok {
			return p, offset, nil
		}
	}
	return nil, 0, plumbing.ErrObjectNotFound
}

// openPacks opens the index of every pack and checks its header.
func (r *objectReader) openPacks() ([]*packFile, error) {
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
		// As git does, an index whose pack is missing is no pack: the
		// object it names may be in another.
		packName := path.Join("objects/pack", base+".pack")
		if _, err := r.dir.Stat(packName); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		p, err := r.openIndex(path.Join("objects/pack", e.Name()))
		if err != nil {
			for _, p := range packs {
				p.idx.Close()
			}
			return nil, fmt.Errorf("read the workspace's pack index %s: %w", e.Name(), err)
		}
		p.name = packName
		p.num = len(packs)
		packs = append(packs, p)
	}
	return packs, nil
}

// openIndex opens a pack index and reads its fanout, which must count up,
// to a count of objects that the file's size matches.
func (r *objectReader) openIndex(name string) (*packFile, error) {
	f, err := r.dir.open(name)
	if err != nil {
		return nil, err
	}
	p := &packFile{idx: f}
	fi, err := f.Stat()
	var head [idxHeaderLen]byte
	if err == nil {
		p.size = fi.Size()
		_, err = io.ReadFull(f, head[:])
	}
	if err != nil || !bytes.Equal(head[:8], []byte{0xff, 't', 'O', 'c', 0, 0, 0, 2}) {
		f.Close()
		return nil, fmt.Errorf("%w: not a version 2 pack index", gitpack.ErrMalformed)
	}
	for i := range p.fanout {
		p.fanout[i] = binary.BigEndian.Uint32(head[8+4*i:])
		if i > 0 && p.fanout[i] < p.fanout[i-1] {
			f.Close()
			return nil, fmt.Errorf("%w: a pack index's counts go down", gitpack.ErrMalformed)
		}
	}
	least := idxHeaderLen + p.count()*(hashLen+4+4) + idxTrailerLen
	if p.size < least || p.size > least+p.count()*8 {
		f.Close()
		return nil, fmt.Errorf("%w: a pack index of %d bytes for %d objects", gitpack.ErrMalformed, p.size, p.count())
	}
	return p, nil
}

// find looks h up in the index (a binary search of its ids, read where
// they are) and returns its offset in the pack.
func (p *packFile) find(h plumbing.Hash) (int64, bool, error) {
	lo, hi := int64(0), int64(p.fanout[h[0]])
	if h[0] > 0 {
		lo = int64(p.fanout[h[0]-1])
	}
	var id [hashLen]byte
	for lo < hi {
		mid := lo + (hi-lo)/2
		if _, err := p.idx.ReadAt(id[:], idxHeaderLen+mid*hashLen); err != nil {
			return 0, false, fmt.Errorf("%w: %w", gitpack.ErrMalformed, err)
		}
		switch c := bytes.Compare(id[:], h[:]); {
		case c < 0:
			lo = mid + 1
		case c > 0:
			hi = mid
		default:
			offset, err := p.offset(mid)
			return offset, err == nil, err
		}
	}
	return 0, false, nil
}

// offset reads the pack offset of the index's i-th object.
func (p *packFile) offset(i int64) (int64, error) {
	var b [8]byte
	small := idxHeaderLen + p.count()*(hashLen+4) + i*4
	if _, err := p.idx.ReadAt(b[:4], small); err != nil {
		return 0, fmt.Errorf("%w: %w", gitpack.ErrMalformed, err)
	}
	o := binary.BigEndian.Uint32(b[:4])
	if o&0x80000000 == 0 {
		return int64(o), nil
	}
	large := idxHeaderLen + p.count()*(hashLen+4+4) + int64(o&0x7fffffff)*8
	if large+8 > p.size-idxTrailerLen {
		return 0, fmt.Errorf("%w: a pack index's offset past its table", gitpack.ErrMalformed)
	}
	if _, err := p.idx.ReadAt(b[:], large); err != nil {
		return 0, fmt.Errorf("%w: %w", gitpack.ErrMalformed, err)
	}
	v := binary.BigEndian.Uint64(b[:])
	if v > 1<<62 {
		return 0, fmt.Errorf("%w: a pack offset of %d", gitpack.ErrMalformed, v)
	}
	return int64(v), nil
}

// delta is an entry of a chain of deltas: where it is, where its data
// starts, and how much of it there is.
type delta struct {
	at    place
	pack  *os.File
	start int64
	size  int64
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
	z := inflaters.Get().(*inflater)
	defer inflaters.Put(z)
	// keep puts what the entry at made in the cache, unless it is too
	// small or too large to be worth it (most objects a walk reads are
	// commits and trees).
	keep := func(at place, t plumbing.ObjectType, data []byte) {
		if len(data) >= madeMin && len(data) < madeMax && at.offset < 1<<40 {
			r.made.Put(madeKey(at.pack, at.offset), append([]byte{byte(t)}, data...))
		}
	}
	var (
		deltas []delta // from the object down to its base
		t      plumbing.ObjectType
		data   []byte
		at     = place{p, offset}
		seen   = map[place]bool{}
	)
	for data == nil {
		if b, ok := r.made.Get(madeKey(at.pack, at.offset)); ok && at.offset < 1<<40 {
			t, data = plumbing.ObjectType(b[0]), b[1:]
			break
		}
		if seen[at] {
			return plumbing.InvalidObject, nil, fmt.Errorf("%w: a chain of deltas that loops", gitpack.ErrMalformed)
		}
		seen[at] = true
		f, err := at.pack.file(r.dir)
		if err != nil {
			return plumbing.InvalidObject, nil, err
		}
		e, start, err := entryAt(f, at.offset)
		if err != nil {
			return plumbing.InvalidObject, nil, err
		}
		if e.Type != gitpack.OfsDelta && e.Type != gitpack.RefDelta {
			t = plumbing.ObjectType(e.Type) // the same numbers
			if data, err = z.at(f, start, e.Size, r.max); err != nil {
				return plumbing.InvalidObject, nil, err
			}
			keep(at, t, data)
			break
		}
		if len(deltas) == maxDeltaChain {
			return plumbing.InvalidObject, nil, fmt.Errorf("%w: a chain of more than %d deltas", gitpack.ErrMalformed, maxDeltaChain)
		}
		deltas = append(deltas, delta{at: at, pack: f, start: start, size: e.Size})
		if e.Type == gitpack.OfsDelta {
			if e.BaseDistance <= 0 || e.BaseDistance >= at.offset {
				return plumbing.InvalidObject, nil, fmt.Errorf("%w: a delta's base outside its pack", gitpack.ErrMalformed)
			}
			at.offset -= e.BaseDistance
			continue
		}
		base := plumbing.Hash(e.BaseHash)
		t, data, err = r.readLoose(base)
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			at.pack, at.offset, err = r.find(base)
		}
		if err != nil {
			return plumbing.InvalidObject, nil, err
		}
	}
	work := int64(len(data))
	for i := len(deltas) - 1; i >= 0; i-- {
		d := deltas[i]
		instructions, err := z.at(d.pack, d.start, d.size, r.max)
		if err != nil {
			return plumbing.InvalidObject, nil, err
		}
		if data, err = gitpack.Patch(data, instructions, r.max); err != nil {
			return plumbing.InvalidObject, nil, err
		}
		keep(d.at, t, data)
		if work += int64(len(data)); work > maxChainWork {
			return plumbing.InvalidObject, nil, fmt.Errorf("%w: a chain of deltas that makes more than %d MiB on the way", gitpack.ErrMalformed, maxChainWork>>20)
		}
	}
	return t, data, nil
}

// entryAt reads the header of the pack entry at offset in f, and returns
// it with where its zlib stream starts.
func entryAt(f *os.File, offset int64) (gitpack.Entry, int64, error) {
	if offset < 12 {
		return gitpack.Entry{}, 0, fmt.Errorf("%w: an object inside a pack's header", gitpack.ErrMalformed)
	}
	var head [64]byte
	n, err := f.ReadAt(head[:], offset)
	if n == 0 {
		return gitpack.Entry{}, 0, fmt.Errorf("%w: an object past its pack's end: %w", gitpack.ErrMalformed, err)
	}
	r := bytes.NewReader(head[:n])
	e, err := gitpack.ReadEntry(r, hashLen)
	return e, offset + int64(n-r.Len()), err
}

// inflater reads zlib streams in packs, one after the other, with one
// decompressor (each new one takes some 40 KiB).
type inflater struct {
	br *bufio.Reader
	zr io.ReadCloser
}

var inflaters = sync.Pool{New: func() any { return new(inflater) }}

// at reads the zlib stream at start in f: exactly size bytes, at most max.
func (z *inflater) at(f *os.File, start, size, max int64) ([]byte, error) {
	src := io.NewSectionReader(f, start, 1<<62)
	var err error
	if z.zr == nil {
		z.br = bufio.NewReader(src)
		z.zr, err = zlib.NewReader(z.br)
	} else {
		z.br.Reset(src)
		err = z.zr.(zlib.Resetter).Reset(z.br, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", gitpack.ErrMalformed, err)
	}
	return inflateExactly(z.zr, size, max)
}
