package worker

import (
	"context"
	"fmt"

	"github.com/troupe-ml/troupe/nn"
)

// Evaluate runs held-out samples [lo, hi) forward through this worker's
// replica's pipeline; the last stage returns the loss (and the rows it
// scored), the others pass their activations on.
func (w *Worker) Evaluate(ctx context.Context, lo, hi int) (Result, int, error) {
	s := w.st
	switch {
	case s == nil:
		return Result{}, 0, fmt.Errorf("%w: this worker has no place in generation %d", ErrStale, w.gen)
	case w.spec.Test == nil:
		return Result{}, 0, fmt.Errorf("%w: no held-out data", ErrData)
	case lo < 0 || hi > w.spec.Test.Len() || lo >= hi:
		return Result{}, 0, fmt.Errorf("%w: held-out rows [%d, %d) outside [0, %d)", ErrData, lo, hi, w.spec.Test.Len())
	}
	if err := s.weights.refresh(); err != nil {
		return Result{}, 0, err
	}
	m := w.model
	w.idx = w.idx[:0]
	for i := lo; i < hi; i++ {
		w.idx = append(w.idx, i)
	}
	w.spec.Test.Fill(w.idx, &w.batch)
	s.mbs[0] = micro{lo: 0, hi: hi - lo, ids: s.mbs[0].ids, tgt: s.mbs[0].tgt, vals: s.mbs[0].vals}
	var x nn.Act
	if m.Input == nn.ActInput {
		buf := w.pool.Get(s.activationRows(0) * m.InCols)
		if err := s.actIn.Broadcast(ctx, s.host(buf, false), 0).Wait(); err != nil {
			w.pool.Put(buf)
			return Result{}, 0, err
		}
		s.landed(buf)
		x = nn.Act{X: buf, Rows: s.activationRows(0), Cols: m.InCols}
	} else {
		x = s.input(0, &w.batch)
	}
	c := s.ctxFor(&s.scratch)
	c.Train = false
	s.tp.reset(ctx)
	y, err := s.pass(ctx, func() nn.Act { return nn.ForwardWith(c, m.Layers, x, s.fwdHooks) })
	if err == nil {
		err = s.tpErr()
	}
	if err != nil {
		w.pool.Put(y.X)
		return Result{}, 0, err
	}
	if !m.Last() {
		err := s.actOut.Broadcast(ctx, s.host(y.X, true), 0).Wait()
		w.pool.Put(y.X)
		return Result{}, 0, err
	}
	var res Result
	tgt := s.targets(0, &w.batch)
	if m.Accuracy {
		res.Correct = w.be.ArgmaxCorrect(y.X, tgt.Ids)
	}
	res.LossSum, _ = m.Loss(c, y, tgt, 0)
	if err := s.tpErr(); err != nil {
		return Result{}, 0, err
	}
	res.Targets = w.batch.Terms(0, hi-lo)
	if !s.reports() || s.coord.DP != 0 {
		// Shard 0 of replica 0 reports the loss every shard computed (with
		// ZeRO-3 the first shard group's replicas run the evaluation
		// together).
		res = Result{}
	}
	return res, hi - lo, w.be.Sync()
}
