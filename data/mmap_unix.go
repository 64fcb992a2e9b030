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

// release drops the mapping's pages from this process's resident set:
// they stay in the page cache (a later read faults them back without
// I/O) but no longer count in the process's memory. Reads of the mapping
// may run meanwhile: a page they touch is faulted back.
func (m *mapping) release() { _ = unix.Madvise(m.data, unix.MADV_DONTNEED) }

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
