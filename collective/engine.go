package collective

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Outbox is the transport side of an Engine: where its messages go.
type Outbox interface {
	// Send hands m (From and To are world ranks) to the transport. It must
	// not block for long: it is called from the shell's only goroutine.
	// m.Payload aliases the operation's buffer; the transport may read it
	// until the operation completes on this rank, or until Cancel for its
	// generation returns.
	Send(m Message)
	// Cancel is called when generation gen of group aborted, before its
	// operations resolve: the transport drops what it still queues for that
	// generation (and older ones) and returns once it reads none of their
	// payloads any more.
	Cancel(group uint32, gen uint64)
	// SharedPayloads reports whether receivers read senders' buffers in
	// place (pointer passing); see Core.SetSharedPayloads.
	SharedPayloads() bool
}

// Engine is one rank's collectives: the cores of the groups this rank
// belongs to, the handles callers wait on, and the Outbox their messages go
// to. A shell (a goroutine loop, an actor) owns it and calls every method
// from one goroutine: Submit for its communicators' requests, Deliver for
// arriving messages, PeerLost for failure signals, Tick now and then.
type Engine struct {
	cfg     Config
	rank    int
	size    int
	out     Outbox
	groups  map[uint32]*engineGroup
	early   map[uint32][]Message
	earlyN  int64
	dead    map[int]error
	closing bool
	flight  *FlightRecorder
}

type engineGroup struct {
	id      uint32
	members []int       // world rank of each group rank
	index   map[int]int // world rank → group rank
	core    *Core
	handles map[OpID]*Handle
}

// NewEngine returns the engine of world rank rank among size ranks, with
// the world group created.
func NewEngine(cfg Config, rank, size int, out Outbox) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: rank %d of %d", ErrBadArgument, rank, size)
	}
	e := &Engine{cfg: cfg, rank: rank, size: size, out: out,
		groups: map[uint32]*engineGroup{}, early: map[uint32][]Message{}, dead: map[int]error{},
		flight: NewFlightRecorder(rank, size, cfg.FlightOps)}
	members := make([]int, size)
	for i := range members {
		members[i] = i
	}
	if err := e.addGroup(time.Time{}, WorldGroup, members); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Engine) addGroup(now time.Time, id uint32, members []int) error {
	if g, ok := e.groups[id]; ok {
		if g.core.closed == nil || g.core.Busy() {
			if slices.Equal(g.members, members) {
				return fmt.Errorf("%w: group %v exists already", ErrBadArgument, members)
			}
			return fmt.Errorf("%w: group %v has the same id as group %v", ErrBadArgument, members, g.members)
		}
	}
	self := slices.Index(members, e.rank)
	core, err := NewCore(e.cfg, id, self, len(members), members)
	if err != nil {
		return err
	}
	core.SetSharedPayloads(e.out.SharedPayloads())
	g := &engineGroup{id: id, members: members, index: map[int]int{}, core: core, handles: map[OpID]*Handle{}}
	for i, w := range members {
		g.index[w] = i
	}
	e.groups[id] = g
	e.flight.group(id, members)
	for w, err := range e.dead {
		if i, ok := g.index[w]; ok {
			core.PeerLost(now, i, err)
		}
	}
	for _, m := range e.early[id] {
		e.earlyN -= heldSize(&m)
		e.deliver(now, g, m)
	}
	delete(e.early, id)
	e.flush(now, g)
	return nil
}

// Submit handles a request posted by a Communicator.
func (e *Engine) Submit(now time.Time, req *Request) {
	g := e.groups[req.group]
	switch req.typ {
	case reqOp:
		if g == nil {
			req.handle.resolve(OpID{}, fmt.Errorf("%w: group %d", ErrClosed, req.group))
			return
		}
		id, err := g.core.Start(now, req.spec)
		if err != nil {
			req.handle.resolve(id, err)
			return
		}
		g.handles[id] = req.handle
		e.flight.start(now, g.id, id, req.spec.Kind, len(req.spec.Buf))
		if p, ok := e.out.(Placer); ok {
			if l, ok := g.core.landing(id); ok {
				p.Place(g.id, id, l)
			}
		}
		if req.ctx != nil && req.ctx.Err() != nil {
			g.core.Cancel(now, id, req.ctx.Err())
		}
		e.flush(now, g)
	case reqSkip:
		if g != nil {
			g.core.Skip(now, req.cause)
			e.flush(now, g)
		}
	case reqCancel:
		if g == nil {
			return
		}
		for id, h := range g.handles {
			if h == req.handle {
				g.core.Cancel(now, id, req.cause)
				e.flush(now, g)
				return
			}
		}
	case reqGroup:
		err := error(ErrClosed)
		if !e.closing {
			err = e.addGroup(now, req.group, req.ranks)
		}
		req.reply <- err
	case reqCloseGroup:
		if g != nil && req.group != WorldGroup {
			g.core.Close(now)
			e.flush(now, g)
		}
		req.reply <- nil
	}
}

