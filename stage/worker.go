package stage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/ddp"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/replica"
)

// Config is one stage of one replica.
type Config struct {
	// Grid lays out D replicas of P stages; Rank is this worker's world
	// rank in it (stage·D + replica).
	Grid pipeline.Grid
	Rank int
	// Schedule is the pipeline schedule (its Stages is Grid.Stages).
	Schedule *pipeline.Schedule
	// Model holds this stage's units; Opt updates them.
	Model *nn.Model
	Opt   optim.Optimizer
	// Comm is the world communicator over all Grid.Size() ranks.
	Comm collective.Communicator
	// Train and Test are this worker's handles on the data; Shuffle and
	// Seed make its sampler, identical on every rank.
	Train, Test data.Dataset
	Shuffle     bool
	Seed        uint64
	// ClipNorm clips the global gradient norm over all stages (0: off).
	ClipNorm float64
	// Recorder, when set, receives every op's span and the activations
	// held, for bubble accounting and traces (in-process worlds).
	Recorder *pipeline.Recorder
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
}

// Worker executes one stage's schedule, step after step.
//
// A Worker is owned by one goroutine (its actor's).
type Worker struct {
	cfg            Config
	stage, replica int
	cursor         *pipeline.Cursor
	be             kernels.Backend
	pool           *nn.Pool
	sampler        *data.Sampler
	batch          data.Batch
	idx            []int
	mbs            []micro
	actIn, actOut  collective.Communicator // links with the previous and next stage
	gradIn, gradOt collective.Communicator
	dp, tied, pipe collective.Communicator
	hostMem        kernels.HostMemory
	staging        map[kernels.Buffer][]float32
	scratch        nn.Tape
	norm           []float32
	peak           int
}

// NewWorker prepares a stage and creates its communicator groups.
func NewWorker(cfg Config) (*Worker, error) {
	g := cfg.Grid
	if cfg.Rank < 0 || cfg.Rank >= g.Size() {
		return nil, fmt.Errorf("stage: rank %d outside a %d×%d grid", cfg.Rank, g.Replicas, g.Stages)
	}
	if cfg.Schedule.Stages != g.Stages {
		return nil, fmt.Errorf("stage: a %d-stage schedule on a %d-stage grid", cfg.Schedule.Stages, g.Stages)
	}
	replicaIdx, st := g.Coords(cfg.Rank)
	w := &Worker{cfg: cfg, stage: st, replica: replicaIdx, be: cfg.Model.Set.Backend(), staging: map[kernels.Buffer][]float32{}}
	w.pool = nn.NewPool(w.be)
	w.hostMem, _ = w.be.(kernels.HostMemory)
	var err error
	if w.cursor, err = pipeline.NewCursor(cfg.Schedule, st); err != nil {
		return nil, err
	}
	if w.sampler, err = data.NewSampler(cfg.Train.Len(), cfg.Seed, cfg.Shuffle); err != nil {
		return nil, fmt.Errorf("stage: %w", err)
	}
	// A group is identified by its ordered member list; the same list
	// serves every purpose that needs it (for two stages, the tied
	// embedding and the norm share the activation link), which is sound
	// because both members issue their operations on it in the same order.
	groups := map[string]collective.Communicator{}
	group := func(ranks ...int) (collective.Communicator, error) {
		key := fmt.Sprint(ranks)
		if c, ok := groups[key]; ok {
			return c, nil
		}
		c, err := cfg.Comm.Group(ranks)
		if err != nil {
			return nil, fmt.Errorf("stage: group %v: %w", ranks, err)
		}
		groups[key] = c
		return c, nil
	}
	link := func(a, b int) (collective.Communicator, error) { return group(a, b) }
	self := cfg.Rank
	if st > 0 {
		prev := g.Rank(replicaIdx, st-1)
		if w.actIn, err = link(prev, self); err != nil {
			return nil, err
		}
		if w.gradOt, err = link(self, prev); err != nil {
			return nil, err
		}
	}
	if st < g.Stages-1 {
		next := g.Rank(replicaIdx, st+1)
		if w.actOut, err = link(self, next); err != nil {
			return nil, err
		}
		if w.gradIn, err = link(next, self); err != nil {
			return nil, err
		}
	}
	if cfg.Model.Tied != nil {
		if w.tied, err = link(g.Rank(replicaIdx, 0), g.Rank(replicaIdx, g.Stages-1)); err != nil {
			return nil, err
		}
	}
	if g.Replicas > 1 {
		if w.dp, err = group(g.DataGroup(st)...); err != nil {
			return nil, err
		}
	}
	if g.Stages > 1 && cfg.ClipNorm > 0 {
		if w.pipe, err = group(g.PipelineGroup(replicaIdx)...); err != nil {
			return nil, err
		}
		w.norm = make([]float32, 1)
	}
	w.mbs = make([]micro, cfg.Schedule.MicroBatches)
	return w, nil
}

