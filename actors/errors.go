package actors

import "errors"

var (
	// ErrBadConfig: a Config field is out of range.
	ErrBadConfig = errors.New("actors: bad config")
	// ErrHandshake: peers did not all introduce themselves in time, or they
	// disagree on the protocol, the world or the transport.
	ErrHandshake = errors.New("actors: handshake failed")
	// ErrDataPlane: a data plane connection broke or a peer broke its
	// protocol (a bad header, more frames than its credit).
	ErrDataPlane = errors.New("actors: data plane")
	// ErrWire: a wire message does not decode to a valid collective message.
	ErrWire = errors.New("actors: bad wire message")
)
