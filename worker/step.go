package worker

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/pipeline"
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

// stepper runs the worker's steps in one generation: its place in the
// mesh, its collective groups, the schedule and the gradient buckets.
type stepper struct {
	w      *Worker
	mesh   mesh.Mesh
	rank   int
	coord  mesh.Coord
	sched  *pipeline.Schedule
	cursor *pipeline.Cursor
	mbs    []micro

	// Links with the previous and the next stage (the same shard); the
	// tied embedding's first and last stage; the part's data-parallel
	// group; the replica's parts (the global gradient norm).
	actIn, actOut, gradIn, gradOut collective.Communicator
	tied, dp, pipe                 collective.Communicator
	groups                         []collective.Communicator

	hostMem kernels.HostMemory
	staging map[kernels.Buffer][]float32
	scratch nn.Tape
	norm    []float32
	partial []float32 // sequence-parallel partial gradients, gathered
	peak    int

	reducer *reducer // nil without data parallelism
	tp      *tpGroup // nil without tensor parallelism
	// zero is the part's ZeRO sharding (nil without it); zeroMoved says
	// that forming replaced the optimizer's shard.
	zero      *zero
	zeroMoved bool
	// updated says that the step in flight applied this worker's update.
	updated bool

	// comm is the generation's communicator and byKey its groups by
	// member list.
	comm  collective.Communicator
	byKey map[string]collective.Communicator
	// meter counts what the groups send; syncMeter what the groups over
	// the replicas send (the data-parallel and ZeRO groups).
	meter, syncMeter *collective.Meter
	// flag is the loss scaler's overflow flag, all-reduced every fp16 step.
	flag [1]float32
}

// SentBytes is what a rank sent in a step's collectives, by kind.
type SentBytes struct {
	AllReduce, ReduceScatter, AllGather, Broadcast int64
}

func sentOf(v map[collective.Kind]int64) SentBytes {
	return SentBytes{AllReduce: v[collective.KindAllReduce] + v[collective.KindNaiveAllReduce],
		ReduceScatter: v[collective.KindReduceScatter], AllGather: v[collective.KindAllGather],
		Broadcast: v[collective.KindBroadcast]}
}

// newStepper places w (holding the model part of rank's stage) at rank of
// m and opens its collective groups on comm.
func newStepper(w *Worker, m mesh.Mesh, rank int, comm collective.Communicator) (*stepper, error) {
	if m.PP != w.spec.Stages() || m.TP != w.spec.Shards() {
		return nil, fmt.Errorf("%w: a %v world for a model cut into %d stages of %d tensor-parallel shards", ErrConfig, m, w.spec.Stages(), w.spec.Shards())
	}
	if m.Size() > 1 && comm == nil {
		return nil, fmt.Errorf("%w: a world of %d ranks needs a communicator", ErrConfig, m.Size())
	}
	sched, err := w.spec.schedule()
	if err != nil {
		return nil, err
	}
	c := m.Coord(rank)
	cur, err := pipeline.NewCursor(sched, c.PP)
	if err != nil {
		return nil, err
	}
	s := &stepper{w: w, mesh: m, rank: rank, coord: c, sched: sched, cursor: cur, staging: map[kernels.Buffer][]float32{},
		mbs: make([]micro, sched.MicroBatches), comm: comm, byKey: map[string]collective.Communicator{}, meter: collective.NewMeter(), syncMeter: collective.NewMeter()}
	s.hostMem, _ = w.be.(kernels.HostMemory)
	if err := s.openGroups(); err != nil {
		s.release()
		return nil, err
	}
	if s.dp != nil && !w.spec.Sync.Local() {
		s.registerGrads()
		if s.reducer, err = newReducer(s); err != nil {
			s.release()
			return nil, err
		}
		if w.spec.Zero > 0 {
			if err := s.openZero(); err != nil {
				s.release()
				return nil, err
			}
		}
	}
	return s, nil
}

