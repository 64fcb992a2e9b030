package worker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
)

// ZeRO (Rajbhandari et al. 2020) over the data-parallel axis: the D
// replicas of a model part are cut into shard groups of S consecutive
// replicas (S = D unless Spec.ZeroGroup says otherwise: hybrid sharding,
// HSDP); within a group each rank owns 1/S of every gradient bucket (the
// chunk the ring's reduce-scatter leaves it) and keeps the optimizer state
// of those elements only. A step reduce-scatters each bucket over the
// shard group as the backward pass makes it final (the overlap of plain
// data parallelism kept), all-reduces the owned chunks over the replicate
// group (the ranks owning the same chunk in the other shard groups), has
// each rank update its owned elements, and all-gathers the updated
// weights over the shard group: the bytes of one all-reduce, split in two.
//
// Replica d of a part is shard z = d mod S of shard group d / S.

// zero is a part's ZeRO state in one generation.
type zero struct {
	// stage is the ZeRO stage (1: optimizer state sharded).
	stage int
	// S is the shard group's size, z this rank's shard in it.
	S, z int
	// shard is the shard group; replicate the ranks holding the same
	// shard in the other shard groups, repRanks (nil with one shard
	// group).
	shard, replicate collective.Communicator
	repRanks         []int
	// owned is this rank's chunk of every bucket, in bucket order; sorted
	// is the same ranges in flat order, the optimizer's.
	owned, sorted []optim.Range
	// g2 is ZeRO-2's gradient memory (nil at stage 1), g3 ZeRO-3's weight
	// memory (nil below stage 3).
	g2 *zeroGrads
	g3 *zeroWeights
}

// zeroGroups returns, for rank of m, the ranks of its shard group and of
// its replicate group (the data-parallel axis cut into groups of s
// consecutive replicas), and its shard index.
func zeroGroups(m mesh.Mesh, rank, s int) (shard, replicate []int, z int) {
	dp := m.Group(mesh.DP, rank)
	d := m.Coord(rank).DP
	g := d / s
	z = d % s
	shard = dp[g*s : (g+1)*s]
	for i := z; i < len(dp); i += s {
		replicate = append(replicate, dp[i])
	}
	return shard, replicate, z
}

// ownedRanges is shard z of S's chunk of every bucket of plan, in bucket
// order: the chunk collective.ReduceScatter leaves it.
func ownedRanges(plan *Plan, S, z int) []optim.Range {
	out := make([]optim.Range, len(plan.Buckets))
	for k, b := range plan.Buckets {
		lo, hi := collective.ChunkRange(b.Len(), S, collective.OwnedChunk(z, S))
		out[k] = optim.Range{Lo: b.Lo + lo, Hi: b.Lo + hi}
	}
	return out
}

// openZero sets up ZeRO for the stepper's part: the groups, the owned
// ranges, a sharded optimizer in place of the whole one (zeroMoved says
// whether that replaced it), and the reduction, gradient and weight
// phases p names. It needs the reducer's bucket plan.
func (s *stepper) openZero(p phasePlan) error {
	spec, m := s.w.spec, s.mesh
	S := spec.ZeroGroupIn(m)
	if m.DP%S != 0 {
		return fmt.Errorf("%w: ZeRO shard groups of %d cannot cut %d data-parallel replicas", ErrConfig, S, m.DP)
	}
	shardRanks, repRanks, z := zeroGroups(m, s.rank, S)
	zr := &zero{stage: spec.Zero, S: S, z: z, repRanks: repRanks}
	var err error
	if zr.shard, err = s.replicaGroup(shardRanks...); err != nil {
		return err
	}
	if len(repRanks) > 1 {
		if zr.replicate, err = s.replicaGroup(repRanks...); err != nil {
			return err
		}
	}
	zr.owned = ownedRanges(s.reducer.plan, S, z)
	zr.sorted = sortedRanges(zr.owned)
	s.zero = zr
	s.reducer.op = zr.shard.ReduceScatter
	if p.Tied == tiedBefore {
		s.reducer.deferred = s.reducer.plan.BucketOf(s.w.model.Tied)
	}
	if spec.ClipNorm > 0 {
		// The global norm sums the owned gradients of every part of the
		// shard group's replicas.
		var ranks []int
		for _, r := range shardRanks {
			ranks = append(ranks, m.Slice(mesh.DP, m.Coord(r).DP)...)
		}
		slices.Sort(ranks)
		if s.pipe, err = s.group(ranks...); err != nil {
			return err
		}
		s.norm = make([]float32, 1)
	}
	if s.zeroMoved, err = s.w.shardOptimizer(zr.sorted, spec.Zero); err != nil {
		return err
	}
	s.openZeroPhases(p)
	return nil
}

