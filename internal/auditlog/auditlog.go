// Package auditlog keeps the sidecars' audit records on disk within a
// bound: a file that is moved aside to NAME.1 (replacing the one before)
// when the next record would take it past its size, so the records on
// disk never take more than twice that size, and the latest ones are
// always there. The agent makes the records (one per request or call), so
// without a bound it could fill the host's disk.
package auditlog

import (
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

	mu   sync.Mutex
	f    *os.File
	size int64
}

// Open opens (creating it and its directory) the log at path for
// appending, so a restarted sidecar keeps the earlier records.
func Open(path string, maxBytes int64) (*File, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("audit log %s: the size bound must be positive, not %d", path, maxBytes)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	l := &File{path: path, max: maxBytes}
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
	if l.size > 0 && l.size+int64(len(p)) > l.max {
		if err := l.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return n, err
}

func (l *File) rotate() error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	l.f = nil
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return l.open()
}

// Close closes the file.
func (l *File) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// OpenAll opens the destinations of a sidecar's --audit-log flags: "-" is
// stdout, anything else a File bounded by maxBytes. No paths means stdout.
// The returned function closes the files.
func OpenAll(paths []string, stdout io.Writer, maxBytes int64) (io.Writer, func(), error) {
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
		f, err := Open(p, maxBytes)
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

// Copy writes the log at path to w, oldest record first: the file moved
// aside, then the current one. ErrNoLog when there is neither.
func Copy(w io.Writer, path string) error {
	found := false
	for _, p := range []string{path + ".1", path} {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		found = true
		_, err = io.Copy(w, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("audit log %s: %w", p, err)
		}
	}
	if !found {
		return fmt.Errorf("%s: %w", path, ErrNoLog)
	}
	return nil
}
