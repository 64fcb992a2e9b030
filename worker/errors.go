package worker

import "github.com/troupe-ml/troupe/failure"

var (
	// ErrConfig: a Spec or Form that cannot work.
	ErrConfig = failure.New(failure.Config, "worker: bad config")
	// ErrStale: a request for another generation, or for a step other
	// than the next one this worker can run.
	ErrStale = failure.New(failure.Stale, "worker: stale request")
	// ErrNoState: the worker holds no state to do what was asked (undo a
	// step it kept no copy of, serve a stage it does not hold).
	ErrNoState = failure.New(failure.StateLost, "worker: state not held")
	// ErrCrashed: the worker panicked; it stopped and is never used again.
	ErrCrashed = failure.New(failure.Crashed, "worker: crashed")
	// ErrWire: a worker's answer that does not decode (bad float data, a
	// pipeline span with an unknown op or times out of order).
	ErrWire = failure.New(failure.Internal, "worker: bad wire message")
	// ErrData: held-out rows out of range, or no held-out data.
	ErrData = failure.New(failure.Data, "worker: bad data request")
)
