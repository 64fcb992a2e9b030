package worker

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/internal/shmem"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/nn"
)

// reducer all-reduces a stage's gradients over its data-parallel group in
// buckets, each started as soon as the last backward pass has made its
// gradients final (PyTorch DDP's Reducer, without its threads): the
// communication of the late layers' buckets overlaps the backward pass of
// the early ones. With ZeRO it reduce-scatters them over the shard group
// instead (ZeRO-2: after every micro-batch's backward pass, into the
// bucket buffers zeroGrads binds). The reduction phases (bucketReduction,
// microReduction) drive it; what a bucket's sum is (send) and how the
// step waits for them (wait) are chosen when it is made.
type reducer struct {
	s       *stepper
	plan    *Plan
	tracker *Tracker
	grads   []float32 // the host view of the gradient buffer (or staging); nil with ZeRO-2
	// op is the collective of a bucket of the flat gradients: the
	// data-parallel group's all-reduce, or ZeRO-1's reduce-scatter over
	// the shard group.
	op func(ctx context.Context, buf []float32, red collective.ReduceOp) *collective.Handle
	// send starts bucket k's sum and wait waits for every sum started.
	send    func(k int)
	wait    func() error
	handles []*collective.Handle
	started []int
	ctx     context.Context
	first   time.Time
	err     error // a hook's failure, reported after the backward pass
	// deferred is a bucket that waits until released (−1: none): with
	// ZeRO, the tied embedding's, summed with the other stage first (the
	// stages own different chunks of it).
	deferred int
}

// newReducer makes the reducer of phases p, all-reducing over the
// data-parallel group (openZero changes that).
func newReducer(s *stepper, p phasePlan) (*reducer, error) {
	set := s.w.model.Set
	plan, err := NewPlan(set, s.w.spec.BucketBytes)
	if p.Weights == weightsPerLayer {
		plan, err = NewUnitPlan(s.w.model) // ZeRO-3 gathers layer by layer
	}
	if err != nil {
		return nil, err
	}
	r := &reducer{s: s, plan: plan, tracker: NewTracker(plan), deferred: -1, op: s.dp.AllReduce}
	r.send, r.wait = r.sendFlat, r.waitFlat
	if p.Reduce == reduceAllReduce {
		// Which algorithm each bucket's all-reduce runs (by its size and the
		// replicas' hosts), for the log: "ring×2 hier×3".
		n := map[collective.Algorithm]int{}
		for _, b := range plan.Buckets {
			n[collective.AlgorithmOf(s.dp, b.Len(), s.gradSum())]++
		}
		var algos []string
		for a := collective.AlgoRing; a.Valid(); a++ {
			if n[a] > 0 {
				algos = append(algos, fmt.Sprintf("%s×%d", a, n[a]))
			}
		}
		s.w.log.Info("gradient all-reduce", zap.Int("replicas", s.dp.Size()), zap.Int("buckets", len(plan.Buckets)), zap.String("algorithms", strings.Join(algos, " ")))
	}
	if g := set.Grads(); g != nil { // none once ZeRO-2 released it (a generation before)
		r.grads = s.host(g, false)
	}
	return r, nil
}

// start prepares a backward pass whose gradients are reduced.
func (r *reducer) start(ctx context.Context) {
	r.ctx, r.err, r.handles, r.first = ctx, nil, r.handles[:0], time.Time{}
	r.tracker.Reset()
	r.tracker.Defer(r.deferred)
}

// ready is the backward pass's hook: p's gradient is final.
func (r *reducer) ready(p *nn.Param) {
	if r.err != nil {
		return
	}
	var err error
	if r.started, err = r.tracker.Ready(p, r.started[:0]); err != nil {
		r.err = err
		return
	}
	r.launch(r.started)
}

// launch starts the reduction of buckets ks.
func (r *reducer) launch(ks []int) {
	if r.first.IsZero() && len(ks) > 0 {
		r.first = time.Now()
	}
	for _, k := range ks {
		r.send(k)
	}
}

// sendFlat starts bucket k's sum over the flat gradients' host view.
func (r *reducer) sendFlat(k int) {
	be := r.s.w.be
	b := r.plan.Buckets[k]
	buf := r.grads[b.Lo:b.Hi]
	if r.s.hostMem == nil {
		be.Download(buf, be.View(r.s.w.model.Set.Grads(), b.Lo, b.Len()))
	}
	r.handles = append(r.handles, r.op(r.ctx, buf, r.s.gradSum()))
}

// waitFlat waits for the sums sendFlat started.
func (r *reducer) waitFlat() error { return collective.WaitAll(r.handles...) }

// gradSum is the reduction of gradients between replicas: a sum, in the
// spec's wire type.
func (s *stepper) gradSum() collective.ReduceOp { return collective.Sum.In(s.w.spec.ReduceDType) }

