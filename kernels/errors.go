package kernels

import "errors"

var (
	// ErrUnknownBackend is returned by Open for a name nobody registered.
	ErrUnknownBackend = errors.New("kernels: unknown backend")
	// ErrNoDevice is returned by a backend factory when its device is absent.
	ErrNoDevice = errors.New("kernels: device not available")
)
