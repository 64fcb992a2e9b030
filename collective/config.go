package collective

import (
	"fmt"
	"time"
)

// Config tunes a rank's collectives. Every rank of a world must use the same
// SubChunkBytes (it fixes how messages are numbered); the other fields are
// local.
type Config struct {
	// SubChunkBytes caps one data message: ring chunks (and the whole buffer
	// of a broadcast or naive all-reduce) larger than this are cut into
	// sub-chunks, so that while rank r adds sub-chunk k, sub-chunk k+1 is on
	// the wire and rank r+1 already adds sub-chunk k−1. Default 1 MiB (on
	// the 2-core machines measured, 1 MiB beat 64 and 256 KiB on every
	// transport: fewer hand-offs per byte); rounded down to a multiple of 4.
	SubChunkBytes int
	// Timeout aborts an operation that has heard nothing from the peer it
	// waits on for this long. It must exceed the longest gap between two
	// ranks issuing the same operation (the slowest backward pass). Default 30 s.
	Timeout time.Duration
	// AbortAckTimeout bounds how long an aborted operation waits for the
	// peers that may still read its buffer (pointer-passing transports) to
	// acknowledge the abort before its Handle resolves anyway. Default 2 s.
	AbortAckTimeout time.Duration
	// MaxEarlyBytes bounds the payload held for operations this rank has not
	// started yet (peers run ahead); past it the generation aborts with
	// ErrOverflow. Default 1 GiB.
	MaxEarlyBytes int64
	// Generation is the first generation of every group's operations. An
	// elastic layer that rebuilds a world passes the new world's generation.
	Generation uint64
	// SmallAllReduceBytes: an AllReduce of at most this many bytes that
	// travels as float32 runs recursive doubling instead of the ring
	// (Config.AllReduceAlgorithm); capped at SubChunkBytes. Every rank of a
	// world must use the same. Default DefaultSmallAllReduceBytes; negative:
	// always the ring.
	SmallAllReduceBytes int
	// NoHierarchical keeps every AllReduce on one level (the ring or
	// recursive doubling) also in groups that span several hosts with
	// several ranks on each, which otherwise run float32 all-reduces above
	// SmallAllReduceBytes hierarchically (OnHosts, hier.go). Every rank of
	// a world must use the same.
	NoHierarchical bool
	// FlightOps is how many operations the flight recorder of each rank
	// keeps (Engine.Flight). Default DefaultFlightOps.
	FlightOps int
	// RegisteredMemory is set by a transport whose peers on the same host
	// read a buffer in registered memory (internal/shmem) where it lies,
	// instead of receiving a copy: the buffers a caller reduces often (a
	// trainer's gradients) are then best allocated there
	// (ReadsRegisteredMemory).
	RegisteredMemory bool
}

// ReadsRegisteredMemory reports whether c's transport reads a buffer that
// lies in registered memory (internal/shmem) in place when the peer is on
// the same host (Config.RegisteredMemory): one copy fewer per message.
func ReadsRegisteredMemory(c Communicator) bool {
	r, ok := c.(RegisteredMemoryReader)
	return ok && r.ReadsRegisteredMemory()
}

// RegisteredMemoryReader is a communicator that tells whether its
// transport reads registered memory in place; wrappers pass it on.
type RegisteredMemoryReader interface {
	ReadsRegisteredMemory() bool
}

// ReadsRegisteredMemory: see the function of that name.
func (f *frontend) ReadsRegisteredMemory() bool { return f.cfg.RegisteredMemory }

// DefaultConfig returns the defaults described on each Config field.
func DefaultConfig() Config {
	return Config{
		SubChunkBytes:   1 << 20,
		Timeout:         30 * time.Second,
		AbortAckTimeout: 2 * time.Second,
		MaxEarlyBytes:   1 << 30,
		FlightOps:       DefaultFlightOps,

		SmallAllReduceBytes: DefaultSmallAllReduceBytes,
	}
}

// DefaultSmallAllReduceBytes is where recursive doubling hands over to the
// ring, chosen by measurement (docs/BENCHMARKS.md, "Small all-reduces").
const DefaultSmallAllReduceBytes = 64 << 10

// Validate fills zero fields with their defaults and rejects the rest that
// is out of range.
func (c *Config) Validate() error {
	d := DefaultConfig()
	if c.SubChunkBytes == 0 {
		c.SubChunkBytes = d.SubChunkBytes
	}
	if c.SubChunkBytes < 4 {
		return fmt.Errorf("%w: SubChunkBytes %d: want at least 4", ErrBadConfig, c.SubChunkBytes)
	}
	c.SubChunkBytes &^= 3
	if c.Timeout == 0 {
		c.Timeout = d.Timeout
	}
	if c.Timeout < 0 {
		return fmt.Errorf("%w: Timeout %v: want > 0", ErrBadConfig, c.Timeout)
	}
	if c.AbortAckTimeout == 0 {
		c.AbortAckTimeout = d.AbortAckTimeout
	}
	if c.AbortAckTimeout < 0 {
		return fmt.Errorf("%w: AbortAckTimeout %v: want > 0", ErrBadConfig, c.AbortAckTimeout)
	}
	if c.MaxEarlyBytes == 0 {
		c.MaxEarlyBytes = d.MaxEarlyBytes
	}
	if c.SmallAllReduceBytes == 0 {
		c.SmallAllReduceBytes = d.SmallAllReduceBytes
	}
	if c.FlightOps == 0 {
		c.FlightOps = d.FlightOps
	}
	if c.FlightOps < 0 {
		return fmt.Errorf("%w: FlightOps %d: want > 0", ErrBadConfig, c.FlightOps)
	}
	if c.MaxEarlyBytes < 0 {
		return fmt.Errorf("%w: MaxEarlyBytes %d: want > 0", ErrBadConfig, c.MaxEarlyBytes)
	}
	return nil
}