// Deliver handles a message that arrived (From and To are world ranks).
func (e *Engine) Deliver(now time.Time, m Message) {
	g := e.groups[m.Group]
	if g == nil {
		// A group this rank has not created yet: hold the message, bounded.
		size := heldSize(&m)
		if e.closing || e.earlyN+size > e.cfg.MaxEarlyBytes {
			m.release()
			return
		}
		if m.Release != nil && !m.Borrowed {
			p := slices.Clone(m.Payload)
			m.release()
			m.Payload = p
		}
		e.early[m.Group] = append(e.early[m.Group], m)
		e.earlyN += size
		return
	}
	e.deliver(now, g, m)
	e.flush(now, g)
}

func (e *Engine) deliver(now time.Time, g *engineGroup, m Message) {
	from, ok := g.index[m.From]
	if !ok {
		m.release()
		return
	}
	m.From = from
	m.To = g.core.Rank()
	g.core.Step(now, m)
}

// Tick passes the time to every group.
func (e *Engine) Tick(now time.Time) {
	for _, g := range e.groups {
		g.core.Tick(now)
		e.flush(now, g)
	}
}

// PeerLost reports that world rank peer died; cause says how it was seen.
func (e *Engine) PeerLost(now time.Time, peer int, cause error) {
	if peer == e.rank || e.dead[peer] != nil {
		return
	}
	if cause == nil {
		cause = errors.New("lost")
	}
	e.dead[peer] = cause
	for _, g := range e.groups {
		if i, ok := g.index[peer]; ok {
			g.core.PeerLost(now, i, cause)
			e.flush(now, g)
		}
	}
}

// Close fails the running operations with ErrClosed (they resolve once
// their peers acknowledged, see Busy) and every later one.
func (e *Engine) Close(now time.Time) {
	e.closing = true
	for _, g := range e.groups {
		g.core.Close(now)
		e.flush(now, g)
	}
	for id, ms := range e.early {
		for i := range ms {
			ms[i].release()
		}
		delete(e.early, id)
	}
	e.earlyN = 0
}

// Busy reports whether an operation is still running or waiting for abort
// acknowledgements: a closing shell keeps delivering until it is not.
func (e *Engine) Busy() bool {
	for _, g := range e.groups {
		if g.core.Busy() || len(g.handles) > 0 {
			return true
		}
	}
	return false
}

// Fail resolves every pending handle with err at once (the flight recorder
// marks them failed at now): the shell is stopping and will deliver
// nothing more.
func (e *Engine) Fail(now time.Time, err error) {
	placer, _ := e.out.(Placer)
	for _, g := range e.groups {
		for id, h := range g.handles {
			if placer != nil {
				placer.Unplace(g.id, id)
			}
			h.resolve(id, &OpError{ID: id, Kind: h.kind, Rank: g.core.Rank(), Err: err, Culprit: -1})
			e.flight.finish(now, g.id, id, err, -1)
			delete(g.handles, id)
		}
	}
}

// Flight is the engine's flight recorder: the last operations this rank
// entered and how far each got. It may be read from any goroutine.
func (e *Engine) Flight() *FlightRecorder { return e.flight }

// culpritOf is the world rank an operation's error blames (−1: none).
func culpritOf(err error, members []int) int {
	var oe *OpError
	if errors.As(err, &oe) && oe.Culprit >= 0 && oe.Culprit < len(members) {
		return members[oe.Culprit]
	}
	return -1
}

func (e *Engine) flush(now time.Time, g *engineGroup) {
	rd := g.core.Ready()
	for _, gen := range rd.AbortedGens {
		e.out.Cancel(g.id, gen)
	}
	for _, m := range rd.Messages {
		m.From = g.members[m.From]
		m.To = g.members[m.To]
		e.out.Send(m)
	}
	placer, _ := e.out.(Placer)
	for _, c := range rd.Completions {
		if h := g.handles[c.ID]; h != nil {
			if placer != nil {
				placer.Unplace(g.id, c.ID) // no more writes into the buffer
			}
			delete(g.handles, c.ID)
			e.flight.finish(now, g.id, c.ID, c.Err, culpritOf(c.Err, g.members))
			h.resolve(c.ID, c.Err)
		}
	}
}
