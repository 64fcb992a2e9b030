//go:build unix

package data

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// mapping is a read-only memory map of a whole file, unmapped when it is
// no longer reachable.
type mapping struct{ data []byte }

func mapFile(f *os.File, size int64) (*mapping, error) {
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: mmap: %v", ErrFormat, err)
	}
	// Samples are drawn in any order: read-ahead would fill memory with
	// pages no sample asked for.
	_ = unix.Madvise(b, unix.MADV_RANDOM)
	m := &mapping{data: b}
	runtime.AddCleanup(m, func(b []byte) { _ = unix.Munmap(b) }, b)
	return m, nil
}
