package worker

import (
	"context"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
)

// Option configures a Worker's optional collaborators.
type Option func(*Worker)

// WithLogger logs what the worker does to its state (roll-backs, restores).
func WithLogger(l *zap.Logger) Option { return func(w *Worker) { w.log = l } }

// WithRecorder records every op of the worker's pipeline stage, and the
// activations it holds, into rec (bubble accounting and traces).
func WithRecorder(rec *pipeline.Recorder) Option { return func(w *Worker) { w.rec = rec } }

// Worker is one rank's model part, optimizer and step machinery.
//
// A Worker is owned by one goroutine (its actor's); its backend too.
type Worker struct {
	spec *Spec
	be   kernels.Backend
	log  *zap.Logger
	rec  *pipeline.Recorder

	hold  Holding
	last  LastStep
	built int // the part the model is built for, −1 before any
	model *nn.Model
	opt   optim.Optimizer
	// optRanges are the flat ranges a ZeRO-sharded optimizer updates (nil:
	// the whole part).
	optRanges []optim.Range
	undo      []kernels.Buffer // Spec.KeepUndo: the state before the last step

	pool    *nn.Pool
	sampler *data.Sampler
	batch   data.Batch
	idx     []int

	// The generation, set by Form.
	gen  uint64
	mesh mesh.Mesh
	rank int // −1: standby
	comm collective.Communicator
	st   *stepper // nil on standby
}

// New returns a worker for spec on be that holds nothing yet; Form gives
// it a place and a model part.
func New(spec *Spec, be kernels.Backend, opts ...Option) (*Worker, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	s, err := data.NewSampler(spec.Train.Len(), spec.Seed, spec.Shuffle)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	w := &Worker{spec: spec, be: be, log: zap.NewNop(), hold: NoHolding, last: LastStep{Step: -1}, built: -1, rank: -1, pool: nn.NewPool(be), sampler: s}
	for _, o := range opts {
		o(w)
	}
	return w, nil
}

// Holding is what the worker holds.
func (w *Worker) Holding() Holding { return w.hold }

// Last is the last step the worker ran, applied or not.
func (w *Worker) Last() LastStep { return w.last }

// Rank is the worker's rank in its generation (−1: standby or not formed).
func (w *Worker) Rank() int { return w.rank }

// Generation is the generation the worker was last formed in.
func (w *Worker) Generation() uint64 { return w.gen }

// Backend is the worker's kernels backend.
func (w *Worker) Backend() kernels.Backend { return w.be }

// Form places the worker in generation f, with comm as its communicator
// over the generation's ranks (nil for a standby worker or a world of
// one). The worker owns comm from then on and closes it at the next Form
// or at Close. On an error the worker is left without a place (standby,
// holding what the error message says) and must be formed again.
func (w *Worker) Form(ctx context.Context, f Form, comm collective.Communicator) error {
	w.leave()
	w.comm = comm
	plan, err := w.hold.Plan(f, w.built)
	if err != nil {
		return err
	}
	w.gen = f.Generation
	w.hold.World0 = f.World0
	if plan.RollBack {
		w.rollBack()
		w.hold.Applied, w.hold.Cursor = w.hold.Applied-1, w.hold.UndoCursor
	}
	w.hold.Undo = false
	if plan.Drop {
		w.hold = Holding{Part: -1, World0: f.World0}
	}
	if f.Standby() {
		w.hold = plan.Next
		return nil
	}
	if plan.Build >= 0 {
		w.hold.Part = -1
		if err := w.buildPart(plan.Build); err != nil {
			return err
		}
	}
	st, err := newStepper(w, f.Mesh, f.Rank, comm)
	if err != nil {
		return err
	}
	if st.zero != nil && st.zeroMoved && plan.Restore == 0 && plan.Next.Applied > 0 {
		st.release()
		w.hold.Part = -1
		return fmt.Errorf("%w: this worker's ZeRO shard of the optimizer state changed with the world; only a checkpoint can give it the new one", ErrNoState)
	}
	switch {
	case plan.Restore > 0:
		w.hold.Part = -1 // a failed restore leaves a mix
		if err := w.restore(plan.Restore); err != nil {
			st.release()
			return err
		}
	case plan.Root >= 0:
		if plan.Root != f.Rank {
			w.hold.Part = -1 // a failed transfer leaves a mix; the root keeps its state
		}
		if err := st.broadcastState(ctx, plan.Root); err != nil {
			st.release()
			return err
		}
	}
	w.hold = plan.Next
	w.opt.SetSteps(w.hold.Applied)
	w.mesh, w.rank, w.st = f.Mesh, f.Rank, st
	return nil
}

// leave drops the worker's place in its generation.
func (w *Worker) leave() {
	if w.st != nil {
		w.st.release()
		w.st = nil
	}
	if w.comm != nil {
		w.comm.Close()
		w.comm = nil
	}
	w.rank = -1
}

// Close releases the worker's place; the worker holds its state still.
func (w *Worker) Close() { w.leave() }

