package ddp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/replica"
)

// WorkerConfig is one data-parallel rank.
type WorkerConfig struct {
	// Rank and World place this replica among the data-parallel ranks.
	Rank, World int
	// Replica is the model, optimizer and backend of this rank.
	Replica *replica.Replica
	// Comm all-reduces gradients among the World ranks (nil when World is 1).
	Comm collective.Communicator
	// Train and Test are this rank's handles on the datasets (every rank
	// opens the same data).
	Train, Test data.Dataset
	// Shuffle and Seed make this rank's sampler, identical on every rank.
	Shuffle bool
	Seed    uint64
	// BucketBytes caps a gradient bucket (≤ 0: 25 MiB).
	BucketBytes int64
	// ClipNorm clips the averaged gradient's global norm (0: off).
	ClipNorm float64
}

// StepRequest is one optimizer step of the global batch at Cursor.
type StepRequest struct {
	Generation, Step uint64
	Cursor           data.Cursor
	Batch, Accum     int
	LR               float64
	// GlobalTargets is the number of loss terms in the global batch; the
	// gradient is scaled by its inverse and summed over ranks.
	GlobalTargets int
	Checksum      bool
}

// StepResult is one rank's share of a step.
type StepResult struct {
	replica.Result
	StepMs, ComputeMs float64
	Overlap
	GradNorm float64
	Checksum uint64
	PeakAct  int64
	// PeakMicro is the most micro-batches whose activations were alive at
	// once (pipeline stages).
	PeakMicro int
	// ScheduleMs is the time until the last backward ended (for a pipeline
	// stage: its schedule, waits included).
	ScheduleMs float64
	// Spans and Mem are what a pipeline stage recorded in the step, set
	// where its trace goes to another process (--trace with --procs).
	Spans []pipeline.Span
	Mem   []pipeline.MemEvent
}

// Stepper is what a Worker actor drives: a data-parallel replica (Worker)
// or a pipeline stage (package stage).
type Stepper interface {
	Step(ctx context.Context, req StepRequest) (StepResult, error)
	Evaluate(lo, hi int) (replica.Result, int, error)
	Weights() []float32
	// State is the model part and optimizer this worker holds, for a
	// checkpoint taken between steps.
	State() (*nn.Model, optim.Optimizer)
}

var _ Stepper = (*Worker)(nil)

// Worker runs data-parallel steps on one rank: forward and backward on its
// rows, gradient buckets all-reduced as soon as backward makes them, then
// the optimizer update, which every rank applies identically.
//
// A Worker is owned by one goroutine (its actor's).
type Worker struct {
	cfg     WorkerConfig
	plan    *Plan
	tracker *Tracker
	sampler *data.Sampler
	be      kernels.Backend
	batch   data.Batch
	idx     []int
	grads   []float32 // the host view of the gradients (or staging)
	host    bool      // grads aliases the backend's gradient buffer
	handles []*collective.Handle
	ready   []int
	hookErr error
	ctx     context.Context
	first   time.Time
}

// NewWorker prepares a rank.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if cfg.World < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.World {
		return nil, fmt.Errorf("ddp: rank %d of %d", cfg.Rank, cfg.World)
	}
	if cfg.World > 1 && cfg.Comm == nil {
		return nil, errors.New("ddp: a world of several ranks needs a communicator")
	}
	set := cfg.Replica.Model.Set
	plan, err := NewPlan(set, cfg.BucketBytes)
	if err != nil {
		return nil, err
	}
	s, err := data.NewSampler(cfg.Train.Len(), cfg.Seed, cfg.Shuffle)
	if err != nil {
		return nil, fmt.Errorf("ddp: %w", err)
	}
	w := &Worker{cfg: cfg, plan: plan, tracker: NewTracker(plan), sampler: s, be: cfg.Replica.Be}
	if hm, ok := w.be.(kernels.HostMemory); ok {
		w.grads, w.host = hm.HostSlice(set.Grads()), true
	} else {
		w.grads = make([]float32, set.Len())
	}
	return w, nil
}

// Plan is the worker's bucket plan.
func (w *Worker) Plan() *Plan { return w.plan }

