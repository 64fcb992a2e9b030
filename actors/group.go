package actors

import (
	"context"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors/actorspb"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/failure"
)

// GroupConfig configures a Group.
type GroupConfig struct {
	// Name is the group actor's name in its system (unique in it).
	Name string
	// Peers are the actors the group calls, by peer index. An entry left
	// nil is filled by that peer's PeerHello (a process that starts on its
	// own); Ready waits until every entry is known.
	Peers []*actor.PID
	// Protocol is the version a PeerHello must carry.
	Protocol uint32
	// CallTimeout bounds a call: a peer that has not answered by then is
	// reported as silent (a hung process sends no reset). Default 10 min.
	CallTimeout time.Duration
	// PeerName names peer p in errors and logs (default "peer p"): a
	// trainer's "rank 3", an elastic leader's "member n2".
	PeerName func(p int) string
}

// Group calls a fixed set of peer actors together: Call sends one request
// to each and returns every reply, or the first failure: a peer's own
// (its reply's Failed), a peer lost (its actor terminated, its process
// exited: Lost), a silent peer (CallTimeout), or a cancelled call. After a
// peer is lost every call fails at once: the group belongs to one world.
//
// Call, Ready, Lost and Close may be called from any goroutine; calls run
// one at a time.
type Group struct {
	sys     *System
	pid     *actor.PID
	timeout time.Duration
}

// NewGroup spawns the group's actor, which watches every known peer.
func NewGroup(sys *System, cfg GroupConfig) (*Group, error) {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Minute
	}
	if len(cfg.Peers) == 0 || cfg.Name == "" {
		return nil, fmt.Errorf("%w: a group needs a name and at least one peer", ErrBadConfig)
	}
	if cfg.PeerName == nil {
		cfg.PeerName = func(p int) string { return fmt.Sprintf("peer %d", p) }
	}
	a := &groupActor{cfg: cfg, log: sys.Logger(), peers: append([]*actor.PID(nil), cfg.Peers...), lost: map[int]string{}}
	pid, err := sys.Root().SpawnNamed(Props(func() actor.Actor { return a }), cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("actors: spawning group %s: %w", cfg.Name, err)
	}
	return &Group{sys: sys, pid: pid, timeout: cfg.CallTimeout}, nil
}

// PID is the group's actor (where a PeerHello goes).
func (g *Group) PID() *actor.PID { return g.pid }

// Call sends msgs[p] to peer p (nil entries skip the peer) and returns the
// replies by peer. Cancelling ctx fails the call at once; the requests
// already sent still run on the peers (a caller that must stop them
// aborts them its own way).
func (g *Group) Call(ctx context.Context, msgs []any) ([]any, error) {
	return g.CallWithin(ctx, msgs, 0)
}

// CallWithin is Call for requests that the peers finish together (the
// ranks of one synchronous step): once one peer answered, a peer that has
// not answered lag later fails the call as silent, naming it (a hung
// process sends no reset and would hold the call for CallTimeout). Lag 0
// is Call.
func (g *Group) CallWithin(ctx context.Context, msgs []any, lag time.Duration) ([]any, error) {
	res, err := g.ask(ctx, &groupCall{msgs: msgs, lag: lag})
	if err != nil {
		return nil, err
	}
	r := res.(*groupResult)
	return r.replies, r.err
}

// Ready waits until every peer is known (their PeerHello arrived).
func (g *Group) Ready(ctx context.Context) error {
	res, err := g.ask(ctx, &groupReady{})
	if err != nil {
		return err
	}
	return res.(*groupResult).err
}

// ask sends msg to the group actor and waits for its answer, a little
// longer than the actor's own call timeout so that it reports first.
func (g *Group) ask(ctx context.Context, msg any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCanceled, err)
	}
	f := g.sys.Root().RequestFuture(g.pid, msg, g.timeout+30*time.Second)
	stop := context.AfterFunc(ctx, func() {
		g.sys.Root().Send(g.pid, &groupCancel{reason: context.Cause(ctx).Error()})
	})
	defer stop()
	res, err := f.Result()
	if err != nil {
		return nil, fmt.Errorf("%w: group %s: %v", ErrPeerSilent, g.pid.Id, err)
	}
	return res, nil
}

// Lost reports that peer p is gone (its launcher saw its process exit):
// the call in flight and every later one fail.
func (g *Group) Lost(p int, cause string) {
	g.sys.Root().Send(g.pid, &groupLost{peer: p, cause: cause})
}