// group returns the communicator of the ordered member list ranks,
// opening it on first use. A group is named by its member list; the same
// list serves every purpose that needs it (with two stages the tied
// embedding and the norm share the activation link), which is sound
// because both members issue their operations on it in the same order.
func (s *stepper) group(ranks ...int) (collective.Communicator, error) {
	key := fmt.Sprint(ranks)
	if g, ok := s.byKey[key]; ok {
		return g, nil
	}
	g, err := s.comm.Group(ranks)
	if err != nil {
		return nil, fmt.Errorf("worker: group %v: %w", ranks, err)
	}
	g = s.meter.Wrap(g)
	s.byKey[key] = g
	s.groups = append(s.groups, g)
	return g, nil
}

// replicaGroup is group for a group over the part's replicas: what it
// sends is counted in syncMeter too.
func (s *stepper) replicaGroup(ranks ...int) (collective.Communicator, error) {
	g, err := s.group(ranks...)
	if err != nil {
		return nil, err
	}
	return s.syncMeter.Wrap(g), nil
}

// openGroups creates the part's communicator groups.
func (s *stepper) openGroups() error {
	m, c, self := s.mesh, s.coord, s.rank
	group := s.group
	at := func(stage int) int { return m.Rank(mesh.Coord{PP: stage, DP: c.DP, TP: c.TP}) }
	var err error
	if c.PP > 0 {
		if s.actIn, err = group(at(c.PP-1), self); err != nil {
			return err
		}
		if s.gradOut, err = group(self, at(c.PP-1)); err != nil {
			return err
		}
	}
	if c.PP < m.PP-1 {
		if s.actOut, err = group(self, at(c.PP+1)); err != nil {
			return err
		}
		if s.gradIn, err = group(at(c.PP+1), self); err != nil {
			return err
		}
	}
	if s.w.model.Tied != nil && m.PP > 1 {
		if s.tied, err = group(at(0), at(m.PP-1)); err != nil {
			return err
		}
	}
	if m.DP > 1 {
		if s.dp, err = s.replicaGroup(m.Group(mesh.DP, self)...); err != nil {
			return err
		}
	}
	if m.TP > 1 {
		g, err := group(m.Group(mesh.TP, self)...)
		if err != nil {
			return err
		}
		s.tp = newTPGroup(g, s.w.be)
	}
	if m.Parts() > 1 && s.w.spec.ClipNorm > 0 {
		if s.pipe, err = group(m.Slice(mesh.DP, c.DP)...); err != nil {
			return err
		}
		s.norm = make([]float32, 1)
	}
	return nil
}

// release closes the groups and frees what the step machinery holds.
func (s *stepper) release() {
	for _, g := range s.groups {
		g.Close()
	}
	s.groups = nil
	for k := range s.mbs {
		mb := &s.mbs[k]
		for _, ix := range []kernels.Index{mb.ids, mb.tgt} {
			if ix != nil {
				s.w.be.FreeIndex(ix)
			}
		}
		if mb.vals != nil {
			s.w.be.Free(mb.vals)
		}
		s.mbs[k] = micro{}
	}
}

// host returns host memory holding b's values for a collective: b itself
// on a host backend, else a staging copy (downloaded when download is set).
func (s *stepper) host(b kernels.Buffer, download bool) []float32 {
	if s.hostMem != nil {
		return s.hostMem.HostSlice(b)
	}
	h, ok := s.staging[b]
	if !ok {
		h = make([]float32, b.Len())
		s.staging[b] = h
	}
	if download {
		s.w.be.Download(h, b)
	}
	return h
}

// landed copies a received staging buffer to the device.
func (s *stepper) landed(b kernels.Buffer) {
	if s.hostMem == nil {
		s.w.be.Upload(b, s.staging[b])
	}
}

