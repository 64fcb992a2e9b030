package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/nn"
)

// A step is the same sequence on every worker: begin, the schedule's
// passes, the gradient sums, the update, the result. What differs with
// the worker's place in the mesh and its spec is how each axis takes part
// in it, and that is chosen once, when the worker is formed: planPhases
// names the phases (a plain function of the mesh and the spec, tested
// without a world) and openPhases builds them. The step calls them
// without asking which they are; an axis the worker does not use gets an
// implementation that does nothing.
//
//   - reduction: how the gradients are summed over the part's replicas
//     (nothing; the buckets all-reduced during the last backward pass;
//     ZeRO's reduce-scatters; nothing until a round ends).
//   - gradMemory: which gradients the optimizer reads (all of them, or a
//     ZeRO rank's owned chunks).
//   - weightMemory: where the weights live (whole on every replica;
//     ZeRO-1/2's, gathered after the update; ZeRO-3's, gathered layer by
//     layer around the passes).
//   - tensorParallel: the group the passes' tensor-parallel layers use.
//
// The sums after the schedule (the replicas', the tensor-parallel
// partial gradients', the tied embedding's) are listed in their order in
// stepper.sums.

// reduceKind is how a step sums the gradients over the part's replicas.
type reduceKind uint8

const (
	// reduceNone: one replica (or an asynchronous replica, which
	// computes alone): nothing to sum.
	reduceNone reduceKind = iota
	// reduceRounds: local SGD and DiLoCo: nothing per step; the replicas
	// average their parameters when a round ends, after the update.
	reduceRounds
	// reduceAllReduce: the buckets all-reduced over the data-parallel
	// group while the last backward pass goes on (PyTorch DDP).
	reduceAllReduce
	// reduceScatter: ZeRO-1: the buckets reduce-scattered over the shard
	// group while the last backward pass goes on, the owned chunks then
	// all-reduced over the replicate group.
	reduceScatter
	// reduceScatterMicro: ZeRO-2 and 3: every micro-batch's buckets
	// reduce-scattered into the owned gradients, the flat gradient buffer
	// gone.
	reduceScatterMicro
)

func (k reduceKind) String() string {
	switch k {
	case reduceNone:
		return "none"
	case reduceRounds:
		return "rounds"
	case reduceAllReduce:
		return "all-reduce"
	case reduceScatter:
		return "reduce-scatter"
	case reduceScatterMicro:
		return "reduce-scatter-micro"
	}
	return fmt.Sprintf("reduce(%d)", uint8(k))
}

// weightKind is where a part's weights live between and during steps.
type weightKind uint8

const (
	// weightsReplicated: every replica holds the whole weights.
	weightsReplicated weightKind = iota
	// weightsGathered: ZeRO-1 and 2: each rank updates its owned chunks,
	// and the shard group all-gathers the updated weights.
	weightsGathered
	// weightsPerLayer: ZeRO-3: each rank holds its owned chunks only; a
	// layer's weights are gathered around each of its passes.
	weightsPerLayer
)

func (k weightKind) String() string {
	switch k {
	case weightsReplicated:
		return "replicated"
	case weightsGathered:
		return "gathered"
	case weightsPerLayer:
		return "per-layer"
	}
	return fmt.Sprintf("weights(%d)", uint8(k))
}

// tiedKind is when the tied embedding's gradient is summed between the
// first and the last stage.
type tiedKind uint8

const (
	// tiedNone: no tied embedding across stages.
	tiedNone tiedKind = iota
	// tiedBefore: before the replicas' sum completes (ZeRO: the stages
	// own different chunks of it, so its bucket waits for the sum).
	tiedBefore
	// tiedAfter: after the replicas' and the tensor-parallel sums.
	tiedAfter
)

func (k tiedKind) String() string {
	switch k {
	case tiedNone:
		return "none"
	case tiedBefore:
		return "before"
	case tiedAfter:
		return "after"
	}
	return fmt.Sprintf("tied(%d)", uint8(k))
}

// phasePlan names the phases of a worker's steps.
type phasePlan struct {
	Reduce  reduceKind
	Weights weightKind
	Tied    tiedKind
	// TP: the passes run tensor-parallel collectives, and the partial
	// gradients are summed over the shards.
	TP bool
}

