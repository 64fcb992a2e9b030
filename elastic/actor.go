package elastic

import (
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-ml/troupe/elastic/elasticpb"
	"github.com/troupe-ml/troupe/failure"
)

// Messages from the Node to its membership actor.
type (
	tickMsg    struct{}
	startMsg   struct{}
	releaseMsg struct{}
	leaveMsg   struct{}
	requestMsg struct{ reason string }
)

// memberActor is the shell around one node's rendezvous core: its mailbox
// serialises memberlist's events, peers' envelopes, the trainer's
// Hold/Release/Request and clock ticks; after each it performs what the
// core asked for (sends, events).
type memberActor struct {
	n    *Node
	core *Core
	// addrs: where each member's actor system is (from its metadata, or
	// the envelope it sent).
	addrs      map[string]string
	members    map[string]Member // live, accepted members (self excluded)
	refused    map[string]bool   // logged once per member ID
	badSenders map[string]bool   // logged once per sender address
	// leavers: members that announced they leave (a notice or their
	// metadata); they answer as acceptors until memberlist sees them go,
	// which is then a leave, not a failure.
	leavers map[string]bool
	held    bool
	// since is the first change this node saw since the last commit: the
	// start of the transition.
	since     time.Time
	lastState Message
}

func (a *memberActor) Receive(ctx actor.Context) {
	now := time.Now()
	if _, ok := ctx.Message().(*actor.Stopped); ok {
		close(a.n.actorDone)
		return
	}
	if a.n.Err() != nil {
		return // crashed: the core's state cannot be trusted; the node stops
	}
	rd := a.step(now, ctx.Message())
	for _, m := range rd.Messages {
		a.send(ctx, m)
	}
	for _, e := range rd.Events {
		a.event(now, e)
	}
	if st := a.core.State(); st.Slot != a.lastState.Slot || st.Accepted != a.lastState.Accepted || a.n.pushState.Load() == nil {
		a.lastState = st
		a.n.publishState(st)
	}
	if _, ok := ctx.Message().(*learnMsg); ok {
		ctx.Respond(learnedMsg{})
	}
}

