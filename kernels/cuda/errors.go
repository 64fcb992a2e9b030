//go:build cuda

package cuda

import "errors"

var (
	// ErrClosed is returned by Sync (and panicked by the other methods)
	// after Close.
	ErrClosed = errors.New("cuda: backend closed")
	// ErrDriver wraps a failure the CUDA driver reported; the backend is
	// not usable afterwards (CUDA errors in a context are sticky).
	ErrDriver = errors.New("cuda: driver error")
	// ErrBadIndex is reported by Sync when a kernel met an id or target
	// outside its table or class range; the kernel skipped it.
	ErrBadIndex = errors.New("cuda: index out of range")
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("cuda: invalid config")
)
