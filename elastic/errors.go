package elastic

import "errors"

var (
	// ErrBadConfig: a Config field is out of range.
	ErrBadConfig = errors.New("elastic: bad config")
	// ErrBadKey: a cluster key is not 16, 24 or 32 bytes, or its text does
	// not decode.
	ErrBadKey = errors.New("elastic: bad cluster key")
	// ErrBadMeta: a member's gossip metadata does not decode, or speaks
	// another troupe protocol version.
	ErrBadMeta = errors.New("elastic: bad member metadata")
	// ErrWire: a rendezvous message does not decode, or its
	// authentication code is wrong.
	ErrWire = errors.New("elastic: bad rendezvous message")
	// ErrJoin: no seed of Config.Join could be reached before JoinTimeout.
	ErrJoin = errors.New("elastic: cannot join the cluster")
	// ErrClosed: the node is closed.
	ErrClosed = errors.New("elastic: node closed")
)
