package worker

import (
	"context"
	"fmt"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
)

// ZeRO-3 shards the weights too. Its buckets are the part's layers (a
// layer's own parameters, in reverse layer order: NewUnitPlan), each rank
// owning 1/S of each; a layer's weights are all-gathered over the shard
// group just before its forward pass and again before its backward pass,
// and freed after; the next layer's gather is started while the current
// one computes. The optimizer updates the owned weights in place, so no
// weights are gathered after the update: per step an all-gather forward,
// one backward and the gradients' reduce-scatter, 1.5 times plain data
// parallelism's all-reduce.

// NewUnitPlan buckets a model part's gradients by layer: each layer's
// bucket holds the parameters it registered (a parameter two layers use,
// the tied embedding, belongs to the first), in reverse layer order, the
// order of the backward pass.
func NewUnitPlan(m *nn.Model) (*Plan, error) {
	ps := m.Set.Params()
	pl := &Plan{index: make(map[*nn.Param]int, len(ps)), bucket: make([]int, len(ps)), params: len(ps)}
	for i, p := range ps {
		pl.index[p] = i
	}
	owner := make([]int, len(ps))
	for i := range owner {
		owner[i] = -1
	}
	for li, l := range m.Layers {
		for _, p := range l.Params() {
			if i := pl.index[p]; owner[i] < 0 {
				owner[i] = li
			}
		}
	}
	for li := len(m.Layers) - 1; li >= 0; li-- {
		first, end := -1, -1
		for i, o := range owner {
			if o != li {
				continue
			}
			if first < 0 {
				first = i
			} else if i != end {
				return nil, fmt.Errorf("worker: layer %d's parameters are not contiguous", li)
			}
			end = i + 1
		}
		if first < 0 {
			continue
		}
		k := len(pl.Buckets)
		pl.Buckets = append(pl.Buckets, Bucket{FirstParam: first, EndParam: end, Lo: ps[first].Offset, Hi: ps[end-1].Offset + ps[end-1].Size()})
		for i := first; i < end; i++ {
			pl.bucket[i] = k
		}
	}
	for i, o := range owner {
		if o < 0 {
			return nil, fmt.Errorf("worker: parameter %q belongs to no layer", ps[i].Name)
		}
	}
	return pl, nil
}

// zeroWeights is ZeRO-3's weight memory: the owned chunks of every
// layer's weights (owned, flat order, the optimizer's), and the gathered
// buckets while a pass needs them.
type zeroWeights struct {
	s    *stepper
	pool *nn.Pool
	// owned holds the owned weights end to end, as zeroGrads.owned holds
	// the gradients (the same offsets, zeroGrads.at).
	owned kernels.Buffer
	// bufs, host, inflight and refs are per bucket: its gathered weights,
	// the host values the all-gather runs on, that operation, and how many
	// layers of the pass hold it.
	bufs []kernels.Buffer
	host [][]float32
	// low holds each present bucket rounded to the compute type (mixed
	// precision; nil otherwise).
	low      []kernels.Buffer
	inflight []*collective.Handle
	refs     []int
	// layers lists each layer's buckets; held marks the layers whose
	// buckets the pass acquired (started or present).
	layers [][]int
	held   []bool
	ctx    context.Context
	err    error
}

// openZeroWeights sets ZeRO-3 up, the owned weights in the worker's shard
// buffer. The set's flat weights, while present (built from the seed, a
// restore from a checkpoint writes them after forming), are moved into it
// at the first pass (Worker.settle).
func (s *stepper) openZeroWeights() {
	plan := s.reducer.plan
	g := &zeroWeights{s: s, pool: nn.NewPool(s.w.be), owned: s.w.zweights, bufs: make([]kernels.Buffer, len(plan.Buckets)),
		low: make([]kernels.Buffer, len(plan.Buckets)), host: make([][]float32, len(plan.Buckets)), inflight: make([]*collective.Handle, len(plan.Buckets)), refs: make([]int, len(plan.Buckets))}
	m := s.w.model
	g.layers = make([][]int, len(m.Layers))
	g.held = make([]bool, len(m.Layers))
	for li, l := range m.Layers {
		for _, p := range l.Params() {
			k := plan.BucketOf(p)
			if !containsInt(g.layers[li], k) {
				g.layers[li] = append(g.layers[li], k)
			}
		}
	}
	s.zero.g3 = g
}

func containsInt(v []int, x int) bool {
	for _, y := range v {
		if y == x {
			return true
		}
	}
	return false
}

// begin starts a pass (a forward, a backward, an evaluation) under ctx.
func (g *zeroWeights) begin(ctx context.Context) {
	g.s.w.settle()
	g.ctx = ctx
	clear(g.held)
}

// acquire holds bucket k for the pass, starting its gather when nobody
// holds it: the rank's owned chunk placed in the bucket, the rest filled
// by the all-gather.
func (g *zeroWeights) acquire(k int) {
	g.refs[k]++
	if g.bufs[k] != nil {
		return
	}
	be, plan := g.s.w.be, g.s.reducer.plan
	b := plan.Buckets[k]
	g.bufs[k] = g.pool.Get(b.Len())
	if g.s.hostMem != nil {
		g.host[k] = g.s.hostMem.HostSlice(g.bufs[k])
	} else {
		g.host[k] = grow(g.host[k], b.Len())
	}
	o := g.s.zero.owned[k]
	be.Download(g.host[k][o.Lo-b.Lo:o.Hi-b.Lo], be.View(g.owned, g.s.zero.g2.at[k], o.Len()))
	g.inflight[k] = g.s.zero.shard.AllGather(g.ctx, g.host[k])
}

