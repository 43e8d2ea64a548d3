package source

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/devaipod/devaipod/internal/gitpack"
)

// MaxObjectSize is the largest object that devaipod lets git take from the
// agent's work: a file, or what a delta makes. The agent writes the
// bundle, and git holds each object it resolves whole in memory, as large
// as the object's header says: a delta of a few bytes that says 1.5 GiB
// and repeats one copy instruction made the host's git take gigabytes.
// GitHub refuses files over 100 MiB too.
const MaxObjectSize = 100 << 20

// ObjectTooLargeError is an object of the agent's work past MaxObjectSize.
type ObjectTooLargeError struct {
	Size int64 // what its header says
	Max  int64
}

func (e *ObjectTooLargeError) Error() string {
	return fmt.Sprintf("the agent's work has an object of %d MiB (a file, or what a delta makes of one), more than %d MiB; nothing was taken",
		e.Size>>20, e.Max>>20)
}

// CheckBundle reads the git bundle at path and refuses it, before any git
// reads it, when an object in its pack is, or a delta makes one, larger
// than max bytes, or when the bundle is malformed. It inflates every
// object to find where the next one starts, and never keeps more than a
// delta's header of one. That can take minutes for a bundle of large
// objects: it ends when ctx does.
func CheckBundle(ctx context.Context, path string, max int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := checkBundle(bufio.NewReaderSize(ctxReader{ctx, f}, 64<<10), max); err != nil {
		return fmt.Errorf("check the agent's bundle: %w", err)
	}
	return nil
}

// ctxReader reads r until ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

var errBadBundle = errors.New("not a git bundle of the kind devaipod makes")

func checkBundle(br *bufio.Reader, max int64) error {
	hashLen := 20
	line, err := bundleLine(br)
	if err != nil {
		return err
	}
	switch line {
	case "# v2 git bundle":
	case "# v3 git bundle":
	default:
		return errBadBundle
	}
	// Capabilities (v3), prerequisites and refs, up to an empty line.
	for {
		line, err := bundleLine(br)
		if err != nil {
			return err
		}
		if line == "" {
			break
		}
		if line == "@object-format=sha256" {
			hashLen = 32
		}
	}
	var head [12]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		return fmt.Errorf("%w: %w", errBadBundle, err)
	}
	if string(head[:4]) != "PACK" {
		return errBadBundle
	}
	if v := binary.BigEndian.Uint32(head[4:8]); v != 2 && v != 3 {
		return fmt.Errorf("%w: pack version %d", errBadBundle, v)
	}
	count := binary.BigEndian.Uint32(head[8:12])
	var zr io.ReadCloser
	for range count {
		e, err := gitpack.ReadEntry(br, hashLen)
		if err != nil {
			return fmt.Errorf("%w: %w", errBadBundle, err)
		}
		size := e.Size
		if size > max {
			return &ObjectTooLargeError{Size: size, Max: max}
		}
		if zr == nil {
			if zr, err = zlib.NewReader(br); err != nil {
				return fmt.Errorf("%w: %w", errBadBundle, err)
			}
		} else if err := zr.(zlib.Resetter).Reset(br, nil); err != nil {
			return fmt.Errorf("%w: %w", errBadBundle, err)
		}
		inflated := &io.LimitedReader{R: zr, N: size + 1}
		data := bufio.NewReaderSize(inflated, 64)
		if e.Type == gitpack.OfsDelta || e.Type == gitpack.RefDelta {
			// A delta starts with the sizes of its base and of what it
			// makes.
			if _, err := gitpack.DeltaSize(data); err != nil {
				return fmt.Errorf("%w: %w", errBadBundle, err)
			}
			made, err := gitpack.DeltaSize(data)
			if err != nil {
				return fmt.Errorf("%w: %w", errBadBundle, err)
			}
			if made > max {
				return &ObjectTooLargeError{Size: made, Max: max}
			}
		}
		// To the end of the entry's zlib stream, which must hold what
		// its header says, no more and no less: the next entry starts
		// right after it.
		if _, err := io.Copy(io.Discard, data); err != nil {
			return fmt.Errorf("%w: %w", errBadBundle, err)
		}
		if inflated.N != 1 {
			return fmt.Errorf("%w: an object is not the size its header says", errBadBundle)
		}
	}
	return nil
}

// bundleLine reads one line of a bundle's header, without its newline.
func bundleLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return "", fmt.Errorf("%w: %w", errBadBundle, err)
	}
	return string(bytes.TrimSuffix(line, []byte{'\n'})), nil
}
