// Package gitpack reads the parts of git's pack format that devaipod
// checks itself in data the agent wrote (gitformat-pack): an entry's
// header and a delta's sizes, and applies a delta with its output bounded
// by what the delta says it makes. The agent chooses every byte, so each
// reader bounds what it takes and fails on what git would not write.
package gitpack

import (
	"errors"
	"fmt"
	"io"
)

// Pack entry types.
const (
	Commit   = 1
	Tree     = 2
	Blob     = 3
	Tag      = 4
	OfsDelta = 6
	RefDelta = 7
)

// ErrMalformed is data that git does not write.
var ErrMalformed = errors.New("malformed git data")

// Entry is a pack entry's header.
type Entry struct {
	Type byte
	Size int64 // of the inflated data (a delta's own, for a delta)
	// BaseDistance is an OfsDelta's: its base starts this many bytes
	// before the entry.
	BaseDistance int64
	// BaseHash is a RefDelta's: its base's id.
	BaseHash []byte
}

// ReadEntry reads an entry's header, up to where its zlib stream starts;
// hashLen is the object id's length (20, or 32 for SHA-256).
func ReadEntry(r io.ByteReader, hashLen int) (Entry, error) {
	c, err := r.ReadByte()
	if err != nil {
		return Entry{}, malformed(err)
	}
	e := Entry{Type: (c >> 4) & 7, Size: int64(c & 15)}
	for shift := 4; c&0x80 != 0; shift += 7 {
		if shift > 56 {
			return Entry{}, fmt.Errorf("%w: an object's size overflows", ErrMalformed)
		}
		if c, err = r.ReadByte(); err != nil {
			return Entry{}, malformed(err)
		}
		e.Size |= int64(c&0x7f) << shift
	}
	switch e.Type {
	case Commit, Tree, Blob, Tag:
	case OfsDelta:
		// Big-endian, 7 bits a byte, each continuation adding one (so
		// that no distance has two encodings).
		for i := 0; ; i++ {
			if e.BaseDistance >= 1<<55 {
				return Entry{}, fmt.Errorf("%w: a delta's offset overflows", ErrMalformed)
			}
			if c, err = r.ReadByte(); err != nil {
				return Entry{}, malformed(err)
			}
			if i > 0 {
				e.BaseDistance++
			}
			e.BaseDistance = e.BaseDistance<<7 | int64(c&0x7f)
			if c&0x80 == 0 {
				break
			}
		}
	case RefDelta:
		e.BaseHash = make([]byte, hashLen)
		for i := range e.BaseHash {
			if e.BaseHash[i], err = r.ReadByte(); err != nil {
				return Entry{}, malformed(err)
			}
		}
	default:
		return Entry{}, fmt.Errorf("%w: object type %d", ErrMalformed, e.Type)
	}
	return e, nil
}

// DeltaSize reads one of the two sizes a delta starts with (its base's,
// then what it makes): 7 bits a byte, least significant first.
func DeltaSize(r io.ByteReader) (int64, error) {
	var size int64
	for shift := 0; ; shift += 7 {
		if shift > 56 {
			return 0, fmt.Errorf("%w: a delta's size overflows", ErrMalformed)
		}
		c, err := r.ReadByte()
		if err != nil {
			return 0, fmt.Errorf("%w: a delta's header: %w", ErrMalformed, err)
		}
		size |= int64(c&0x7f) << shift
		if c&0x80 == 0 {
			return size, nil
		}
	}
}

// byteReader reads a byte slice, counting what it took.
type byteReader struct {
	b []byte
	n int
}

func (r *byteReader) ReadByte() (byte, error) {
	if r.n >= len(r.b) {
		return 0, io.ErrUnexpectedEOF
	}
	c := r.b[r.n]
	r.n++
	return c, nil
}

// Patch applies delta to base and returns what it makes, as git does:
// the delta must name base's size, and make exactly the size it says,
// which may be at most max. Every copy is checked against base and the
// output's size before anything is written, so no delta makes more.
func Patch(base, delta []byte, max int64) ([]byte, error) {
	r := &byteReader{b: delta}
	baseSize, err := DeltaSize(r)
	if err != nil {
		return nil, err
	}
	if baseSize != int64(len(base)) {
		return nil, fmt.Errorf("%w: a delta for a base of %d bytes applied to one of %d", ErrMalformed, baseSize, len(base))
	}
	size, err := DeltaSize(r)
	if err != nil {
		return nil, err
	}
	if size > max {
		return nil, &TooLargeError{Size: size, Max: max}
	}
	out := make([]byte, 0, size)
	for r.n < len(delta) {
		cmd := delta[r.n]
		r.n++
		switch {
		case cmd&0x80 != 0: // copy from the base
			offset, err := copyArg(r, cmd, 4)
			if err != nil {
				return nil, err
			}
			n, err := copyArg(r, cmd>>4, 3)
			if err != nil {
				return nil, err
			}
			if n == 0 {
				n = 0x10000
			}
			if offset+n > int64(len(base)) || int64(len(out))+n > size {
				return nil, fmt.Errorf("%w: a delta copies past its base or past the size it makes", ErrMalformed)
			}
			out = append(out, base[offset:offset+n]...)
		case cmd != 0: // insert the next cmd bytes of the delta
			n := int(cmd)
			if r.n+n > len(delta) || int64(len(out)+n) > size {
				return nil, fmt.Errorf("%w: a delta inserts past its end or past the size it makes", ErrMalformed)
			}
			out = append(out, delta[r.n:r.n+n]...)
			r.n += n
		default:
			return nil, fmt.Errorf("%w: a delta's reserved instruction 0", ErrMalformed)
		}
	}
	if int64(len(out)) != size {
		return nil, fmt.Errorf("%w: a delta makes %d bytes, not the %d it says", ErrMalformed, len(out), size)
	}
	return out, nil
}

// copyArg reads a copy instruction's offset (4 bytes at most) or size (3):
// of its bytes, least significant first, those whose bits are set in bits
// follow.
func copyArg(r *byteReader, bits byte, count int) (int64, error) {
	var v int64
	for i := range count {
		if bits&(1<<i) != 0 {
			c, err := r.ReadByte()
			if err != nil {
				return 0, malformed(err)
			}
			v |= int64(c) << (8 * i)
		}
	}
	return v, nil
}

// TooLargeError is an object past the bound its reader was given.
type TooLargeError struct {
	Size int64 // what its header says
	Max  int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("an object of %d bytes, more than %d", e.Size, e.Max)
}

func malformed(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: %w", ErrMalformed, err)
}