// buildPart makes the worker hold model part st (a stage's shard), built
// from the seed (or Spec.Init); the state is the seed's until a restore or
// a transfer replaces it.
func (w *Worker) buildPart(st int) error {
	m, opt, err := w.spec.buildPart(w.be, st)
	if err != nil {
		return err
	}
	for _, b := range w.undo {
		w.be.Free(b)
	}
	w.model, w.opt, w.built, w.undo, w.optRanges = m, opt, st, nil, nil
	return nil
}

// shardOptimizer makes the optimizer update only ranges (ZeRO), keeping
// its step count; it reports whether that replaced the optimizer (and so
// its state), which an already sharded one with the same ranges does not.
func (w *Worker) shardOptimizer(ranges []optim.Range) (bool, error) {
	return w.shardOptimizerWith(ranges, nil, nil)
}

// shardOptimizerWith is shardOptimizer with the ranges' gradients read
// from grads (ZeRO-2) and their weights updated in weights (ZeRO-3); with
// either it always replaces the optimizer, whose buffers are new.
func (w *Worker) shardOptimizerWith(ranges []optim.Range, grads, weights kernels.Buffer) (bool, error) {
	if grads == nil && weights == nil && w.optRanges != nil && slices.Equal(w.optRanges, ranges) {
		return false, nil
	}
	opt, err := optim.NewShardWith(w.model.Set, w.spec.Optim, ranges, grads, weights)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	opt.SetSteps(w.opt.Steps())
	for _, b := range w.undo {
		w.be.Free(b)
	}
	w.opt, w.optRanges, w.undo = opt, ranges, nil
	return true, nil
}

// restore loads the part's weights and optimizer state from the
// checkpoint of step.
func (w *Worker) restore(step int) error {
	ck, err := checkpoint.Open(checkpoint.OSFS{}, w.spec.CkptDir, int64(step))
	if err != nil {
		return err
	}
	defer ck.Close()
	if err := ck.Restore(w.model.Set, w.opt); err != nil {
		return fmt.Errorf("restoring part %d from checkpoint step %d: %w", w.built, step, err)
	}
	w.log.Info("model part restored from a checkpoint", zap.Int("part", w.built), zap.Int("step", step))
	return nil
}

// State is the model part and optimizer the worker holds (nil before it
// holds any), for a checkpoint taken between steps.
func (w *Worker) State() (*nn.Model, optim.Optimizer) { return w.model, w.opt }

// Weights returns the part's parameters on the host (a tensor-parallel
// shard's, see nn.Layout), without the copy of the tied embedding a last
// stage keeps (the first stage reports it), so that without tensor
// parallelism the stages' weights in order concatenate to the whole
// model's.
// With ZeRO-3 the ranks of the part's shard group gather them together:
// each of them must be asked.
func (w *Worker) Weights(ctx context.Context) ([]float32, error) {
	if w.model == nil {
		return nil, nil
	}
	var flat []float32
	if g := w.zeroWeights(); g != nil {
		var err error
		if flat, err = g.gatherAll(ctx); err != nil {
			return nil, err
		}
	} else {
		flat = w.model.Set.HostWeights()
	}
	if t := w.model.Tied; t != nil && !w.model.First() {
		flat = flat[:t.Offset]
	}
	return flat, nil
}

// zeroWeights is the ZeRO-3 weight memory of the worker's generation (nil
// without).
func (w *Worker) zeroWeights() *zeroWeights {
	if w.st == nil {
		return nil
	}
	return w.st.zeroWeights()
}

// Checksum is the hash of every parameter the worker holds (0: none);
// with ZeRO-3, of the weights it owns.
func (w *Worker) Checksum() uint64 {
	if w.model == nil || w.hold.Part < 0 {
		return 0
	}
	if w.st != nil {
		return w.st.checksum()
	}
	return Checksum(w.model.Set.HostWeights())
}

// stateBufs are the buffers of the part's training state: its weights
// and its optimizer's state.
func (w *Worker) stateBufs() []kernels.Buffer {
	bufs := []kernels.Buffer{w.model.Set.Weights()}
	for _, st := range w.opt.States() {
		bufs = append(bufs, st.Buf)
	}
	return bufs
}

// keepUndo copies the part's state before a step, into buffers allocated
// once per part.
func (w *Worker) keepUndo() {
	bufs := w.stateBufs()
	if len(w.undo) != len(bufs) {
		for _, b := range w.undo {
			w.be.Free(b)
		}
		w.undo = make([]kernels.Buffer, len(bufs))
		for i, b := range bufs {
			w.undo[i] = w.be.Alloc(b.Len())
		}
	}
	for i, b := range bufs {
		w.be.Copy(w.undo[i], b)
	}
}

// rollBack restores the copy keepUndo made (Holding.Plan checked that it
// belongs to the step before the one held).
func (w *Worker) rollBack() {
	for i, b := range w.stateBufs() {
		w.be.Copy(b, w.undo[i])
	}
	w.log.Info("torn step undone", zap.Int("from_step", w.hold.Applied), zap.Int("to_step", w.hold.Applied-1))
}
