package elastic

import "github.com/troupe-ml/troupe/failure"

var (
	// ErrBadConfig: a Config field is out of range.
	ErrBadConfig = failure.New(failure.Config, "elastic: bad config")
	// ErrBadKey: a cluster key is not 16, 24 or 32 bytes, or its text does
	// not decode.
	ErrBadKey = failure.New(failure.Config, "elastic: bad cluster key")
	// ErrBadMeta: a member's gossip metadata does not decode, or speaks
	// another troupe protocol version.
	ErrBadMeta = failure.New(failure.Config, "elastic: bad member metadata")
	// ErrWire: a rendezvous message does not decode, or its
	// authentication code is wrong.
	ErrWire = failure.New(failure.Internal, "elastic: bad rendezvous message")
	// ErrJoin: no seed of Config.Join could be reached before JoinTimeout.
	ErrJoin = failure.New(failure.PeerLost, "elastic: cannot join the cluster")
	// ErrGone: this node is alone and every address it knows refuses
	// connections (Timings.Gone): the job ended without it, or every
	// other node stopped.
	ErrGone = failure.New(failure.PeerLost, "elastic: the job's other nodes are gone")
	// ErrCrashed: the membership actor panicked; the node must stop.
	ErrCrashed = failure.New(failure.Crashed, "elastic: membership crashed")
	// ErrClosed: the node is closed.
	ErrClosed = failure.New(failure.Canceled, "elastic: node closed")
)