// Step runs one optimizer step. On error nothing was applied to the
// parameters (the update runs only after every bucket's all-reduce
// succeeded), so the step can be retried.
func (w *Worker) Step(ctx context.Context, req StepRequest) (StepResult, error) {
	var res StepResult
	start := time.Now()
	r := w.cfg.Replica
	if req.Accum < 1 {
		req.Accum = 1
	}
	lo, hi := data.Split(req.Batch, w.cfg.World, w.cfg.Rank)
	rows := hi - lo
	w.idx = w.sampler.At(req.Cursor+data.Cursor(lo), rows, w.idx)
	r.ZeroGrads()
	r.Pool.ResetPeak()
	scale := float32(0)
	if req.GlobalTargets > 0 {
		scale = float32(1 / float64(req.GlobalTargets))
	}
	w.ctx, w.hookErr, w.handles, w.first = ctx, nil, w.handles[:0], time.Time{}
	w.tracker.Reset()
	if rows > 0 {
		w.cfg.Train.Fill(w.idx, &w.batch)
	}
	for k := 0; k < req.Accum; k++ {
		mlo, mhi := data.Split(rows, req.Accum, k)
		last := k == req.Accum-1
		var hook func(*nn.Param)
		if last && w.cfg.World > 1 {
			hook = w.onGradReady
		}
		if mhi == mlo {
			continue
		}
		out, err := r.ForwardBackward(&w.batch, mlo, mhi, scale, hook)
		if err != nil {
			w.abandon()
			return res, err
		}
		res.LossSum += out.LossSum
		res.Targets += out.Targets
		res.Correct += out.Correct
	}
	backwardEnd := time.Now()
	res.ScheduleMs = msOf(backwardEnd.Sub(start))
	if w.cfg.World > 1 {
		// A rank whose last micro-batch was empty contributed no hooks:
		// launch whatever is left (zero or accumulated gradients).
		for _, p := range r.Model.Set.Params() {
			if w.tracker.Done() {
				break
			}
			if !w.tracker.seen[w.plan.index[p]] {
				w.onGradReady(p)
			}
		}
		if w.hookErr != nil {
			w.abandon()
			return res, w.hookErr
		}
		if err := collective.WaitAll(w.handles...); err != nil {
			return res, fmt.Errorf("ddp: rank %d: gradient all-reduce: %w", w.cfg.Rank, err)
		}
		lastEnd := time.Now()
		if !w.host {
			r.Be.Upload(r.Model.Set.Grads(), w.grads)
		}
		res.Overlap = MeasureOverlap(w.first, backwardEnd, lastEnd)
	}
	norm, err := r.Update(req.LR, w.cfg.ClipNorm)
	if err != nil {
		return res, err
	}
	res.GradNorm = norm
	if req.Checksum {
		res.Checksum = Checksum(r.Model.Set.HostWeights())
	}
	res.StepMs = msOf(time.Since(start))
	res.ComputeMs = res.StepMs - res.ExposedMs
	res.PeakAct = r.Pool.PeakBytes()
	return res, nil
}

// onGradReady starts the all-reduce of every bucket the tracker releases.
func (w *Worker) onGradReady(p *nn.Param) {
	if w.hookErr != nil {
		return
	}
	var err error
	w.ready, err = w.tracker.Ready(p, w.ready[:0])
	if err != nil {
		w.hookErr = err
		return
	}
	for _, k := range w.ready {
		b := w.plan.Buckets[k]
		buf := w.grads[b.Lo:b.Hi]
		if !w.host {
			w.be.Download(buf, w.be.View(w.cfg.Replica.Model.Set.Grads(), b.Lo, b.Len()))
		}
		if w.first.IsZero() {
			w.first = time.Now()
		}
		w.handles = append(w.handles, w.cfg.Comm.AllReduce(w.ctx, buf, collective.Sum))
	}
}

// abandon waits for the all-reduces already started, so that no operation
// still owns the gradient buffer when the step returns its error.
func (w *Worker) abandon() {
	_ = collective.WaitAll(w.handles...)
}

// Evaluate runs held-out samples [lo, hi) forward.
func (w *Worker) Evaluate(lo, hi int) (replica.Result, int, error) {
	if w.cfg.Test == nil {
		return replica.Result{}, 0, errors.New("ddp: no held-out data")
	}
	if lo < 0 || hi > w.cfg.Test.Len() || lo >= hi {
		return replica.Result{}, 0, fmt.Errorf("ddp: held-out rows [%d, %d) outside [0, %d)", lo, hi, w.cfg.Test.Len())
	}
	w.idx = w.idx[:0]
	for i := lo; i < hi; i++ {
		w.idx = append(w.idx, i)
	}
	var b data.Batch
	w.cfg.Test.Fill(w.idx, &b)
	res, err := w.cfg.Replica.Evaluate(&b, 0, b.Rows)
	return res, hi - lo, err
}

// State implements Stepper.
func (w *Worker) State() (*nn.Model, optim.Optimizer) {
	return w.cfg.Replica.Model, w.cfg.Replica.Opt
}

// Weights returns a host copy of the parameters.
func (w *Worker) Weights() []float32 { return w.cfg.Replica.Model.Set.HostWeights() }
