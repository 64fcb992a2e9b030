package worker

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
)

// StepRequest is one optimizer step of the global batch at Cursor.
type StepRequest struct {
	Generation uint64
	// Step is the 0-based optimizer step; the worker must hold Step steps.
	Step   int
	Cursor data.Cursor
	// Batch is the global batch in samples: replica d takes rows
	// data.Split(Batch, DP, d) of it.
	Batch int
	LR    float64
	// GlobalTargets is the number of loss terms in the global batch: each
	// rank scales its gradient by its inverse and the all-reduce sums, so
	// every replica holds the gradient of the global mean loss.
	GlobalTargets int
	// Checksum asks for a checksum of the parameters after the update.
	Checksum bool
	// LossScale, when positive, is fp16's dynamic loss scale: the loss
	// gradient is multiplied by it, the gradients divided by it before
	// the update, and a step whose gradients hold an inf or NaN on any
	// rank is skipped on every rank (StepResult.Skipped).
	LossScale float64
	// LossScaleTracker is the scaler's growth tracker before this step
	// (its good steps in a row): with LossScale, the scaler's whole
	// state, which the worker keeps with its last step (LastStep) so that
	// whoever takes the training state from it can continue the scaler.
	LossScaleTracker int
	// Round ends a synchronisation round after this step's update (local
	// SGD, DiLoCo: Spec.Sync); ignored when the replicas synchronise
	// every step.
	Round bool
	// Async is the worker's part in a step of asynchronous training
	// (Spec.Sync async; nil otherwise).
	Async *AsyncStep
}

// Result is what a pass over some rows gives.
type Result struct {
	// LossSum is the sum of the per-target losses (last stage).
	LossSum float64
	// Targets is the number of loss terms.
	Targets int
	// Correct counts rows whose arg-max logit is the target (classifiers).
	Correct int
}

// StepResult is one rank's share of a step.
type StepResult struct {
	Result
	// Skipped: the gradients overflowed under the loss scale on some rank,
	// and no rank updated (every rank reports the same).
	Skipped bool
	// StepMs is the whole step; ComputeMs the forward, backward and
	// recompute passes; ScheduleMs the schedule (passes, sends, receives
	// and waits) until its last backward ended.
	StepMs, ComputeMs, ScheduleMs float64
	// Overlap is the gradient communication: the data-parallel buckets'
	// span and the sums after the schedule (the tied embedding, the
	// gradient norm), the part of it the step waited for, and the share
	// hidden behind the backward pass.
	Overlap
	GradNorm float64
	Checksum uint64
	// PeakAct is the activation pool's high-water mark; PeakMicro the most
	// micro-batches whose activations were alive at once.
	PeakAct   int64
	PeakMicro int
	// ParamBytes, GradBytes and OptimBytes are the bytes of the
	// parameters, gradients and optimizer state this rank holds between
	// steps; PeakParamBytes and PeakGradBytes the most parameter and
	// gradient bytes it held during the step (ZeRO's gathered layers and
	// buckets in flight included).
	ParamBytes, GradBytes, OptimBytes int64
	PeakParamBytes, PeakGradBytes     int64
	// Sent is the bytes this rank sent in the step's collectives.
	Sent SentBytes
	// SyncBytes is the part of them sent to the part's other replicas:
	// the gradient reduction (and ZeRO's gathers) when they synchronise
	// every step; a round's average, or nothing between rounds, when they
	// synchronise in rounds.
	SyncBytes int64
	// Computed: the forward and backward passes of every micro-batch ran
	// (Result is then this rank's whole share of the step, also when the
	// step failed afterwards, in its gradient sums).
	Computed bool
	// Grads is the gradient an asynchronous replica computed
	// (AsyncCompute): a copy, the caller's.
	Grads []float32
}

// LastStep is the last step a worker ran, applied or not.
type LastStep struct {
	// Step is its index (−1: none).
	Step int
	// Result is what its passes gave, complete when Computed.
	Result
	Computed bool
	// LossScale and LossScaleTracker are the fp16 loss scaler's state it
	// ran with (scale 0: none) and Skipped whether its gradients
	// overflowed and no rank applied it.
	LossScale        float64
	LossScaleTracker int
	Skipped          bool
}

