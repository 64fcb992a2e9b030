package worker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/mesh"
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
	// shard in the other shard groups (nil with one shard group).
	shard, replicate collective.Communicator
	// owned is this rank's chunk of every bucket, in bucket order; sorted
	// is the same ranges in flat order, the optimizer's.
	owned, sorted []optim.Range
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
// ranges, and a sharded optimizer in place of the whole one (zeroMoved
// says whether that replaced it). It needs the reducer's bucket plan.
func (s *stepper) openZero() error {
	spec, m := s.w.spec, s.mesh
	S := spec.ZeroGroup
	if S == 0 {
		S = m.DP
	}
	if m.DP%S != 0 {
		return fmt.Errorf("%w: ZeRO shard groups of %d cannot cut %d data-parallel replicas", ErrConfig, S, m.DP)
	}
	shardRanks, repRanks, z := zeroGroups(m, s.rank, S)
	zr := &zero{stage: spec.Zero, S: S, z: z}
	var err error
	if zr.shard, err = s.group(shardRanks...); err != nil {
		return err
	}
	if len(repRanks) > 1 {
		if zr.replicate, err = s.group(repRanks...); err != nil {
			return err
		}
	}
	zr.owned = ownedRanges(s.reducer.plan, S, z)
	zr.sorted = sortedRanges(zr.owned)
	s.zero = zr
	if s.tied != nil {
		s.reducer.deferred = s.w.model.Tied
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
	s.zeroMoved, err = s.w.shardOptimizer(zr.sorted)
	return err
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

// reduceOwned completes the owned chunks after the shard group's
// reduce-scatter: with several shard groups, the owned chunk of every
// bucket is all-reduced over the replicate group.
func (s *stepper) reduceOwned(ctx context.Context, res *StepResult) error {
	zr := s.zero
	if zr.replicate == nil {
		return nil
	}
	grads := s.reducer.grads
	start := time.Now()
	var hs []*collective.Handle
	for _, r := range zr.owned {
		hs = append(hs, zr.replicate.AllReduce(ctx, grads[r.Lo:r.Hi], collective.Sum))
	}
	err := collective.WaitAll(hs...)
	res.addExposed(time.Since(start))
	return err
}

// ownedSquares is the sum of squares of the gradients this rank owns that
// the global norm counts: not a last stage's copy of the tied embedding
// (the first stage counts it) and, on a tensor-parallel shard other than
// 0, not the parameters every shard holds whole.
func (s *stepper) ownedSquares() float64 {
	m, be := s.w.model, s.w.be
	var sq float64
	for _, p := range m.Set.Params() {
		if p == m.Tied && !m.First() || s.coord.TP > 0 && p.Split == nil {
			continue
		}
		for _, r := range s.zero.sorted {
			lo, hi := max(r.Lo, p.Offset), min(r.Hi, p.Offset+p.Size())
			if lo < hi {
				sq += be.SumSquares(be.View(m.Set.Grads(), lo, hi-lo))
			}
		}
	}
	return sq
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