// step hands one input to the core under the node's lock, so that Hold
// sees either the proposal (and refuses) or defers its acknowledgement.
func (a *memberActor) step(now time.Time, msg any) (rd Ready) {
	n := a.n
	n.mu.Lock()
	defer n.mu.Unlock()
	defer func() {
		// A core that panicked may be half updated: it takes nothing
		// more, and the node reports the crash (Failed) so that its owner
		// stops it; its peers then see it go. A restarted actor would
		// have forgotten the rendezvous.
		if p := recover(); p != nil {
			n.logger.Error("elastic: membership actor panicked", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			n.crash(fmt.Errorf("%w: %w", ErrCrashed, failure.Panicked("the membership actor", p)))
			rd = Ready{}
		}
	}()
	if n.held != a.held {
		a.held = n.held
		if a.held {
			a.core.Hold()
		} else {
			a.core.Release()
		}
	}
	switch msg := msg.(type) {
	case *mlEvent:
		a.onMember(now, msg)
	case *refusedMsg:
		a.onRefused(now, msg.id, msg.addr, msg.err)
	case *leaveNoticeMsg:
		// A member of this node's view says it leaves: a leave, even if
		// memberlist's leave broadcast overtakes its "leaving" metadata.
		if msg.id != n.self.ID {
			a.leaving(msg.id)
		}
	case *elasticpb.Envelope:
		a.onEnvelope(msg)
	case *stateMsg:
		var env elasticpb.Envelope
		if err := proto.Unmarshal(msg.buf, &env); err == nil {
			a.onEnvelope(&env)
		}
	case tickMsg:
		a.core.Tick()
	case startMsg:
		a.core.Start()
	case leaveMsg:
		a.core.Leave()
	case *requestMsg:
		a.mark(now)
		a.core.Request(msg.reason)
	case *learnMsg:
		a.core.Learn(msg.w)
	}
	rd = a.core.Ready()
	for _, e := range rd.Events {
		switch e.Kind {
		case EventProposed:
			n.pending = true
		case EventCommitted:
			n.pending = false
		}
	}
	return rd
}

func (a *memberActor) mark(now time.Time) {
	if a.since.IsZero() {
		a.since = now
	}
}

func (a *memberActor) onMember(now time.Time, e *mlEvent) {
	id := e.node.Name
	if id == a.n.self.ID {
		return
	}
	switch e.kind {
	case mlJoin, mlUpdate:
		m, leaving, err := decodeMeta(id, e.node.Meta, a.n.protocol)
		if err != nil {
			a.onRefused(now, id, e.node.Address(), err)
			return
		}
		_, known := a.members[id]
		a.members[id], a.addrs[id] = m, m.ActorAddr
		if down := a.n.failed.take(e.node.Address()); !known && !down.IsZero() {
			// Back after it was found failing (a partition, a hang): a
			// connection to it that stayed open (no reset crossed the
			// cut) would carry the next world's proposal only at TCP's
			// retransmission backoff, seconds later, even when this node
			// noticed the failure only just now; the next message dials
			// anew. (Dropped here and not when it failed: a false alarm's
			// connection still works, and may carry a reply the leader
			// waits for.)
			a.n.sys.DropPeer(m.ActorAddr)
		}
		a.publishMembers()
		a.core.MemberUp(m)
		if leaving {
			a.leaving(id)
		}
		if !known {
			a.n.hadPeers.Store(true)
			a.mark(now)
			a.n.logger.Info("elastic: member joined", zap.String("id", id), zap.String("gossip", e.node.Address()))
			a.n.events.push(Event{Kind: EventJoined, Member: m, Time: now})
		}
	case mlLeave:
		// memberlist does not say here whether the node left or died
		// (Node.State is not set): a node that leaves announces it first
		// (a notice, and its metadata).
		a.down(now, id, e.node.Address(), a.leavers[id])
	}
}

// leaving: member id announced that it leaves. It stays a member (an
// acceptor the quorum may need) until memberlist sees it go.
func (a *memberActor) leaving(id string) {
	if _, ok := a.members[id]; !ok || a.leavers[id] {
		return
	}
	a.leavers[id] = true
	a.n.logger.Info("elastic: member leaves", zap.String("id", id))
	a.core.MemberLeaving(id)
}

// down: member id left (announced) or failed.
func (a *memberActor) down(now time.Time, id, gossip string, left bool) {
	m, ok := a.members[id]
	if !ok {
		return
	}
	delete(a.members, id)
	delete(a.leavers, id)
	a.publishMembers()
	ev := Event{Kind: EventFailed, Member: m, Time: now}
	if left {
		ev.Kind = EventLeft
	} else {
		a.n.failed.set(gossip, now)
		if t := a.n.acks.take(id); !t.IsZero() {
			ev.Silence = now.Sub(t)
		}
	}
	a.mark(now)
	a.n.logger.Info("elastic: member "+ev.Kind.String(), zap.String("id", id), zap.Duration("silence", ev.Silence))
	a.core.MemberDown(id, left)
	a.n.events.push(ev)
}

func (a *memberActor) onRefused(now time.Time, id, addr string, err error) {
	if a.refused[id] {
		return
	}
	a.refused[id] = true
	a.n.logger.Warn("elastic: refused a node", zap.String("id", id), zap.String("gossip", addr), zap.Error(err))
	a.n.events.push(Event{Kind: EventRefused, Member: Member{ID: id}, Reason: err.Error(), Time: now})
}

func (a *memberActor) publishMembers() {
	ms := make([]Member, 0, len(a.members)+1)
	ms = append(ms, a.n.self)
	for _, m := range a.members {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, compareMembers)
	a.n.members.Store(&ms)
}

func (a *memberActor) onEnvelope(env *elasticpb.Envelope) {
	m, err := open(a.n.key, a.n.protocol, env)
	if err != nil {
		if !a.badSenders[env.SenderAddr] {
			a.badSenders[env.SenderAddr] = true
			a.n.logger.Warn("elastic: dropping a rendezvous message", zap.String("sender", env.SenderAddr), zap.Error(err))
		}
		return
	}
	if m.Type == MsgState {
		m.To = a.n.self.ID
	}
	if m.To != a.n.self.ID || a.n.drop != nil && a.n.drop(m) {
		return
	}
	if env.SenderAddr != "" {
		a.addrs[m.From] = env.SenderAddr
	}
	a.core.Step(m)
}

func (a *memberActor) send(ctx actor.Context, m Message) {
	addr, ok := a.addrs[m.To]
	if !ok {
		a.n.logger.Debug("elastic: no address for a rendezvous message", zap.Stringer("message", m))
		return
	}
	env, err := seal(a.n.key, a.n.protocol, a.n.self.ActorAddr, m)
	if err != nil {
		a.n.logger.Error("elastic: encoding a rendezvous message", zap.Stringer("message", m), zap.Error(err))
		return
	}
	ctx.Send(actor.NewPID(addr, actorName(m.To)), env)
}

// event logs a core event and hands it to the trainer.
func (a *memberActor) event(now time.Time, e Event) {
	e.Time = now
	log := a.n.logger
	switch e.Kind {
	case EventProposed:
		a.mark(now)
		log.Info("elastic: new world proposed", zap.Uint64("generation", e.World.Gen), zap.Strings("members", names(e.World)),
			zap.String("reason", e.World.Reason))
	case EventCommitted:
		if !a.since.IsZero() {
			e.Rendezvous = now.Sub(a.since)
		}
		a.since = time.Time{}
		log.Info("elastic: world committed", zap.Uint64("generation", e.World.Gen), zap.Strings("members", names(e.World)),
			zap.Int("rank", e.World.Rank(a.n.self.ID)), zap.String("reason", e.World.Reason),
			zap.String("proposer", e.World.Proposer), zap.Duration("rendezvous", e.Rendezvous))
		a.n.publishWorld(e.World)
	case EventWaiting:
		log.Warn("elastic: waiting", zap.String("reason", e.Reason))
	case EventConflict:
		log.Error("elastic: conflicting worlds", zap.String("reason", e.Reason))
	}
	a.n.events.push(e)
}

// names lists a world's members by node name.
func names(w World) []string {
	out := make([]string, len(w.Members))
	for i, m := range w.Members {
		out[i] = m.Name
	}
	return out
}