// release starts the deferred bucket.
func (r *reducer) release() {
	if r.deferred >= 0 && r.err == nil {
		r.launch([]int{r.deferred})
	}
}

// launchRest starts the buckets no hook started (a replica whose last
// micro-batch was empty makes no gradients final: it sends its zeros, or
// what earlier micro-batches accumulated).
func (r *reducer) launchRest() {
	for i, p := range r.s.w.model.Set.Params() {
		if r.tracker.Done() {
			break
		}
		if !r.tracker.seen[i] {
			r.ready(p)
		}
	}
}

// finish launches the buckets no hook started and waits for every bucket.
func (r *reducer) finish() error {
	r.launchRest()
	if r.err != nil {
		r.abandon()
		return r.err
	}
	return r.wait()
}

// abandon waits for the reductions already started, so that no operation
// still owns a gradient buffer when the step returns its error.
func (r *reducer) abandon() { _ = r.wait() }

// sumGradients completes the gradient sums after the schedule, in the
// order openPhases listed them: the data-parallel buckets (started during
// the backward passes), the partial gradients of a tensor-parallel part
// over its group, then the tied embedding's between the first and the
// last stage. With ZeRO the tied embedding is summed first (its bucket
// waited for it: the stages own different chunks of it), then its bucket
// goes, and the owned chunks are completed over the replicate group.
func (s *stepper) sumGradients(ctx context.Context, scheduleEnd time.Time, res *StepResult) error {
	for _, sum := range s.sums {
		if err := sum(ctx, scheduleEnd, res); err != nil {
			return err
		}
	}
	return nil
}

// sumTied sums the tied embedding's gradient between the first and the
// last stage.
func (s *stepper) sumTied(ctx context.Context, _ time.Time, res *StepResult) error {
	t := s.w.model.Tied
	buf := s.host(t.G, true)
	start := time.Now()
	err := s.tied.AllReduce(ctx, buf, s.gradSum()).Wait()
	res.addExposed(time.Since(start))
	if err != nil {
		return fmt.Errorf("stage %d: tied embedding gradient sum: %w", s.coord.PP, err)
	}
	s.landed(t.G)
	return nil
}

// sumTiedFirst is sumTied under ZeRO: then the tied embedding's bucket,
// which waited for it, goes.
func (s *stepper) sumTiedFirst(ctx context.Context, scheduleEnd time.Time, res *StepResult) error {
	if err := s.sumTied(ctx, scheduleEnd, res); err != nil {
		return err
	}
	s.reducer.release()
	return nil
}

// sumPartialGrads all-reduces, over the tensor-parallel group, the
// gradients of replicated parameters that each shard computed only a part
// of (nn.Param.PartialGrad: with sequence parallelism the LayerNorms,
// row-parallel biases and positions, which see the shard's rows only; with
// or without it, a weight every shard holds whole but uses only in part,
// such as the k and v projections of a model whose kv heads the shards
// cannot split), in one operation; afterwards every shard holds their
// whole gradients. A part without such parameters sends nothing (every
// shard of a stage has the same layout, so all of them skip alike). With
// ZeRO only the owned parts are summed (the shards of a stage have the
// same layout, so they own the same elements of these parameters).
func (s *stepper) sumPartialGrads(tp *tpGroup) gradSum {
	return func(ctx context.Context, _ time.Time, res *StepResult) error {
		if err := s.sumPartial(ctx, tp.comm, res); err != nil {
			return fmt.Errorf("stage %d: tensor-parallel partial gradient sum: %w", s.coord.PP, err)
		}
		return nil
	}
}

// sumPartial is sumPartialGrads over comm.
func (s *stepper) sumPartial(ctx context.Context, comm collective.Communicator, res *StepResult) error {
	be := s.w.be
	var parts []kernels.Buffer
	n := 0
	for _, p := range s.w.model.Set.Params() {
		if p.PartialGrad {
			s.grads.views(p, func(g kernels.Buffer) { parts = append(parts, g); n += g.Len() })
		}
	}
	if n == 0 {
		return nil
	}
	s.partial = grow(s.partial, n)
	off := 0
	for _, g := range parts {
		be.Download(s.partial[off:off+g.Len()], g)
		off += g.Len()
	}
	start := time.Now()
	err := comm.AllReduce(ctx, s.partial, collective.Sum).Wait()
	res.addExposed(time.Since(start))
	if err != nil {
		return err
	}
	off = 0
	for _, g := range parts {
		be.Upload(g, s.partial[off:off+g.Len()])
		off += g.Len()
	}
	return nil
}

// addExposed counts communication that nothing overlapped (the step
// waited for all of it).
func (r *StepResult) addExposed(d time.Duration) {
	r.CommMs += msOf(d)
	r.ExposedMs += msOf(d)
	if r.CommMs > 0 {
		r.Hidden = 1 - r.ExposedMs/r.CommMs
	}
}

