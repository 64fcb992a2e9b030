//go:build linux

package shmem

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Supported reports whether Alloc can succeed on this system.
const Supported = true

func create(bytes int) (int, []byte, error) {
	fd, err := unix.MemfdCreate("troupe-reg", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, nil, fmt.Errorf("shmem: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(bytes)); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("shmem: sizing a segment of %d bytes: %w", bytes, err)
	}
	mem, err := unix.Mmap(fd, 0, bytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("shmem: mapping a segment of %d bytes: %w", bytes, err)
	}
	return fd, mem, nil
}

func release(fd int, mem []byte) error {
	err := unix.Munmap(mem)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}
