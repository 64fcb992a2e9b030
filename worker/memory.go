package worker

import (
	"context"
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
)

// The gradient and weight memory phases (see phases.go): which gradients
// the optimizer reads and where the weights live, replicated or sharded
// by ZeRO.

// wholeGrads is the flat gradient buffer, every element of it the
// optimizer's (no ZeRO).
type wholeGrads struct{ s *stepper }

func (g wholeGrads) buf() kernels.Buffer { return g.s.w.model.Set.Grads() }

func (g wholeGrads) squares(norm bool) float64 {
	s, m, be := g.s, g.s.w.model, g.s.w.be
	sq := be.SumSquares(m.Set.Grads())
	if !norm {
		return sq
	}
	if t := m.Tied; t != nil && !m.First() {
		sq -= be.SumSquares(t.G)
	}
	if s.coord.TP > 0 {
		for _, p := range m.Set.Params() {
			if p.Split == nil {
				sq -= be.SumSquares(p.G)
			}
		}
	}
	return sq
}

func (wholeGrads) views(p *nn.Param, f func(g kernels.Buffer)) { f(p.G) }

func (g wholeGrads) load(v []float32) { g.s.w.be.Upload(g.s.w.model.Set.Grads(), v) }

func (g wholeGrads) held(res *StepResult) {
	res.GradBytes = 4 * int64(g.s.w.model.Set.Len())
	res.PeakGradBytes = res.GradBytes
}

// ownedSet is the ranges of the flat gradients a ZeRO rank owns (in flat
// order, zero.sorted) and where each starts in the buffer that holds them.
type ownedSet struct {
	s      *stepper
	ranges []optim.Range
	starts []int
}

// views calls f with the parts of p's gradient this rank owns, as views
// of buf.
func (o ownedSet) views(buf kernels.Buffer, p *nn.Param, f func(g kernels.Buffer)) {
	be := o.s.w.be
	for i, r := range o.ranges {
		lo, hi := max(r.Lo, p.Offset), min(r.Hi, p.Offset+p.Size())
		if lo < hi {
			f(be.View(buf, o.starts[i]+lo-r.Lo, hi-lo))
		}
	}
}

// squares is the sum of squares of the gradients this rank owns that the
// global norm counts: not a last stage's copy of the tied embedding (the
// first stage counts it) and, on a tensor-parallel shard other than 0,
// not the parameters every shard holds whole.
func (o ownedSet) squares(buf kernels.Buffer) float64 {
	s, m, be := o.s, o.s.w.model, o.s.w.be
	var sq float64
	for _, p := range m.Set.Params() {
		if p == m.Tied && !m.First() || s.coord.TP > 0 && p.Split == nil {
			continue
		}
		o.views(buf, p, func(g kernels.Buffer) { sq += be.SumSquares(g) })
	}
	return sq
}

// rangeGrads is ZeRO-1's: the flat gradient buffer stays whole (and is
// what the loss scaler and clipping scale, as cheap as the owned part),
// the optimizer reads the owned ranges of it.
type rangeGrads struct {
	wholeGrads
	owned ownedSet
}

func (g rangeGrads) squares(bool) float64 { return g.owned.squares(g.buf()) }

func (g rangeGrads) views(p *nn.Param, f func(g kernels.Buffer)) { g.owned.views(g.buf(), p, f) }

// packedGrads is ZeRO-2's and 3's: the owned chunks end to end in the
// worker's shard buffer, the flat gradient buffer gone.
type packedGrads struct {
	g2    *zeroGrads
	owned ownedSet
}

func (g packedGrads) buf() kernels.Buffer { return g.g2.owned }

func (g packedGrads) squares(bool) float64 { return g.owned.squares(g.g2.owned) }

func (g packedGrads) views(p *nn.Param, f func(g kernels.Buffer)) {
	g.owned.views(g.g2.owned, p, f)
}

// load takes the owned ranges of v.
func (g packedGrads) load(v []float32) {
	be := g.owned.s.w.be
	for i, r := range g.owned.ranges {
		be.Upload(be.View(g.g2.owned, g.owned.starts[i], r.Len()), v[r.Lo:r.Hi])
	}
}

func (g packedGrads) held(res *StepResult) {
	res.GradBytes, res.PeakGradBytes = 4*int64(g.g2.owned.Len()), g.g2.heldBytes()
}

// replicatedWeights is the whole weights on every replica.
type replicatedWeights struct{ s *stepper }

func (replicatedWeights) start() {}

// refresh rounds the weights to their compute copies under mixed
// precision (the last update, load or gather changed them).
func (r replicatedWeights) refresh() error {
	w := r.s.w
	if w.spec.Precision == kernels.F32 {
		return nil
	}
	return nn.RefreshLow(w.be, w.spec.Precision, w.model.Set.Params())
}

func (replicatedWeights) pass(_ context.Context, f func() nn.Act) (nn.Act, error) { return f(), nil }

func (replicatedWeights) afterUpdate(context.Context, *StepResult) error { return nil }

func (r replicatedWeights) held(res *StepResult) {
	w := r.s.w
	res.ParamBytes = 4 * int64(w.model.Set.Len())
	if dt := w.spec.Precision; dt != kernels.F32 {
		res.ParamBytes += int64(dt.Size() * w.model.Set.Len()) // the compute copies
	}
	res.PeakParamBytes = res.ParamBytes
}

// gatheredWeights is ZeRO-1's and 2's: whole weights, each rank updating
// its owned chunks, which the shard group all-gathers after the update.
type gatheredWeights struct{ replicatedWeights }

func (g gatheredWeights) afterUpdate(ctx context.Context, res *StepResult) error {
	if err := g.s.gatherWeights(ctx, res); err != nil {
		return fmt.Errorf("ZeRO weight gather: %w", err)
	}
	return nil
}

// layerWeights is ZeRO-3's: the owned chunks only, every layer's weights
// gathered around each of its passes (zeroWeights); the optimizer updates
// the owned weights in place, so nothing is gathered after the update.
type layerWeights struct{ g3 *zeroWeights }

func (l layerWeights) start() { l.g3.pool.ResetPeak() }

// refresh does nothing: each layer's gathered weights are rounded as they
// arrive (zeroWeights.ready).
func (layerWeights) refresh() error { return nil }

// pass runs f between the gathers of its layers' weights, whose failure
// is the pass's.
func (l layerWeights) pass(ctx context.Context, f func() nn.Act) (nn.Act, error) {
	l.g3.begin(ctx)
	a := f()
	return a, l.g3.end()
}

func (layerWeights) afterUpdate(context.Context, *StepResult) error { return nil }

func (l layerWeights) held(res *StepResult) {
	res.ParamBytes, res.PeakParamBytes = 4*int64(l.g3.owned.Len()), l.g3.heldBytes()
}
