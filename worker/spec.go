package worker

import (
	"fmt"
	"time"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
)

// Spec is what every worker of a job shares: the model and its cut into
// pipeline stages, the schedule, the optimizer, the data. It is read-only
// once a worker is built from it.
type Spec struct {
	// Model is the whole model's architecture.
	Model nn.Spec
	// Cuts are the units of each pipeline stage, in stage order; one range
	// covering every unit means no pipelining.
	Cuts []pipeline.Range
	// TP is the number of tensor-parallel shards of every stage (0 or 1:
	// none); SP adds sequence parallelism (sequence models only).
	TP int
	SP bool
	// Schedule is the pipeline schedule (ignored with one stage, which
	// runs its micro-batches one after the other).
	Schedule pipeline.Kind
	// MicroBatches is the number of micro-batches of each replica's share
	// of a step: gradient accumulation with one stage, the pipeline's
	// micro-batches with several.
	MicroBatches int
	// Recompute keeps only each stage's input in the forward pass and
	// recomputes the rest before the backward pass (pipelines only).
	Recompute bool
	// Optim is the optimizer; ClipNorm clips the global gradient norm (0:
	// off).
	Optim    optim.Config
	ClipNorm float64
	// BucketBytes caps a gradient bucket of the data-parallel all-reduce
	// (≤ 0: 25 MiB, PyTorch's default).
	BucketBytes int64
	// Zero is the ZeRO stage over the data-parallel axis (0: none; 1:
	// optimizer state sharded; 2: gradients too; 3: weights too);
	// ZeroGroup the size of its shard groups (0: the whole data-parallel
	// group; a divisor of it: hybrid sharding, the groups replicating each
	// other).
	Zero, ZeroGroup int
	// Seed initialises the weights and drives the sampler; Init, when set,
	// is a safetensors file of initial weights (PyTorch names).
	Seed uint64
	Init string
	// Shuffle draws each epoch in a new order.
	Shuffle bool
	// Train and Test are this worker's handles on the data (every worker
	// opens the same data); Test may be nil.
	Train, Test data.Dataset
	// CkptDir is where a worker restores its stage from when a generation
	// takes its state from a checkpoint.
	CkptDir string
	// KeepUndo keeps a copy of the stage's state from before each step, so
	// that a step some stages applied and others did not (a torn pipeline
	// step) can be undone: elastic pipelines set it. With it, a step that
	// fails after this worker's update (a ZeRO weight gather that a lost
	// peer broke) is undone at once; without it, such a worker holds
	// nothing afterwards.
	KeepUndo bool
	// Precision is the compute type: kernels.F32 (the zero value), or
	// kernels.BF16 or F16 for mixed precision (fp32 master weights and
	// optimizer state, GEMMs in the low type with fp32 accumulation, saved
	// activations in the low type; see nn.Ctx.SetPrecision).
	Precision kernels.DType
	// ReduceDType is the type gradients travel in between replicas: F32
	// (the zero value), or BF16 or F16, half the bytes, each hop of the
	// ring rounding its sums (collective.ReduceOp.In). It applies to the
	// data-parallel all-reduce, ZeRO's reduce-scatter and replicate
	// all-reduce, and the tied embedding's sum across stages.
	ReduceDType kernels.DType
	// Sync is how the data-parallel replicas synchronise: every step
	// (the zero value), or in rounds (local SGD, DiLoCo) whose ends the
	// step loop marks (StepRequest.Round).
	Sync Sync
	// Straggler, when set, makes the worker at its mesh rank compute
	// Delay longer every step: a slow replica for tests of straggler
	// detection (a binary built with -tags troupetesthooks sets it from
	// TROUPE_TEST_STRAGGLER=RANK:DELAY).
	Straggler *Straggler
	// Overflow, when set, puts an inf into the gradient of the worker at
	// its mesh rank in its step: the loss scaler's skip for tests
	// (a binary built with -tags troupetesthooks sets it from
	// TROUPE_TEST_OVERFLOW=RANK:STEP).
	Overflow *Overflow
}

// Overflow is a test's overflowing gradient: the worker at Rank finds an
// inf in its gradients at (1-based) Step.
type Overflow struct {
	Rank, Step int
}

// ZeroGroupIn is the ZeRO shard group size in world m (0: no ZeRO).
func (s *Spec) ZeroGroupIn(m mesh.Mesh) int {
	switch {
	case s.Zero == 0:
		return 0
	case s.ZeroGroup > 0:
		return s.ZeroGroup
	}
	return m.DP
}

// PP is the number of pipeline stages, one per cut (mesh.Mesh.PP).
func (s *Spec) PP() int { return len(s.Cuts) }