// ready waits for bucket k's gather and binds its parameters' weights. A
// failed gather leaves garbage in them and its error for the pass's end.
func (g *zeroWeights) ready(k int) {
	if h := g.inflight[k]; h != nil {
		g.inflight[k] = nil
		if err := h.Wait(); err != nil && g.err == nil {
			g.err = fmt.Errorf("ZeRO-3 weight gather: %w", err)
		}
		if g.s.hostMem == nil {
			g.s.w.be.Upload(g.bufs[k], g.host[k])
		}
	}
	plan, set, be := g.s.reducer.plan, g.s.w.model.Set, g.s.w.be
	b := plan.Buckets[k]
	for _, p := range set.Params()[b.FirstParam:b.EndParam] {
		p.W = be.View(g.bufs[k], p.Offset-b.Lo, p.Size())
	}
	// Mixed precision: the bucket rounded to the compute type once, its
	// parameters' compute copies views of it, held as long as the bucket.
	if dt := g.s.w.spec.Precision; dt != kernels.F32 && g.low[k] == nil {
		lp, _ := kernels.LowPrecisionOf(be)
		g.low[k] = g.pool.GetAs(b.Len(), dt)
		lp.Convert(g.low[k], g.bufs[k])
		for _, p := range set.Params()[b.FirstParam:b.EndParam] {
			p.Low = be.View(g.low[k], p.Offset-b.Lo, p.Size())
		}
	}
}

// release lets bucket k go; the last holder frees it and unbinds its
// parameters.
func (g *zeroWeights) release(k int) {
	g.refs[k]--
	if g.refs[k] > 0 {
		return
	}
	if h := g.inflight[k]; h != nil { // prefetched but never used
		g.inflight[k] = nil
		_ = h.Wait()
	}
	plan, set := g.s.reducer.plan, g.s.w.model.Set
	b := plan.Buckets[k]
	for _, p := range set.Params()[b.FirstParam:b.EndParam] {
		p.W, p.Low = nil, nil
	}
	g.pool.Put(g.bufs[k])
	g.bufs[k] = nil
	if g.low[k] != nil {
		g.pool.Put(g.low[k])
		g.low[k] = nil
	}
}

// hold acquires layer i's buckets once per pass.
func (g *zeroWeights) hold(i int) {
	if i < 0 || i >= len(g.layers) || g.held[i] {
		return
	}
	g.held[i] = true
	for _, k := range g.layers[i] {
		g.acquire(k)
	}
}

// before makes layer i's weights present and starts gathering the next
// layer's (next is i+1 forward, i−1 backward).
func (g *zeroWeights) before(i, next int) {
	g.hold(i)
	for _, k := range g.layers[i] {
		g.ready(k)
	}
	g.hold(next)
}

// after lets layer i's weights go.
func (g *zeroWeights) after(i int) {
	if !g.held[i] {
		return
	}
	g.held[i] = false
	for _, k := range g.layers[i] {
		g.release(k)
	}
}

// end ends a pass: whatever it still holds (a prefetch past its last
// layer) is let go, and a failed gather is its error.
func (g *zeroWeights) end() error {
	for i := range g.held {
		g.after(i)
	}
	err := g.err
	g.err = nil
	return err
}

// setHooks sets the passes' layer hooks of phases p: ZeRO-3 gathers each
// layer's weights around its passes (the next layer's gather started
// before it computes), and ZeRO-2 binds each layer's gradient buckets
// before its backward pass. They stay empty without.
func (s *stepper) setHooks(p phasePlan) {
	layers := s.w.model.Layers
	switch {
	case p.Weights == weightsPerLayer:
		g2, g3 := s.zero.g2, s.zero.g3
		s.fwdHooks = nn.Hooks{Before: func(i int) { g3.before(i, i+1) }, After: g3.after}
		s.bwdHooks = nn.Hooks{Before: func(i int) { g3.before(i, i-1); g2.bind(layers[i]) }, After: g3.after}
	case p.Reduce == reduceScatterMicro:
		g2 := s.zero.g2
		s.bwdHooks = nn.Hooks{Before: func(i int) { g2.bind(layers[i]) }}
	}
}

// zeroWeights is ZeRO-3's weight memory (nil otherwise).
func (s *stepper) zeroWeights() *zeroWeights {
	if s.zero == nil {
		return nil
	}
	return s.zero.g3
}

// heldBytes is the weight memory at its step's peak: the owned chunks and
// the gathered buckets.
func (g *zeroWeights) heldBytes() int64 { return g.pool.PeakBytes() + 4*int64(g.owned.Len()) }

// gatherAll returns the part's whole weights on the host (every bucket
// gathered in turn): for the final weights and checksums of ZeRO-3.
func (g *zeroWeights) gatherAll(ctx context.Context) ([]float32, error) {
	g.begin(ctx)
	set, be := g.s.w.model.Set, g.s.w.be
	out := make([]float32, set.Len())
	for k, b := range g.s.reducer.plan.Buckets {
		g.acquire(k)
		g.ready(k)
		be.Download(out[b.Lo:b.Hi], g.bufs[k])
		g.release(k)
	}
	return out, g.end()
}
