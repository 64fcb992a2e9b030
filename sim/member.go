package sim

import (
	"fmt"
	"slices"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/internal/simbug"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// member is a node's worker: it holds one part of a replica of the model
// (the whole model without pipeline stages or tensor-parallel shards),
// answers the leader's calls, runs steps and reduces their gradients with
// the collective core over its part's data-parallel group.
type member struct {
	n    *node
	hold worker.Holding
	// params and moment are the part's training state; undo* the state
	// from before the last step (worker.Spec.KeepUndo).
	params, moment         []float32
	undoParams, undoMoment []float32
	// builtPart is the part params was built or loaded for (−1: none).
	builtPart int
	// history lists the steps the state includes; a
	// roll back drops the last one, a transfer copies the root's.
	history []applied

	// The generation the worker is formed in.
	gen   uint64
	mesh  mesh.Mesh
	rank  int
	ranks []string // node ID of each rank
	// coll reduces gradients over the part's data-parallel group (ranks
	// by replica: mesh.PartRank).
	coll *collective.Core
	// waitState: a non-root rank waits for its root's state before it
	// answers the form call (call, i: the call to answer).
	waitState *callMsg
	waitFrom  string
	waitHold  worker.Holding
	waitRoot  int // the rank whose state it waits for
	// early is a root's state that arrived before this worker's form
	// (the collective core holds early messages alike).
	early *stateMsg
	// answered is the last call number answered, by leader.
	answered map[string]uint64
	// jobStep is the job's last step this worker heard of (its forms; the
	// agents' workers also hear every step reported).
	jobStep uint64
	// run is the step in flight.
	run *running
}

// applied is a step a replica's state includes.
type applied struct {
	step   int
	cursor uint64
	// ranks is the generation's size (the batch's split), loss the step's
	// loss, checksum the state after the update.
	ranks    int
	loss     float32
	checksum uint64
}

type running struct {
	step    runStep
	leader  string
	buf     []float32 // gradient, then the step's loss, reduced together
	op      collective.OpID
	started bool
}

func newMember(n *node) member {
	return member{n: n, hold: worker.NoHolding, builtPart: -1, rank: -1, answered: map[string]uint64{}}
}

func (w *member) rankOf(id string) int { return slices.Index(w.ranks, id) }

// call answers the leader's call.
func (w *member) call(from string, c callMsg) {
	s := w.n.s
	reply := func(body any, err error) {
		s.send(w.n.id, from, replyMsg{call: c.call, i: c.i, body: body, err: err})
	}
	if c.world.Gen > w.n.core.Committed().Gen {
		// The call proves its generation committed, although this node
		// may have lost the commit (and its proposer since).
		s.tracef("%s learns generation %d from %s's call", w.n.id, c.world.Gen, from)
		w.n.core.Learn(c.world)
		w.n.flush()
	}
	if c.call <= w.answered[from] {
		// A duplicate, or one delayed past a later call: the first answer
		// stands (a lost one times out). The actor transport delivers a
		// leader's calls once and in order; the simulated network does
		// not.
		return
	}
	w.answered[from] = c.call
	if c.gen < w.gen {
		// A leader of a superseded generation (it hung through the next
		// one): what this worker holds belongs to a newer generation, and
		// while it waits for a root's state it holds nothing. The worker
		// actor answers such a call only after its form in flight ends;
		// here it is refused as stale, which the leader takes as a
		// transient failure.
		reply(nil, failure.Wrapf(failure.Stale, "%s is formed in generation %d, called for generation %d", w.n.id, w.gen, c.gen))
		return
	}
	switch m := c.msg.(type) {
	case *workerpb.StatusRequest:
		st := &workerpb.Status{Peer: m.Peer, Name: w.n.name, HeldPart: int32(w.hold.Part), Applied: uint64(w.hold.Applied),
			Cursor: uint64(w.hold.Cursor), CanRollBack: w.hold.Undo, World0: uint32(w.hold.World0), Rank: int32(w.rank),
			JobStep: max(w.jobStep, uint64(w.hold.Applied))}
		if m.Checksum {
			st.Checksum = w.checksum()
		}
		reply(st, nil)
	case *workerpb.Form:
		w.jobStep = max(w.jobStep, m.Step)
		body, wait, err := w.form(m, from, c)
		if !wait {
			reply(body, err)
		}
	case *workerpb.Finish:
		reply(finishAck{}, nil)
		w.n.finish(m.Failure.Err())
	default:
		reply(nil, failure.Wrapf(failure.Internal, "unknown call %T", c.msg))
	}
}

func (w *member) checksum() uint64 {
	if w.hold.Part < 0 {
		return 0
	}
	return worker.Checksum(w.params)
}

// form places the worker in a generation: worker.Worker.Form's plan,
// carried out on the replica. wait: the answer comes once the root's state
// arrived.
func (w *member) form(m *workerpb.Form, leader string, c callMsg) (body any, wait bool, err error) {
	w.leave()
	f := worker.Form{Generation: m.Generation, Mesh: mesh.Mesh{DP: int(m.Dp), PP: max(1, int(m.Pp)), TP: max(1, int(m.Tp))}, Rank: int(m.Rank),
		Step: int(m.Step), Cursor: data.Cursor(m.Cursor), RollBack: m.RollBack, World0: int(m.World0),
		Source: worker.Source{Kind: worker.SourceKind(m.Source), Step: int(m.CheckpointStep)}}
	for _, r := range m.Roots {
		f.Source.Roots = append(f.Source.Roots, int(r))
	}
	plan, err := w.hold.Plan(f, w.builtPart)
	if err != nil {
		return nil, false, err
	}
	if plan.RollBack {
		copy(w.params, w.undoParams)
		copy(w.moment, w.undoMoment)
		w.history = w.history[:len(w.history)-1]
	}
	if plan.Drop {
		w.history = nil
	}
	if f.Standby() {
		w.hold = plan.Next
		return &workerpb.Formed{Peer: m.Peer}, false, nil
	}
	if plan.Build >= 0 {
		w.params, w.history = w.n.s.initPart(plan.Build), nil
		w.moment, w.builtPart = make([]float32, len(w.params)), plan.Build
	}
	if plan.Restore > 0 {
		if err := w.restore(plan.Restore, plan.Next.Part); err != nil {
			w.hold = worker.NoHolding
			return nil, false, failure.Wrapf(failure.Checkpoint, "restoring checkpoint step %d: %v", plan.Restore, err)
		}
	}
	w.gen, w.mesh, w.rank, w.ranks = m.Generation, f.Mesh, int(m.Rank), slices.Clone(m.Addrs)
	w.hold = plan.Next
	if f.Mesh.DP > 1 {
		cfg := collective.DefaultConfig()
		cfg.Timeout = collTimeout
		core, err := collective.NewCore(cfg, uint32(m.Generation), f.Mesh.Coord(w.rank).DP, f.Mesh.DP, nil)
		if err != nil {
			return nil, false, err
		}
		w.coll = core
	}
	if plan.Root >= 0 && plan.Root != w.rank {
		w.hold.Part = -1 // until the root's state arrives
		w.waitState, w.waitFrom, w.waitHold, w.waitRoot = &c, leader, plan.Next, plan.Root
		if e := w.early; e != nil && e.gen == w.gen {
			w.state(*e)
		}
		return nil, true, nil
	}
	if plan.Root == w.rank {
		// broadcastState: to the ranks of its slot (its part's replicas)
		// whose root it is.
		for r, id := range w.ranks {
			if r != w.rank && (f.Source.Roots[f.Mesh.Part(r)] == w.rank || simbug.AnyRoot) {
				w.n.s.send(w.n.id, id, stateMsg{gen: w.gen, from: w.rank, params: slices.Clone(w.params), moment: slices.Clone(w.moment), history: slices.Clone(w.history)})
			}
		}
	}
	return &workerpb.Formed{Peer: m.Peer, Checksum: w.checksum()}, false, nil
}

// state takes the root's state (broadcastState).
func (w *member) state(m stateMsg) {
	c := w.waitState
	if c == nil || m.gen != w.gen {
		if m.gen > w.gen {
			w.early = &m
		}
		return
	}
	if m.from != w.waitRoot && !simbug.AnyRoot {
		return // not its root: another part's state
	}
	w.waitState, w.early = nil, nil
	w.hold = w.waitHold
	w.params, w.moment, w.builtPart = slices.Clone(m.params), slices.Clone(m.moment), w.hold.Part
	w.history = slices.Clone(m.history)
	w.n.s.send(w.n.id, w.waitFrom, replyMsg{call: c.call, i: c.i, body: &workerpb.Formed{Checksum: w.checksum()}})
}

// leave drops the worker's place in its generation.
func (w *member) leave() {
	w.abort("the worker is formed again")
	w.gen, w.rank, w.ranks, w.coll, w.waitState = 0, -1, nil, nil, nil
}

// runStep computes the rank's gradient, then reduces it with the others'.
func (w *member) runStep(leader string, m runStep) {
	s := w.n.s
	if w.run != nil {
		return // a duplicate
	}
	if m.gen != w.gen || w.rank < 0 || w.hold.Part < 0 || w.hold.Applied != m.step {
		s.send(w.n.id, leader, stepDone{gen: m.gen, step: m.step, rank: w.rank,
			err: failure.Wrapf(failure.Stale, "%s holds step %d of generation %d, asked for step %d of generation %d", w.n.id, w.hold.Applied, w.gen, m.step, m.gen)})
		return
	}
	r := &running{step: m, leader: leader}
	if s.cfg.parts() == 1 {
		r.buf = make([]float32, nParams+1)
		samples := s.sampler.Shard(data.Cursor(m.cursor), m.batch, len(w.ranks), w.rank, nil)
		r.buf[nParams] = s.data.gradient(w.params, samples, 1/float32(m.batch), r.buf[:nParams])
	} else {
		g, err := s.replicaGradient(w, m)
		if err != nil {
			s.send(w.n.id, leader, stepDone{gen: m.gen, step: m.step, rank: w.rank, err: err})
			return
		}
		// The part's gradient, then the replica's loss, reduced together.
		r.buf = append(gather(g[:nParams], s.partIdx[w.hold.Part]), g[nParams])
	}
	w.run = r
	// The forward and backward take stepTime; then the all-reduce starts.
	s.clk.after(stepTime, func() {
		s.atNode(w.n, func() {
			if w.run != r {
				return
			}
			if w.coll == nil {
				w.finishStep(nil)
				return
			}
			id, err := w.coll.Start(s.clk.time(), collective.Spec{Kind: collective.KindAllReduce, Buf: r.buf, Reduce: collective.Sum})
			r.op, r.started = id, true
			if err != nil {
				w.finishStep(err)
				return
			}
			w.flushColl()
		})
	})
}

// finishStep applies the step's update once its all-reduce completed on
// this rank, or reports why it failed.
func (w *member) finishStep(err error) {
	r := w.run
	w.run = nil
	s := w.n.s
	if err == nil {
		w.undoParams, w.undoMoment = slices.Clone(w.params), slices.Clone(w.moment)
		sgd(w.params, w.moment, r.buf[:len(w.params)])
		w.hold.Undo, w.hold.UndoCursor = true, w.hold.Cursor
		w.hold.Applied++
		w.hold.Cursor = data.Cursor(r.step.cursor + uint64(r.step.batch))
		a := applied{step: r.step.step, cursor: r.step.cursor, ranks: w.mesh.DP, loss: r.buf[len(w.params)], checksum: w.checksum()}
		w.history = append(w.history, a)
		s.check.applied(w, a)
	}
	s.send(w.n.id, r.leader, stepDone{gen: r.step.gen, step: r.step.step, rank: w.rank, err: err})
}

// abort abandons the step in flight (a new world is proposed or
// committed): its all-reduce fails on every rank.
func (w *member) abort(why string) {
	r := w.run
	if r == nil {
		return
	}
	if !r.started || w.coll == nil {
		w.run = nil
		w.n.s.send(w.n.id, r.leader, stepDone{gen: r.step.gen, step: r.step.step, rank: w.rank, err: failure.Wrapf(failure.Aborted, "%s", why)})
		return
	}
	w.coll.Cancel(w.n.s.clk.time(), r.op, failure.Wrapf(failure.Aborted, "%s", why))
	w.flushColl()
}

func (w *member) peerLost(rank int, id string) {
	if w.coll != nil && rank != w.rank && w.mesh.Part(rank) == w.mesh.Part(w.rank) {
		w.coll.PeerLost(w.n.s.clk.time(), w.mesh.Coord(rank).DP, failure.Wrapf(failure.PeerLost, "member %s failed", id))
		w.flushColl()
	}
}

func (w *member) collective(m collMsg) {
	if w.coll == nil || m.gen != w.gen {
		return
	}
	w.coll.Step(w.n.s.clk.time(), m.m)
	w.flushColl()
}

func (w *member) tick() {
	if w.coll != nil {
		w.coll.Tick(w.n.s.clk.time())
		w.flushColl()
	}
}

// flushColl sends the collective core's messages (their payloads copied:
// they alias the operation's buffer) and takes its completions.
func (w *member) flushColl() {
	rd := w.coll.Ready()
	for _, m := range rd.Messages {
		m.Payload = slices.Clone(m.Payload)
		w.n.s.send(w.n.id, w.ranks[w.mesh.PartRank(w.mesh.Part(w.rank), m.To)], collMsg{gen: w.gen, m: m})
	}
	for _, c := range rd.Completions {
		if r := w.run; r != nil && r.started && c.ID == r.op {
			w.finishStep(c.Err)
		}
	}
}

func (w *member) String() string {
	return fmt.Sprintf("%s rank %d gen %d step %d", w.n.id, w.rank, w.gen, w.hold.Applied)
}

// replicaGradient is the gradient and loss (the last value) of replica
// m's step on its data-parallel shard of the batch, for a rank of a model
// cut into parts: the replica's forward and backward run once, centrally,
// on the parts its ranks hold (the activations between them are not
// simulated), and each rank takes its part of it. It fails when a rank of
// the replica does not hold its part at the step (gone, cut off, formed
// elsewhere): the pipeline or tensor-parallel group cannot run the step.
func (s *sim) replicaGradient(w *member, m runStep) ([]float32, error) {
	dp := w.mesh.Coord(w.rank).DP
	key := gradKey{gen: m.gen, step: m.step, replica: dp}
	if g, ok := s.grads[key]; ok {
		return g, nil
	}
	full := make([]float32, nParams)
	for p := range w.mesh.Parts() {
		rank := w.mesh.PartRank(p, dp)
		id := w.ranks[rank]
		o := s.nodes[id]
		if o == nil || !o.up || !s.reach(w.n.id, id) || o.w.gen != m.gen || o.w.rank != rank || o.w.hold.Part != p ||
			o.w.hold.Applied != m.step || len(o.w.params) != len(s.partIdx[p]) {
			return nil, failure.Wrapf(failure.PeerLost, "step %d of generation %d: replica %d's part %d (rank %d, %s) is not there to run it", m.step, m.gen, dp, p, rank, id)
		}
		for i, j := range s.partIdx[p] {
			full[j] = o.w.params[i]
		}
	}
	g := make([]float32, nParams+1)
	samples := s.sampler.Shard(data.Cursor(m.cursor), m.batch, w.mesh.DP, dp, nil)
	g[nParams] = s.data.gradient(full, samples, 1/float32(m.batch), g[:nParams])
	s.grads[key] = g
	return g, nil
}

// gradKey names a replica's step in a generation.
type gradKey struct {
	gen     uint64
	step    int
	replica int
}

// initPart is part's state built from the seed.
func (s *sim) initPart(part int) []float32 {
	if s.cfg.parts() == 1 {
		return initParams()
	}
	return gather(initParams(), s.partIdx[part])
}
