package worker

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
)

// SyncMode is how the data-parallel replicas keep their parameters
// together.
type SyncMode uint8

const (
	// SyncStep reduces the gradients every step (PyTorch DDP): the
	// replicas never differ.
	SyncStep SyncMode = iota
	// SyncLocalSGD steps each replica on its own gradients and averages
	// the parameters at the end of each round (local SGD); the optimizer
	// state stays local.
	SyncLocalSGD
	// SyncDiLoCo steps each replica on its own gradients (the inner
	// optimizer) and, at the end of each round, averages the
	// pseudo-gradients θ_global − θ_local and applies them to the global
	// parameters with an outer SGD with (Nesterov) momentum; every replica
	// then continues from the new global parameters (DiLoCo).
	SyncDiLoCo
	// SyncAsync trains asynchronously with a parameter server: replicas
	// compute gradients on the server's weights without waiting for each
	// other, and the server applies each (AsyncStep) unless it is too
	// stale (package ps). A worker is either a replica or the server;
	// each is one rank of its own.
	SyncAsync
)

func (m SyncMode) String() string {
	switch m {
	case SyncStep:
		return "step"
	case SyncLocalSGD:
		return "local-sgd"
	case SyncDiLoCo:
		return "diloco"
	case SyncAsync:
		return "async"
	}
	return fmt.Sprintf("sync(%d)", uint8(m))
}

// ParseSyncMode reads "step", "local-sgd", "diloco" or "async" ("" is
// step).
func ParseSyncMode(s string) (SyncMode, error) {
	switch s {
	case "", "step":
		return SyncStep, nil
	case "local-sgd", "localsgd":
		return SyncLocalSGD, nil
	case "diloco":
		return SyncDiLoCo, nil
	case "async":
		return SyncAsync, nil
	}
	return 0, fmt.Errorf("%w: sync mode %q: want step, local-sgd, diloco or async", ErrConfig, s)
}

// Sync is how the replicas synchronise (Spec.Sync). When a round ends is
// the step loop's business (StepRequest.Round).
type Sync struct {
	Mode SyncMode
	// OuterLR, OuterMomentum and OuterNesterov are DiLoCo's outer
	// optimizer: torch.optim.SGD on the global parameters, the averaged
	// pseudo-gradient its gradient.
	OuterLR, OuterMomentum float64
	OuterNesterov          bool
	// DType is the type DiLoCo's pseudo-gradients travel in between
	// replicas: F32 (the zero value), or BF16 or F16, half the bytes.
	DType kernels.DType
}

// Local reports whether the replicas step on their own gradients between
// rounds (local SGD, DiLoCo).
func (s Sync) Local() bool { return s.Mode == SyncLocalSGD || s.Mode == SyncDiLoCo }

// Async reports asynchronous training with a parameter server.
func (s Sync) Async() bool { return s.Mode == SyncAsync }

// Validate checks the settings.
func (s Sync) Validate() error {
	switch {
	case s.Mode > SyncAsync:
		return fmt.Errorf("%w: sync mode %v", ErrConfig, s.Mode)
	case s.DType != kernels.F32 && (s.Mode != SyncDiLoCo || !s.DType.Low()):
		return fmt.Errorf("%w: %v rounds cannot send %v (16-bit rounds are DiLoCo's pseudo-gradients)", ErrConfig, s.Mode, s.DType)
	case s.Mode != SyncDiLoCo:
		return nil
	case !(s.OuterLR > 0) || math.IsInf(s.OuterLR, 0):
		return fmt.Errorf("%w: DiLoCo's outer learning rate must be positive, got %g", ErrConfig, s.OuterLR)
	case !(s.OuterMomentum >= 0 && s.OuterMomentum < 1):
		return fmt.Errorf("%w: DiLoCo's outer momentum must be in [0, 1), got %g", ErrConfig, s.OuterMomentum)
	case s.OuterNesterov && s.OuterMomentum == 0:
		return fmt.Errorf("%w: DiLoCo's outer Nesterov momentum needs an outer momentum above 0", ErrConfig)
	}
	return nil
}

// The names of DiLoCo's outer state among a part's optimizer states
// (checkpoint.OptimName gives each parameter's tensor).
const (
	OuterParams   = "outer_params"
	OuterMomentum = "outer_momentum_buffer"
)

