// Package probe checks, before a long run starts, that its outputs can be
// written, so that a wrong path fails in a second instead of after hours
// of training. It only creates and removes a file beside each output; the
// output itself is not touched. It imports nothing of troupe.
package probe

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// File checks that a file can be written at path: its directory exists
// and takes a new file, and path is not a directory. An existing file at
// path is kept (the run replaces it when it writes).
func File(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("its directory %s does not exist", dir)
	case err != nil:
		return fmt.Errorf("its directory: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	return touch(dir, filepath.Base(path))
}

// Dir checks that files can be written in the directory path, making it
// and the missing directories above it when it does not exist (as the run
// would). A file at path is an error.
func Dir(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("%s is a file, not a directory", path)
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		if err := os.MkdirAll(path, 0o755); err != nil {
			return fmt.Errorf("cannot make the directory: %w", err)
		}
	case err != nil:
		return err
	}
	return touch(path, "probe")
}

// touch creates a hidden file named after name in dir and removes it.
func touch(dir, name string) error {
	f, err := os.CreateTemp(dir, "."+name+".probe-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("cannot write in %s: %w", dir, err)
	}
	name = f.Name()
	cerr := f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("cannot remove the probe file %s: %w", name, err)
	}
	if cerr != nil {
		return fmt.Errorf("cannot write in %s: %w", dir, cerr)
	}
	return nil
}
