package elastic

import (
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-ml/troupe/internal/simbug"
)

// CoreConfig configures a rendezvous core.
type CoreConfig struct {
	// Self is this node; it is always live in its own view.
	Self Member
	// MinNodes: no world with fewer members forms; the nodes wait. Default 1.
	MinNodes int
	// MaxNodes: worlds have at most this many members; more live nodes wait
	// as standby until a member goes. 0: no limit.
	MaxNodes int
	// Quorum: whose agreement a new generation needs (default majority).
	Quorum Quorum
	// SettleTicks: after a node joins, the leader waits until no node has
	// joined for this many ticks before it proposes, so that nodes started
	// together form one world and joins are batched. Members that fail or
	// leave do not wait: the old world cannot train anyway. Default 4.
	SettleTicks int
	// RetryTicks: a proposer sends its prepare or proposal again to those
	// that have not answered after this many ticks, and an acceptor repeats
	// its acknowledgement until it learns the commit. Default 10.
	RetryTicks int
}

// DefaultCoreConfig is one node or more, no limit, majority quorum, with
// the tick counts described on each field (Self is the caller's).
func DefaultCoreConfig() CoreConfig {
	return CoreConfig{MinNodes: 1, Quorum: QuorumMajority, SettleTicks: 4, RetryTicks: 10}
}

// Validate fills zero fields with defaults and rejects the rest that is
// out of range.
func (c *CoreConfig) Validate() error {
	d := DefaultCoreConfig()
	if c.Self.ID == "" || c.Self.Name == "" {
		return fmt.Errorf("%w: Self needs an ID and a Name", ErrBadConfig)
	}
	if c.MinNodes == 0 {
		c.MinNodes = d.MinNodes
	}
	if c.RetryTicks == 0 {
		c.RetryTicks = d.RetryTicks
	}
	if c.MinNodes < 1 || c.MaxNodes < 0 || c.MaxNodes > 0 && c.MaxNodes < c.MinNodes {
		return fmt.Errorf("%w: MinNodes %d, MaxNodes %d: want 1 ≤ MinNodes ≤ MaxNodes (MaxNodes 0: no limit)", ErrBadConfig, c.MinNodes, c.MaxNodes)
	}
	if c.Quorum != QuorumMajority && c.Quorum != QuorumAny {
		return fmt.Errorf("%w: %s", ErrBadConfig, c.Quorum)
	}
	if c.SettleTicks < 0 || c.RetryTicks < 1 {
		return fmt.Errorf("%w: SettleTicks %d (want ≥ 0), RetryTicks %d (want ≥ 1)", ErrBadConfig, c.SettleTicks, c.RetryTicks)
	}
	return nil
}

// phase is where a proposer's attempt stands.
type phase uint8

const (
	phasePrepare phase = iota + 1 // waiting for promises
	phasePropose                  // waiting for acknowledgements
)

func (p phase) String() string {
	switch p {
	case phasePrepare:
		return "prepare"
	case phasePropose:
		return "propose"
	}
	return "idle"
}

// promise is what one acceptor told the proposer in phase 1.
type promise struct {
	value  World // accepted value, Gen 0 if none
	ballot Ballot
}

// attempt is the leader's try to decide one slot at one ballot.
type attempt struct {
	slot     uint64
	ballot   Ballot
	phase    phase
	value    World // phasePropose
	promises map[string]promise
	acks     map[string]bool
	lastSent int64
}

