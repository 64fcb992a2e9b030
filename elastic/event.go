package elastic

import (
	"fmt"
	"time"
)

// EventKind is the kind of an Event.
type EventKind uint8

const (
	// EventProposed: a new world that involves this node is being agreed.
	// The trainer finishes (or, after a failure, aborts) its step and
	// calls Release; the node acknowledges at that step boundary.
	EventProposed EventKind = iota + 1
	// EventCommitted: World is the new committed generation.
	EventCommitted
	// EventWaiting: no world including this node can be formed now; Reason
	// says why (too few nodes, no quorum, standby, superseded).
	EventWaiting
	// EventConflict: a peer holds another world under a generation this
	// node committed. Only a job formed twice (disjoint --join lists, or a
	// partition at start-up with --min-nodes at most half of the nodes)
	// gets here; the node refuses the other world.
	EventConflict
	// EventJoined: Member became live.
	EventJoined
	// EventLeft: Member left gracefully.
	EventLeft
	// EventFailed: Member was declared dead by the failure detector.
	EventFailed
	// EventRefused: Member was refused (another protocol version, bad
	// metadata); it never becomes a peer.
	EventRefused
)

var eventKindNames = [...]string{"?", "proposed", "committed", "waiting", "conflict", "joined", "left", "failed", "refused"}

func (k EventKind) String() string {
	if int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", k)
}

// Event is a transition this node saw. The core fills Kind, World and
// Reason; the shell adds Member and the times.
type Event struct {
	Kind EventKind
	// World: the proposed (EventProposed) or committed (EventCommitted) world.
	World World
	// Member: who joined, left, failed or was refused.
	Member Member
	// Reason: why this node waits, the conflict, or why a member was refused.
	Reason string
	// Time is when this node saw the transition (shell events only).
	Time time.Time
	// Silence (EventFailed) is how long this node had not heard a probe
	// acknowledgement from the member when it was declared dead: an upper
	// bound of the detection time, zero if this node never probed it.
	Silence time.Duration
	// Rendezvous (EventCommitted) is the time from the first change this
	// node saw that the world answers (a member up or down, a request, the
	// proposal) to its commit.
	Rendezvous time.Duration
}

// String renders the event for logs and the interaction tests.
func (e Event) String() string {
	switch e.Kind {
	case EventProposed:
		return fmt.Sprintf("proposed %s (%s)", e.World, e.World.Reason)
	case EventCommitted:
		return fmt.Sprintf("committed %s by %s (%s)", e.World, e.World.Proposer, e.World.Reason)
	case EventWaiting, EventConflict:
		return fmt.Sprintf("%s: %s", e.Kind, e.Reason)
	case EventRefused:
		return fmt.Sprintf("refused %s: %s", e.Member.ID, e.Reason)
	}
	return fmt.Sprintf("%s %s", e.Kind, e.Member.ID)
}
