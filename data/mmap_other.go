//go:build !unix

package data

import (
	"fmt"
	"io"
	"os"
)

// mapping holds a whole file in memory where there is no mmap.
type mapping struct{ data []byte }

func mapFile(f *os.File, size int64) (*mapping, error) {
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	return &mapping{data: b}, nil
}

// release does nothing: the file is in memory.
func (m *mapping) release() {}