// Close stops the group's actor; a call in flight fails at once.
func (g *Group) Close() { _ = g.sys.Root().StopFuture(g.pid).Wait() }

type (
	groupCall struct {
		msgs []any
		lag  time.Duration
	}
	// groupLag says that call seq's lag passed.
	groupLag    struct{ seq uint64 }
	groupReady  struct{}
	groupCancel struct{ reason string }
	groupLost   struct {
		peer  int
		cause string
	}
	groupResult struct {
		replies []any
		err     error
	}
)

// groupActor is the Group's shell: it sends the requests, feeds the
// replies and failure signals to the call's gather core, and answers the
// caller when the core is done.
type groupActor struct {
	broken error // set by a panic: every call fails with it
	cfg    GroupConfig
	log    *zap.Logger
	peers  []*actor.PID
	lost   map[int]string
	call   *gather
	caller *actor.PID
	seq    uint64 // numbers calls, so that a late reply to an ended one is dropped
	// lag bounds the wait after a call's first reply (0: none); lagTimer
	// runs once it started, and is stopped when the call ends.
	lag      time.Duration
	lagTimer *time.Timer
	ready    []*actor.PID
}

func (a *groupActor) Receive(c actor.Context) {
	defer a.recoverPanic(c, true)
	switch m := c.Message().(type) {
	case *actor.Started:
		for _, p := range a.peers {
			if p != nil {
				c.Watch(p)
			}
		}
	case *actorspb.PeerHello:
		a.hello(c, m)
	case *groupReady:
		if err := a.refuse(false); err != nil || a.known() {
			c.Respond(&groupResult{err: err})
			return
		}
		a.ready = append(a.ready, c.Sender())
	case *groupCall:
		a.start(c, m)
	case *groupCancel:
		if a.call != nil {
			a.call.fail(fmt.Errorf("%w: %s", ErrCanceled, m.reason))
			a.answerIfDone(c)
		}
	case *actor.Stopping:
		// A caller must not wait for a group that is gone.
		if a.call != nil {
			a.call.fail(fmt.Errorf("%w: group %s stopped", ErrCanceled, a.cfg.Name))
			a.answerIfDone(c)
		}
		for _, w := range a.ready {
			c.Send(w, &groupResult{err: fmt.Errorf("%w: group %s stopped", ErrCanceled, a.cfg.Name)})
		}
		a.ready = nil
	case *actor.Terminated:
		for p, pid := range a.peers {
			if pid != nil && pid.Equal(m.Who) {
				a.lose(c, p, fmt.Sprintf("its actor %s stopped", m.Who.Id))
			}
		}
	case *groupLost:
		a.lose(c, m.peer, m.cause)
	case *groupLag:
		if a.call != nil && m.seq == a.seq && !a.call.done() {
			a.call.fail(fmt.Errorf("%w: %s did not answer within %v of %s (a hung process sends no reset)",
				ErrPeerSilent, a.call.silent(a.cfg.PeerName), a.lag, a.call.first(a.cfg.PeerName)))
			a.answerIfDone(c)
		}
	}
}

// start sends a call's requests, or refuses the call.
func (a *groupActor) start(c actor.Context, m *groupCall) {
	if err := a.refuse(true); err != nil {
		c.Respond(&groupResult{err: err})
		return
	}
	if len(m.msgs) != len(a.peers) {
		c.Respond(&groupResult{err: fmt.Errorf("%w: %d requests for %d peers", ErrBadConfig, len(m.msgs), len(a.peers))})
		return
	}
	a.seq++
	a.call, a.caller, a.lag = newGather(m.msgs), c.Sender(), m.lag
	for p, msg := range m.msgs {
		if msg != nil {
			a.request(c, a.seq, p, msg)
		}
	}
	a.answerIfDone(c)
}

// request sends msg to peer p as part of call seq; the answer comes back
// through the actor's mailbox, and one to a call that already ended (it
// failed, or was cancelled) is dropped.
func (a *groupActor) request(c actor.Context, seq uint64, p int, msg any) {
	f := c.RequestFuture(a.peers[p], msg, a.cfg.CallTimeout)
	c.ReenterAfter(f, func(res any, err error) {
		defer a.recoverPanic(c, false)
		if a.call == nil || seq != a.seq {
			return
		}
		r, ok := res.(Reply)
		switch {
		case err != nil:
			a.call.fail(fmt.Errorf("%w: %s did not answer within %v (silent: %s): %v",
				ErrPeerSilent, a.cfg.PeerName(p), a.cfg.CallTimeout, a.call.silent(a.cfg.PeerName), err))
		case !ok || int(r.GetPeer()) != p:
			a.call.fail(fmt.Errorf("%w: %s answered %T", ErrWire, a.cfg.PeerName(p), res))
		default:
			a.call.reply(r, a.cfg.PeerName)
			if a.lag > 0 && a.call.answered == 1 && !a.call.done() {
				self, root := c.Self(), c.ActorSystem().Root
				a.lagTimer = time.AfterFunc(a.lag, func() { root.Send(self, &groupLag{seq: seq}) })
			}
		}
		a.answerIfDone(c)
	})
}

