package cadence

import "github.com/troupe-ml/troupe/failure"

// ErrLoss: the loss became NaN or infinite. It is train.ErrLoss (the same
// value, re-exported there), so its message names train.
var ErrLoss = failure.New(failure.Diverged, "train: the loss is not finite")
