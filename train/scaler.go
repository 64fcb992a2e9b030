package train

import (
	"fmt"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/kernels"
)

// lossScaler is fp16's dynamic loss scaler with PyTorch GradScaler's
// arithmetic: the loss gradient is multiplied by Scale; a step whose
// gradients overflow (an inf or NaN on any rank) is skipped and the scale
// multiplied by BackoffFactor; after GrowthInterval steps in a row
// without one, by GrowthFactor. It is plain state, owned by the step loop.
type lossScaler struct {
	checkpoint.ScalerState
	// min is the floor: a step that overflows at it ends the run.
	min float64
}

// newLossScaler is cfg's scaler: one under fp16 in any of its spellings
// (fp16, float16, half: comparing with "fp16" alone once trained "half"
// without one), none under bf16 (it keeps fp32's range and, as with
// PyTorch's autocast, needs none), else nil.
func newLossScaler(cfg *Config) *lossScaler {
	if cfg.Precision.kernel() != kernels.F16 {
		return nil
	}
	return &lossScaler{ScalerState: checkpoint.ScalerState{Scale: cfg.LossScaleInit, GrowthFactor: 2, BackoffFactor: 0.5,
		GrowthInterval: cfg.LossScaleWindow}, min: cfg.LossScaleMin}
}

// scale is the loss scale of the next step (0: no scaling).
func (s *lossScaler) scale() float64 {
	if s == nil {
		return 0
	}
	return s.Scale
}

// tracker is the growth tracker (0 without a scaler).
func (s *lossScaler) tracker() int {
	if s == nil {
		return 0
	}
	return s.GrowthTracker
}

// update takes a step's outcome (skipped: its gradients overflowed). An
// overflow at the floor is an error naming the step.
func (s *lossScaler) update(skipped bool, step int) error {
	if s == nil {
		return nil
	}
	if skipped {
		if s.Scale <= s.min {
			return fmt.Errorf("%w: step %d: the fp16 gradients overflow at the smallest loss scale %g (--loss-scale-min): lower the learning rate, clip the gradients or train in bf16", ErrLoss, step, s.min)
		}
		s.Scale = max(s.min, s.Scale*s.BackoffFactor)
		s.GrowthTracker = 0
		return nil
	}
	s.GrowthTracker++
	if s.GrowthTracker == s.GrowthInterval {
		s.Scale *= s.GrowthFactor
		s.GrowthTracker = 0
	}
	return nil
}

// state is the scaler's checkpoint state (nil without one).
func (s *lossScaler) state() *checkpoint.ScalerState {
	if s == nil {
		return nil
	}
	st := s.ScalerState
	return &st
}

// restore continues from a checkpoint's state (a checkpoint without one
// keeps the initial scale).
func (s *lossScaler) restore(st *checkpoint.ScalerState) {
	if s != nil && st != nil && st.Scale > 0 {
		s.Scale, s.GrowthTracker = st.Scale, st.GrowthTracker
	}
}

// lastRun is what a worker says of the last step it ran: its index
// (0-based), the steps it holds applied, the loss scaler's state it ran
// with (scale and growth tracker) and whether it skipped the update.
type lastRun struct {
	Step, Applied int
	LossScale     float64
	Tracker       int
	Skipped       bool
}

// scalerAt is the loss scaler's state after applied steps: the state the
// job reported after that step (known, by the steps applied), or else, from
// a worker that ran the last of them (the job may not have reported it:
// its leader died after the workers ran it and before it told the members;
// or this node joined after the reports), the state it ran with updated by
// its outcome — checked against the job's report of the step before when
// there is one. ok is false when neither tells.
func (s *lossScaler) at(applied int, known map[int]checkpoint.ScalerState, last lastRun) (checkpoint.ScalerState, bool) {
	if st, ok := known[applied]; ok {
		return st, true
	}
	if last.Step != applied-1 || last.Applied != applied || !(last.LossScale > 0) {
		return checkpoint.ScalerState{}, false
	}
	prev, ok := known[applied-1]
	if ok && (last.LossScale != prev.Scale || last.Tracker != prev.GrowthTracker) {
		return checkpoint.ScalerState{}, false // the worker ran another state than the job's
	}
	if !ok {
		prev = s.ScalerState // the factors and the interval are the job's
		prev.Scale, prev.GrowthTracker = last.LossScale, last.Tracker
	}
	next := lossScaler{ScalerState: prev, min: s.min}
	if err := next.update(last.Skipped, applied); err != nil {
		return checkpoint.ScalerState{}, false
	}
	return next.ScalerState, true
}