// Step runs one optimizer step. On an error nothing was applied: the update
// runs only after every gradient sum succeeded.
func (w *Worker) Step(ctx context.Context, req StepRequest) (StepResult, error) {
	if w.st == nil || req.Generation != w.gen {
		return StepResult{}, fmt.Errorf("%w: this worker has no place in generation %d", ErrStale, req.Generation)
	}
	if req.Async != nil {
		return w.asyncStep(ctx, req)
	}
	switch {
	case req.Step != w.hold.Applied:
		return StepResult{}, fmt.Errorf("%w: this worker applied %d steps, asked for step %d", ErrStale, w.hold.Applied, req.Step+1)
	}
	if w.spec.KeepUndo {
		w.keepUndo()
	}
	res, err := w.st.step(ctx, req)
	w.last = LastStep{Step: req.Step, Result: res.Result, Computed: res.Computed, LossScale: req.LossScale,
		LossScaleTracker: req.LossScaleTracker, Skipped: res.Skipped}
	if err != nil {
		if w.st.updated {
			w.undoFailedStep(req.Step, err)
		}
		w.hold.Undo = false
		return res, err
	}
	w.hold.Undo, w.hold.UndoCursor = w.spec.KeepUndo, w.hold.Cursor
	w.hold.Applied, w.hold.Cursor = req.Step+1, req.Cursor+data.Cursor(req.Batch)
	return res, nil
}

// undoFailedStep answers a step that failed after this worker's update (a
// ZeRO weight gather that a lost peer broke, leaving the owned chunks
// updated and the others not): the state goes back to the copy from
// before the step (Spec.KeepUndo), or, without one, the worker holds
// nothing, its state being torn.
func (w *Worker) undoFailedStep(step int, cause error) {
	if w.spec.KeepUndo && w.undo != nil {
		for i, b := range w.stateBufs() {
			w.be.Copy(b, w.undo[i])
		}
		w.opt.SetSteps(w.undoSteps)
		w.log.Warn("a step that failed after its update is undone", zap.Int("step", step+1), zap.Error(cause))
		return
	}
	w.hold = Holding{Part: -1, World0: w.hold.World0}
	w.log.Warn("a step failed after its update: this worker's state is torn and dropped", zap.Int("step", step+1), zap.Error(cause))
}

// micro is one micro-batch's state on this stage.
type micro struct {
	lo, hi  int            // rows of the replica's share
	tape    nn.Tape        // saved activations for backward
	in      kernels.Buffer // the stage input, kept for recompute
	recv    nn.Act         // the input activation received
	out     nn.Act         // output activation (to send) or logits' gradient
	grad    nn.Act         // gradient received for the output
	dx      nn.Act         // gradient of the input (to send)
	sendAct *collective.Handle
	sendDx  *collective.Handle
	ids     kernels.Index
	tgt     kernels.Index
	vals    kernels.Buffer // real-valued targets
}

// empty reports whether the micro-batch has no rows (a replica with fewer
// rows than micro-batches, without pipelining).
func (mb *micro) empty() bool { return mb.hi == mb.lo }

// step runs the stage's schedule over the micro-batches, sums and clips
// the gradients, and applies the update: the phases below, in order.
func (s *stepper) step(ctx context.Context, req StepRequest) (StepResult, error) {
	var res StepResult
	start := time.Now()
	s.updated = false
	scale, err := s.begin(req)
	if err != nil {
		return res, err
	}
	scheduleEnd, err := s.compute(ctx, &res, scale, start)
	if err != nil {
		return res, err
	}
	if err := s.sumGradients(ctx, scheduleEnd, &res); err != nil {
		return res, err
	}
	if a := req.Async; a != nil && a.Kind == AsyncCompute {
		// The server applies it: the replica's weights stay the
		// server's version they were given.
		res.Grads = append([]float32(nil), s.host(s.w.model.Set.Grads(), true)...)
		return s.finish(res, start, req, 0)
	}
	norm, err := s.update(ctx, req, &res)
	if err != nil {
		return res, err
	}
	return s.finish(res, start, req, norm)
}

// begin readies a step: this replica's rows of the global batch read
// (the first and last stages), the micro-batches cut, the gradients
// zeroed and the groups' per-step state reset. It returns the loss
// gradient's scale.
func (s *stepper) begin(req StepRequest) (float32, error) {
	w, m := s.w, s.w.model
	M := s.sched.MicroBatches
	lo, hi := data.Split(req.Batch, s.mesh.DP, s.coord.DP)
	rows := hi - lo
	if s.everyMicro && rows < M {
		// Pipelines, and ZeRO-3's gathers, need every rank to run every
		// micro-batch.
		return 0, fmt.Errorf("%w: %d rows for replica %d cannot make %d micro-batches", ErrConfig, rows, s.coord.DP, M)
	}
	if rows > 0 && (m.First() || m.Last()) {
		w.idx = w.sampler.At(req.Cursor+data.Cursor(lo), rows, w.idx)
		w.spec.Train.Fill(w.idx, &w.batch)
	}
	m.Set.ZeroGrads()
	w.pool.ResetPeak()
	s.peak = 0
	for k := range s.mbs {
		mlo, mhi := data.Split(rows, M, k)
		s.mbs[k] = micro{lo: mlo, hi: mhi, ids: s.mbs[k].ids, tgt: s.mbs[k].tgt, vals: s.mbs[k].vals}
	}
	return s.lossScale(req), nil
}