// Core is the rendezvous state machine of one node: a pure value driven
// by its inputs (membership changes, peers' messages, ticks, the trainer's
// Hold/Release and Request), with no goroutines, clock or I/O; Ready hands
// out what it wants sent and the events it saw. Not safe for concurrent
// use: one actor owns it.
//
// Each committed generation g is a slot; the next world is decided in it
// by single-decree Paxos among the members of world g (with QuorumMajority
// a strict majority of them must promise and accept; for the first world,
// and with QuorumAny, every live node the leader sees), with ballots
// (round, proposer). The
// proposer of world g owns round 0 of slot g and skips the prepare phase,
// so a stable leader agrees a change in one round trip: propose, ack,
// commit. Any other leader (the previous one died) prepares first and
// adopts a value a quorum may already have accepted. The leader commits
// when the quorum and every live member of the value have acknowledged;
// a member acknowledges only at a step boundary (Hold/Release).
type Core struct {
	cfg  CoreConfig
	self Member
	now  int64

	live   map[string]Member // by ID, self included
	vcache []Member          // view(), nil when live changed
	wdirty bool              // live or committed changed: recompute the waiting reason
	down   map[string]string // members of the committed world gone since: ID → "failed" or "left"
	// leavers announced that they leave: they are in no world proposed
	// and never lead, but they answer as acceptors until they are gone
	// (they go once a world without them committed).
	leavers map[string]bool
	lastUp  int64  // tick of the last member up
	forced  string // a new generation is wanted although membership is the same

	committed World

	// Acceptor state for slot committed.Gen.
	promised       Ballot
	accepted       World // Gen 0: nothing accepted
	acceptedBallot Ballot
	pending        *Message // a proposal waiting for Release
	announced      World    // the last proposal reported as EventProposed
	lastAck        int64
	held           bool

	// Proposer state for slot committed.Gen.
	att      *attempt
	maxRound uint64
	usedZero bool
	retryAt  int64

	started  bool // Start was called: the node may lead
	leaving  bool // Leave was called: the node no longer leads
	waiting  string
	conflict string
	inbox    []Message // messages to self
	out      []Message
	events   []Event
}

// NewCore returns the core of cfg.Self, which knows no other member yet.
func NewCore(cfg CoreConfig) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Core{cfg: cfg, self: cfg.Self.clone(), live: map[string]Member{}, down: map[string]string{}, leavers: map[string]bool{}}
	c.live[c.self.ID] = c.self
	c.after()
	return c, nil
}

// Start tells the core that the node has joined the cluster (its join
// exchanged state with a seed), or is the first node: from now on it may
// lead. Before, it only listens: a node that proposed the first world
// before its join completed could form a world of its own beside the
// cluster's.
func (c *Core) Start() {
	c.started, c.wdirty = true, true
	c.after()
}

// Leave tells the core that this node is leaving: it stops leading (the
// others form the next world without it) but still answers as an
// acceptor until it is gone. It should go once it committed a world
// without itself (Committed): until then its answer may be what the
// world's quorum needs.
func (c *Core) Leave() {
	c.leaving, c.att, c.wdirty = true, nil, true
	c.after()
}

// MemberLeaving: member id announced that it leaves (Leave on its node).
// It is no longer proposed nor followed as the leader, but it still
// counts as an acceptor of the committed world until MemberDown: a
// graceful leave does not count against the quorum like a failure, and
// any number of members may leave at once (each answers until a world
// without it committed).
func (c *Core) MemberLeaving(id string) {
	if id == c.self.ID || c.leavers[id] {
		return
	}
	if _, ok := c.live[id]; !ok {
		return
	}
	c.leavers[id], c.vcache, c.wdirty = true, nil, true
	c.after()
}

// Ready is what the core wants done since the last call: messages to send
// (the caller owns the slices) and events for the trainer.
type Ready struct {
	Messages []Message
	Events   []Event
}

// Ready hands out and forgets the pending messages and events.
func (c *Core) Ready() Ready {
	r := Ready{Messages: c.out, Events: c.events}
	c.out, c.events = nil, nil
	return r
}

// Committed is the latest committed world this node knows (Gen 0: none).
func (c *Core) Committed() World { return c.committed.clone() }

// State is this node's part of memberlist's push/pull exchange (the
// shell sends it as Delegate.LocalState): its committed world and what it
// accepted for the next. The receiver passes it to Step.
func (c *Core) State() Message {
	return Message{Type: MsgState, From: c.self.ID, Slot: c.committed.Gen, Base: c.committed.clone(),
		Value: c.accepted.clone(), Accepted: c.acceptedBallot}
}

