package kernels

import "github.com/troupe-ml/troupe/failure"

var (
	// ErrUnknownBackend is returned by Open for a name nobody registered.
	ErrUnknownBackend = failure.New(failure.Config, "kernels: unknown backend")
	// ErrNoDevice is returned by a backend factory when its device is absent.
	ErrNoDevice = failure.New(failure.Config, "kernels: device not available")
)