// lossScale is the factor of the loss gradient: the inverse of the global
// batch's loss terms, times fp16's loss scale, times the replicas when
// each steps on its own gradient.
func (s *stepper) lossScale(req StepRequest) float32 {
	if req.GlobalTargets <= 0 {
		return 0
	}
	scale := float32(1 / float64(req.GlobalTargets))
	if req.LossScale > 0 {
		// fp16: the loss gradient scaled up, so that the small gradients
		// flowing back stay above fp16's smallest values; unscale divides
		// them back before the update.
		scale = float32(req.LossScale / float64(req.GlobalTargets))
	}
	return scale * s.lossFactor
}

// compute runs the schedule's passes, sends and receives (the
// data-parallel buckets and ZeRO's gathers overlapping them), times them
// into res from the step's start, and returns when the schedule ended. On
// an error every operation is drained and the step's state cleared.
func (s *stepper) compute(ctx context.Context, res *StepResult, scale float32, start time.Time) (time.Time, error) {
	s.reduce.start(ctx)
	s.weights.start()
	s.tp.reset(ctx)
	s.meter.Take()
	s.syncMeter.Take()
	var busy time.Duration
	err := s.weights.refresh()
	if d := s.w.spec.delayAt(s.rank); d > 0 && err == nil {
		// A test's straggler: computing longer, its peers waiting for it
		// in the step's collectives.
		t := time.NewTimer(d)
		select {
		case <-t.C:
			busy = d
		case <-ctx.Done():
			t.Stop()
			err = context.Cause(ctx)
		}
	}
	if err == nil {
		var b time.Duration
		b, err = s.runSchedule(ctx, res, scale)
		busy += b
	}
	// Whatever happened, no operation may own a buffer after the step.
	if derr := s.drain(); err == nil {
		err = derr
	}
	if err != nil {
		s.reduce.abandon()
		s.clear()
		return time.Time{}, err
	}
	end := time.Now()
	res.Computed = true
	res.ScheduleMs = msOf(end.Sub(start))
	// The passes waited for every tensor-parallel collective.
	res.ComputeMs = msOf(busy - s.tp.busy())
	res.addExposed(s.tp.busy())
	return end, nil
}

// update applies the summed gradients: unscaled and checked for overflow
// under fp16 (a skipped step on every rank), clipped, the optimizer's
// step, then the reduction's and the weights' phases after it (a
// synchronisation round where one ends, ZeRO-1/2's gather of the updated
// weights). It returns the gradient norm (0 when skipped).
func (s *stepper) update(ctx context.Context, req StepRequest, res *StepResult) (float64, error) {
	var err error
	if req.LossScale > 0 {
		if res.Skipped, err = s.unscale(ctx, res, req); err != nil {
			return 0, err
		}
	}
	var norm float64
	if !res.Skipped {
		if norm, err = s.clip(ctx, res); err != nil {
			return 0, err
		}
		s.w.opt.Step(float32(req.LR))
		s.updated = true
	}
	// A synchronisation round that ends here ends also after a skipped
	// update.
	ended, err := s.reduce.afterUpdate(ctx, req, res)
	if err != nil {
		return 0, err
	}
	s.updated = s.updated || ended
	if res.Skipped {
		// The step's update is not applied (a round that ended here
		// was): the optimizer state and its step count stay; the next
		// step zeroes the gradients.
		return 0, nil
	}
	if err := s.weights.afterUpdate(ctx, res); err != nil {
		return 0, fmt.Errorf("stage %d: %w", s.coord.PP, err)
	}
	return norm, nil
}

// finish fills a step's result after its update (or its skip).
func (s *stepper) finish(res StepResult, start time.Time, req StepRequest, norm float64) (StepResult, error) {
	w := s.w
	if err := w.be.Sync(); err != nil {
		return res, err
	}
	res.GradNorm = norm
	if req.Checksum {
		res.Checksum = w.Checksum()
	}
	res.StepMs = msOf(time.Since(start))
	res.PeakAct = w.pool.PeakBytes()
	s.weights.held(&res)
	s.grads.held(&res)
	for _, st := range w.opt.States() {
		res.OptimBytes += 4 * int64(st.Buf.Len())
	}
	res.Sent = sentOf(s.meter.Take())
	for _, n := range s.syncMeter.Take() {
		res.SyncBytes += n
	}
	res.PeakMicro = s.peak
	return res, nil
}
