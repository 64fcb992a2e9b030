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

// WithRegisteredGrads lets the worker move its gradients into registered
// memory (kernels.RegisteredAllocator) when it joins a world whose
// data-parallel peers on this host read that memory in place
// (collective.ReadsRegisteredMemory): every chunk of the gradient
// all-reduce then reaches them with no copy. For a worker that lives as
// long as its process (a rank process of Config.Procs): the memory stays
// registered while the model part is held, and a part built again leaves
// the old part's gradients mapped until the process ends.
func WithRegisteredGrads() Option { return func(w *Worker) { w.registerGrads = true } }

// Worker is one rank's model part, optimizer and step machinery.
//
// A Worker is owned by one goroutine (its actor's); its backend too.
type Worker struct {
	spec *Spec
	be   kernels.Backend
	log  *zap.Logger
	rec  *pipeline.Recorder
	// registerGrads: WithRegisteredGrads
	registerGrads bool

	hold  Holding
	last  LastStep
	built int // the part the model is built for, −1 before any
	model *nn.Model
	opt   optim.Optimizer
	// optRanges are the flat ranges a ZeRO-sharded optimizer updates (nil:
	// the whole part); zgrads and zweights, the buffers it reads their
	// gradients from (ZeRO-2) and updates their weights in (ZeRO-3), the
	// owned chunks end to end (nil below those stages). They live as long
	// as the optimizer, so that a worker formed again for the same shard
	// keeps its state.
	optRanges        []optim.Range
	zgrads, zweights kernels.Buffer
	undo             []kernels.Buffer // Spec.KeepUndo: the state before the last step
	undoSteps        int              // and the optimizer's update count then

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
	if spec.Precision != kernels.F32 {
		if _, ok := kernels.LowPrecisionOf(be); !ok || !spec.Precision.Low() {
			return nil, fmt.Errorf("%w: the %s backend cannot compute in %v", ErrConfig, be.Caps().Device, spec.Precision)
		}
	}
	if r := spec.ReduceDType; r != kernels.F32 && !r.Low() {
		return nil, fmt.Errorf("%w: gradients cannot travel in %v", ErrConfig, r)
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
	if want := w.spec.ZeroGroupIn(f.Mesh); !f.Standby() && f.ZeroGroup != want {
		return fmt.Errorf("%w: a form for ZeRO shard groups of %d, this worker's are %d", ErrConfig, f.ZeroGroup, want)
	}
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
	if st.zeroMoved && plan.Restore == 0 && (plan.Root < 0 || plan.Root == f.Rank) && plan.Next.Applied > 0 {
		st.release()
		w.hold.Part = -1
		return fmt.Errorf("%w: this worker's ZeRO shard changed with the world and no replica of the new one is named; only a checkpoint can give it", ErrNoState)
	}
	switch {
	case plan.Restore > 0:
		w.hold.Part = -1           // a failed restore leaves a mix
		w.model.Set.AllocWeights() // ZeRO-3: settled weights are restored whole, then settled again
		if err := w.restore(plan.Restore); err != nil {
			st.release()
			return err
		}
	case plan.Root >= 0:
		// Replicas that synchronise in rounds differ between them: a
		// replica that holds its part at the generation's step keeps its
		// own state (its progress in the round); the others take the
		// root's, and under DiLoCo start from its global parameters.
		keep := w.spec.Sync.Local() && plan.Build < 0 && w.hold.Part == f.Mesh.Part(f.Rank) && w.hold.Applied == f.Step
		if plan.Root != f.Rank && !keep {
			w.hold.Part = -1 // a failed transfer leaves a mix; the root keeps its state
		}
		if err := st.broadcastState(ctx, plan.Root, keep); err != nil {
			st.release()
			return err
		}
		if plan.Root != f.Rank && !keep {
			w.adoptGlobal()
		}
	}
	// The optimizer's update count came with the state (its own, the
	// checkpoint's, the root replica's): the steps applied less those the
	// loss scaler skipped.
	w.hold = plan.Next
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
	w.dropUndo()
	w.freeShard()
	w.model, w.opt, w.built = m, opt, st
	return nil
}

// shardOptimizer makes the optimizer update only ranges (ZeRO stage
// stage), keeping its step count: at stage 2 it reads their gradients from
// zgrads, at stage 3 updates their weights in zweights. It reports whether
// that replaced the optimizer (and so its state), which one already
// sharded for the same ranges does not. A replaced ZeRO-3 shard leaves the
// part's flat weights present again (their values lost) for a restore or a
// transfer to fill.
func (w *Worker) shardOptimizer(ranges []optim.Range, stage int) (bool, error) {
	if w.optRanges != nil && slices.Equal(w.optRanges, ranges) {
		return false, nil
	}
	n := 0
	for _, r := range ranges {
		n += r.Len()
	}
	var grads, weights kernels.Buffer
	if stage >= 2 {
		grads = w.allocShard(n)
	}
	if stage >= 3 {
		weights = w.allocShard(n)
	}
	opt, err := optim.NewShardWith(w.model.Set, w.spec.Optim, ranges, grads, weights)
	if err != nil {
		for _, b := range []kernels.Buffer{grads, weights} {
			if b != nil {
				w.be.Free(b)
			}
		}
		return false, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	opt.SetSteps(w.opt.Steps())
	w.dropUndo()
	w.freeShard()
	w.opt, w.optRanges, w.zgrads, w.zweights = opt, ranges, grads, weights
	if set := w.model.Set; stage >= 3 && set.Weights() == nil {
		set.AllocWeights()
	}
	return true, nil
}

// allocShard allocates a shard buffer of n elements (an empty view for 0).
func (w *Worker) allocShard(n int) kernels.Buffer {
	b := w.be.Alloc(max(n, 1))
	if n == 0 {
		b = w.be.View(b, 0, 0)
	}
	return b
}

// freeShard frees the ZeRO shard buffers (the optimizer using them is
// being replaced).
func (w *Worker) freeShard() {
	for _, b := range []kernels.Buffer{w.zgrads, w.zweights} {
		if b != nil {
			w.be.Free(b)
		}
	}
	w.optRanges, w.zgrads, w.zweights = nil, nil, nil
}

// dropUndo frees the copy of the state from before the last step.
func (w *Worker) dropUndo() {
	for _, b := range w.undo {
		w.be.Free(b)
	}
	w.undo = nil
	w.hold.Undo = false
}

// settle moves a ZeRO-3 part's weights into its owned shard, once the
// part's flat weights were filled (built from the seed, restored,
// re-made when the shard moved): only the owned chunks are kept, and the
// flat buffer is freed. The state is then in one place: stateBufs, a
// checksum and the passes read the shard.
func (w *Worker) settle() {
	set, be := w.model.Set, w.be
	if w.zweights == nil || set.Weights() == nil {
		return
	}
	off := 0
	for _, r := range w.optRanges {
		be.Copy(be.View(w.zweights, off, r.Len()), be.View(set.Weights(), r.Lo, r.Len()))
		off += r.Len()
	}
	set.ReleaseWeights()
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
// with ZeRO-3, of the weights it owns (equal on the replicas of its shard
// in the other shard groups).
func (w *Worker) Checksum() uint64 {
	if w.model == nil || w.hold.Part < 0 {
		return 0
	}
	w.settle()
	if w.zweights != nil {
		h := make([]float32, w.zweights.Len())
		w.be.Download(h, w.zweights)
		return Checksum(h)
	}
	return Checksum(w.model.Set.HostWeights())
}

// UndoChecksum is Checksum of the parameters from before the last step,
// those a roll back restores (Holding.Undo; 0 without them). A leader
// that undoes a torn step compares members by it: after the roll back,
// Checksum describes the state no longer.
func (w *Worker) UndoChecksum() uint64 {
	if w.model == nil || w.hold.Part < 0 || !w.hold.Undo || len(w.undo) == 0 {
		return 0
	}
	// keepUndo copied stateBufs, whose first buffer is what Checksum hashes.
	h := make([]float32, w.undo[0].Len())
	w.be.Download(h, w.undo[0])
	return Checksum(h)
}

// stateBufs are the buffers of the part's training state: its weights
// (with ZeRO-3 its owned shard of them, settled first) and its
// optimizer's state.
func (w *Worker) stateBufs() []kernels.Buffer {
	w.settle()
	bufs := []kernels.Buffer{w.model.Set.Weights()}
	if w.zweights != nil {
		bufs[0] = w.zweights
	}
	for _, st := range w.opt.States() {
		bufs = append(bufs, st.Buf)
	}
	return bufs
}

// keepUndo copies the part's state before a step, into buffers allocated
// once per part.
func (w *Worker) keepUndo() {
	bufs := w.stateBufs()
	if !sameLens(w.undo, bufs) {
		w.dropUndo()
		w.undo = make([]kernels.Buffer, len(bufs))
		for i, b := range bufs {
			w.undo[i] = w.be.Alloc(b.Len())
		}
	}
	for i, b := range bufs {
		w.be.Copy(w.undo[i], b)
	}
	w.undoSteps = w.opt.Steps()
}

// rollBack restores the copy keepUndo made (Holding.Plan checked that it
// belongs to the step before the one held).
func (w *Worker) rollBack() {
	for i, b := range w.stateBufs() {
		w.be.Copy(b, w.undo[i])
	}
	w.opt.SetSteps(w.undoSteps)
	w.log.Info("torn step undone", zap.Int("from_step", w.hold.Applied), zap.Int("to_step", w.hold.Applied-1))
}

func sameLens(a, b []kernels.Buffer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Len() != b[i].Len() {
			return false
		}
	}
	return true
}
