package collective

import (
	"errors"
	"fmt"

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
// rank's error wraps the same sentinel as the rank that detected it. They
// are the wire's, older than package failure's codes and numbered apart
// from them; peerAbort is where they become failure's classes.
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

// peerAbort is the error of an abort notice from peer with code and
// reason: ErrAborted naming the peer, wrapping the sentinel of code with
// the detecting rank's message. Its failure class is the one the
// detecting rank's error has where that is permanent (a mismatch is the
// same bug on every rank: a new generation would only meet it again),
// and failure.Aborted otherwise, transient like every transient cause.
// An unknown code (codeOther, or a newer build's) wraps no sentinel and
// is failure.Aborted.
func peerAbort(peer string, code uint32, reason string) error {
	sentinel := sentinelOf(code)
	err := fmt.Errorf("%w by %s: %w", ErrAborted, peer, &remoteError{sentinel: sentinel, text: reason})
	if c := failure.CodeOf(sentinel); sentinel != nil && !c.Transient() {
		return failure.Wrap(c, err)
	}
	return err
}

// remoteError is the cause another rank reported in its abort notice.
type remoteError struct {
	sentinel error
	text     string
}

func (e *remoteError) Error() string { return e.text }
func (e *remoteError) Unwrap() error { return e.sentinel }
