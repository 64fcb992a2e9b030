package collective

import (
	"errors"

	"github.com/troupe-ml/troupe/failure"
)

var (
	// ErrTimeout: an operation heard nothing from the peer it waits on for
	// longer than Config.Timeout.
	ErrTimeout = failure.New(failure.Timeout, "collective: timeout")
	// ErrPeerLost: a peer died (its actor terminated, its process exited,
	// its connection reset) while an operation or a group call (package
	// actors) needed it: the one sentinel of a lost peer.
	ErrPeerLost = failure.New(failure.PeerLost, "peer lost")
	// ErrAborted: another rank aborted the operation's generation; the error
	// also wraps the cause that rank reported (ErrTimeout, ErrPeerLost…).
	ErrAborted = failure.New(failure.Aborted, "collective: aborted")
	// ErrMismatch: ranks issued different operations under the same id
	// (kind, length or root differ), or a message does not fit the schedule.
	ErrMismatch = failure.New(failure.Internal, "collective: operation mismatch")
	// ErrCanceled: the context given to the operation was canceled.
	ErrCanceled = failure.New(failure.Canceled, "collective: canceled")
	// ErrClosed: the communicator was closed.
	ErrClosed = failure.New(failure.Canceled, "collective: communicator closed")
	// ErrOverflow: peers sent more early messages (for operations this rank
	// has not started yet) than Config.MaxEarlyBytes allows.
	ErrOverflow = failure.New(failure.Aborted, "collective: too many early messages")
	// ErrBadArgument: an argument is out of range (a root, a group, a size).
	ErrBadArgument = failure.New(failure.Internal, "collective: bad argument")
	// ErrBadConfig: a Config field is out of range.
	ErrBadConfig = failure.New(failure.Config, "collective: bad config")
)

// Abort codes carry the cause of an abort across the wire, so that every
// rank's error wraps the same sentinel as the rank that detected it.
const (
	codeOther uint32 = iota
	codeTimeout
	codePeerLost
	codeMismatch
	codeCanceled
	codeClosed
	codeOverflow
)

func codeOf(err error) uint32 {
	switch {
	case errors.Is(err, ErrTimeout):
		return codeTimeout
	case errors.Is(err, ErrPeerLost):
		return codePeerLost
	case errors.Is(err, ErrMismatch):
		return codeMismatch
	case errors.Is(err, ErrCanceled):
		return codeCanceled
	case errors.Is(err, ErrClosed):
		return codeClosed
	case errors.Is(err, ErrOverflow):
		return codeOverflow
	}
	return codeOther
}

func sentinelOf(code uint32) error {
	switch code {
	case codeTimeout:
		return ErrTimeout
	case codePeerLost:
		return ErrPeerLost
	case codeMismatch:
		return ErrMismatch
	case codeCanceled:
		return ErrCanceled
	case codeClosed:
		return ErrClosed
	case codeOverflow:
		return ErrOverflow
	}
	return nil
}