// TPSize is the number of tensor-parallel shards of a stage: TP, 0 read
// as 1 (mesh.Mesh.TP; a method cannot share the field's name).
func (s *Spec) TPSize() int { return max(1, s.TP) }

// Parts is the number of model parts a replica is cut into: each stage's
// shards (see mesh.Mesh.Part).
func (s *Spec) Parts() int { return s.PP() * s.TPSize() }

// place is part's tensor-parallel place.
func (s *Spec) place(part int) nn.TP {
	return nn.TP{Rank: part % s.TPSize(), Size: s.TPSize(), SP: s.SP}
}

// Validate checks the spec.
func (s *Spec) Validate() error {
	if err := s.Model.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if len(s.Cuts) == 0 || s.Cuts[0].Lo != 0 || s.Cuts[len(s.Cuts)-1].Hi != s.Model.Units() {
		return fmt.Errorf("%w: stage cuts %v do not cover the model's %d units", ErrConfig, s.Cuts, s.Model.Units())
	}
	for i := 1; i < len(s.Cuts); i++ {
		if s.Cuts[i].Lo != s.Cuts[i-1].Hi || s.Cuts[i].Hi <= s.Cuts[i].Lo {
			return fmt.Errorf("%w: stage cuts %v are not contiguous", ErrConfig, s.Cuts)
		}
	}
	if s.TP < 0 {
		return fmt.Errorf("%w: %d tensor-parallel shards", ErrConfig, s.TP)
	}
	if s.Zero < 0 || s.Zero > 3 || s.ZeroGroup < 0 {
		return fmt.Errorf("%w: ZeRO stage %d with groups of %d (stages 0 to 3)", ErrConfig, s.Zero, s.ZeroGroup)
	}
	if err := nn.CheckTPOf(s.Model, s.place(0)); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if s.MicroBatches < 1 {
		return fmt.Errorf("%w: %d micro-batches", ErrConfig, s.MicroBatches)
	}
	if s.Recompute && s.PP() == 1 {
		return fmt.Errorf("%w: recompute needs pipeline stages", ErrConfig)
	}
	if s.Train == nil {
		return fmt.Errorf("%w: no training data", ErrConfig)
	}
	if err := s.Sync.Validate(); err != nil {
		return err
	}
	// (Under async, ZeRO shards the parameter servers' state: the
	// replicas hold none.)
	if s.Sync.Local() && s.Zero > 0 {
		return fmt.Errorf("%w: %v keeps each replica's optimizer whole; ZeRO shards it among the replicas (use --zero 0)", ErrConfig, s.Sync.Mode)
	}
	if s.Sync.Async() && (s.PP() > 1 || s.TPSize() > 1) {
		return fmt.Errorf("%w: asynchronous training runs whole replicas (no pipeline stages, no tensor parallelism)", ErrConfig)
	}
	return nil
}

// schedule builds the schedule of a world of the spec's stages.
func (s *Spec) schedule() (*pipeline.Schedule, error) {
	c := pipeline.Config{Kind: s.Schedule, Stages: s.PP(), MicroBatches: s.MicroBatches, Recompute: s.Recompute}
	if c.Stages == 1 {
		c.Kind = pipeline.Kind1F1B // one stage: forward and backward of each micro-batch in turn
	}
	sched, err := pipeline.Build(c)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return sched, nil
}

// buildPart makes model part part (a stage's tensor-parallel shard) on
// be, with weights from the seed or from Init, and its optimizer.
func (s *Spec) buildPart(be kernels.Backend, part int) (*nn.Model, optim.Optimizer, error) {
	cut := s.Cuts[part/s.TPSize()]
	m, err := nn.BuildShard(be, s.Model, s.Seed, cut.Lo, cut.Hi, s.place(part))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if s.Init != "" {
		load := m.Set.LoadWeights
		if cut.Lo != 0 || cut.Hi != s.Model.Units() {
			load = m.Set.LoadStageWeights
		}
		if err := load(s.Init); err != nil {
			return nil, nil, err
		}
	}
	opt, err := optim.New(m.Set, s.Optim)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if s.Sync.Local() {
		opt = newRounds(m.Set, opt, s.Sync)
	}
	return m, opt, nil
}

// Straggler is a test's slow worker: the one at Rank computes Delay
// longer every step.
type Straggler struct {
	Rank  int
	Delay time.Duration
}

// delayAt is how much longer the worker at rank computes every step.
func (s *Spec) delayAt(rank int) time.Duration {
	if s.Straggler == nil || s.Straggler.Rank != rank {
		return 0
	}
	return s.Straggler.Delay
}
