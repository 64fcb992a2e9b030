package actors

import "errors"

var (
	// ErrPeerLost: a worker's process or actor is gone (connection reset,
	// endpoint terminated, process exit).
	ErrPeerLost = errors.New("actors: worker lost")
	// ErrPeerSilent: a worker did not answer a call in time (a hung
	// process, which sends no reset).
	ErrPeerSilent = errors.New("actors: worker silent")
	// ErrCanceled: the caller gave up on the call (CancelCall).
	ErrCanceled = errors.New("actors: call canceled")
)