// step runs the stage's schedule over the micro-batches, sums and clips
// the gradients, and applies the update.
func (s *stepper) step(ctx context.Context, req StepRequest) (StepResult, error) {
	var res StepResult
	start := time.Now()
	s.updated = false
	w, m := s.w, s.w.model
	M := s.sched.MicroBatches
	lo, hi := data.Split(req.Batch, s.mesh.DP, s.coord.DP)
	rows := hi - lo
	if (s.mesh.PP > 1 || s.zeroWeights() != nil) && rows < M {
		// Pipelines, and ZeRO-3's gathers, need every rank to run every
		// micro-batch.
		return res, fmt.Errorf("%w: %d rows for replica %d cannot make %d micro-batches", ErrConfig, rows, s.coord.DP, M)
	}
	if rows > 0 && (m.First() || m.Last()) {
		w.idx = w.sampler.At(req.Cursor+data.Cursor(lo), rows, w.idx)
		w.spec.Train.Fill(w.idx, &w.batch)
	}
	scale := float32(0)
	if req.GlobalTargets > 0 {
		scale = float32(1 / float64(req.GlobalTargets))
		if req.LossScale > 0 {
			// fp16: the loss gradient scaled up, so that the small
			// gradients flowing back stay above fp16's smallest values;
			// unscale divides them back before the update.
			scale = float32(req.LossScale / float64(req.GlobalTargets))
		}
		if s.w.spec.Sync.Local() {
			// Each replica steps on its own gradient: its share of the
			// global mean's, times the replicas, so that their average
			// is the global mean's gradient (what a round averages).
			scale *= float32(s.mesh.DP)
		}
	}
	m.Set.ZeroGrads()
	w.pool.ResetPeak()
	s.peak = 0
	for k := range s.mbs {
		mlo, mhi := data.Split(rows, M, k)
		s.mbs[k] = micro{lo: mlo, hi: mhi, ids: s.mbs[k].ids, tgt: s.mbs[k].tgt, vals: s.mbs[k].vals}
	}
	if s.reducer != nil {
		s.reducer.start(ctx)
	}
	if g2 := s.zeroGrads(); g2 != nil {
		g2.start()
		g2.pool.ResetPeak()
	}
	if g3 := s.zeroWeights(); g3 != nil {
		g3.pool.ResetPeak()
	}
	if s.tp != nil {
		s.tp.reset(ctx)
	}
	s.meter.Take()
	s.syncMeter.Take()
	var busy time.Duration
	err := s.refreshLow()
	if d := w.spec.delayAt(s.rank); d > 0 && err == nil {
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
		b, err = s.runSchedule(ctx, &res, scale)
		busy += b
	}
	// Whatever happened, no operation may own a buffer after the step.
	if derr := s.drain(); err == nil {
		err = derr
	}
	if err != nil {
		if s.reducer != nil {
			s.reducer.abandon()
		}
		s.clear()
		return res, err
	}
	scheduleEnd := time.Now()
	res.Computed = true
	res.ScheduleMs = msOf(scheduleEnd.Sub(start))
	res.ComputeMs = msOf(busy)
	if s.tp != nil {
		// The passes waited for every tensor-parallel collective.
		res.ComputeMs = msOf(busy - s.tp.busy)
		res.addExposed(s.tp.busy)
	}
	if err := s.sumGradients(ctx, scheduleEnd, &res); err != nil {
		return res, err
	}
	if a := req.Async; a != nil && a.Kind == AsyncCompute {
		// The server applies it: the replica's weights stay the
		// server's version they were given.
		res.Grads = append([]float32(nil), s.host(m.Set.Grads(), true)...)
		return s.finish(res, start, req, 0)
	}
	if req.LossScale > 0 {
		if res.Skipped, err = s.unscale(ctx, &res, req); err != nil {
			return res, err
		}
	}
	var norm float64
	if !res.Skipped {
		if norm, err = s.clip(ctx, &res); err != nil {
			return res, err
		}
		w.opt.Step(float32(req.LR))
		s.updated = true
	}
	if req.Round && w.spec.Sync.Local() {
		// Also after a skipped update: the round averages what the
		// replicas hold.
		if err := s.round(ctx, &res); err != nil {
			return res, err
		}
		s.updated = true
	}
	if res.Skipped {
		// The step's update is not applied (a round that ended here
		// was): the optimizer state and its step count stay; the next
		// step zeroes the gradients.
		return s.finish(res, start, req, 0)
	}
	if s.zero != nil && s.zero.g3 == nil {
		if err := s.gatherWeights(ctx, &res); err != nil {
			return res, fmt.Errorf("stage %d: ZeRO weight gather: %w", s.coord.PP, err)
		}
	}
	return s.finish(res, start, req, norm)
}

