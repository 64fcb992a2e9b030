package nn

import "github.com/troupe-ml/troupe/failure"

var (
	// ErrStateDict reports weights that do not fit the model (missing,
	// unknown or mis-shaped tensors).
	ErrStateDict = failure.New(failure.Config, "nn: state dict does not match the model")
	// ErrConfig reports an invalid model configuration.
	ErrConfig = failure.New(failure.Config, "nn: invalid model config")
)