// Stage and Replica place the worker in the grid.
func (w *Worker) Stage() int   { return w.stage }
func (w *Worker) Replica() int { return w.replica }

// host returns host memory holding b's values for a collective: b itself
// on a host backend, else a staging copy (downloaded when download is set).
func (w *Worker) host(b kernels.Buffer, download bool) []float32 {
	if w.hostMem != nil {
		return w.hostMem.HostSlice(b)
	}
	s, ok := w.staging[b]
	if !ok {
		s = make([]float32, b.Len())
		w.staging[b] = s
	}
	if download {
		w.be.Download(s, b)
	}
	return s
}

// landed copies a received staging buffer to the device.
func (w *Worker) landed(b kernels.Buffer) {
	if w.hostMem == nil {
		w.be.Upload(b, w.staging[b])
	}
}

// Step runs one optimizer step: the stage's schedule over M micro-batches,
// the gradient sums, the update. On error nothing was applied.
func (w *Worker) Step(ctx context.Context, req ddp.StepRequest) (ddp.StepResult, error) {
	var res ddp.StepResult
	start := time.Now()
	m := w.cfg.Model
	g := w.cfg.Grid
	M := w.cfg.Schedule.MicroBatches
	lo, hi := data.Split(req.Batch, g.Replicas, w.replica)
	rows := hi - lo
	if rows < M {
		return res, fmt.Errorf("stage: %d rows for replica %d cannot make %d micro-batches", rows, w.replica, M)
	}
	if m.First() || m.Last() {
		w.idx = w.sampler.At(req.Cursor+data.Cursor(lo), rows, w.idx)
		w.cfg.Train.Fill(w.idx, &w.batch)
	}
	scale := float32(0)
	if req.GlobalTargets > 0 {
		scale = float32(1 / float64(req.GlobalTargets))
	}
	m.Set.ZeroGrads()
	w.pool.ResetPeak()
	w.peak = 0
	for k := range w.mbs {
		mlo, mhi := data.Split(rows, M, k)
		w.mbs[k] = micro{lo: mlo, hi: mhi, ids: w.mbs[k].ids, tgt: w.mbs[k].tgt}
	}
	w.cursor.Reset()
	var busy time.Duration
	err := func() error {
		for !w.cursor.Finished() {
			t0 := time.Now()
			op, ok := w.cursor.Next()
			if !ok {
				// A receive: the collective's handle is the message's
				// arrival. Wait for it, then let the Cursor see it.
				if op, ok = w.cursor.Waiting(); !ok {
					return fmt.Errorf("stage %d: schedule stalled", w.stage)
				}
			}
			if err := w.run(ctx, op, &res, scale); err != nil {
				return fmt.Errorf("stage %d, %s: %w", w.stage, op, err)
			}
			if op.Kind.IsRecv() {
				if err := w.cursor.Deliver(pipeline.Message{Kind: sendOf(op.Kind), Micro: op.Micro, From: op.Peer, To: w.stage}); err != nil {
					return err
				}
			}
			t1 := time.Now()
			if op.Kind == pipeline.Forward || op.Kind == pipeline.Backward || op.Kind == pipeline.Recompute {
				busy += t1.Sub(t0)
			}
			if w.cfg.Recorder != nil {
				w.cfg.Recorder.Op(w.stage, op, t0, t1)
			}
			if err := w.cursor.Done(op); err != nil {
				return err
			}
			w.countAlive()
		}
		return nil
	}()
	// Whatever happened, no operation may own a buffer after Step returns.
	if werr := w.drain(); err == nil {
		err = werr
	}
	if err != nil {
		w.release()
		return res, err
	}
	commStart := time.Now()
	res.ScheduleMs = msOf(commStart.Sub(start))
	if err := w.sumGradients(ctx); err != nil {
		return res, err
	}
	norm, err := w.clip(ctx)
	if err != nil {
		return res, err
	}
	commMs := msSince(commStart)
	w.cfg.Opt.Step(float32(req.LR))
	if err := w.be.Sync(); err != nil {
		return res, err
	}
	res.GradNorm = norm
	if req.Checksum {
		res.Checksum = ddp.Checksum(w.Weights())
	}
	res.StepMs = msSince(start)
	res.ComputeMs = float64(busy.Microseconds()) / 1e3
	res.CommMs, res.ExposedMs = commMs, commMs
	res.PeakAct = w.pool.PeakBytes()
	res.PeakMicro = w.peak
	return res, nil
}