// MemberUp: m is live (memberlist: joined, or alive again).
func (c *Core) MemberUp(m Member) {
	if m.ID == c.self.ID || m.ID == "" {
		return
	}
	_, known := c.live[m.ID]
	c.live[m.ID], c.vcache, c.wdirty = m.clone(), nil, true
	if !known {
		c.lastUp = c.now
		if why, ok := c.down[m.ID]; ok {
			delete(c.down, m.ID)
			if c.forced == "" {
				c.forced = fmt.Sprintf("%s %s and came back", m.Name, why)
			}
		}
		if c.leader() {
			if c.committed.Gen > 0 {
				c.send(Message{Type: MsgCommit, To: m.ID, Value: c.committed})
			}
			if c.att != nil {
				c.sendPhaseTo(m.ID)
			}
		}
	}
	c.after()
}

// MemberDown: the member id failed (left false) or left gracefully.
func (c *Core) MemberDown(id string, left bool) {
	if id == c.self.ID {
		return
	}
	if _, ok := c.live[id]; !ok {
		return
	}
	delete(c.live, id)
	left = left || c.leavers[id]
	delete(c.leavers, id)
	c.vcache, c.wdirty = nil, true
	if c.committed.Contains(id) {
		c.down[id] = "failed"
		if left {
			c.down[id] = "left"
		}
	}
	c.after()
}

// Request asks for a new generation although membership did not change
// (the trainer saw a collective fail). The leader proposes one; any other
// node forwards the request to the leader.
func (c *Core) Request(reason string) {
	if c.leader() {
		if c.forced == "" {
			c.forced = "request: " + reason
		}
	} else if cand := c.candidates(c.view()); len(cand) > 0 {
		c.send(Message{Type: MsgRequest, To: cand[0].ID, Slot: c.committed.Gen, Reason: reason})
	}
	c.after()
}

// Hold marks this node busy in a training step: it defers acknowledging a
// new world until Release, so that worlds change at step boundaries.
func (c *Core) Hold() {
	c.held = true
	c.after()
}

// Release marks a step boundary: a deferred acknowledgement goes out.
func (c *Core) Release() {
	c.held = false
	if p := c.pending; p != nil {
		c.pending = nil
		if p.Slot == c.committed.Gen && !p.Ballot.Less(c.promised) {
			c.accept(*p)
		}
	}
	c.after()
}

// Learn tells the core that world w committed although no commit message
// reached this node: the trainer received a call of generation w.Gen from
// w's leader, which calls its members only after its own core committed w
// (so the call proves the commit). A world this node already passed is
// ignored; one of the same generation and other members is a conflict.
func (c *Core) Learn(w World) {
	if w.Gen == 0 || validWorld(w) != nil {
		return
	}
	switch {
	case w.Gen > c.committed.Gen:
		c.learn(w)
	case w.Gen == c.committed.Gen && !w.Equal(c.committed):
		c.conflicting(w.Proposer, w)
	}
	c.after()
}

// Tick passes one unit of time: unanswered messages are sent again.
func (c *Core) Tick() {
	c.now++
	if simbug.NoResend {
		c.after()
		return
	}
	if a := c.att; a != nil && c.now-a.lastSent >= int64(c.cfg.RetryTicks) {
		c.sendPhase()
	}
	if c.accepted.Gen > 0 && c.acceptedBallot.ID != c.self.ID && c.acceptedBallot == c.promised &&
		c.now-c.lastAck >= int64(c.cfg.RetryTicks) && c.isLive(c.acceptedBallot.ID) {
		c.lastAck = c.now
		c.send(Message{Type: MsgAck, To: c.acceptedBallot.ID, Slot: c.committed.Gen, Ballot: c.acceptedBallot})
	}
	c.after()
}

