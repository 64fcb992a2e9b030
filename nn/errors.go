package nn

import "errors"

var (
	// ErrStateDict reports weights that do not fit the model (missing,
	// unknown or mis-shaped tensors).
	ErrStateDict = errors.New("nn: state dict does not match the model")
	// ErrConfig reports an invalid model configuration.
	ErrConfig = errors.New("nn: invalid model config")
)
