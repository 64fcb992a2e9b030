package data

import "errors"

// Sentinel errors; every error from this package wraps one of them with a
// message naming the file, tensor, option or value that was wrong.
var (
	// ErrSpec: a --data spec that names no known dataset or has bad
	// parameters.
	ErrSpec = errors.New("data: invalid dataset spec")
	// ErrOptions: Options out of range.
	ErrOptions = errors.New("data: invalid options")
	// ErrNotFound: the files a dataset needs are not on this machine.
	ErrNotFound = errors.New("data: dataset files not found")
	// ErrFormat: a data file is malformed (bad IDX header, wrong tensor
	// shapes, labels out of range, text too short for the context, ...).
	ErrFormat = errors.New("data: malformed data")
	// ErrSamplerState: a saved sampler state that does not fit this sampler.
	ErrSamplerState = errors.New("data: sampler state mismatch")
)