// Step hands the core a message from a peer.
func (c *Core) Step(m Message) {
	c.receive(m)
	c.after()
}

// after runs what follows every input: messages to self, leadership, the
// waiting state.
func (c *Core) after() {
	for {
		for len(c.inbox) > 0 {
			m := c.inbox[0]
			c.inbox = c.inbox[1:]
			c.receive(m)
		}
		c.maybeLead()
		if len(c.inbox) == 0 {
			break
		}
	}
	c.inbox = nil
	c.updateWaiting()
}

func (c *Core) send(m Message) {
	m.From = c.self.ID
	m.Base, m.Value = m.Base.clone(), m.Value.clone()
	if m.To == c.self.ID {
		c.inbox = append(c.inbox, m)
		return
	}
	c.out = append(c.out, m)
}

func (c *Core) emit(e Event) {
	e.World = e.World.clone()
	c.events = append(c.events, e)
}

// view is the live members in order, without incarnations that a newer
// process of the same Name superseded.
func (c *Core) view() []Member {
	if c.vcache != nil {
		return c.vcache
	}
	v := make([]Member, 0, len(c.live))
	for _, m := range c.live {
		superseded := false
		for _, o := range c.live {
			if o.supersedes(m) {
				superseded = true
				break
			}
		}
		if !superseded {
			v = append(v, m)
		}
	}
	slices.SortFunc(v, compareMembers)
	c.vcache = v
	return v
}

func (c *Core) isLive(id string) bool {
	return slices.ContainsFunc(c.view(), func(m Member) bool { return m.ID == id })
}

// candidates is the part of view that may be proposed and may lead: the
// live members that do not leave.
func (c *Core) candidates(view []Member) []Member {
	if len(c.leavers) == 0 && !c.leaving {
		return view
	}
	out := make([]Member, 0, len(view))
	for _, m := range view {
		if !c.leavers[m.ID] && !(m.ID == c.self.ID && c.leaving) {
			out = append(out, m)
		}
	}
	return out
}

// leader: this node is the first candidate.
func (c *Core) leader() bool {
	v := c.candidates(c.view())
	return len(v) > 0 && v[0].ID == c.self.ID
}

func idSet(ms []Member) map[string]bool {
	s := make(map[string]bool, len(ms))
	for _, m := range ms {
		s[m.ID] = true
	}
	return s
}

// wanted is the world the view calls for: the live members of the
// committed world, then newcomers in order up to MaxNodes; nil when fewer
// than MinNodes.
func (c *Core) wanted(view []Member) []Member {
	view = c.candidates(view)
	in := idSet(view)
	var out []Member
	for _, m := range c.committed.Members {
		if in[m.ID] {
			out = append(out, m)
		}
	}
	for _, m := range view {
		if !c.committed.Contains(m.ID) && (c.cfg.MaxNodes == 0 || len(out) < c.cfg.MaxNodes) {
			out = append(out, m)
		}
	}
	if len(out) < c.cfg.MinNodes {
		return nil
	}
	slices.SortFunc(out, compareMembers)
	return out
}

// target is the world to propose now, and why; ok is false when none is
// needed or possible.
func (c *Core) target(view []Member) (members []Member, reason string, ok bool) {
	members = c.wanted(view)
	if members == nil || c.committed.Gen > 0 && sameIDs(members, c.committed.Members) && c.forced == "" {
		return nil, "", false
	}
	return members, c.describe(members, view), true
}