// rounds is a part's optimizer when the replicas synchronise in rounds:
// the inner optimizer (its step count and configuration are rounds'),
// and under DiLoCo the outer state beside it, the global parameters (the
// part's weights when the last round ended) and the outer momentum
// buffer. Its States are the inner optimizer's followed by the outer
// ones, so that a checkpoint, the transfer of a replica's state and the
// undo of a step carry them with the rest. The replicas' states differ,
// so a checkpoint takes one replica's whole instead of rows from each (a
// multi-process checkpoint splits the rows of what the replicas hold
// alike among them): every state covers the whole part as one range,
// which checkpoint.Snapshot writes from the owner, replica 0
// (Worker.partOptions), and a restore reads whole.
type rounds struct {
	optim.Optimizer
	global, mom kernels.Buffer // DiLoCo's (nil under local SGD; mom nil without outer momentum)
	states      []optim.State  // the buffers never change: listed once
}

// newRounds wraps inner for s.Mode; under DiLoCo the global parameters
// start as the part's weights.
func newRounds(set *nn.ParamSet, inner optim.Optimizer, s Sync) *rounds {
	be := set.Backend()
	o := &rounds{Optimizer: inner, states: inner.States()}
	if s.Mode == SyncDiLoCo {
		o.global = be.Alloc(set.Len())
		be.Copy(o.global, set.Weights())
		o.states = append(o.states, optim.State{Name: OuterParams, Buf: o.global})
		if s.OuterMomentum > 0 {
			o.mom = be.Alloc(set.Len()) // zeroed
			o.states = append(o.states, optim.State{Name: OuterMomentum, Buf: o.mom})
		}
	}
	for i := range o.states {
		if o.states[i].Ranges == nil {
			o.states[i].Ranges = []optim.Range{{Lo: 0, Hi: set.Len()}}
		}
	}
	return o
}

func (o *rounds) States() []optim.State { return o.states }

// round ends a synchronisation round after the step's update: local SGD
// averages the parameters over the part's data-parallel group; DiLoCo
// averages the pseudo-gradients θ_global − θ_local, steps the global
// parameters with the outer optimizer and makes them the part's weights.
// Nothing of the weights or the outer state changes before the average
// has arrived, so a round that fails leaves the step's local update only
// (which Worker.Step undoes when it kept a copy).
func (s *stepper) round(ctx context.Context, res *StepResult) error {
	sync, set, be := s.w.spec.Sync, s.w.model.Set, s.w.be
	// The gradient buffer is free until the next step zeroes it: what a
	// round averages goes there.
	buf := set.Grads()
	switch sync.Mode {
	case SyncLocalSGD:
		if s.dp == nil {
			return nil // one replica: its parameters are the average
		}
		be.Copy(buf, set.Weights())
		if err := s.average(ctx, res, s.host(buf, true), collective.Avg); err != nil {
			return err
		}
		s.landed(buf)
		be.Copy(set.Weights(), buf)
	case SyncDiLoCo:
		o, ok := s.w.opt.(*rounds)
		if !ok || o.global == nil {
			return fmt.Errorf("%w: a DiLoCo round on a part without outer state", ErrConfig)
		}
		delta := buf // the pseudo-gradient
		be.Copy(delta, o.global)
		be.Axpy(-1, set.Weights(), delta)
		if s.dp != nil {
			if err := s.average(ctx, res, s.host(delta, true), collective.Avg.In(sync.DType)); err != nil {
				return err
			}
			s.landed(delta)
		}
		// torch.optim.SGD's first step sets the buffer to the gradient;
		// with no dampening that is momentum·0 + gradient, what a zeroed
		// buffer gives every round alike.
		be.SGDStep(o.global, delta, o.mom, kernels.SGDHyper{LR: float32(sync.OuterLR), Momentum: float32(sync.OuterMomentum),
			Nesterov: sync.OuterNesterov}, false)
		be.Copy(set.Weights(), o.global)
	}
	return nil
}

// average reduces buf over the part's data-parallel group with op.
func (s *stepper) average(ctx context.Context, res *StepResult, buf []float32, op collective.ReduceOp) error {
	start := time.Now()
	err := s.dp.AllReduce(ctx, buf, op).Wait()
	res.addExposed(time.Since(start))
	if err != nil {
		return fmt.Errorf("stage %d: %v round over the replicas: %w", s.coord.PP, s.w.spec.Sync.Mode, err)
	}
	return nil
}

// adoptGlobal makes a DiLoCo part's weights its global parameters (a
// worker that took its state from another replica starts its round there).
func (w *Worker) adoptGlobal() {
	if o, ok := w.opt.(*rounds); ok && o.global != nil {
		w.be.Copy(w.model.Set.Weights(), o.global)
	}
}
