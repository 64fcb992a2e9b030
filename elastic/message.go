package elastic

import (
	"fmt"
	"strings"
)

// MsgType is the kind of a rendezvous message.
type MsgType uint8

const (
	// MsgPrepare (proposer → all): promise to accept no ballot below this one
	// for this slot, and tell me what you accepted.
	MsgPrepare MsgType = iota + 1
	// MsgPromise (acceptor → proposer): promised; Value is what the sender
	// accepted for the slot, at ballot Accepted (Value.Gen 0: nothing).
	MsgPromise
	// MsgPropose (proposer → all): accept Value as the next world.
	MsgPropose
	// MsgAck (acceptor → proposer): Value accepted at Ballot, and this node
	// is at a step boundary.
	MsgAck
	// MsgNack (acceptor → proposer): refused; the sender promised Promised.
	MsgNack
	// MsgCommit (anyone → anyone): Value is committed. Also the answer to a
	// message about an older slot, so that laggards catch up.
	MsgCommit
	// MsgRequest (member → leader): please form a new generation (Reason),
	// e.g. after a collective failed although membership did not change.
	MsgRequest
	// MsgState (node ↔ node, in memberlist's push/pull exchange, not sent by
	// the core): Base is the sender's committed world; Value, if any, what
	// it accepted for the next, at ballot Accepted. A node that joins
	// through a seed learns from it whether a world exists or is being
	// formed, and never forms one of its own beside it.
	MsgState
)

var msgTypeNames = [...]string{"?", "Prepare", "Promise", "Propose", "Ack", "Nack", "Commit", "Request", "State"}

func (t MsgType) String() string {
	if int(t) < len(msgTypeNames) {
		return msgTypeNames[t]
	}
	return fmt.Sprintf("MsgType(%d)", t)
}

// Ballot numbers the attempts to decide one slot. Ballots are ordered by
// Round, then proposer ID; round 0 belongs to the proposer of the slot's
// base world alone, which is why it needs no prepare phase.
type Ballot struct {
	Round uint64
	ID    string
}

// Less orders ballots.
func (b Ballot) Less(o Ballot) bool {
	return b.Round < o.Round || b.Round == o.Round && b.ID < o.ID
}

// IsZero reports whether b is no ballot at all.
func (b Ballot) IsZero() bool { return b.ID == "" && b.Round == 0 }

func (b Ballot) String() string {
	if b.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%d.%s", b.Round, b.ID)
}

// Message is one rendezvous message between two cores. Slot is the
// sender's committed generation: the rendezvous decides the world that
// follows it (generation Slot+1).
type Message struct {
	Type     MsgType
	From, To string
	Slot     uint64
	Ballot   Ballot
	// Base is the sender's committed world (Prepare, Propose): a receiver
	// that missed its commit learns it from here.
	Base World
	// Value: the proposed world (Propose), the accepted one (Promise), the
	// committed one (Commit).
	Value World
	// Accepted is the ballot at which Value was accepted (Promise).
	Accepted Ballot
	// Promised is the ballot the sender promised (Nack).
	Promised Ballot
	// Reason explains a Request.
	Reason string
}

// String renders a message for logs and the interaction tests.
func (m Message) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s -> %s %s", m.From, m.To, m.Type)
	switch m.Type {
	case MsgCommit:
		fmt.Fprintf(&b, " %s by %s (%s)", m.Value, m.Value.Proposer, m.Value.Reason)
		return b.String()
	case MsgRequest:
		fmt.Fprintf(&b, " s%d %q", m.Slot, m.Reason)
		return b.String()
	case MsgState:
		fmt.Fprintf(&b, " %s", m.Base)
		if m.Value.Gen > 0 {
			fmt.Fprintf(&b, " accepted %s at b%s", m.Value, m.Accepted)
		}
		return b.String()
	}
	fmt.Fprintf(&b, " s%d b%s", m.Slot, m.Ballot)
	switch m.Type {
	case MsgPropose:
		fmt.Fprintf(&b, " %s (%s)", m.Value, m.Value.Reason)
	case MsgPromise:
		if m.Value.Gen > 0 {
			fmt.Fprintf(&b, " accepted %s at b%s", m.Value, m.Accepted)
		}
	case MsgNack:
		fmt.Fprintf(&b, " promised b%s", m.Promised)
	}
	return b.String()
}