// describe says why members differ from the committed world, by name.
func (c *Core) describe(members []Member, view []Member) string {
	if c.committed.Gen == 0 {
		return "formed"
	}
	in, live := idSet(members), idSet(view)
	var parts []string
	restarted := map[string]bool{}
	for _, m := range c.committed.Members {
		if in[m.ID] {
			continue
		}
		why := c.down[m.ID]
		if c.leavers[m.ID] {
			why = "left"
		}
		if slices.ContainsFunc(members, func(n Member) bool { return n.supersedes(m) }) {
			why, restarted[m.Name] = "restart", true
		} else if why == "" && !live[m.ID] {
			why = "failed"
		} else if why == "" {
			why = "removed"
		}
		parts = append(parts, why+" "+m.Name)
	}
	for _, m := range members {
		if !c.committed.Contains(m.ID) && !restarted[m.Name] {
			parts = append(parts, "join "+m.Name)
		}
	}
	if c.forced != "" {
		parts = append(parts, c.forced)
	}
	if len(parts) == 0 {
		return "re-formed"
	}
	return strings.Join(parts, "; ")
}

// due says whether the leader should propose now or let joins settle.
func (c *Core) due(view []Member) bool {
	if c.forced != "" {
		return true
	}
	in := idSet(c.candidates(view))
	for _, m := range c.committed.Members {
		if !in[m.ID] {
			return true
		}
	}
	if c.committed.Gen == 0 && c.cfg.MaxNodes > 0 && len(view) >= c.cfg.MaxNodes {
		return true
	}
	return c.now-c.lastUp >= int64(c.cfg.SettleTicks)
}

// quorumPossible: with a majority quorum, are enough members of the
// committed world live to decide anything?
func (c *Core) quorumPossible(view []Member) bool {
	if c.cfg.Quorum != QuorumMajority || c.committed.Gen == 0 {
		return true
	}
	in := idSet(view)
	k := 0
	for _, m := range c.committed.Members {
		if in[m.ID] {
			k++
		}
	}
	return 2*k > len(c.committed.Members)
}

// quorum: did enough nodes answer? Majority: more than half of the
// committed world's members (a member that leaves counts while it
// answers). Otherwise (the first world, or QuorumAny): every live node
// this node sees that does not leave.
func (c *Core) quorum(answered map[string]bool, view []Member) bool {
	if c.cfg.Quorum == QuorumMajority && c.committed.Gen > 0 {
		k := 0
		for _, m := range c.committed.Members {
			if answered[m.ID] {
				k++
			}
		}
		return 2*k > len(c.committed.Members)
	}
	for _, m := range c.candidates(view) {
		if !answered[m.ID] {
			return false
		}
	}
	return true
}

// maybeLead starts an attempt when this node leads and the world should
// change, and drops its attempt when it no longer leads.
func (c *Core) maybeLead() {
	view := c.view()
	leads := c.leader()
	if c.att != nil {
		if !leads || !c.quorumPossible(view) {
			c.att = nil
		} else {
			c.advance(view)
		}
		if c.att != nil {
			return
		}
	}
	if !leads || !c.started || c.leaving || c.now < c.retryAt || !c.quorumPossible(view) {
		return
	}
	members, reason, ok := c.target(view)
	if !ok || !c.due(view) {
		return
	}
	slot := c.committed.Gen
	if slot > 0 && c.committed.Proposer == c.self.ID && !c.usedZero && c.promised.IsZero() {
		c.usedZero = true
		c.att = &attempt{slot: slot, ballot: Ballot{0, c.self.ID}, phase: phasePropose, acks: map[string]bool{},
			value: World{Gen: slot + 1, Members: members, Proposer: c.self.ID, Reason: reason}}
	} else {
		round := max(c.maxRound, c.promised.Round) + 1
		c.maxRound = round
		c.att = &attempt{slot: slot, ballot: Ballot{round, c.self.ID}, phase: phasePrepare, promises: map[string]promise{}}
		if simbug.NoPrepare {
			c.att.phase, c.att.acks = phasePropose, map[string]bool{}
			c.att.value = World{Gen: slot + 1, Members: members, Proposer: c.self.ID, Reason: reason}
		}
	}
	c.sendPhase()
}

// sendPhase sends the attempt's current message to every live node that
// has not answered it.
func (c *Core) sendPhase() {
	c.att.lastSent = c.now
	for _, m := range c.view() {
		c.sendPhaseTo(m.ID)
	}
}