func (p phasePlan) String() string {
	return fmt.Sprintf("reduce=%v weights=%v tied=%v tp=%t", p.Reduce, p.Weights, p.Tied, p.TP)
}

// planPhases chooses the phases of a worker's steps in world m under
// spec; tied says that the model ties its embedding and output weights.
// Every rank of m gets the same plan.
func planPhases(m mesh.Mesh, spec *Spec, tied bool) phasePlan {
	p := phasePlan{TP: m.TP > 1}
	switch {
	case spec.Sync.Local():
		p.Reduce = reduceRounds
	case m.DP == 1:
		p.Reduce = reduceNone
	case spec.Zero == 0:
		p.Reduce = reduceAllReduce
	case spec.Zero == 1:
		p.Reduce = reduceScatter
	default:
		p.Reduce = reduceScatterMicro
	}
	sharded := p.Reduce == reduceScatter || p.Reduce == reduceScatterMicro
	switch {
	case sharded && spec.Zero >= 3:
		p.Weights = weightsPerLayer
	case sharded:
		p.Weights = weightsGathered
	}
	switch {
	case !tied || m.PP == 1:
	case sharded:
		p.Tied = tiedBefore
	default:
		p.Tied = tiedAfter
	}
	return p
}

// everyMicro says whether every rank must run every micro-batch, rows or
// not: a pipeline's stages exchange them, and ZeRO-3's gathers pair the
// passes of the shard group's ranks.
func (p phasePlan) everyMicro(m mesh.Mesh) bool { return m.PP > 1 || p.Weights == weightsPerLayer }

// reduction sums a step's gradients over the part's replicas. The step
// calls it in order (start, then backward and endBackward around each
// micro-batch's backward pass, then finish, or abandon on a failure, then
// afterUpdate), never concurrently.
type reduction interface {
	// start readies a step under ctx.
	start(ctx context.Context)
	// backward readies micro-batch k's backward pass under c: the hook
	// that starts a bucket's sum when its gradients are final.
	backward(ctx context.Context, k int, c *nn.Ctx)
	// endBackward ends a micro-batch's backward pass: it returns the
	// failure of a sum that pass started.
	endBackward() error
	// finish completes the sums after the schedule (scheduleEnd measures
	// how much of them the schedule hid).
	finish(ctx context.Context, scheduleEnd time.Time, res *StepResult) error
	// abandon waits for the sums in flight of a step that failed, so that
	// no operation still owns a gradient buffer.
	abandon()
	// afterUpdate runs after the update (also a skipped one) and reports
	// whether it changed the weights (a round that ended).
	afterUpdate(ctx context.Context, req StepRequest, res *StepResult) (bool, error)
}

// gradMemory is the gradients the optimizer reads once they are summed.
type gradMemory interface {
	// buf is the buffer the optimizer reads, which the loss scaler and
	// clipping scale.
	buf() kernels.Buffer
	// squares is the sum of squares of the gradients this rank holds for
	// the optimizer; with norm, of those the global norm counts here (not
	// a last stage's tied embedding, not the whole parameters on a
	// tensor-parallel shard other than 0).
	squares(norm bool) float64
	// views calls f with the parts of p's gradient this rank holds.
	views(p *nn.Param, f func(g kernels.Buffer))
	// load takes a whole gradient from the host (a parameter server's).
	load(v []float32)
	// held sets res's gradient bytes.
	held(res *StepResult)
}

// weightMemory is where the weights live.
type weightMemory interface {
	// start readies a step.
	start()
	// refresh makes the compute copies of the weights current before a
	// step's or an evaluation's passes.
	refresh() error
	// pass runs one forward or backward pass f and returns the failure of
	// what the pass needed of the weights.
	pass(ctx context.Context, f func() nn.Act) (nn.Act, error)
	// afterUpdate gives every rank the weights the update changed.
	afterUpdate(ctx context.Context, res *StepResult) error
	// held sets res's parameter bytes.
	held(res *StepResult)
}

// tensorParallel is the group of the stage's shards that the passes'
// tensor-parallel layers use.
type tensorParallel interface {
	// reset starts a step or an evaluation under ctx.
	reset(ctx context.Context)
	// group is the passes' nn.TPGroup (nil: no tensor parallelism).
	group() nn.TPGroup
	// err is the failure of a collective in the passes so far.
	err() error
	// busy is the time the passes spent in its collectives.
	busy() time.Duration
}