func msSince(t time.Time) float64 { return msOf(time.Since(t)) }

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

var _ ddp.Stepper = (*Worker)(nil)

// ctxFor is the nn context of micro-batch k.
func (w *Worker) ctxFor(t *nn.Tape) *nn.Ctx {
	return &nn.Ctx{Be: w.be, Pool: w.pool, Tape: t, Train: true}
}

// input returns micro-batch k's input activation.
func (w *Worker) input(k int) nn.Act {
	mb := &w.mbs[k]
	m := w.cfg.Model
	n := mb.hi - mb.lo
	switch m.Input {
	case nn.DenseInput:
		f := m.Features
		x := w.pool.Get(n * f)
		w.be.Upload(x, w.batch.X[mb.lo*f:mb.hi*f])
		return nn.Act{X: x, Rows: n, Cols: f}
	case nn.TokenInput:
		t := m.Context
		if mb.ids == nil || mb.ids.Len() != n*t {
			mb.ids = w.be.AllocIndex(n * t)
		}
		w.be.UploadIndex(mb.ids, w.batch.Tokens[mb.lo*t:mb.hi*t])
		return nn.Act{Ids: mb.ids, Rows: n * t}
	}
	x := mb.recv
	mb.recv = nn.Act{}
	return x
}

// targets uploads micro-batch k's targets (last stage).
func (w *Worker) targets(k int) kernels.Index {
	mb := &w.mbs[k]
	per := 1
	if w.cfg.Model.Context > 0 {
		per = w.cfg.Model.Context
	}
	y := w.batch.Y[mb.lo*per : mb.hi*per]
	if mb.tgt == nil || mb.tgt.Len() != len(y) {
		mb.tgt = w.be.AllocIndex(len(y))
	}
	w.be.UploadIndex(mb.tgt, y)
	return mb.tgt
}

// activationRows is the number of activation rows of micro-batch k.
func (w *Worker) activationRows(k int) int {
	mb := &w.mbs[k]
	n := mb.hi - mb.lo
	if w.cfg.Model.Context > 0 {
		n *= w.cfg.Model.Context
	}
	return n
}

