package collective

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// MsgType is the type of a collective message.
type MsgType uint8

const (
	// MsgData carries a (sub-)chunk of an operation's buffer.
	MsgData MsgType = iota + 1
	// MsgDone carries the completion count along the ring: Seq = the number
	// of consecutive ranks, ending with the sender, that have received all
	// their data for the operation.
	MsgDone
	// MsgAbort says that the sender aborted generation Gen; Code and Reason
	// say why, Culprit names the peer at fault (-1 if none).
	MsgAbort
	// MsgAbortAck answers a MsgAbort: the sender will read nothing more that
	// the receiver sent in generation Gen.
	MsgAbortAck
	msgTypeEnd
)

var msgTypeNames = [...]string{"", "data", "done", "abort", "abort-ack"}

func (t MsgType) String() string {
	if t > 0 && t < msgTypeEnd {
		return msgTypeNames[t]
	}
	return fmt.Sprintf("MsgType(%d)", uint8(t))
}

// Valid reports whether t names a message type.
func (t MsgType) Valid() bool { return t > 0 && t < msgTypeEnd }

// Message is one collective message. Every message carries (Gen, Op, Seq)
// so that the receiver drops old generations and duplicates.
//
// From and To are group ranks inside Core and world ranks between Engine and
// a transport.
type Message struct {
	Type  MsgType
	Group uint32
	From  int
	To    int
	Gen   uint64
	Op    uint64
	// Seq numbers the data messages of an operation (step·subChunks + sub),
	// or is the count of a MsgDone.
	Seq uint32
	// Kind and Len describe the operation as the sender issued it, so that
	// mismatched calls are caught instead of silently mixing buffers. Algo
	// is an AllReduce's algorithm (AlgoAuto for the other kinds); Root is
	// the broadcast root.
	Kind Kind
	Algo Algorithm
	Len  uint64
	Root int
	// Wire is the type the payload's values travel in: F32, or BF16 and
	// F16 packed two to a float32 word (ReduceOp.In).
	Wire kernels.DType
	// Payload is the data of a MsgData. When Core emits a message, Payload
	// aliases the operation's buffer: a transport may read it until the
	// operation completes on this rank (completion proves the receiver
	// consumed it) or, after an abort, until Engine calls Outbox.Cancel.
	Payload []float32
	// Code, Culprit and Reason describe a MsgAbort.
	Code    uint32
	Culprit int
	Reason  string
	// Release, when not nil, is called once by Core when it no longer needs
	// Payload (after adding or copying it, or dropping the message), so a
	// transport can recycle the buffer it received into.
	Release func()
	// Borrowed: Payload is the sender's own buffer, which this process
	// maps (a reference to its registered memory). It stays valid and
	// unchanged until this rank consumed it, as the sender's operation
	// cannot complete before, so a message held for an operation not
	// started yet keeps it instead of a copy, and weighs no more than an
	// empty one against Config.MaxEarlyBytes.
	Borrowed bool
}

func (m *Message) release() {
	if m.Release != nil {
		r := m.Release
		m.Release = nil
		r()
	}
}

func (m Message) String() string {
	return fmt.Sprintf("%s g%d %d→%d gen %d op %d seq %d (%d values)", m.Type, m.Group, m.From, m.To, m.Gen, m.Op, m.Seq, len(m.Payload))
}
