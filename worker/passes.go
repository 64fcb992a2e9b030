package worker

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/pipeline"
)

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
	s.w.be.Scale(s.grads.buf(), float32(1/req.LossScale))
	sq := s.grads.squares(false)
	if o := s.w.spec.Overflow; o != nil && o.Rank == s.rank && o.Step == req.Step+1 {
		sq = math.Inf(1)
	}
	found := float32(0)
	if math.IsInf(sq, 0) || math.IsNaN(sq) {
		found = 1
	}
	found, err := s.overflowAny(ctx, found, res)
	return found != 0, err
}

// worldOverflow is overflowAny in a world of several ranks: the
// findings' maximum over the world.
func (s *stepper) worldOverflow(ctx context.Context, found float32, res *StepResult) (float32, error) {
	flag := s.flag[:]
	flag[0] = found
	start := time.Now()
	err := s.w.comm.AllReduce(ctx, flag, collective.Max).Wait()
	res.addExposed(time.Since(start))
	if err != nil {
		return 0, fmt.Errorf("the loss scaler's overflow check: %w", err)
	}
	return flag[0], nil
}

// ctxFor is the nn context of one pass over tape t.
func (s *stepper) ctxFor(t *nn.Tape) *nn.Ctx {
	c := &nn.Ctx{Be: s.w.be, Pool: s.w.pool, Tape: t, Train: true, TP: s.tp.group()}
	// New checked that the backend computes in the spec's precision.
	_ = c.SetPrecision(s.w.spec.Precision)
	return c
}

// tpErr is the failure of a tensor-parallel collective in the passes run
// so far (nil without tensor parallelism): the whole step fails with it.
func (s *stepper) tpErr() error { return s.tp.err() }

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
	y, err := s.pass(ctx, func() nn.Act { return nn.ForwardWith(c, m.Layers, x, s.fwdHooks) })
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
	return s.weights.pass(ctx, f)
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
	y, err := s.pass(ctx, func() nn.Act { return nn.ForwardWith(c, m.Layers, x, s.fwdHooks) })
	s.w.pool.Put(y.X)
	return err
}

// backward runs micro-batch k's backward pass; its input's gradient goes
// to the previous stage. The reduction phase hooks the passes whose
// gradients it sums while they go on (with data parallelism the last
// micro-batch's, which makes every gradient final; ZeRO-2's every one).
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
	s.reduce.backward(ctx, k, c)
	var err error
	mb.dx, err = s.pass(ctx, func() nn.Act { return nn.BackwardWith(c, m.Layers, dy, s.bwdHooks) })
	if err != nil {
		return err
	}
	if err := s.reduce.endBackward(); err != nil {
		return err
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