// gradSum is one of the sums that complete a step's gradients after the
// schedule (stepper.sums).
type gradSum func(ctx context.Context, scheduleEnd time.Time, res *StepResult) error

// openPhases builds the phases p names, opening ZeRO where it shards, and
// lists the gradient sums in their order.
func (s *stepper) openPhases(p phasePlan) error {
	s.reduce, s.grads, s.weights, s.tp = noReduction{}, wholeGrads{s}, replicatedWeights{s}, noTP{}
	s.lossFactor = 1
	s.everyMicro = p.everyMicro(s.mesh)
	switch p.Reduce {
	case reduceRounds:
		// Each replica steps on its own gradient: its share of the global
		// mean's, times the replicas, so that their average is the global
		// mean's gradient (what a round averages).
		s.reduce, s.lossFactor = roundReduction{s: s}, float32(s.mesh.DP)
	case reduceAllReduce, reduceScatter, reduceScatterMicro:
		s.registerGrads()
		var err error
		if s.reducer, err = newReducer(s, p); err != nil {
			return err
		}
		s.reduce = bucketReduction{s: s, r: s.reducer, owned: noOwnedSum}
		if p.Reduce != reduceAllReduce {
			if err := s.openZero(p); err != nil {
				return err
			}
		}
	}
	var tp *tpGroup
	if p.TP {
		tp = newTPGroup(s.tpComm, s.w.be)
		s.tp = tpPhase{tp}
	}
	if p.Tied == tiedBefore {
		s.sums = append(s.sums, s.sumTiedFirst)
	}
	s.sums = append(s.sums, s.reduce.finish)
	if p.TP {
		s.sums = append(s.sums, s.sumPartialGrads(tp))
	}
	if p.Tied == tiedAfter {
		s.sums = append(s.sums, s.sumTied)
	}
	// The sums of one number each: the squared gradient norm over the
	// ranks it spans (openGroups and openZero opened pipe where there
	// are several), the loss scaler's overflow over the world.
	s.normSum, s.overflowAny = keepNorm, keepOverflow
	if s.pipe != nil {
		s.normSum = s.pipeNorm
	}
	if s.w.comm != nil && s.mesh.Size() > 1 {
		s.overflowAny = s.worldOverflow
	}
	return nil
}

// keepNorm and keepOverflow are normSum and overflowAny of a rank whose
// own value is the whole.
func keepNorm(_ context.Context, sq float64, _ *StepResult) (float64, error) { return sq, nil }

func keepOverflow(_ context.Context, found float32, _ *StepResult) (float32, error) {
	return found, nil
}

// noReduction sums nothing: the worker is the part's only replica.
type noReduction struct{}

func (noReduction) start(context.Context)                                {}
func (noReduction) backward(context.Context, int, *nn.Ctx)               {}
func (noReduction) endBackward() error                                   { return nil }
func (noReduction) finish(context.Context, time.Time, *StepResult) error { return nil }
func (noReduction) abandon()                                             {}
func (noReduction) afterUpdate(context.Context, StepRequest, *StepResult) (bool, error) {
	return false, nil
}

// noTP is the tensor-parallel phase of a part that is not cut.
type noTP struct{}

func (noTP) reset(context.Context) {}
func (noTP) group() nn.TPGroup     { return nil }
func (noTP) err() error            { return nil }
func (noTP) busy() time.Duration   { return 0 }

// tpPhase is the tensor-parallel phase of a part cut into shards.
type tpPhase struct{ g *tpGroup }

func (t tpPhase) reset(ctx context.Context) { t.g.reset(ctx) }
func (t tpPhase) group() nn.TPGroup         { return t.g }
func (t tpPhase) err() error                { return t.g.err }
func (t tpPhase) busy() time.Duration       { return t.g.busy }

var (
	_ reduction      = noReduction{}
	_ reduction      = roundReduction{}
	_ reduction      = bucketReduction{}
	_ reduction      = microReduction{}
	_ tensorParallel = noTP{}
	_ tensorParallel = tpPhase{}
	_ gradMemory     = wholeGrads{}
	_ gradMemory     = rangeGrads{}
	_ gradMemory     = packedGrads{}
	_ weightMemory   = replicatedWeights{}
	_ weightMemory   = gatheredWeights{}
	_ weightMemory   = layerWeights{}
)
