package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/nn"
)

// The reduction phases (see phases.go): how a step sums the gradients over
// the part's replicas.

// roundReduction sums nothing per step: the replicas step on their own
// gradients and average their parameters when a round ends (local SGD,
// DiLoCo).
type roundReduction struct {
	noReduction
	s *stepper
}

// afterUpdate ends the round when the step's request says so, also after
// a skipped update: the round averages what the replicas hold.
func (r roundReduction) afterUpdate(ctx context.Context, req StepRequest, res *StepResult) (bool, error) {
	if !req.Round {
		return false, nil
	}
	return true, r.s.round(ctx, res)
}

// bucketReduction sums the flat gradients' buckets over the replicas
// while the last micro-batch's backward pass makes them final: an
// all-reduce over the data-parallel group (PyTorch DDP), or ZeRO-1's
// reduce-scatter over the shard group, whose owned chunks owned then
// completes over the replicate group.
type bucketReduction struct {
	s     *stepper
	r     *reducer
	owned func(ctx context.Context, res *StepResult) error
}

func (b bucketReduction) start(ctx context.Context) { b.r.start(ctx) }

// backward hooks the last micro-batch's pass: its gradients are final.
func (b bucketReduction) backward(_ context.Context, k int, c *nn.Ctx) {
	if k == len(b.s.mbs)-1 {
		c.OnGradReady = b.r.ready
	}
}

func (b bucketReduction) endBackward() error { return b.r.err }

func (b bucketReduction) finish(ctx context.Context, scheduleEnd time.Time, res *StepResult) error {
	s := b.s
	if err := b.r.finish(); err != nil {
		return fmt.Errorf("stage %d: data-parallel gradient sum: %w", s.coord.PP, err)
	}
	if err := b.owned(ctx, res); err != nil {
		return fmt.Errorf("stage %d: ZeRO gradient sum over the replicas: %w", s.coord.PP, err)
	}
	res.Overlap = MeasureOverlap(b.r.first, scheduleEnd, time.Now())
	s.landed(s.w.model.Set.Grads())
	return nil
}

func (b bucketReduction) abandon() { b.r.abandon() }

func (bucketReduction) afterUpdate(context.Context, StepRequest, *StepResult) (bool, error) {
	return false, nil
}

// microReduction is ZeRO-2's (and 3's): every micro-batch's backward pass
// reduce-scatters its buckets over the shard group into the owned
// gradients, which owned then completes over the replicate group.
type microReduction struct {
	s     *stepper
	r     *reducer
	g2    *zeroGrads
	owned func(ctx context.Context, res *StepResult) error
}

func (m microReduction) start(ctx context.Context) {
	m.r.start(ctx)
	m.g2.start()
	m.g2.pool.ResetPeak()
}

func (m microReduction) backward(ctx context.Context, _ int, c *nn.Ctx) {
	m.r.start(ctx)
	c.OnGradReady = m.r.ready
}

// endBackward reduces every bucket but the deferred one into the owned
// gradients and frees it.
func (m microReduction) endBackward() error { return m.g2.endMicro() }

func (m microReduction) finish(ctx context.Context, scheduleEnd time.Time, res *StepResult) error {
	s := m.s
	if err := m.r.finish(); err != nil {
		return fmt.Errorf("stage %d: data-parallel gradient sum: %w", s.coord.PP, err)
	}
	if err := m.owned(ctx, res); err != nil {
		return fmt.Errorf("stage %d: ZeRO gradient sum over the replicas: %w", s.coord.PP, err)
	}
	res.Overlap = MeasureOverlap(m.r.first, scheduleEnd, time.Now())
	return nil
}

func (m microReduction) abandon() { m.r.abandon() }

func (microReduction) afterUpdate(context.Context, StepRequest, *StepResult) (bool, error) {
	return false, nil
}

// noOwnedSum completes nothing: one shard group holds every replica.
func noOwnedSum(context.Context, *StepResult) error { return nil }

// sumOwnedRanges all-reduces ZeRO-1's owned chunk of every bucket over
// the replicate group, in the flat gradients' host view.
func (s *stepper) sumOwnedRanges(ctx context.Context, res *StepResult) error {
	zr := s.zero
	start := time.Now()
	var hs []*collective.Handle
	for _, r := range zr.owned {
		hs = append(hs, zr.replicate.AllReduce(ctx, s.reducer.grads[r.Lo:r.Hi], s.gradSum()))
	}
	err := collective.WaitAll(hs...)
	res.addExposed(time.Since(start))
	return err
}

// sumOwnedPacked all-reduces ZeRO-2's owned gradients over the replicate
// group, in one operation.
func (s *stepper) sumOwnedPacked(ctx context.Context, res *StepResult) error {
	zr := s.zero
	start := time.Now()
	v := s.host(zr.g2.owned, true)
	err := zr.replicate.AllReduce(ctx, v, s.gradSum()).Wait()
	if err == nil {
		s.landed(zr.g2.owned)
	}
	res.addExposed(time.Since(start))
	return err
}