func (c *Core) sendPhaseTo(id string) {
	a := c.att
	switch a.phase {
	case phasePrepare:
		if _, ok := a.promises[id]; !ok {
			c.send(Message{Type: MsgPrepare, To: id, Slot: a.slot, Ballot: a.ballot, Base: c.committed})
		}
	case phasePropose:
		if !a.acks[id] {
			c.send(Message{Type: MsgPropose, To: id, Slot: a.slot, Ballot: a.ballot, Base: c.committed, Value: a.value})
		}
	}
}

func (c *Core) receive(m Message) {
	if m.From == "" || m.To != c.self.ID {
		return
	}
	switch m.Type {
	case MsgCommit:
		c.onCommit(m)
		return
	case MsgState:
		c.onState(m)
		return
	}
	switch {
	case m.Slot < c.committed.Gen:
		// The sender is behind: tell it the latest world.
		c.send(Message{Type: MsgCommit, To: m.From, Value: c.committed})
		return
	case m.Slot > c.committed.Gen:
		if (m.Type != MsgPrepare && m.Type != MsgPropose) || m.Base.Gen != m.Slot || validWorld(m.Base) != nil {
			return
		}
		c.learn(m.Base)
	}
	if (m.Type == MsgPrepare || m.Type == MsgPropose) && !m.Base.Equal(c.committed) {
		c.conflicting(m.From, m.Base)
		return
	}
	c.maxRound = max(c.maxRound, m.Ballot.Round, m.Promised.Round)
	switch m.Type {
	case MsgPrepare:
		c.onPrepare(m)
	case MsgPropose:
		c.onPropose(m)
	case MsgPromise:
		c.onPromise(m)
	case MsgAck:
		c.onAck(m)
	case MsgNack:
		c.onNack(m)
	case MsgRequest:
		if c.leader() && c.forced == "" {
			c.forced = fmt.Sprintf("request from %s: %s", m.From, m.Reason)
		}
	}
}

func (c *Core) onCommit(m Message) {
	w := m.Value
	if w.Gen == 0 || validWorld(w) != nil {
		return
	}
	switch {
	case w.Gen > c.committed.Gen:
		c.learn(w)
	case w.Gen < c.committed.Gen:
		c.send(Message{Type: MsgCommit, To: m.From, Value: c.committed})
	case !w.Equal(c.committed):
		c.conflicting(m.From, w)
	}
}

// onState merges a peer's push/pull state. Taking over its accepted value
// is what this node would have done had the proposal reached it (the
// ballot is not below this node's promise), so Paxos stays safe, and a
// later prepare here reports the value: a node that joined through a
// member of a world being formed cannot form another.
func (c *Core) onState(m Message) {
	if m.Base.Gen != m.Slot || validWorld(m.Base) != nil {
		return
	}
	if m.Slot > c.committed.Gen {
		c.learn(m.Base)
	}
	if m.Slot != c.committed.Gen || !m.Base.Equal(c.committed) || m.Value.Gen == 0 {
		return
	}
	b := m.Accepted
	if m.Value.Gen != m.Slot+1 || validWorld(m.Value) != nil || b.ID == "" ||
		b.Round == 0 && (c.committed.Gen == 0 || b.ID != c.committed.Proposer) {
		return
	}
	if !c.promised.IsZero() && b.Less(c.promised) || c.accepted.Gen > 0 && !c.acceptedBallot.Less(b) {
		return
	}
	c.promised, c.accepted, c.acceptedBallot = b, m.Value.clone(), b
	c.dropStalePending()
}

func (c *Core) conflicting(from string, w World) {
	r := fmt.Sprintf("%s holds %s by %s, this node committed %s by %s", from, w, w.Proposer, c.committed, c.committed.Proposer)
	if r != c.conflict {
		c.conflict = r
		c.emit(Event{Kind: EventConflict, Reason: r})
	}
}