func (w *Worker) run(ctx context.Context, op pipeline.Op, res *ddp.StepResult, scale float32) error {
	k := op.Micro
	mb := &w.mbs[k]
	m := w.cfg.Model
	switch op.Kind {
	case pipeline.RecvAct:
		buf := w.pool.Get(w.activationRows(k) * m.InCols)
		if err := w.actIn.Broadcast(ctx, w.host(buf, false), 0).Wait(); err != nil {
			w.pool.Put(buf)
			return err
		}
		w.landed(buf)
		mb.recv = nn.Act{X: buf, Rows: w.activationRows(k), Cols: m.InCols}
	case pipeline.Forward:
		x := w.input(k)
		recompute := w.cfg.Schedule.Recompute
		if recompute && m.Input == nn.ActInput {
			mb.in = w.pool.Get(x.X.Len())
			w.be.Copy(mb.in, x.X)
		}
		tape := &mb.tape
		if recompute {
			tape = &w.scratch
		}
		c := w.ctxFor(tape)
		y := nn.Forward(c, m.Layers, x)
		if m.Last() {
			sum, d := nn.CrossEntropy(c, y, w.targets(k), scale)
			res.LossSum += sum
			res.Targets += replica.Targets(&w.batch, mb.lo, mb.hi, m)
			mb.out = d
		} else {
			mb.out = y
		}
		if recompute {
			w.scratch.Clear(w.pool)
		}
	case pipeline.SendAct:
		mb.sendAct = w.actOut.Broadcast(ctx, w.host(mb.out.X, true), 0)
	case pipeline.RecvGrad:
		buf := w.pool.Get(w.activationRows(k) * m.OutCols)
		if err := w.gradIn.Broadcast(ctx, w.host(buf, false), 0).Wait(); err != nil {
			w.pool.Put(buf)
			return err
		}
		w.landed(buf)
		mb.grad = nn.Act{X: buf, Rows: w.activationRows(k), Cols: m.OutCols}
	case pipeline.Recompute:
		var x nn.Act
		if m.Input == nn.ActInput {
			x = nn.Act{X: mb.in, Rows: w.activationRows(k), Cols: m.InCols}
			mb.in = nil
		} else {
			x = w.input(k)
		}
		c := w.ctxFor(&mb.tape)
		y := nn.Forward(c, m.Layers, x)
		// The output was sent (or the loss gradient taken) by the forward;
		// the recomputation only rebuilds the tape.
		w.pool.Put(y.X)
	case pipeline.Backward:
		dy := mb.grad
		if m.Last() {
			dy = mb.out
		} else if err := w.finishSend(&mb.sendAct, &mb.out); err != nil {
			return err
		}
		mb.out, mb.grad = nn.Act{}, nn.Act{}
		c := w.ctxFor(&mb.tape)
		mb.dx = nn.Backward(c, m.Layers, dy)
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
	case pipeline.SendGrad:
		mb.sendDx = w.gradOt.Broadcast(ctx, w.host(mb.dx.X, true), 0)
	default:
		return fmt.Errorf("unknown op %v", op)
	}
	return nil
}

// countAlive measures how many micro-batches hold activations for their
// backward pass right now (a non-empty tape), and keeps the step's peak.
func (w *Worker) countAlive() {
	n := 0
	for k := range w.mbs {
		if w.mbs[k].tape.Len() > 0 {
			n++
		}
	}
	w.peak = max(w.peak, n)
}

// finishSend waits for a send to finish and returns its buffer to the pool.
func (w *Worker) finishSend(h **collective.Handle, a *nn.Act) error {
	if *h == nil {
		return nil
	}
	err := (*h).Wait()
	*h = nil
	if a.X != nil {
		w.pool.Put(a.X)
		*a = nn.Act{}
	}
	return err
}