// openZeroPhases sets the phases of ZeRO's stage: the owned chunks
// completed over the replicate group where there are several shard
// groups, ZeRO-2's gradient memory, ZeRO-3's weight memory and the hooks
// of the passes that use them.
func (s *stepper) openZeroPhases(p phasePlan) {
	zr := s.zero
	owned := noOwnedSum
	starts := make([]int, len(zr.sorted))
	switch p.Reduce {
	case reduceScatter:
		if zr.replicate != nil {
			owned = s.sumOwnedRanges
		}
		for i, r := range zr.sorted {
			starts[i] = r.Lo
		}
		s.reduce = bucketReduction{s: s, r: s.reducer, owned: owned}
		s.grads = rangeGrads{wholeGrads{s}, ownedSet{s, zr.sorted, starts}}
	case reduceScatterMicro:
		s.openZeroGrads()
		if zr.replicate != nil {
			owned = s.sumOwnedPacked
		}
		off := 0
		for i, r := range zr.sorted {
			starts[i] = off
			off += r.Len()
		}
		s.reduce = microReduction{s: s, r: s.reducer, g2: zr.g2, owned: owned}
		s.grads = packedGrads{zr.g2, ownedSet{s, zr.sorted, starts}}
	}
	s.weights = gatheredWeights{replicatedWeights{s}}
	if p.Weights == weightsPerLayer {
		s.openZeroWeights()
		s.weights = layerWeights{zr.g3}
	}
	s.setHooks(p)
}

