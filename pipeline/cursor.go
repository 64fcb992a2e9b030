package pipeline

import "fmt"

// Message is what a send op hands to its peer stage. The payload (an
// activation or a gradient tensor) travels beside it; the Cursor needs only
// to know which message it is.
type Message struct {
	// Kind is the op that sent it: SendAct or SendGrad.
	Kind  OpKind
	Micro int
	// From and To are the sending and receiving stages.
	From, To int
}

// String reads "send_act 3 from stage 1 to stage 2".
func (m Message) String() string {
	return fmt.Sprintf("%s %d from stage %d to stage %d", m.Kind, m.Micro, m.From, m.To)
}

// recvKind is the receive op that takes a message sent by send.
func recvKind(send OpKind) OpKind {
	if send == SendAct {
		return RecvAct
	}
	return RecvGrad
}

// msgState is where one expected message stands.
type msgState uint8

const (
	msgAbsent   msgState = iota // not received by this stage's schedule
	msgExpected                 // a receive op waits for it; it has not come
	msgArrived                  // it came; its receive op has not run yet
	msgConsumed                 // its receive op ran
)

// msgKey names a message by its receive op's kind and micro-batch; the
// peer is fixed by the kind (RecvAct from stage−1, RecvGrad from stage+1).
type msgKey struct {
	kind  OpKind
	micro int
}

// Cursor steps one stage through its list of ops. It is the pure core of a
// stage actor: the shell asks Next for the op to run, runs it, reports it
// with Done, and hands every message that arrives from a peer to Deliver.
// Messages may arrive in any order and long before their receive op; the
// Cursor only makes a receive op runnable once its message is there.
//
// A Cursor is not safe for concurrent use: one actor (one goroutine at a
// time) owns it. One Cursor serves one optimizer step; Reset reuses it for
// the next.
type Cursor struct {
	stage int
	ops   []Op
	pc    int
	msgs  map[msgKey]msgState
}

// NewCursor returns a Cursor at the start of stage's list in s. s must have
// passed Validate; the Cursor shares s's op lists and never changes them.
func NewCursor(s *Schedule, stage int) (*Cursor, error) {
	if stage < 0 || stage >= s.Stages || stage >= len(s.Ops) {
		return nil, fmt.Errorf("%w: stage %d of a %d-stage schedule", ErrBadArgument, stage, s.Stages)
	}
	c := &Cursor{stage: stage, ops: s.Ops[stage], msgs: make(map[msgKey]msgState)}
	c.Reset()
	return c, nil
}

// Reset rewinds the Cursor to the start of the list, forgetting every
// message, for the next optimizer step.
func (c *Cursor) Reset() {
	c.pc = 0
	clear(c.msgs)
	for _, op := range c.ops {
		if op.Kind.IsRecv() {
			c.msgs[msgKey{op.Kind, op.Micro}] = msgExpected
		}
	}
}

// Stage is the stage the Cursor steps.
func (c *Cursor) Stage() int { return c.stage }

// Next returns the op to run now, or false when the stage must wait: its
// next op receives a message that has not arrived, or the list is done
// (see Finished).
func (c *Cursor) Next() (Op, bool) {
	if c.pc >= len(c.ops) {
		return Op{}, false
	}
	op := c.ops[c.pc]
	if op.Kind.IsRecv() && c.msgs[msgKey{op.Kind, op.Micro}] != msgArrived {
		return Op{}, false
	}
	return op, true
}

// Waiting returns the receive op the stage waits on, or false when it is
// not waiting (it has an op to run, or it is finished).
func (c *Cursor) Waiting() (Op, bool) {
	if c.pc >= len(c.ops) {
		return Op{}, false
	}
	op := c.ops[c.pc]
	if op.Kind.IsRecv() && c.msgs[msgKey{op.Kind, op.Micro}] != msgArrived {
		return op, true
	}
	return Op{}, false
}

// Done records that op, the one Next returned, has run. Reporting any other
// op is a bug in the shell and returns ErrBadArgument.
func (c *Cursor) Done(op Op) error {
	next, ok := c.Next()
	if !ok || next != op {
		if c.pc >= len(c.ops) {
			return fmt.Errorf("%w: stage %d: %v done after the end of the schedule", ErrBadArgument, c.stage, op)
		}
		return fmt.Errorf("%w: stage %d: %v done, but the runnable op is %v (ok=%v)", ErrBadArgument, c.stage, op, next, ok)
	}
	if op.Kind.IsRecv() {
		c.msgs[msgKey{op.Kind, op.Micro}] = msgConsumed
	}
	c.pc++
	return nil
}

// Deliver hands the Cursor a message from a peer. It returns
// ErrDuplicateMessage for a message it already has (or already consumed),
// and ErrUnexpectedMessage for one this stage's schedule never receives
// (wrong kind, micro-batch, sender or receiver); either way the Cursor is
// unchanged.
func (c *Cursor) Deliver(m Message) error {
	if !m.Kind.IsSend() {
		return fmt.Errorf("%w: %v: not a send", ErrUnexpectedMessage, m)
	}
	want := c.stage - 1 // an activation comes from the previous stage
	if m.Kind == SendGrad {
		want = c.stage + 1
	}
	if m.To != c.stage || m.From != want {
		return fmt.Errorf("%w: stage %d got %v", ErrUnexpectedMessage, c.stage, m)
	}
	k := msgKey{recvKind(m.Kind), m.Micro}
	switch c.msgs[k] {
	case msgExpected:
		c.msgs[k] = msgArrived
		return nil
	case msgArrived, msgConsumed:
		return fmt.Errorf("%w: stage %d got %v twice", ErrDuplicateMessage, c.stage, m)
	}
	return fmt.Errorf("%w: stage %d got %v, which its schedule never receives", ErrUnexpectedMessage, c.stage, m)
}

// Finished reports whether every op has run.
func (c *Cursor) Finished() bool { return c.pc >= len(c.ops) }

// Position is the number of ops run so far; Len the list's length.
func (c *Cursor) Position() int { return c.pc }

// Len is the length of the stage's list.
func (c *Cursor) Len() int { return len(c.ops) }

// MessageOf is the message a send op of stage from carries.
func MessageOf(from int, op Op) Message {
	return Message{Kind: op.Kind, Micro: op.Micro, From: from, To: op.Peer}
}
