package actors

import "github.com/troupe-ml/troupe/failure"

var (
	// ErrPeerLost: a worker's process or actor is gone (connection reset,
	// endpoint terminated, process exit).
	ErrPeerLost = failure.New(failure.PeerLost, "actors: worker lost")
	// ErrPeerSilent: a worker did not answer a call in time (a hung
	// process, which sends no reset).
	ErrPeerSilent = failure.New(failure.PeerSilent, "actors: worker silent")
	// ErrCanceled: the caller gave up on the call (CancelCall).
	ErrCanceled = failure.New(failure.Canceled, "actors: call canceled")
)