// sortedRanges is rs in flat order, without empty ranges.
func sortedRanges(rs []optim.Range) []optim.Range {
	var out []optim.Range
	for _, r := range rs {
		if r.Len() > 0 {
			out = append(out, r)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Lo < out[j-1].Lo; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// gatherWeights all-gathers, over the shard group, the weights each rank
// updated: every bucket's range, each rank contributing its chunk.
func (s *stepper) gatherWeights(ctx context.Context, res *StepResult) error {
	zr, be := s.zero, s.w.be
	set := s.w.model.Set
	w := s.host(set.Weights(), s.hostMem == nil)
	start := time.Now()
	var hs []*collective.Handle
	for _, b := range s.reducer.plan.Buckets {
		hs = append(hs, zr.shard.AllGather(ctx, w[b.Lo:b.Hi]))
	}
	err := collective.WaitAll(hs...)
	res.addExposed(time.Since(start))
	if err != nil {
		return err
	}
	if s.hostMem == nil {
		be.Upload(set.Weights(), w)
	}
	return nil
}

// zeroGrads is ZeRO-2's gradient memory: the part's flat gradient buffer
// is gone; a bucket's gradients live in a pooled buffer from the backward
// pass that first needs them until its reduce-scatter completes, and only
// the owned chunks stay, summed over the step's micro-batches in owned.
// Every micro-batch's backward pass reduces its buckets (ZeRO-2 trades
// that communication, M times plain data parallelism's with M
// micro-batches, for the memory), except a deferred bucket, which keeps its
// gradients until the step's end.
type zeroGrads struct {
	s    *stepper
	pool *nn.Pool
	// bufs, host and inflight are per bucket: its gradients while bound,
	// the host values the reduce-scatter runs on, and that operation.
	bufs     []kernels.Buffer
	host     [][]float32
	inflight []*collective.Handle
	// owned holds the owned chunks end to end in flat order (the
	// optimizer's gradient buffer); at is each bucket's chunk's offset.
	owned kernels.Buffer
	at    []int
	err   error
	// queue is the buckets in flight, oldest first: at most maxInFlight
	// (the oldest is waited for), which bounds the gradient memory.
	queue []int
}

// maxInFlight is how many buckets' reductions ZeRO-2 lets run while the
// backward pass goes on, as DeepSpeed bounds its reduce buckets.
const maxInFlight = 2

// openZeroGrads sets ZeRO-2 up: the set's flat gradient buffer released,
// the owned gradients in the worker's shard buffer.
func (s *stepper) openZeroGrads() {
	zr, set, be := s.zero, s.w.model.Set, s.w.be
	plan := s.reducer.plan
	g := &zeroGrads{s: s, pool: nn.NewPool(be), bufs: make([]kernels.Buffer, len(plan.Buckets)),
		host: make([][]float32, len(plan.Buckets)), inflight: make([]*collective.Handle, len(plan.Buckets)), at: make([]int, len(plan.Buckets))}
	n := 0
	for _, r := range zr.sorted {
		for k, o := range zr.owned {
			if o == r {
				g.at[k] = n
			}
		}
		n += r.Len()
	}
	set.ReleaseGrads()
	r := s.reducer
	r.grads = nil
	r.send = func(k int) { g.launch(r.ctx, k) }
	r.wait = func() error { return g.retire(true) }
	g.owned = s.w.zgrads
	zr.g2 = g
}

// start clears the owned gradients for a step.
func (g *zeroGrads) start() {
	g.err = nil
	g.s.w.be.Fill(g.owned, 0)
}

// bind gives the parameters of layer l gradient buffers: their buckets',
// allocated zeroed the first time a backward pass needs one. The buckets
// whose reductions completed meanwhile are freed first.
func (g *zeroGrads) bind(l nn.Layer) {
	plan, set := g.s.reducer.plan, g.s.w.model.Set
	g.retire(false)
	for _, p := range l.Params() {
		k := plan.BucketOf(p)
		if g.bufs[k] != nil {
			continue
		}
		b := plan.Buckets[k]
		g.bufs[k] = g.pool.GetZero(b.Len())
		for _, q := range set.Params()[b.FirstParam:b.EndParam] {
			q.G = g.s.w.be.View(g.bufs[k], q.Offset-b.Lo, q.Size())
		}
	}
}

// launch reduce-scatters bucket k over the shard group.
func (g *zeroGrads) launch(ctx context.Context, k int) {
	be, plan := g.s.w.be, g.s.reducer.plan
	b := plan.Buckets[k]
	if g.bufs[k] == nil { // no pass touched it: its zeros
		g.bufs[k] = g.pool.GetZero(b.Len())
	}
	if g.s.hostMem != nil {
		g.host[k] = g.s.hostMem.HostSlice(g.bufs[k])
	} else {
		g.host[k] = grow(g.host[k], b.Len())
		be.Download(g.host[k], g.bufs[k])
	}
	g.inflight[k] = g.s.zero.shard.ReduceScatter(ctx, g.host[k], g.s.gradSum())
	g.queue = append(g.queue, k)
	for len(g.queue) > maxInFlight {
		g.take(g.queue[0])
	}
	g.retire(false)
}

// retire takes the reductions that completed (all of them, waiting, with
// wait). It returns the first failure.
func (g *zeroGrads) retire(wait bool) error {
	for _, k := range slices.Clone(g.queue) {
		if !wait {
			select {
			case <-g.inflight[k].Done():
			default:
				continue
			}
		}
		g.take(k)
	}
	return g.err
}

// take waits for bucket k's reduction: its owned chunk is added to owned,
// its buffer freed and its parameters unbound.
func (g *zeroGrads) take(k int) {
	be, plan, set := g.s.w.be, g.s.reducer.plan, g.s.w.model.Set
	h := g.inflight[k]
	g.inflight[k] = nil
	g.queue = slices.DeleteFunc(g.queue, func(q int) bool { return q == k })
	b := plan.Buckets[k]
	if err := h.Wait(); err != nil {
		if g.err == nil {
			g.err = err
		}
	} else {
		o := g.s.zero.owned[k]
		chunk := g.host[k][o.Lo-b.Lo : o.Hi-b.Lo]
		tmp := g.pool.Get(len(chunk))
		be.Upload(tmp, chunk)
		dst := be.View(g.owned, g.at[k], len(chunk))
		be.Add(dst, dst, tmp)
		g.pool.Drop(tmp)
	}
	for _, q := range set.Params()[b.FirstParam:b.EndParam] {
		q.G = nil
	}
	g.pool.Drop(g.bufs[k]) // buckets differ in length: a cache of each would hold the whole gradient
	g.bufs[k] = nil
	if g.s.hostMem != nil {
		g.host[k] = nil // a view of the dropped buffer
	} else {
		g.host[k] = g.host[k][:0] // the staging copy, kept for the next micro-batch
	}
}

// endMicro ends a micro-batch's backward pass: every bucket but the
// deferred one is reduced into owned and freed.
func (g *zeroGrads) endMicro() error {
	r := g.s.reducer
	r.launchRest()
	if r.err != nil {
		return r.err
	}
	return g.retire(true)
}

// heldBytes is the gradient memory at its step's peak: the pooled bucket
// buffers and the owned chunks.
func (g *zeroGrads) heldBytes() int64 { return g.pool.PeakBytes() + 4*int64(g.owned.Len()) }
