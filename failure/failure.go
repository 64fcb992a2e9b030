package failure

import (
	"context"
	"errors"
	"fmt"
)

// Code classifies a failure. The values are part of the wire protocol:
// append new codes, never renumber.
type Code uint32

const (
	// Unknown: an error nobody classified; treated as permanent.
	Unknown Code = iota

	// PeerLost: a peer's process, actor or connection is gone.
	PeerLost
	// PeerSilent: a peer did not answer in time (a hung process sends no
	// reset).
	PeerSilent
	// Timeout: an operation waited too long for data.
	Timeout
	// Aborted: another rank aborted the operation.
	Aborted
	// Canceled: the caller gave up (a superseded generation, a cancelled
	// context, a closed communicator).
	Canceled
	// Stale: a request for another generation or step than the member is
	// at; the world moved on while it was in flight.
	Stale
	// Crashed: a worker panicked and stopped (its state may be half
	// updated, so it is never used again); the job goes on without its
	// node.
	Crashed

	// Config: a configuration that cannot work (for this world).
	Config
	// Output: an output (weights, metrics, trace, checkpoint) cannot be
	// written.
	Output
	// Data: the training data cannot be read or is malformed.
	Data
	// Checkpoint: a checkpoint cannot be read or does not fit.
	Checkpoint
	// Diverged: replicas that must hold the same bits do not.
	Diverged
	// StateLost: a part of the training state is held by no member and no
	// checkpoint.
	StateLost
	// Internal: a broken invariant (a bug).
	Internal
	// Exhausted: a bound on waiting or restarting ran out (an elastic
	// node that could not join a world for --rdzv-timeout; more transient
	// failures than --max-restarts).
	Exhausted

	numCodes
)

var codeNames = [...]string{
	Unknown: "unknown", PeerLost: "peer-lost", PeerSilent: "peer-silent", Timeout: "timeout", Aborted: "aborted",
	Canceled: "canceled", Stale: "stale", Crashed: "crashed", Config: "config", Output: "output", Data: "data",
	Checkpoint: "checkpoint", Diverged: "diverged", StateLost: "state-lost", Internal: "internal",
	Exhausted: "exhausted",
}

func (c Code) String() string {
	if c < numCodes {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", uint32(c))
}

// Valid reports whether c is a code this build knows.
func (c Code) Valid() bool { return c < numCodes }

// Transient reports whether a failure of this code lets the job go on in a
// new generation.
func (c Code) Transient() bool { return c >= PeerLost && c <= Crashed }

// Error is an error with a Code. Sentinels are *Error values compared by
// identity; an Error decoded from the wire also matches every sentinel of
// its code.
type Error struct {
	code   Code
	msg    string
	cause  error
	remote bool
}

// New returns a sentinel error of code c with message msg.
func New(c Code, msg string) *Error { return &Error{code: c, msg: msg} }

// Wrap marks err with code c; the result says err's message and unwraps
// to err. A nil err gives nil.
func Wrap(c Code, err error) error {
	if err == nil {
		return nil
	}
	return &Error{code: c, msg: err.Error(), cause: err}
}

// Wrapf marks a new error with code c; like fmt.Errorf, %w verbs in format
// wrap their operands.
func Wrapf(c Code, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Error{code: c, msg: err.Error(), cause: err}
}

// Panicked is the error of a panic recovered in where (an actor, a core):
// a Crashed failure, since what panicked stops and its state may be half
// updated, naming where and the panic's value. Every panic handler of the
// project classifies a panic through it; the stack goes to its log.
func Panicked(where string, p any) error {
	return &Error{code: Crashed, msg: fmt.Sprintf("%s panicked: %v", where, p)}
}

func (e *Error) Error() string { return e.msg }

// Code is the error's classification.
func (e *Error) Code() Code { return e.code }

// Unwrap is the error marked by Wrap, if any.
func (e *Error) Unwrap() error { return e.cause }

// Is makes an error decoded from the wire match the sentinels of its code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && e.remote && t.code == e.code && t.cause == nil && !t.remote
}

// CodeOf is the code of the outermost classified error in err's chain:
// context cancellation and deadlines are Canceled, nil and unclassified
// errors Unknown.
func CodeOf(err error) Code {
	if err == nil {
		return Unknown
	}
	var e *Error
	if errors.As(err, &e) {
		return e.code
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Canceled
	}
	return Unknown
}

// Transient reports whether err lets the job go on in a new generation.
func Transient(err error) bool { return err != nil && CodeOf(err).Transient() }

// Encode is what crosses the wire for err: its code and message (Unknown
// and "" for nil).
func Encode(err error) (Code, string) {
	if err == nil {
		return Unknown, ""
	}
	return CodeOf(err), err.Error()
}

// Decode is the error a peer encoded: nil for an empty message, else an
// error with the code and the message that matches the code's sentinels
// under errors.Is. An unknown code decodes as Unknown (permanent).
func Decode(c Code, msg string) error {
	if msg == "" && c == Unknown {
		return nil
	}
	if !c.Valid() {
		c = Unknown
	}
	return &Error{code: c, msg: msg, remote: true}
}