// finish fills a step's result after its update (or its skip).
func (s *stepper) finish(res StepResult, start time.Time, req StepRequest, norm float64) (StepResult, error) {
	w, m := s.w, s.w.model
	if err := w.be.Sync(); err != nil {
		return res, err
	}
	res.GradNorm = norm
	if req.Checksum {
		res.Checksum = w.Checksum()
	}
	res.StepMs = msOf(time.Since(start))
	res.PeakAct = w.pool.PeakBytes()
	res.ParamBytes, res.GradBytes = 4*int64(m.Set.Len()), 4*int64(m.Set.Len())
	if dt := w.spec.Precision; dt != kernels.F32 {
		res.ParamBytes += int64(dt.Size() * m.Set.Len()) // the compute copies
	}
	res.PeakParamBytes, res.PeakGradBytes = res.ParamBytes, res.GradBytes
	if g2 := s.zeroGrads(); g2 != nil {
		res.GradBytes, res.PeakGradBytes = 4*int64(g2.owned.Len()), g2.heldBytes()
	}
	if g3 := s.zeroWeights(); g3 != nil {
		res.ParamBytes, res.PeakParamBytes = 4*int64(g3.owned.Len()), g3.heldBytes()
	}
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

// runSchedule runs the stage's ops in order, waiting for each receive's
// message, and returns the time spent in compute passes.
func (s *stepper) runSchedule(ctx context.Context, res *StepResult, scale float32) (time.Duration, error) {
	var busy time.Duration
	s.cursor.Reset()
	for !s.cursor.Finished() {
		t0 := time.Now()
		op, ok := s.cursor.Next()
		if !ok {
			// A receive: the collective's handle is the message's arrival.
			// Wait for it, then let the Cursor see it.
			if op, ok = s.cursor.Waiting(); !ok {
				return busy, fmt.Errorf("stage %d: schedule stalled", s.coord.PP)
			}
		}
		if err := s.run(ctx, op, res, scale); err != nil {
			return busy, fmt.Errorf("stage %d, %s: %w", s.coord.PP, op, err)
		}
		if op.Kind.IsRecv() {
			if err := s.cursor.Deliver(pipeline.Message{Kind: sendOf(op.Kind), Micro: op.Micro, From: op.Peer, To: s.coord.PP}); err != nil {
				return busy, err
			}
		}
		t1 := time.Now()
		if op.Kind.Compute() {
			busy += t1.Sub(t0)
		}
		if s.w.rec != nil {
			s.w.rec.Op(s.coord.PP, op, t0, t1)
		}
		if err := s.cursor.Done(op); err != nil {
			return busy, err
		}
		s.countAlive()
	}
	return busy, nil
}

// unscale divides the gradients by the loss scale and reports whether
// some rank found one that is not finite: every rank's finding is summed
// over the world (one all-reduce of a number), so that all skip together.
func (s *stepper) unscale(ctx context.Context, res *StepResult, req StepRequest) (bool, error) {
	m, be := s.w.model, s.w.be
	g := m.Set.Grads()
	if g2 := s.zeroGrads(); g2 != nil {
		g = g2.owned
	}
	be.Scale(g, float32(1/req.LossScale))
	var sq float64
	if s.zero != nil {
		sq = s.ownedSquares()
	} else {
		sq = be.SumSquares(g)
	}
	if o := s.w.spec.Overflow; o != nil && o.Rank == s.rank && o.Step == req.Step+1 {
		sq = math.Inf(1)
	}
	found := float32(0)
	if math.IsInf(sq, 0) || math.IsNaN(sq) {
		found = 1
	}
	if s.w.comm != nil && s.mesh.Size() > 1 {
		flag := s.flag[:]
		flag[0] = found
		start := time.Now()
		err := s.w.comm.AllReduce(ctx, flag, collective.Max).Wait()
		res.addExposed(time.Since(start))
		if err != nil {
			return false, fmt.Errorf("the loss scaler's overflow check: %w", err)
		}
		found = flag[0]
	}
	return found != 0, nil
}

// refreshLow rounds the weights to their compute copies under mixed
// precision, before a step's or an evaluation's passes read them (the
// last update, load or gather changed them). ZeRO-3 rounds each layer's
// gathered weights instead (zeroWeights.ready).
func (s *stepper) refreshLow() error {
	if s.w.spec.Precision == kernels.F32 || s.zeroWeights() != nil {
		return nil
	}
	return nn.RefreshLow(s.w.be, s.w.spec.Precision, s.w.model.Set.Params())
}

// ctxFor is the nn context of one pass over tape t.
func (s *stepper) ctxFor(t *nn.Tape) *nn.Ctx {
	c := &nn.Ctx{Be: s.w.be, Pool: s.w.pool, Tape: t, Train: true}
	if s.tp != nil {
		c.TP = s.tp
	}
	// New checked that the backend computes in the spec's precision.
	_ = c.SetPrecision(s.w.spec.Precision)
	return c
}

// tpErr is the failure of a tensor-parallel collective in the passes run
// so far (nil without tensor parallelism): the whole step fails with it.
func (s *stepper) tpErr() error {
	if s.tp == nil {
		return nil
	}
	return s.tp.err
}

// reports says whether this rank reports its passes' losses: one shard of
// each tensor-parallel group (every shard computes the same loss).
func (s *stepper) reports() bool { return s.coord.TP == 0 }

// input returns micro-batch k's input activation: its rows of the batch
// on the first stage, the activation received on the others.
func (s *stepper) input(k int, b *data.Batch) nn.Act {
	mb := &s.mbs[k]
	m, be := s.w.model, s.w.be
	n := mb.hi - mb.lo
	switch m.Input {
	case nn.DenseInput:
		f := m.Features
		x := s.w.pool.Get(n * f)
		be.Upload(x, b.X[mb.lo*f:mb.hi*f])
		return nn.Act{X: x, Rows: n, Cols: f}
	case nn.TokenInput:
		t := m.Context
		if mb.ids == nil || mb.ids.Len() != n*t {
			if mb.ids != nil {
				be.FreeIndex(mb.ids)
			}
			mb.ids = be.AllocIndex(n * t)
		}
		be.UploadIndex(mb.ids, b.Tokens[mb.lo*t:mb.hi*t])
		return nn.Act{Ids: mb.ids, Rows: n * t}
	}
	x := mb.recv
	mb.recv = nn.Act{}
	return x
}

// targets uploads micro-batch k's targets (last stage): its class ids,
// or its real values.
func (s *stepper) targets(k int, b *data.Batch) nn.Targets {
	mb := &s.mbs[k]
	be := s.w.be
	if len(b.V) > 0 {
		per := len(b.V) / b.Rows
		v := b.V[mb.lo*per : mb.hi*per]
		if mb.vals == nil || mb.vals.Len() != len(v) {
			if mb.vals != nil {
				be.Free(mb.vals)
			}
			mb.vals = be.Alloc(len(v))
		}
		be.Upload(mb.vals, v)
		return nn.Targets{Values: mb.vals, Cols: per}
	}
	per := max(1, s.w.model.Context)
	y := b.Y[mb.lo*per : mb.hi*per]
	if mb.tgt == nil || mb.tgt.Len() != len(y) {
		if mb.tgt != nil {
			be.FreeIndex(mb.tgt)
		}
		mb.tgt = be.AllocIndex(len(y))
	}
	be.UploadIndex(mb.tgt, y)
	return nn.Targets{Ids: mb.tgt}
}

// activationRows is the number of activation rows of micro-batch k that
// cross a stage boundary (a sequence-parallel shard's share of them).
func (s *stepper) activationRows(k int) int {
	mb := &s.mbs[k]
	return s.w.model.BoundaryRows((mb.hi - mb.lo) * max(1, s.w.model.Context))
}

// run runs one op of micro-batch op.Micro.
func (s *stepper) run(ctx context.Context, op pipeline.Op, res *StepResult, scale float32) error {
	k := op.Micro
	if s.mbs[k].empty() {
		return nil // only without pipelining: a replica with fewer rows than micro-batches
	}
	switch op.Kind {
	case pipeline.RecvAct:
		return s.recvAct(ctx, k)
	case pipeline.Forward:
		if err := s.forward(ctx, k, res, scale); err != nil {
			return err
		}
		return s.tpErr()
	case pipeline.SendAct:
		s.mbs[k].sendAct = s.actOut.Broadcast(ctx, s.host(s.mbs[k].out.X, true), 0)
	case pipeline.RecvGrad:
		return s.recvGrad(ctx, k)
	case pipeline.Recompute:
		if err := s.recompute(ctx, k); err != nil {
			return err
		}
		return s.tpErr()
	case pipeline.Backward:
		return s.backward(ctx, k)
	case pipeline.SendGrad:
		s.mbs[k].sendDx = s.gradOut.Broadcast(ctx, s.host(s.mbs[k].dx.X, true), 0)
	default:
		return fmt.Errorf("unknown op %v", op)
	}
	return nil
}

// recvAct receives micro-batch k's input activation from the previous
// stage.
func (s *stepper) recvAct(ctx context.Context, k int) error {
	m, pool := s.w.model, s.w.pool
	buf := pool.Get(s.activationRows(k) * m.InCols)
	if err := s.actIn.Broadcast(ctx, s.host(buf, false), 0).Wait(); err != nil {
		pool.Put(buf)
		return err
	}
	s.landed(buf)
	s.mbs[k].recv = nn.Act{X: buf, Rows: s.activationRows(k), Cols: m.InCols}
	return nil
}

// forward runs micro-batch k through the stage: its output goes to the
// next stage, or, on the last, the loss and its gradient. With recompute
// only the stage's input is kept for the backward pass.
func (s *stepper) forward(ctx context.Context, k int, res *StepResult, scale float32) error {
	mb := &s.mbs[k]
	w, m := s.w, s.w.model
	x := s.input(k, &w.batch)
	recompute := s.sched.Recompute
	if recompute && m.Input == nn.ActInput {
		mb.in = w.pool.Get(x.X.Len())
		w.be.Copy(mb.in, x.X)
	}
	tape := &mb.tape
	if recompute {
		tape = &s.scratch
	}
	c := s.ctxFor(tape)
	y, err := s.pass(ctx, func() nn.Act { return nn.ForwardWith(c, m.Layers, x, s.forwardHooks()) })
	if m.Last() {
		tgt := s.targets(k, &w.batch)
		if m.Accuracy && s.reports() {
			res.Correct += w.be.ArgmaxCorrect(y.X, tgt.Ids)
		}
		sum, d := m.Loss(c, y, tgt, scale)
		if s.reports() {
			res.LossSum += sum
			res.Targets += w.batch.Terms(mb.lo, mb.hi)
		}
		mb.out = d
	} else {
		mb.out = y
	}
	if recompute {
		s.scratch.Clear(w.pool)
	}
	return err
}

// pass runs one forward or backward pass f; with ZeRO-3 it is a pass of
// weight gathers too, whose failure is the pass's error.
func (s *stepper) pass(ctx context.Context, f func() nn.Act) (nn.Act, error) {
	g3 := s.zeroWeights()
	if g3 == nil {
		return f(), nil
	}
	g3.begin(ctx)
	a := f()
	return a, g3.end()
}

// recvGrad receives the gradient of micro-batch k's output from the next
// stage.
func (s *stepper) recvGrad(ctx context.Context, k int) error {
	m, pool := s.w.model, s.w.pool
	buf := pool.Get(s.activationRows(k) * m.OutCols)
	if err := s.gradIn.Broadcast(ctx, s.host(buf, false), 0).Wait(); err != nil {
		pool.Put(buf)
		return err
	}
	s.landed(buf)
	s.mbs[k].grad = nn.Act{X: buf, Rows: s.activationRows(k), Cols: m.OutCols}
	return nil
}

// recompute rebuilds micro-batch k's tape from its kept input. The output
// was sent (or the loss gradient taken) by the forward; the recomputation
// only rebuilds the tape.
func (s *stepper) recompute(ctx context.Context, k int) error {
	mb := &s.mbs[k]
	m := s.w.model
	var x nn.Act
	if m.Input == nn.ActInput {
		x = nn.Act{X: mb.in, Rows: s.activationRows(k), Cols: m.InCols}
		mb.in = nil
	} else {
		x = s.input(k, &s.w.batch)
	}
	c := s.ctxFor(&mb.tape)
	y, err := s.pass(ctx, func() nn.Act { return nn.ForwardWith(c, m.Layers, x, s.forwardHooks()) })
	s.w.pool.Put(y.X)
	return err
}

// backward runs micro-batch k's backward pass; its input's gradient goes
// to the previous stage. The last micro-batch's pass makes every gradient
// final: with data parallelism its buckets are all-reduced while it goes
// on.
func (s *stepper) backward(ctx context.Context, k int) error {
	mb := &s.mbs[k]
	w, m := s.w, s.w.model
	dy := mb.grad
	if m.Last() {
		dy = mb.out
	} else if err := s.finishSend(&mb.sendAct, &mb.out); err != nil {
		return err
	}
	mb.out, mb.grad = nn.Act{}, nn.Act{}
	c := s.ctxFor(&mb.tape)
	g2 := s.zeroGrads()
	switch {
	case g2 != nil:
		// ZeRO-2 reduces every micro-batch's gradients, bucket by bucket.
		s.reducer.start(ctx)
		c.OnGradReady = s.reducer.ready
	case s.reducer != nil && k == len(s.mbs)-1:
		c.OnGradReady = s.reducer.ready
	}
	var err error
	mb.dx, err = s.pass(ctx, func() nn.Act { return nn.BackwardWith(c, m.Layers, dy, s.backwardHooks()) })
	if err != nil {
		return err
	}
	if g2 != nil {
		if err := g2.endMicro(); err != nil {
			return err
		}
	}
	if err := s.tpErr(); err != nil {
		return err
	}
	if mb.tape.Len() != 0 {
		return fmt.Errorf("%d activations left on the tape", mb.tape.Len())
	}
	if mb.in != nil {
		w.pool.Put(mb.in)
		mb.in = nil
	}
	if m.First() && mb.dx.X != nil {
		w.pool.Put(mb.dx.X)
		mb.dx = nn.Act{}
	}
	if s.reducer != nil && s.reducer.err != nil {
		return s.reducer.err
	}
	return nil
}

// countAlive measures how many micro-batches hold activations for their
// backward pass right now (a non-empty tape), and keeps the step's peak.
func (s *stepper) countAlive() {
	n := 0
	for k := range s.mbs {
		if s.mbs[k].tape.Len() > 0 {
			n++
		}
	}
	s.peak = max(s.peak, n)
}

// finishSend waits for a send to finish and returns its buffer to the pool.
func (s *stepper) finishSend(h **collective.Handle, a *nn.Act) error {
	if *h == nil {
		return nil
	}
	err := (*h).Wait()
	*h = nil
	if a.X != nil {
		s.w.pool.Put(a.X)
		*a = nn.Act{}
	}
	return err
}

// drain waits for every send of the step still in flight.
func (s *stepper) drain() error {
	var first error
	for k := range s.mbs {
		mb := &s.mbs[k]
		if err := s.finishSend(&mb.sendAct, &mb.out); err != nil && first == nil {
			first = err
		}
		if err := s.finishSend(&mb.sendDx, &mb.dx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// clear returns what a failed step still holds.
func (s *stepper) clear() {
	pool := s.w.pool
	for k := range s.mbs {
		mb := &s.mbs[k]
		mb.tape.Clear(pool)
		for _, b := range []kernels.Buffer{mb.in, mb.recv.X, mb.out.X, mb.grad.X, mb.dx.X} {
			if b != nil {
				pool.Put(b)
			}
		}
		s.mbs[k] = micro{ids: mb.ids, tgt: mb.tgt, vals: mb.vals}
	}
	s.scratch.Clear(pool)
}

// sendOf is the send op whose message a receive op takes.
func sendOf(recv pipeline.OpKind) pipeline.OpKind {
	if recv == pipeline.RecvAct {
		return pipeline.SendAct
	}
	return pipeline.SendGrad
}
