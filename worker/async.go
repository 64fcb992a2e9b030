package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/troupe-ml/troupe/data"
)

// AsyncKind is a worker's part in a step of asynchronous training.
type AsyncKind uint8

const (
	// AsyncCompute: a replica takes the parameter server's weights
	// (AsyncStep.Weights) and computes the gradient of the mean loss over
	// the step's whole batch (StepResult.Grads), applying nothing.
	AsyncCompute AsyncKind = iota + 1
	// AsyncApply: the parameter server applies a replica's gradient
	// (AsyncStep.Grads) with the step's learning rate (clipped as
	// Spec.ClipNorm says) as its update number Step+1. Sharded servers
	// (a data-parallel world of several ranks with ZeRO) each take the
	// whole gradient and apply the chunks they own; the clipping norm
	// sums every server's.
	AsyncApply
)

func (k AsyncKind) String() string {
	switch k {
	case AsyncCompute:
		return "compute"
	case AsyncApply:
		return "apply"
	}
	return fmt.Sprintf("async(%d)", uint8(k))
}

// AsyncStep is a worker's part in a step of asynchronous training
// (StepRequest.Async). Each replica is a worker in a mesh of one rank, so
// a step's batch is the replica's whole; the servers are the ranks of a
// data-parallel mesh of their own (one, or the shards of ZeRO).
type AsyncStep struct {
	Kind AsyncKind
	// Weights are the server's weights the replica computes on (every
	// parameter, flat, in the model's order).
	Weights []float32
	// Grads is the gradient the server applies (same layout).
	Grads []float32
}

// asyncStep runs a replica's computation or the server's update (Step
// checked the generation). A replica's Holding says the latest step it
// computed (its weights are whatever version it was last given); the
// server's counts its updates: Applied is its version.
func (w *Worker) asyncStep(ctx context.Context, req StepRequest) (StepResult, error) {
	a, m := req.Async, w.st.mesh
	switch {
	case !w.spec.Sync.Async():
		return StepResult{}, fmt.Errorf("%w: an asynchronous step for a worker that synchronises by %v", ErrConfig, w.spec.Sync.Mode)
	case a.Kind == AsyncCompute && m.Size() != 1:
		return StepResult{}, fmt.Errorf("%w: an asynchronous computation for a worker in a world of %d ranks (each replica is one rank)", ErrConfig, m.Size())
	case a.Kind == AsyncApply && m.Size() != m.DP:
		return StepResult{}, fmt.Errorf("%w: an asynchronous update for a worker in a %d×%d×%d world (the servers are data-parallel ranks)", ErrConfig, m.DP, m.PP, m.TP)
	}
	n := w.model.Set.Len()
	switch a.Kind {
	case AsyncCompute:
		if len(a.Weights) != n {
			return StepResult{}, fmt.Errorf("%w: %d weights for a model of %d parameters", ErrConfig, len(a.Weights), n)
		}
		if err := w.model.Set.SetHostWeights(a.Weights); err != nil {
			return StepResult{}, err
		}
		res, err := w.st.step(ctx, req)
		w.last = LastStep{Step: req.Step, Result: res.Result, Computed: res.Computed}
		if err == nil {
			// What its status reports: the job trained this far (an
			// elastic leader taking over knows the job is not fresh).
			w.hold.Applied = max(w.hold.Applied, req.Step+1)
		}
		return res, err
	case AsyncApply:
		switch {
		case len(a.Grads) != n:
			return StepResult{}, fmt.Errorf("%w: a gradient of %d values for a model of %d parameters", ErrConfig, len(a.Grads), n)
		case req.Step != w.hold.Applied:
			return StepResult{}, fmt.Errorf("%w: the server applied %d updates, asked for update %d", ErrStale, w.hold.Applied, req.Step+1)
		}
		res, err := w.st.apply(ctx, req)
		if err != nil {
			return res, err
		}
		w.hold.Applied = req.Step + 1
		w.hold.Cursor = max(w.hold.Cursor, req.Cursor+data.Cursor(req.Batch))
		return res, nil
	}
	return StepResult{}, fmt.Errorf("%w: asynchronous step kind %v", ErrConfig, a.Kind)
}

// apply is the server's update: a replica's gradient, clipped, stepped
// with the optimizer. A ZeRO shard takes the chunks it owns (ZeRO-2 and 3
// hold no others) and, below stage 3, all-gathers the updated weights
// with the other servers.
func (s *stepper) apply(ctx context.Context, req StepRequest) (StepResult, error) {
	var res StepResult
	start := time.Now()
	s.updated = false
	s.meter.Take()
	s.syncMeter.Take()
	s.grads.load(req.Async.Grads)
	norm, err := s.clip(ctx, &res)
	if err != nil {
		return res, err
	}
	s.w.opt.Step(float32(req.LR))
	s.updated = true
	if err := s.weights.afterUpdate(ctx, &res); err != nil {
		return res, fmt.Errorf("parameter server: %w", err)
	}
	return s.finish(res, start, req, norm)
}