// learn makes w the committed world and opens its slot.
func (c *Core) learn(w World) {
	c.committed, c.wdirty = w.clone(), true
	c.promised, c.accepted, c.acceptedBallot, c.pending, c.announced = Ballot{}, World{}, Ballot{}, nil, World{}
	c.att, c.maxRound, c.usedZero, c.retryAt = nil, 0, false, 0
	c.down, c.forced = map[string]string{}, ""
	c.emit(Event{Kind: EventCommitted, World: w})
}

func (c *Core) onPrepare(m Message) {
	if m.From != m.Ballot.ID || m.Ballot.Round == 0 {
		return
	}
	if !c.promised.IsZero() && m.Ballot.Less(c.promised) {
		c.send(Message{Type: MsgNack, To: m.From, Slot: m.Slot, Ballot: m.Ballot, Promised: c.promised})
		return
	}
	c.promised = m.Ballot
	c.dropStalePending()
	c.send(Message{Type: MsgPromise, To: m.From, Slot: m.Slot, Ballot: m.Ballot, Value: c.accepted, Accepted: c.acceptedBallot})
}

func (c *Core) onPropose(m Message) {
	if m.From != m.Ballot.ID || m.Value.Gen != m.Slot+1 || validWorld(m.Value) != nil {
		return
	}
	if m.Ballot.Round == 0 && (c.committed.Gen == 0 || m.Ballot.ID != c.committed.Proposer) {
		return
	}
	if !c.promised.IsZero() && m.Ballot.Less(c.promised) {
		c.send(Message{Type: MsgNack, To: m.From, Slot: m.Slot, Ballot: m.Ballot, Promised: c.promised})
		return
	}
	if c.accepted.Gen > 0 && c.acceptedBallot == m.Ballot {
		if c.accepted.Equal(m.Value) {
			c.lastAck = c.now
			c.send(Message{Type: MsgAck, To: m.From, Slot: m.Slot, Ballot: m.Ballot})
		}
		return
	}
	c.promised = m.Ballot
	c.dropStalePending()
	if !c.announced.Equal(m.Value) {
		c.announced = m.Value.clone()
		if c.committed.Contains(c.self.ID) || m.Value.Contains(c.self.ID) {
			c.emit(Event{Kind: EventProposed, World: m.Value})
		}
	}
	if c.held {
		p := m
		p.Value = m.Value.clone()
		c.pending = &p
		return
	}
	c.accept(m)
}

func (c *Core) accept(m Message) {
	c.accepted, c.acceptedBallot, c.lastAck = m.Value.clone(), m.Ballot, c.now
	c.send(Message{Type: MsgAck, To: m.From, Slot: m.Slot, Ballot: m.Ballot})
}

func (c *Core) dropStalePending() {
	if c.pending != nil && c.pending.Ballot.Less(c.promised) {
		c.pending = nil
	}
}

func (c *Core) onPromise(m Message) {
	a := c.att
	if a == nil || a.phase != phasePrepare || a.ballot != m.Ballot {
		return
	}
	if m.Value.Gen != 0 && (m.Value.Gen != a.slot+1 || validWorld(m.Value) != nil) {
		return
	}
	a.promises[m.From] = promise{value: m.Value.clone(), ballot: m.Accepted}
}

func (c *Core) onAck(m Message) {
	if a := c.att; a != nil && a.phase == phasePropose && a.ballot == m.Ballot {
		a.acks[m.From] = true
	}
}

