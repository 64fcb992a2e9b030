package actors

import "github.com/troupe-ml/troupe/failure"

var (
	// ErrBadConfig: a Config field is out of range.
	ErrBadConfig = failure.New(failure.Config, "actors: bad config")
	// ErrHandshake: peers did not all introduce themselves in time, or they
	// disagree on the protocol, the world or the transport.
	ErrHandshake = failure.New(failure.PeerSilent, "actors: handshake failed")
	// ErrDataPlane: a data plane connection broke or a peer broke its
	// protocol (a bad header, more frames than its credit).
	ErrDataPlane = failure.New(failure.PeerLost, "actors: data plane")
	// ErrWire: a wire message does not decode to a valid collective message.
	ErrWire = failure.New(failure.Internal, "actors: bad wire message")

	// ErrPeerSilent: a group's peer did not answer a call in time (a hung
	// process, which sends no reset).
	ErrPeerSilent = failure.New(failure.PeerSilent, "actors: peer silent")
	// ErrCanceled: the caller gave up on a group call.
	ErrCanceled = failure.New(failure.Canceled, "actors: call canceled")
)
