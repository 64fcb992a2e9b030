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
	// With ZeRO: zcoll runs the shard group's reduce-scatter and
	// all-gather (ranks by shard), rcoll the all-reduce of a shard over
	// the slot's replicas in the other shard groups (nil with one group).
	zcoll, rcoll *collective.Core
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
	// core is the core running op; phase the ZeRO step's operation
	// (zeroStep); full the part's gathered parameters (ZeRO-3's forward,
	// and every rank's all-gather after its shard's update).
	core  *collective.Core
	phase int
	full  []float32
	// params and moment are the rank's state after the ZeRO step's
	// update, kept once its last operation completes.
	params, moment []float32
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
			JobStep: max(w.jobStep, uint64(w.hold.Applied)), HeldZeroGroup: uint32(w.hold.ZeroGroup), HeldZeroShard: uint32(w.hold.ZeroShard)}
		if m.Checksum {
			st.Checksum, st.UndoChecksum = w.checksum(), w.undoChecksum()
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

// undoChecksum is checksum's for the state a roll back restores
// (worker.Worker.UndoChecksum); 0 without one.
func (w *member) undoChecksum() uint64 {
	if w.hold.Part < 0 || !w.hold.Undo {
		return 0
	}
	return worker.Checksum(w.undoParams)
}

// form places the worker in a generation: worker.Worker.Form's plan,
// carried out on the replica. wait: the answer comes once the root's state
// arrived.
func (w *member) form(m *workerpb.Form, leader string, c callMsg) (body any, wait bool, err error) {
	w.leave()
	f := worker.Form{Generation: m.Generation, Mesh: mesh.Mesh{DP: int(m.Dp), PP: max(1, int(m.Pp)), TP: max(1, int(m.Tp))}, Rank: int(m.Rank),
		Step: int(m.Step), Cursor: data.Cursor(m.Cursor), RollBack: m.RollBack, World0: int(m.World0),
		Source: worker.Source{Kind: worker.SourceKind(m.Source), Step: int(m.CheckpointStep)}, ZeroGroup: int(m.ZeroGroup)}
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
	if plan.Build >= 0 || plan.Next.Slot(f.ZeroGroup) != w.hold.Slot(f.ZeroGroup) && f.ZeroGroup > 0 {
		// Built from the seed; with ZeRO, a worker given another shard
		// of its part builds too (its state is then taken from the
		// slot's root or a checkpoint).
		w.params, w.moment, w.history = w.n.s.initSlot(plan.Next.Part, plan.Next.ZeroShard)
		w.builtPart = plan.Next.Part
	}
	if plan.Restore > 0 {
		if err := w.restore(plan.Restore, plan.Next.Slot(f.ZeroGroup)); err != nil {
			w.hold = worker.NoHolding
			return nil, false, failure.Wrapf(failure.Checkpoint, "restoring checkpoint step %d: %v", plan.Restore, err)
		}
	}
	w.gen, w.mesh, w.rank, w.ranks = m.Generation, f.Mesh, int(m.Rank), slices.Clone(m.Addrs)
	w.hold = plan.Next
	for grp, dst := range []**collective.Core{&w.coll, &w.zcoll, &w.rcoll} {
		if grp != groupDP && f.ZeroGroup == 0 {
			break
		}
		idx, size := w.groupPlace(grp)
		if size <= 1 {
			continue
		}
		cfg := collective.DefaultConfig()
		cfg.Timeout = collTimeout
		core, err := collective.NewCore(cfg, uint32(m.Generation), idx, size, nil)
		if err != nil {
			return nil, false, err
		}
		*dst = core
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
			if r != w.rank && (f.Source.Roots[f.Mesh.Slot(r, f.ZeroGroup)] == w.rank || simbug.AnyRoot) {
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
	w.gen, w.rank, w.ranks, w.coll, w.zcoll, w.rcoll, w.waitState = 0, -1, nil, nil, nil, nil, nil
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
	w.run = r
	if s.cfg.Zero == 3 {
		// ZeRO-3: the part's parameters are gathered from the shard
		// group before the forward.
		lo, hi := s.shardRange(w.hold.Part, w.hold.ZeroShard)
		r.full = make([]float32, len(s.partIdx[w.hold.Part]))
		copy(r.full[lo:hi], w.params)
		w.startOp(r, w.zcoll, collective.KindAllGather, r.full)
		return
	}
	w.compute(r)
}

// compute runs the step's forward and backward (they take stepTime),
// then starts its first collective.
func (w *member) compute(r *running) {
	s, m := w.n.s, r.step
	params := w.params
	if r.full != nil {
		params = r.full
	}
	if s.cfg.parts() == 1 {
		r.buf = make([]float32, nParams+1)
		samples := s.sampler.Shard(data.Cursor(m.cursor), m.batch, w.mesh.DP, w.mesh.Coord(w.rank).DP, nil)
		r.buf[nParams] = s.data.gradient(params, samples, 1/float32(m.batch), r.buf[:nParams])
	} else {
		g, err := s.replicaGradient(w, m)
		if err != nil {
			w.run = nil
			s.send(w.n.id, r.leader, stepDone{gen: m.gen, step: m.step, rank: w.rank, err: err})
			return
		}
		// The part's gradient, then the replica's loss, reduced together.
		r.buf = append(gather(g[:nParams], s.partIdx[w.hold.Part]), g[nParams])
	}
	if s.cfg.Zero >= 2 {
		// Each shard's gradient followed by the loss (so that every rank
		// of the shard group ends with the loss reduced), for the
		// reduce-scatter: chunk c of len(part)+S values is the gradient's
		// chunk c (collective.ChunkRange) and the loss.
		S, n := s.cfg.zeroGroup(), len(r.buf)-1
		buf := make([]float32, 0, n+S)
		for c := range S {
			lo, hi := collective.ChunkRange(n, S, c)
			buf = append(append(buf, r.buf[lo:hi]...), r.buf[n])
		}
		r.buf = buf
	}
	// The forward and backward take stepTime; then the reduction starts.
	s.clk.after(stepTime, func() {
		s.atNode(w.n, func() {
			if w.run != r {
				return
			}
			switch s.cfg.Zero {
			case 0, 1:
				r.phase = phaseReduce
				w.startOp(r, w.coll, collective.KindAllReduce, r.buf)
			default:
				r.phase = phaseReduceScatter
				w.startOp(r, w.zcoll, collective.KindReduceScatter, r.buf)
			}
		})
	})
}

// The operations of a step (running.phase), in order: ZeRO-3's
// all-gather of the parameters (phaseGather), the gradient's all-reduce
// (no ZeRO, ZeRO-1: phaseReduce) or reduce-scatter over the shard group
// (ZeRO-2, 3: phaseReduceScatter) then the shard's all-reduce over the
// slot's replicas (phaseSlotReduce, with more than one shard group), and
// at ZeRO-1 and 2 the all-gather of the updated parameters
// (phaseGatherUpdated).
const (
	phaseGather = iota
	phaseReduce
	phaseReduceScatter
	phaseSlotReduce
	phaseGatherUpdated
)

// startOp starts a collective of kind on core over buf (no core: a group
// of one, done at once).
func (w *member) startOp(r *running, core *collective.Core, kind collective.Kind, buf []float32) {
	if core == nil {
		w.opDone(nil)
		return
	}
	id, err := core.Start(w.n.s.clk.time(), collective.Spec{Kind: kind, Buf: buf, Reduce: collective.Sum})
	r.op, r.started, r.core = id, true, core
	if err != nil {
		w.finishStep(err)
		return
	}
	w.flushColl()
}

// opDone: the step's operation in flight completed on this rank.
func (w *member) opDone(err error) {
	r, s := w.run, w.n.s
	if err != nil {
		w.finishStep(err)
		return
	}
	r.started, r.core = false, nil
	if s.cfg.Zero == 0 {
		w.finishStep(nil)
		return
	}
	S, part, sh := s.cfg.zeroGroup(), w.hold.Part, w.hold.ZeroShard
	n := len(s.partIdx[part])
	lo, hi := s.shardRange(part, sh)
	c := collective.OwnedChunk(sh, S)
	switch r.phase {
	case phaseGather:
		w.compute(r)
	case phaseReduce:
		// ZeRO-1: the gradient is whole; the rank updates its shard.
		r.params, r.moment = slices.Clone(w.params), slices.Clone(w.moment)
		sgd(r.params[lo:hi], r.moment, r.buf[lo:hi])
		r.full = r.params
		r.phase = phaseGatherUpdated
		w.startOp(r, w.zcoll, collective.KindAllGather, r.full)
	case phaseReduceScatter, phaseSlotReduce:
		// The shard's reduced gradient and the loss: chunk c of the
		// reduce-scatter's buffer.
		own := r.buf[lo+c : hi+c+1]
		if r.phase == phaseReduceScatter && w.rcoll != nil {
			r.phase = phaseSlotReduce
			w.startOp(r, w.rcoll, collective.KindAllReduce, own)
			return
		}
		loss := own[len(own)-1]
		r.params, r.moment = slices.Clone(w.params), slices.Clone(w.moment)
		r.buf = append(make([]float32, n), loss)
		if s.cfg.Zero == 3 {
			sgd(r.params, r.moment, own[:hi-lo])
			w.finishStep(nil)
			return
		}
		sgd(r.params[lo:hi], r.moment, own[:hi-lo])
		r.full = r.params
		r.phase = phaseGatherUpdated
		w.startOp(r, w.zcoll, collective.KindAllGather, r.full)
	case phaseGatherUpdated:
		w.finishStep(nil)
	}
}

// finishStep applies the step's update once its all-reduce completed on
// this rank, or reports why it failed.
func (w *member) finishStep(err error) {
	r := w.run
	w.run = nil
	s := w.n.s
	if err == nil {
		w.undoParams, w.undoMoment = slices.Clone(w.params), slices.Clone(w.moment)
		if s.cfg.Zero == 0 {
			sgd(w.params, w.moment, r.buf[:len(w.params)])
		} else {
			// The update the ZeRO step computed, kept now that its
			// operations all completed.
			w.params, w.moment = r.params, r.moment
		}
		w.hold.Undo, w.hold.UndoCursor = true, w.hold.Cursor
		w.hold.Applied++
		w.hold.Cursor = data.Cursor(r.step.cursor + uint64(r.step.batch))
		a := applied{step: r.step.step, cursor: r.step.cursor, ranks: w.mesh.DP, loss: r.buf[len(r.buf)-1], checksum: w.stateSum()}
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
	if !r.started || r.core == nil {
		w.run = nil
		w.n.s.send(w.n.id, r.leader, stepDone{gen: r.step.gen, step: r.step.step, rank: w.rank, err: failure.Wrapf(failure.Aborted, "%s", why)})
		return
	}
	r.core.Cancel(w.n.s.clk.time(), r.op, failure.Wrapf(failure.Aborted, "%s", why))
	w.flushColl()
}

func (w *member) peerLost(rank int, id string) {
	if w.rank < 0 || rank == w.rank {
		return
	}
	for grp, core := range w.cores() {
		if i, ok := w.groupIndex(grp, rank); ok && core != nil {
			core.PeerLost(w.n.s.clk.time(), i, failure.Wrapf(failure.PeerLost, "member %s failed", id))
		}
	}
	w.flushColl()
}

// The collective groups of a rank: its part's data-parallel group (ranks
// by replica), and with ZeRO its shard group (the S replicas of its
// group, by shard) and its slot's replicas (one per shard group).
const (
	groupDP = iota
	groupShard
	groupSlot
)

func (w *member) cores() [3]*collective.Core { return [3]*collective.Core{w.coll, w.zcoll, w.rcoll} }

// groupPlace is the rank's index in group grp and the group's size.
func (w *member) groupPlace(grp int) (idx, size int) {
	S, dp := max(1, w.n.s.cfg.zeroGroup()), w.mesh.Coord(w.rank).DP
	switch grp {
	case groupShard:
		return dp % S, S
	case groupSlot:
		return dp / S, w.mesh.DP / S
	}
	return dp, w.mesh.DP
}

// groupRank is the mesh rank of index i of the rank's group grp.
func (w *member) groupRank(grp, i int) int {
	S, dp, part := max(1, w.n.s.cfg.zeroGroup()), w.mesh.Coord(w.rank).DP, w.mesh.Part(w.rank)
	switch grp {
	case groupShard:
		return w.mesh.PartRank(part, dp/S*S+i)
	case groupSlot:
		return w.mesh.PartRank(part, i*S+dp%S)
	}
	return w.mesh.PartRank(part, i)
}

// groupIndex is rank's index in the rank's group grp (ok: it is in it).
func (w *member) groupIndex(grp, rank int) (int, bool) {
	_, size := w.groupPlace(grp)
	for i := range size {
		if w.groupRank(grp, i) == rank {
			return i, true
		}
	}
	return 0, false
}

func (w *member) collective(m collMsg) {
	core := w.cores()[m.grp]
	if core == nil || m.gen != w.gen {
		return
	}
	core.Step(w.n.s.clk.time(), m.m)
	w.flushColl()
}

func (w *member) tick() {
	for _, core := range w.cores() {
		if core != nil {
			core.Tick(w.n.s.clk.time())
		}
	}
	w.flushColl()
}

// flushColl sends the collective cores' messages (their payloads copied:
// they alias the operation's buffer) and takes their completions.
func (w *member) flushColl() {
	for grp, core := range w.cores() {
		if core == nil {
			continue
		}
		rd := core.Ready()
		for _, m := range rd.Messages {
			m.Payload = slices.Clone(m.Payload)
			w.n.s.send(w.n.id, w.ranks[w.groupRank(grp, m.To)], collMsg{gen: w.gen, grp: grp, m: m})
		}
		for _, c := range rd.Completions {
			if r := w.run; r != nil && r.started && r.core == core && c.ID == r.op {
				w.opDone(c.Err)
			}
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

// initSlot is the state of part's ZeRO shard built from the seed: the
// part's parameters (at ZeRO-3 their shard) and the shard's momentum; the
// whole part's without ZeRO.
func (s *sim) initSlot(part, shard int) (params, moment []float32, history []applied) {
	params = s.initPart(part)
	if s.cfg.Zero == 0 {
		return params, make([]float32, len(params)), nil
	}
	lo, hi := s.shardRange(part, shard)
	if s.cfg.Zero == 3 {
		params = params[lo:hi]
	}
	return params, make([]float32, hi-lo), nil
}

// shardRange is the positions in part's parameters of its ZeRO shard:
// the chunk that the shard's rank of a shard group owns after a
// reduce-scatter (collective.OwnedChunk).
func (s *sim) shardRange(part, shard int) (lo, hi int) {
	S := s.cfg.zeroGroup()
	return collective.ChunkRange(len(s.partIdx[part]), S, collective.OwnedChunk(shard, S))
}

// stateSum is the checksum of the state a rank holds of its slot: the
// parameters, and with ZeRO the momentum shard too (the ranks of a shard
// group hold the same parameters at ZeRO-1 and 2, but not the same
// momentum).
func (w *member) stateSum() uint64 {
	if w.hold.Part < 0 {
		return 0
	}
	return w.n.s.stateSum(w.params, w.moment)
}

func (s *sim) stateSum(params, moment []float32) uint64 {
	if s.cfg.Zero == 0 {
		return worker.Checksum(params)
	}
	return worker.Checksum(append(slices.Clone(params), moment...))
}

// slot is the slot whose state the rank holds (−1: none).
func (w *member) slot() int { return w.hold.Slot(w.n.s.cfg.zeroGroup()) }