// advance moves the attempt on when enough nodes answered: answers, and
// nodes going down (fewer to wait for), both get it there.
func (c *Core) advance(view []Member) {
	a := c.att
	switch a.phase {
	case phasePrepare:
		answered := make(map[string]bool, len(a.promises))
		for id := range a.promises {
			answered[id] = true
		}
		if !c.quorum(answered, view) {
			return
		}
		// Paxos: if a quorum may have accepted a value, it is the one with
		// the highest ballot among the promises; propose it again, never
		// another.
		var best promise
		ids := make([]string, 0, len(a.promises))
		for id := range a.promises {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			if p := a.promises[id]; p.value.Gen > 0 && (best.value.Gen == 0 || best.ballot.Less(p.ballot)) {
				best = p
			}
		}
		value := best.value
		if value.Gen == 0 {
			members, reason, ok := c.target(view)
			if !ok {
				c.att = nil
				return
			}
			value = World{Gen: a.slot + 1, Members: members, Proposer: c.self.ID, Reason: reason}
		}
		a.phase, a.value, a.acks = phasePropose, value, map[string]bool{}
		c.sendPhase()
	case phasePropose:
		if !c.quorum(a.acks, view) {
			return
		}
		live := idSet(view)
		for _, m := range a.value.Members {
			if live[m.ID] && !a.acks[m.ID] {
				return
			}
		}
		w := a.value
		for _, m := range view {
			if m.ID != c.self.ID {
				c.send(Message{Type: MsgCommit, To: m.ID, Value: w})
			}
		}
		c.learn(w)
	}
}

func (c *Core) onNack(m Message) {
	if a := c.att; a != nil && a.ballot == m.Ballot {
		c.att = nil
		c.retryAt = c.now + 1
	}
}

func (c *Core) updateWaiting() {
	if !c.started || !c.wdirty {
		return
	}
	c.wdirty = false
	if r := c.waitReason(); r != c.waiting {
		c.waiting = r
		if r != "" {
			c.emit(Event{Kind: EventWaiting, Reason: r})
		}
	}
}

func (c *Core) waitReason() string {
	for _, m := range c.live {
		if m.supersedes(c.self) {
			return fmt.Sprintf("superseded by %s, a newer process of node %s", m.ID, m.Name)
		}
	}
	if c.leaving {
		return "leaving: this node answers until a world without it commits"
	}
	view := c.view()
	if !c.quorumPossible(view) {
		in := idSet(view)
		k := 0
		for _, m := range c.committed.Members {
			if in[m.ID] {
				k++
			}
		}
		n := len(c.committed.Members)
		return fmt.Sprintf("no quorum: %d of the %d members of generation %d are reachable, %d needed", k, n, c.committed.Gen, n/2+1)
	}
	members := c.wanted(view)
	if members == nil {
		return fmt.Sprintf("too few nodes: %d live, %d needed", len(c.candidates(view)), c.cfg.MinNodes)
	}
	if !slices.ContainsFunc(members, func(m Member) bool { return m.ID == c.self.ID }) {
		return fmt.Sprintf("standby: the world is full (%d nodes)", c.cfg.MaxNodes)
	}
	return ""
}

// Status is a snapshot of a core for logs and tests.
type Status struct {
	Self      string
	Tick      int64
	Leader    string
	View      []string
	Committed World
	// Acceptor state.
	Promised, AcceptedBallot Ballot
	Accepted                 World
	Held, Pending            bool
	// Leaving: the live members that announced they leave.
	Leaving []string
	// Leader state: the attempt's phase ("idle" if none) and ballot.
	Phase   string
	Ballot  Ballot
	Waiting string
}

// Status describes the core now.
func (c *Core) Status() Status {
	v := c.view()
	var leader string
	if cand := c.candidates(v); len(cand) > 0 {
		leader = cand[0].ID
	}
	s := Status{Self: c.self.ID, Tick: c.now, Leader: leader, Committed: c.committed.clone(),
		Promised: c.promised, AcceptedBallot: c.acceptedBallot, Accepted: c.accepted.clone(),
		Held: c.held, Pending: c.pending != nil, Phase: "idle", Waiting: c.waiting}
	for _, m := range v {
		s.View = append(s.View, m.ID)
		if c.leavers[m.ID] || m.ID == c.self.ID && c.leaving {
			s.Leaving = append(s.Leaving, m.ID)
		}
	}
	if c.att != nil {
		s.Phase, s.Ballot = c.att.phase.String(), c.att.ballot
	}
	return s
}
