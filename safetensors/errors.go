package safetensors

import (
	"github.com/troupe-ml/troupe/failure"
)

// Sentinel errors. Every error this package returns wraps one of these, with
// a message that names the tensor or header field that was wrong.
var (
	// ErrCorrupt: the file is not a valid safetensors file (bad length,
	// bad JSON, offsets that do not match shapes, holes, overlaps, ...).
	ErrCorrupt = failure.New(failure.Data, "safetensors: corrupt file")
	// ErrHeaderTooLarge: the header length field exceeds MaxHeaderSize.
	ErrHeaderTooLarge = failure.New(failure.Data, "safetensors: header too large")
	// ErrUnknownDType: a dtype string this package does not know.
	ErrUnknownDType = failure.New(failure.Data, "safetensors: unknown dtype")
	// ErrNotFound: no tensor of that name in the file.
	ErrNotFound = failure.New(failure.Data, "safetensors: tensor not found")
	// ErrDType: the tensor's dtype cannot be converted to the requested type.
	ErrDType = failure.New(failure.Data, "safetensors: wrong dtype")
	// ErrRange: an integer value does not fit the requested type, or a
	// byte range lies outside the tensor.
	ErrRange = failure.New(failure.Data, "safetensors: value out of range")
	// ErrInvalidTensor: a tensor given to Write is inconsistent (data length
	// versus shape, bad or duplicate name).
	ErrInvalidTensor = failure.New(failure.Data, "safetensors: invalid tensor")
)