// drain waits for every send of the step still in flight.
func (w *Worker) drain() error {
	var first error
	for k := range w.mbs {
		mb := &w.mbs[k]
		if err := w.finishSend(&mb.sendAct, &mb.out); err != nil && first == nil {
			first = err
		}
		if err := w.finishSend(&mb.sendDx, &mb.dx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// release returns what a failed step still holds.
func (w *Worker) release() {
	for k := range w.mbs {
		mb := &w.mbs[k]
		mb.tape.Clear(w.pool)
		for _, b := range []kernels.Buffer{mb.in, mb.recv.X, mb.out.X, mb.grad.X, mb.dx.X} {
			if b != nil {
				w.pool.Put(b)
			}
		}
		w.mbs[k] = micro{ids: mb.ids, tgt: mb.tgt}
	}
	w.scratch.Clear(w.pool)
}

// sumGradients sums the gradients within the stage's data-parallel group,
// then the tied embedding's between the first and the last stage.
func (w *Worker) sumGradients(ctx context.Context) error {
	set := w.cfg.Model.Set
	if w.dp != nil {
		buf := w.host(set.Grads(), true)
		if err := w.dp.AllReduce(ctx, buf, collective.Sum).Wait(); err != nil {
			return fmt.Errorf("stage %d: data-parallel gradient sum: %w", w.stage, err)
		}
		w.landed(set.Grads())
	}
	if w.tied != nil {
		t := w.cfg.Model.Tied
		buf := w.host(t.G, true)
		if err := w.tied.AllReduce(ctx, buf, collective.Sum).Wait(); err != nil {
			return fmt.Errorf("stage %d: tied embedding gradient sum: %w", w.stage, err)
		}
		w.landed(t.G)
	}
	return nil
}

// clip scales the gradients to the global norm bound, the norm summed over
// the stages (the tied embedding counted once, on the first stage).
func (w *Worker) clip(ctx context.Context) (float64, error) {
	if w.cfg.ClipNorm <= 0 {
		return 0, nil
	}
	set := w.cfg.Model.Set
	sq := w.be.SumSquares(set.Grads())
	if t := w.cfg.Model.Tied; t != nil && !w.cfg.Model.First() {
		sq -= w.be.SumSquares(t.G)
	}
	if w.pipe != nil {
		w.norm[0] = float32(sq)
		if err := w.pipe.AllReduce(ctx, w.norm, collective.Sum).Wait(); err != nil {
			return 0, fmt.Errorf("stage %d: gradient norm: %w", w.stage, err)
		}
		sq = float64(w.norm[0])
	}
	norm := math.Sqrt(sq)
	if norm > w.cfg.ClipNorm {
		w.be.Scale(set.Grads(), float32(w.cfg.ClipNorm/(norm+1e-6)))
	}
	return norm, nil
}

// Evaluate runs held-out samples [lo, hi) forward through the pipeline of
// this worker's replica; the last stage returns the loss.
func (w *Worker) Evaluate(lo, hi int) (replica.Result, int, error) {
	m := w.cfg.Model
	if w.cfg.Test == nil {
		return replica.Result{}, 0, errors.New("stage: no held-out data")
	}
	if lo < 0 || hi > w.cfg.Test.Len() || lo >= hi {
		return replica.Result{}, 0, fmt.Errorf("stage: held-out rows [%d, %d) outside [0, %d)", lo, hi, w.cfg.Test.Len())
	}
	ctx := context.Background()
	w.idx = w.idx[:0]
	for i := lo; i < hi; i++ {
		w.idx = append(w.idx, i)
	}
	w.cfg.Test.Fill(w.idx, &w.batch)
	k := 0
	w.mbs[k] = micro{lo: 0, hi: hi - lo, ids: w.mbs[k].ids, tgt: w.mbs[k].tgt}
	var x nn.Act
	if m.Input == nn.ActInput {
		buf := w.pool.Get(w.activationRows(k) * m.InCols)
		if err := w.actIn.Broadcast(ctx, w.host(buf, false), 0).Wait(); err != nil {
			w.pool.Put(buf)
			return replica.Result{}, 0, err
		}
		w.landed(buf)
		x = nn.Act{X: buf, Rows: w.activationRows(k), Cols: m.InCols}
	} else {
		x = w.input(k)
	}
	c := &nn.Ctx{Be: w.be, Pool: w.pool, Tape: &w.scratch, Train: false}
	y := nn.Forward(c, m.Layers, x)
	var res replica.Result
	if m.Last() {
		tgt := w.targets(k)
		if m.Name == "mlp" {
			res.Correct = w.be.ArgmaxCorrect(y.X, tgt)
		}
		res.LossSum, _ = nn.CrossEntropy(c, y, tgt, 0)
		res.Targets = replica.Targets(&w.batch, 0, hi-lo, m)
		return res, hi - lo, w.be.Sync()
	}
	err := w.actOut.Broadcast(ctx, w.host(y.X, true), 0).Wait()
	w.pool.Put(y.X)
	return res, 0, err
}

// State implements ddp.Stepper.
func (w *Worker) State() (*nn.Model, optim.Optimizer) { return w.cfg.Model, w.cfg.Opt }

// Weights returns this stage's parameters on the host, without the copy of
// the tied embedding a last stage keeps (the first stage reports it).
func (w *Worker) Weights() []float32 {
	m := w.cfg.Model
	flat := m.Set.HostWeights()
	if t := m.Tied; t != nil && !m.First() {
		flat = flat[:t.Offset]
	}
	return flat
}

// sendOf is the send op whose message a receive op takes.
func sendOf(recv pipeline.OpKind) pipeline.OpKind {
	if recv == pipeline.RecvAct {
		return pipeline.SendAct
	}
	return pipeline.SendGrad
}