// clip scales the gradients to the global norm bound, the norm summed over
// the replica's parts: the tied embedding counted once, on the first
// stage, and the parameters every tensor-parallel shard holds whole once,
// on shard 0 (Megatron-LM's param_is_not_tensor_parallel_duplicate). It
// returns the norm before clipping (0 when not clipping).
func (s *stepper) clip(ctx context.Context, res *StepResult) (float64, error) {
	maxNorm := s.w.spec.ClipNorm
	if maxNorm <= 0 {
		return 0, nil
	}
	sq, err := s.normSum(ctx, s.grads.squares(true), res)
	if err != nil {
		return 0, err
	}
	norm := math.Sqrt(sq)
	if norm > maxNorm {
		// With ZeRO only the owned gradients are whole, but scaling all is
		// as cheap, and the optimizer reads only those (ZeRO-2 holds only
		// those).
		s.w.be.Scale(s.grads.buf(), float32(maxNorm/(norm+1e-6)))
	}
	return norm, nil
}

// pipeNorm is normSum over the ranks the global norm spans (pipe): the
// replica's parts, or with ZeRO those of the shard group's replicas.
func (s *stepper) pipeNorm(ctx context.Context, sq float64, res *StepResult) (float64, error) {
	s.norm[0] = float32(sq)
	start := time.Now()
	err := s.pipe.AllReduce(ctx, s.norm, collective.Sum).Wait()
	res.addExposed(time.Since(start))
	if err != nil {
		return 0, fmt.Errorf("stage %d: gradient norm: %w", s.coord.PP, err)
	}
	return float64(s.norm[0]), nil
}

// broadcastState gives every rank of the part's data-parallel group the
// weights and optimizer state of mesh rank root; with ZeRO, every rank of
// root's replicate group (the same shard in each shard group) root's
// shard of them. A rank that keeps its own state takes part and drops
// what it receives.
func (s *stepper) broadcastState(ctx context.Context, root int, keep bool) error {
	comm, group := s.dp, s.mesh.Group(mesh.DP, s.rank)
	if zr := s.zero; zr != nil {
		comm, group = zr.replicate, zr.repRanks
	}
	if comm == nil {
		if root != s.rank {
			return fmt.Errorf("%w: root %d is not rank %d, which has no replica", ErrConfig, root, s.rank)
		}
		return nil
	}
	at := -1
	for i, r := range group {
		if r == root {
			at = i
		}
	}
	if at < 0 {
		return fmt.Errorf("%w: root %d is not in the replica group %v of rank %d", ErrConfig, root, group, s.rank)
	}
	be := s.w.be
	for _, b := range s.w.stateBufs() {
		host := make([]float32, b.Len())
		be.Download(host, b)
		if err := comm.Broadcast(ctx, host, at).Wait(); err != nil {
			return fmt.Errorf("state of stage %d from rank %d: %w", s.coord.PP, root, err)
		}
		if !keep {
			be.Upload(b, host)
		}
	}
	// The optimizer's update count (the steps applied less those the loss
	// scaler skipped): exact in a float32 below 2²⁴.
	count := []float32{float32(s.w.opt.Steps())}
	if err := comm.Broadcast(ctx, count, at).Wait(); err != nil {
		return fmt.Errorf("optimizer step count of stage %d from rank %d: %w", s.coord.PP, root, err)
	}
	if !keep {
		s.w.opt.SetSteps(int(count[0]))
	}
	return nil
}

// registerGrads moves the gradients into registered memory when the worker
// may (WithRegisteredGrads) and the data-parallel peers read it in place:
// a host backend that allocates it, gradients that stay whole (below
// ZeRO-2, which frees them), more than one replica. A failure to allocate
// is logged and the gradients stay where they are (the all-reduce then
// copies, as with private memory).
func (s *stepper) registerGrads() {
	w := s.w
	set := w.model.Set
	ra, ok := w.be.(kernels.RegisteredAllocator)
	if !w.registerGrads || !ok || s.hostMem == nil || w.spec.Zero >= 2 || s.dp.Size() < 2 ||
		!collective.ReadsRegisteredMemory(s.dp) || set.Grads() == nil || set.Len() == 0 {
		return
	}
	if _, _, done := shmem.Find(s.hostMem.HostSlice(set.Grads())); done {
		return
	}
	g, err := ra.AllocRegistered(set.Len())
	if err == nil {
		err = set.MoveGrads(g)
	}
	if err != nil {
		w.log.Warn("gradients stay in private memory", zap.Error(err))
		return
	}
	w.log.Info("gradients in registered memory: same-host replicas read them in place", zap.Int("values", set.Len()))
}
