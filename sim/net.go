package sim

import (
	"fmt"
	"time"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/elastic"
)

// envelope is a message on the simulated network.
type envelope struct {
	from, to string
	body     any
}

// Message bodies other than the cores' own (elastic.Message, and
// collective.Message in collMsg).
type (
	// collMsg is a collective core's message within generation gen.
	collMsg struct {
		gen uint64
		// grp is the group whose core sent it (groupDP, groupShard,
		// groupSlot).
		grp int
		m   collective.Message
	}
	// callMsg is the leader's call of generation gen, phase ph, to member i.
	// world is the generation's committed world: the proof of its commit
	// (Core.Learn), as the agents' StatusRequest and Form carry their
	// leader's sealed commit (elastic.Node.CommitProof); the simulated
	// network loses and reorders messages one by one, so every call
	// carries it here.
	callMsg struct {
		world elastic.World
		gen   uint64
		call  uint64 // the leader's call number, to match the replies
		i     int
		msg   any
	}
	// replyMsg answers a callMsg.
	replyMsg struct {
		call uint64
		i    int
		body any
		err  error
	}
	// runStep asks a rank to run step (its data at cursor).
	runStep struct {
		gen    uint64
		step   int
		cursor uint64
		batch  int
	}
	// stepDone answers runStep.
	stepDone struct {
		gen  uint64
		step int
		rank int
		err  error
	}
	// stateMsg is a replica's training state, sent by the generation's root
	// to the other ranks (worker broadcastState).
	stateMsg struct {
		gen            uint64
		from           int // the root's rank
		params, moment []float32
		history        []applied
	}
	// finishAck answers the leader's Finish.
	finishAck struct{}
)

func (e envelope) String() string {
	switch b := e.body.(type) {
	case elastic.Message:
		return b.String()
	case collMsg:
		return fmt.Sprintf("%s→%s collective gen %d %v op %d seq %d", e.from, e.to, b.gen, b.m.Type, b.m.Op, b.m.Seq)
	case callMsg:
		return fmt.Sprintf("%s→%s call %d gen %d %T", e.from, e.to, b.call, b.gen, b.msg)
	case replyMsg:
		return fmt.Sprintf("%s→%s reply to call %d: %T err=%v", e.from, e.to, b.call, b.body, b.err)
	case runStep:
		return fmt.Sprintf("%s→%s run step %d gen %d", e.from, e.to, b.step, b.gen)
	case stepDone:
		return fmt.Sprintf("%s→%s step %d done gen %d err=%v", e.from, e.to, b.step, b.gen, b.err)
	case stateMsg:
		return fmt.Sprintf("%s→%s state gen %d", e.from, e.to, b.gen)
	}
	return fmt.Sprintf("%s→%s %T", e.from, e.to, e.body)
}

// send puts a message on the network, with the faults the seed draws:
// dropped, duplicated, or delayed past later messages (reordered).
func (s *sim) send(from, to string, body any) {
	e := envelope{from: from, to: to, body: body}
	if from == to {
		s.clk.after(0, func() { s.deliver(e) })
		return
	}
	if s.quiet() {
		s.clk.after(time.Millisecond+time.Duration(s.rng.IntN(4000))*time.Microsecond, func() { s.deliver(e) })
		return
	}
	if s.maybe(s.msgFault) {
		s.faults++
		s.tracef("drop %s", e)
		return
	}
	copies := 1
	if s.maybe(s.msgFault) {
		s.faults++
		copies = 2
		s.tracef("duplicate %s", e)
	}
	for range copies {
		d := time.Millisecond + time.Duration(s.rng.IntN(4000))*time.Microsecond
		if s.maybe(s.msgFault) {
			s.faults++
			d += time.Duration(s.rng.IntN(300)) * time.Millisecond
		}
		s.clk.after(d, func() { s.deliver(e) })
	}
}

// deliver hands a message to its node: dropped when the node is down or
// across a partition, held while the node hangs.
func (s *sim) deliver(e envelope) {
	n := s.nodes[e.to]
	switch {
	case n == nil || !n.up:
		return
	case !s.reach(e.from, e.to):
		s.tracef("lost across the partition: %s", e)
		return
	}
	s.atNode(n, func() { n.receive(e) })
}

// reach reports whether a and b are on the same side of a partition.
func (s *sim) reach(a, b string) bool { return s.side[s.nameOf(a)] == s.side[s.nameOf(b)] }

// maybe draws an event of probability p.
func (s *sim) maybe(p float64) bool { return p > 0 && s.rng.Float64() < p }
