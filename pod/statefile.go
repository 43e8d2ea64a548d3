package pod

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// listFile is a JSON list that devaipod keeps in its state directory (the
// approvals kept for a repository, the repositories trusted), changed
// under a lock and written whole.
type listFile[T any] struct{ path string }

// load reads the list; a missing file is an empty one.
func (f listFile[T]) load() ([]T, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []T
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", f.path, err)
	}
	return list, nil
}

// update reads the list, changes it with change and writes what change
// returns, holding the file's lock throughout: two changes at once must
// not lose one.
func (f listFile[T]) update(change func([]T) ([]T, error)) error {
	if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(f.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", f.path, err)
	}
	list, err := f.load()
	if err != nil {
		return err
	}
	if list, err = change(list); err != nil {
		return err
	}
	return f.save(list)
}

// save writes the list whole, through a file of its own that replaces the
// old one, so that a reader sees one or the other.
func (f listFile[T]) save(list []T) error {
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), filepath.Base(f.path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), f.path)
}