// recoverPanic turns a panic into a broken group: the call in flight and
// every later one fail with it, naming the group, instead of an actor
// restarted without the call it was serving (its caller would wait for
// the call timeout). direct: the panic came from Receive, not from a
// reply's continuation.
func (a *groupActor) recoverPanic(c actor.Context, direct bool) {
	p := recover()
	if p == nil {
		return
	}
	a.broken = failure.Panicked("group "+a.cfg.Name, p)
	a.log.Error("group actor panicked", zap.String("group", a.cfg.Name), zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
	if a.call != nil {
		a.call.fail(a.broken)
		a.answerIfDone(c)
	}
	if _, ok := c.Message().(*groupCall); ok && direct && a.caller == nil && c.Sender() != nil {
		c.Respond(&groupResult{err: a.broken}) // the call never started
	}
}

// refuse says why a call (or, with call unset, Ready) cannot start now.
func (a *groupActor) refuse(call bool) error {
	switch {
	case a.broken != nil:
		return a.broken
	case len(a.lost) > 0:
		return a.lostErr()
	case call && a.call != nil:
		return fmt.Errorf("%w: a call is in flight", ErrBadConfig)
	case call && !a.known():
		return fmt.Errorf("%w: not every peer has said hello", ErrBadConfig)
	}
	return nil
}

func (a *groupActor) known() bool {
	for _, p := range a.peers {
		if p == nil {
			return false
		}
	}
	return true
}

// answerIfDone answers the caller once the call's core is done.
func (a *groupActor) answerIfDone(c actor.Context) {
	if a.call == nil || !a.call.done() {
		return
	}
	c.Send(a.caller, &groupResult{replies: a.call.replies, err: a.call.err})
	a.call, a.caller = nil, nil
	if a.lagTimer != nil {
		a.lagTimer.Stop()
		a.lagTimer = nil
	}
}

// hello registers a peer that started on its own.
func (a *groupActor) hello(c actor.Context, m *actorspb.PeerHello) {
	p := int(m.Peer)
	if m.Protocol != a.cfg.Protocol || p >= len(a.peers) || a.peers[p] != nil || m.Address == "" || m.Actor == "" {
		a.log.Warn("refused a peer's hello", zap.String("group", a.cfg.Name), zap.Uint32("peer", m.Peer),
			zap.String("address", m.Address), zap.Uint32("protocol", m.Protocol), zap.Uint32("want_protocol", a.cfg.Protocol))
		return
	}
	pid := actor.NewPID(m.Address, m.Actor)
	a.peers[p] = pid
	c.Watch(pid)
	a.log.Info("peer ready", zap.String("group", a.cfg.Name), zap.String("peer", a.cfg.PeerName(p)), zap.String("address", m.Address))
	if a.known() {
		for _, w := range a.ready {
			c.Send(w, &groupResult{})
		}
		a.ready = nil
	}
}

// lose records a lost peer and fails whatever waits.
func (a *groupActor) lose(c actor.Context, p int, cause string) {
	if _, dup := a.lost[p]; dup {
		return
	}
	a.lost[p] = cause
	a.log.Warn("peer lost", zap.String("group", a.cfg.Name), zap.String("peer", a.cfg.PeerName(p)), zap.String("cause", cause))
	if a.call != nil {
		a.call.fail(a.lostErr())
		a.answerIfDone(c)
	}
	for _, w := range a.ready {
		c.Send(w, &groupResult{err: a.lostErr()})
	}
	a.ready = nil
}

func (a *groupActor) lostErr() error {
	ps := make([]int, 0, len(a.lost))
	for p := range a.lost {
		ps = append(ps, p)
	}
	sort.Ints(ps)
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s (%s)", a.cfg.PeerName(p), a.lost[p])
	}
	return fmt.Errorf("%w: %s", collective.ErrPeerLost, strings.Join(parts, ", "))
}
