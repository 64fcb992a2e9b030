package data

import "github.com/troupe-ml/troupe/failure"

// Sentinel errors; every error from this package wraps one of them with a
// message naming the file, tensor, option or value that was wrong.
var (
	// ErrSpec: a --data spec that names no known dataset or has bad
	// parameters.
	ErrSpec = failure.New(failure.Config, "data: invalid dataset spec")
	// ErrOptions: Options out of range.
	ErrOptions = failure.New(failure.Config, "data: invalid options")
	// ErrNotFound: the files a dataset needs are not on this machine.
	ErrNotFound = failure.New(failure.Data, "data: dataset files not found")
	// ErrFormat: a data file is malformed (bad IDX header, wrong tensor
	// shapes, labels out of range, text too short for the context, ...).
	ErrFormat = failure.New(failure.Data, "data: malformed data")
	// ErrOutput: Prepare cannot write its output directory.
	ErrOutput = failure.New(failure.Config, "data: cannot write the output")
	// ErrSamplerState: a saved sampler state that does not fit this sampler.
	ErrSamplerState = failure.New(failure.Checkpoint, "data: sampler state mismatch")
)
