// Package auditlog keeps the sidecars' audit records on disk within a
// bound: a file that is moved aside to NAME.1 (replacing the one before)
// when the next record would take it past its size, so the latest records
// are always there. The agent makes the records (one per request or
// call), so without a bound it could fill the host's disk.
//
// The bound alone would let the agent erase what it did: records of
// routine traffic (allowed requests to an allowed host), which it can make
// as fast as the network goes, would push the record of its refused
// attempts out. So a log may say which records to keep (Keep): when NAME.1
// is replaced, those of its lines are first appended to NAME.kept, up to
// the same size, and never dropped: the first records kept stay for the
// log's life. Past that, they go to NAME.kept.recent, moved aside to
// NAME.kept.recent.1 as the log is, so the latest kept ones are there
// too. The records a sidecar keeps are those its flood limit slows down
// (Flood), so a flood of them takes hours to move the recent ones along
// and cannot move the first. A log takes at most five times its size:
// two files of all records, three of kept ones.
package auditlog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// DefaultMaxBytes is the size at which a log file is moved aside.
const DefaultMaxBytes = 8 << 20

// File is an append-only audit log that rotates by size. Each Write is
// one or more whole records and is never split across two files.
type File struct {
	path string
	max  int64
	keep Keep // nil: nothing is kept

	mu        sync.Mutex
	f         *os.File
	size      int64
	first     *File // PATH.kept: the first records kept, never moved aside
	firstFull bool  // first took no more: the rest go to recent, in order
	recent    *File // PATH.kept.recent: those kept once first is full
}

// Keep tells whether a record (one line, with its newline) is kept when
// the file it is in is about to be dropped.
type Keep func(line []byte) bool

// The files of kept records: PATH.kept, PATH.kept.recent(.1).
const (
	keptSuffix   = ".kept"
	recentSuffix = ".kept.recent"
)

// Open opens (creating it and its directory) the log at path for
// appending, so a restarted sidecar keeps the earlier records. keep, when
// not nil, says which records outlive their file (see the package's
// comment).
func Open(path string, maxBytes int64, keep Keep) (*File, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("audit log %s: the size bound must be positive, not %d", path, maxBytes)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	l := &File{path: path, max: maxBytes, keep: keep}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *File) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit log: %w", err)
	}
	l.f, l.size = f, st.Size()
	return nil
}

// Write appends p, first moving the file aside when p would take it past
// the bound (a record larger than the bound gets a file of its own).
func (l *File) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return 0, fs.ErrClosed
	}
	var kerr error
	if l.size > 0 && l.size+int64(len(p)) > l.max {
		if err := l.rotate(); err != nil {
			if l.f == nil {
				return 0, err
			}
			kerr = err // p still goes in: the records to come matter more
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	if err == nil {
		err = kerr
	}
	return n, err
}

// writeIfRoom appends p unless it would take the file past its bound;
// false when it did not.
func (l *File) writeIfRoom(p []byte) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return false, fs.ErrClosed
	}
	if l.size+int64(len(p)) > l.max {
		return false, nil
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return true, err
}

func (l *File) rotate() error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	l.f = nil
	// The file moved aside before is dropped now: first what it keeps. A
	// failure to keep does not stop the log; it is reported with the
	// write.
	kerr := l.keepFrom(l.path + ".1")
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	if err := l.open(); err != nil {
		return err
	}
	return kerr
}

// keepFrom appends the lines of the file at old that l keeps to PATH.kept
// while it has room, then to PATH.kept.recent.
func (l *File) keepFrom(old string) error {
	if l.keep == nil {
		return nil
	}
	f, err := os.Open(old)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("keep records of %s: %w", old, err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	var kept []byte
	write := func() error {
		if len(kept) == 0 {
			return nil
		}
		defer func() { kept = kept[:0] }()
		if l.first == nil && !l.firstFull {
			// A recent file from before a restart: the first is full.
			if _, err := os.Stat(l.path + recentSuffix); err == nil {
				l.firstFull = true
			} else {
				f, err := Open(l.path+keptSuffix, l.max, nil)
				if err != nil {
					return err
				}
				l.first = f
			}
		}
		if !l.firstFull {
			done, err := l.first.writeIfRoom(kept)
			if done || err != nil {
				return err
			}
			// Never a smaller piece later: what first holds stays older
			// than what recent does.
			l.firstFull = true
		}
		if l.recent == nil {
			f, err := Open(l.path+recentSuffix, l.max, nil)
			if err != nil {
				return err
			}
			l.recent = f
		}
		_, err := l.recent.Write(kept)
		return err
	}
	for {
		line, rerr := r.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' && l.keep(line) {
			kept = append(kept, line...)
		}
		// Written in pieces of about 64 KiB, each whole lines: a Write is
		// never split across two files.
		if len(kept) >= 64<<10 || rerr != nil {
			if err := write(); err != nil {
				return fmt.Errorf("keep records of %s: %w", old, err)
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("keep records of %s: %w", old, rerr)
		}
	}
}

// Close closes the file, and the files of kept records.
func (l *File) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if l.f != nil {
		err = l.f.Close()
		l.f = nil
	}
	for _, k := range []*File{l.first, l.recent} {
		if k != nil {
			err = errors.Join(err, k.Close())
		}
	}
	return err
}

// OpenAll opens the destinations of a sidecar's --audit-log flags: "-" is
// stdout, anything else a File bounded by maxBytes that keeps what keep
// says. No paths means stdout. The returned function closes the files.
func OpenAll(paths []string, stdout io.Writer, maxBytes int64, keep Keep) (io.Writer, func(), error) {
	if len(paths) == 0 {
		return stdout, func() {}, nil
	}
	var writers []io.Writer
	var files []*File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	for _, p := range paths {
		if p == "-" {
			writers = append(writers, stdout)
			continue
		}
		f, err := Open(p, maxBytes, keep)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		files = append(files, f)
		writers = append(writers, f)
	}
	return io.MultiWriter(writers...), closeAll, nil
}

// ErrNoLog says a log has neither a file nor a previous one.
var ErrNoLog = errors.New("no audit log")

// Files are the files of the log at path, oldest records first: those of
// the records kept from files dropped (PATH.kept, then PATH.kept.recent.1
// and PATH.kept.recent), and those of the log itself (PATH.1, the file
// moved aside, then PATH). The log exists when one of the latter does.
func Files(path string) (kept, log []string) {
	return []string{path + keptSuffix, path + recentSuffix + ".1", path + recentSuffix}, []string{path + ".1", path}
}

// Copy writes the log at path to w, oldest record first (see Files).
// ErrNoLog when there is none. The files are all opened first, so that a
// rotation while they are read shows records twice rather than hides them
// (but for kept ones moved aside to a recent file opened too late).
func Copy(w io.Writer, path string) error {
	kept, log := Files(path)
	names := append(kept, log...)
	files := make([]*os.File, len(names))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	found := false
	for i, p := range names {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		files[i] = f
		found = found || i >= len(kept)
	}
	if !found {
		return fmt.Errorf("%s: %w", path, ErrNoLog)
	}
	for i, f := range files {
		if f == nil {
			continue
		}
		if _, err := io.Copy(w, f); err != nil {
			return fmt.Errorf("audit log %s: %w", names[i], err)
		}
	}
	return nil
}
