//go:build !linux

package shmem

// Supported reports whether Alloc can succeed on this system.
const Supported = false

func create(int) (int, []byte, error) { return -1, nil, ErrUnsupported }

func release(int, []byte) error { return nil }
