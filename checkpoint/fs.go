package checkpoint

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
)

// FS is the file system a checkpoint is written to and read from. Every
// write of this package goes through it, so tests can swap in MemFS (which
// models what survives a crash) wrapped in FaultFS (which fails or crashes
// at a chosen operation), the way cockroachdb/pebble tests its vfs.FS.
//
// Names are paths in the host's syntax (filepath). Implementations must be
// safe for concurrent use by several goroutines.
type FS interface {
	// Create creates the named file for writing, truncating it if it
	// exists. Its parent directory must exist.
	Create(name string) (File, error)
	// Open opens the named file for reading.
	Open(name string) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes a path and everything under it; a missing path is
	// not an error.
	RemoveAll(name string) error
	// Rename renames oldname to newname, replacing a file (or an empty
	// directory) at newname, atomically as POSIX rename(2) does.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and any missing parents.
	MkdirAll(name string) error
	// SyncDir makes the entries of a directory (creations, renames,
	// removals in it) durable: fsync(2) of the directory.
	SyncDir(name string) error
	// List returns the names of a directory's entries, sorted.
	List(dir string) ([]string, error)
	// Stat describes a file or directory.
	Stat(name string) (os.FileInfo, error)
}

// File is an open file of an FS. A file from Create is written
// sequentially; a file from Open is read with ReadAt. Write and Sync are
// not called concurrently on one File; ReadAt may be.
type File interface {
	io.Writer
	io.ReaderAt
	io.Closer
	// Sync makes the data written so far durable: fsync(2).
	Sync() error
}

// OSFS is the operating system's file system.
type OSFS struct{}

var _ FS = OSFS{}

// Create implements FS.
func (OSFS) Create(name string) (File, error) {
	return os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
}

// Open implements FS.
func (OSFS) Open(name string) (File, error) { return os.Open(name) }

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// RemoveAll implements FS.
func (OSFS) RemoveAll(name string) error { return os.RemoveAll(name) }

// Rename implements FS.
func (OSFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// MkdirAll implements FS.
func (OSFS) MkdirAll(name string) error { return os.MkdirAll(name, 0o755) }

// SyncDir implements FS.
func (OSFS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// List implements FS.
func (OSFS) List(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.Name()
	}
	slices.Sort(names)
	return names, nil
}

// Stat implements FS.
func (OSFS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }

// readFile reads a whole file of at most limit bytes: manifests, part
// manifests and the latest pointer are small, and a larger one is corrupt,
// not something to allocate for.
func readFile(fsys FS, name string, limit int64) ([]byte, error) {
	st, err := fsys.Stat(name)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a directory", name)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, over the %d-byte limit", name, st.Size(), limit)
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if n == len(b) {
		return b, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return nil, fmt.Errorf("reading %s: %w", name, err)
}

// writeFileSync creates name with data, fsyncs and closes it: the first
// half of every atomic replace (the rename and directory fsync follow).
func writeFileSync(fsys FS, name string, data []byte) error {
	f, err := fsys.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// exists reports whether name exists; errors other than "not found" count
// as existing so that callers go on to fail on the real operation.
func exists(fsys FS, name string) bool {
	_, err := fsys.Stat(name)
	return err == nil || !errors.Is(err, iofs.ErrNotExist)
}

// parentDir is filepath.Dir, named for what it is used for here.
func parentDir(name string) string { return filepath.Dir(name) }
