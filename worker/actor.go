package worker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// Protocol is the version of the worker's wire messages: a worker process
// whose hello carries another is refused (an unknown message type would
// crash the receiving process). 4: RunStep carries asynchronous steps
// (a worker of 3 would run one as a synchronous step).
const Protocol = 4

// ActorName is the worker actor's name in a worker process's or an elastic
// agent's actor system, so that a trainer elsewhere addresses it knowing
// the system's address.
const ActorName = "worker"

// ControlName is the name of the control actor beside a worker actor
// named name: it takes Abort while the worker actor is busy.
func ControlName(name string) string { return name + "-ctl" }

// CommFactory opens the communicator of the generation a Form describes,
// for the worker at its rank.
type CommFactory func(f *workerpb.Form) (collective.Communicator, error)

// Gate brackets each step, so that the world changes only between steps
// (an elastic node's membership): Hold returns false while a new world is
// being formed.
type Gate interface {
	Hold() bool
	Release()
}

// ShellConfig configures a worker actor.
type ShellConfig struct {
	// Name is the actor's name: ActorName in a process of its own, unique
	// in a process that runs several workers.
	Name string
	// Node is the name of the node, reported in Status.
	Node string
	// Comms opens each generation's communicator (worlds of more than one
	// rank).
	Comms CommFactory
	// Gate, when set, brackets every step.
	Gate Gate
	// Notify, when set, receives what concerns the worker's node rather
	// than the worker: *workerpb.Finish (the job ended), *workerpb.Progress
	// (a step's metrics) and the error of a crash (it wraps ErrCrashed).
	// It is called on the actor's goroutine and must not block.
	Notify func(any)
	// Learn, when set, receives the commit proof a leader's call carries
	// (StatusRequest and Form of an elastic generation) before the call is
	// served: a node that missed its generation's commit learns it there,
	// so that its steps are not refused as if the world were still being
	// formed. Called on the actor's goroutine; it may block for a short,
	// bounded time.
	Learn func(proof []byte)
	// ShipTrace sends what the worker's recorder saw of each step back in
	// StepDone (a pipeline stage in a worker process, whose trace the
	// parent writes).
	ShipTrace bool
	// Logger receives the worker's warnings; nil logs nothing.
	Logger *zap.Logger
}

// Shell is a worker actor (and its control actor) around a Worker: the
// only code that touches the worker once spawned.
type Shell struct {
	sys      *actors.System
	pid, ctl *actor.PID

	mu     sync.Mutex
	cancel context.CancelCauseFunc // of the step, evaluation or transfer in flight

	// flight is the recorder of the current generation's communicator
	// (nil: none, a world of one); rank is the worker's rank in it.
	flight atomic.Pointer[collective.FlightRecorder]
	rank   atomic.Int64
	node   string
}

// Spawn starts the worker actor for w. If the actor panics it answers the
// request in flight with an error wrapping ErrCrashed, tells Notify, and
// stops: a worker whose state may be half updated is never used again.
func Spawn(sys *actors.System, w *Worker, cfg ShellConfig) (*Shell, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Notify == nil {
		cfg.Notify = func(any) {}
	}
	s := &Shell{sys: sys, node: cfg.Node}
	s.rank.Store(-1)
	a := &shellActor{w: w, cfg: cfg, shell: s, log: cfg.Logger}
	var err error
	if s.pid, err = sys.Root().SpawnNamed(actors.Props(func() actor.Actor { return a }), cfg.Name); err != nil {
		return nil, fmt.Errorf("worker: spawning %s: %w", cfg.Name, err)
	}
	ctl := actors.Props(func() actor.Actor {
		return actor.ReceiveFunc(func(c actor.Context) {
			switch m := c.Message().(type) {
			case *workerpb.Abort:
				s.Abort(m.Reason)
			case *workerpb.FlightRequest:
				b, err := json.Marshal(s.Flight(m.Reason))
				c.Respond(&workerpb.FlightRecord{Peer: m.Peer, Failure: workerpb.FailureOf(err), Dump: b})
			}
		})
	})
	if s.ctl, err = sys.Root().SpawnNamed(ctl, ControlName(cfg.Name)); err != nil {
		s.Stop()
		return nil, fmt.Errorf("worker: spawning %s: %w", ControlName(cfg.Name), err)
	}
	return s, nil
}

// PID is the worker actor.
func (s *Shell) PID() *actor.PID { return s.pid }

// Abort cancels the step, evaluation or state transfer in flight, if any;
// it returns at once (the worker answers the request with the error).
func (s *Shell) Abort(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		s.cancel(fmt.Errorf("%w: %s", collective.ErrCanceled, reason))
	}
}

// Stop stops both actors, after the request in flight (Abort first to cut
// it short); the worker's communicator is closed.
func (s *Shell) Stop() {
	if s.ctl != nil {
		_ = s.sys.Root().StopFuture(s.ctl).Wait()
	}
	_ = s.sys.Root().StopFuture(s.pid).Wait()
}

// Flight dumps the flight recorder of the worker's rank (an empty one in
// a world of one rank, or before the worker joins one), stamped now with
// reason. It may be called from any goroutine, also while the worker is
// busy: what a hang's alignment reads.
func (s *Shell) Flight(reason string) collective.FlightDump {
	now := time.Now()
	var d collective.FlightDump
	if f := s.flight.Load(); f != nil {
		d = f.Dump(now, reason)
	} else {
		d = collective.FlightDump{Rank: max(0, int(s.rank.Load())), Size: 1, Time: now, Reason: reason,
			Groups: []collective.FlightGroup{}, Ops: []collective.FlightOp{}}
	}
	d.Name = s.node
	return d
}

// begin makes the context of an abortable request.
func (s *Shell) begin() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	s.mu.Lock()
	s.cancel = cancel
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		s.cancel = nil
		s.mu.Unlock()
		cancel(nil)
	}
}

// ExportRequest asks a worker of this process for the part it holds
// (Worker.ExportPart), between steps; it is answered with *Exported.
type ExportRequest struct{}

// Exported answers ExportRequest; Checksum is the part's parameters'.
type Exported struct {
	State    PartState
	Checksum uint64
	Err      error
}

// maxHandOver bounds the values a hand-over may announce (16 GiB of
// float32), so that a bad PartChunk cannot make the worker allocate
// without bound.
const maxHandOver = 1 << 32

// take adds a PartChunk to the hand-over in progress; the last one makes
// the worker take the part.
func (a *shellActor) take(m *workerpb.PartChunk) *workerpb.PartTaken {
	fail := func(err error) *workerpb.PartTaken {
		a.taking = nil
		return &workerpb.PartTaken{Peer: m.Peer, Failure: workerpb.FailureOf(err)}
	}
	if m.Buffer == 0 && m.Offset == 0 {
		total := uint64(0)
		for _, n := range m.Lens {
			total += min(n, maxHandOver+1)
		}
		if m.Part < 0 || len(m.Lens) == 0 || total > maxHandOver {
			return fail(fmt.Errorf("%w: a hand-over of part %d in %d buffers of %d values", ErrConfig, m.Part, len(m.Lens), total))
		}
		ps := &PartState{Hold: Holding{Part: int(m.Part), Applied: int(m.Applied), Cursor: data.Cursor(m.Cursor), World0: int(m.World0)},
			Steps: int(m.OptSteps), Bufs: make([][]float32, len(m.Lens))}
		for i, n := range m.Lens {
			ps.Bufs[i] = make([]float32, n)
		}
		a.taking = ps
	}
	ps := a.taking
	if ps == nil || int(m.Buffer) >= len(ps.Bufs) || m.Part != int32(ps.Hold.Part) || m.Applied != uint64(ps.Hold.Applied) ||
		m.Offset > uint64(len(ps.Bufs[m.Buffer])) || uint64(len(m.Values)) > uint64(len(ps.Bufs[m.Buffer]))-m.Offset {
		return fail(fmt.Errorf("%w: a hand-over chunk of part %d, buffer %d, offset %d out of order", ErrConfig, m.Part, m.Buffer, m.Offset))
	}
	copy(ps.Bufs[m.Buffer][m.Offset:], m.Values)
	if !m.Last {
		return &workerpb.PartTaken{Peer: m.Peer}
	}
	a.taking = nil
	if err := a.w.ImportPart(*ps); err != nil {
		return fail(err)
	}
	a.jobStep = max(a.jobStep, m.Applied)
	return &workerpb.PartTaken{Peer: m.Peer, Checksum: a.w.Checksum()}
}

// CaptureRequest asks a worker of this process to add its stage to Snap
// (an in-process checkpoint); it is answered with *Captured. Requests of
// one snapshot go one at a time, stages in order.
type CaptureRequest struct {
	Peer uint32
	Snap *checkpoint.Snapshot
}

// Captured answers CaptureRequest.
type Captured struct {
	Peer uint32
	Err  error
}

func (c *Captured) GetPeer() uint32 { return c.Peer }
func (c *Captured) Failed() error   { return c.Err }

var _ actors.Reply = (*Captured)(nil)

type shellActor struct {
	w     *Worker
	cfg   ShellConfig
	shell *Shell
	log   *zap.Logger
	// jobStep is the last step of the job this worker heard of (Form,
	// Progress), reported in Status.job_step.
	jobStep uint64
	// taking is the part a leaving worker is handing over (PartChunk), as
	// far as it came.
	taking *PartState
}

func (a *shellActor) Receive(c actor.Context) {
	defer a.recoverPanic(c)
	a.learn(c.Message())
	switch m := c.Message().(type) {
	case *workerpb.StatusRequest:
		h := a.w.Holding()
		st := &workerpb.Status{Peer: m.Peer, Name: a.cfg.Node, HeldPart: int32(h.Part), Applied: uint64(h.Applied),
			Cursor: uint64(h.Cursor), CanRollBack: h.Undo, World0: uint32(h.World0), Rank: int32(a.w.Rank()),
			HeldZeroGroup: uint32(h.ZeroGroup), HeldZeroShard: uint32(h.ZeroShard)}
		last := a.w.Last()
		st.LastStep, st.LastComputed = int64(last.Step), last.Computed
		st.LastLossSum, st.LastTargets, st.LastCorrect = last.LossSum, uint64(last.Targets), uint64(last.Correct)
		st.LastLossScale, st.LastSkipped, st.LastLossScaleTracker = last.LossScale, last.Skipped, uint32(last.LossScaleTracker)
		st.JobStep = max(a.jobStep, st.Applied)
		if m.Checksum {
			st.Checksum, st.UndoChecksum = a.w.Checksum(), a.w.UndoChecksum()
		}
		c.Respond(st)
	case *workerpb.Form:
		a.jobStep = max(a.jobStep, m.Step)
		c.Respond(a.form(m))
	case *workerpb.RunStep:
		c.Respond(a.step(m))
	case *workerpb.EvalRequest:
		c.Respond(a.eval(m))
	case *workerpb.WeightsRequest:
		c.Respond(a.weights(m))
	case *workerpb.SaveShard:
		c.Respond(a.saveShard(m))
	case *CaptureRequest:
		c.Respond(&Captured{Peer: m.Peer, Err: a.w.Capture(m.Snap)})
	case *ExportRequest:
		ps, err := a.w.ExportPart()
		c.Respond(&Exported{State: ps, Checksum: a.w.Checksum(), Err: err})
	case *workerpb.PartChunk:
		c.Respond(a.take(m))
	case *workerpb.Finish:
		c.Respond(&workerpb.Finished{Peer: m.Peer, Checksum: a.w.Checksum()})
		a.cfg.Notify(m)
	case *workerpb.Progress:
		a.jobStep = max(a.jobStep, m.Step)
		a.cfg.Notify(m)
	case *actor.Stopped:
		a.w.Close()
	}
}

// learn hands the commit proof msg carries, if any, to ShellConfig.Learn.
func (a *shellActor) learn(msg any) {
	if a.cfg.Learn == nil {
		return
	}
	var proof []byte
	switch m := msg.(type) {
	case *workerpb.StatusRequest:
		proof = m.CommitProof
	case *workerpb.Form:
		proof = m.CommitProof
	}
	if len(proof) > 0 {
		a.cfg.Learn(proof)
	}
}

// recoverPanic turns a panic into a crash: the request in flight is
// answered with it, the node told, and the actor stopped.
func (a *shellActor) recoverPanic(c actor.Context) {
	p := recover()
	if p == nil {
		return
	}
	err := fmt.Errorf("%w: %w", ErrCrashed, failure.Panicked("actor "+c.Self().Id, p))
	a.log.Error("worker crashed", zap.String("actor", c.Self().Id), zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
	if c.Sender() != nil {
		if r := failedReply(c.Message(), err); r != nil {
			c.Respond(r)
		}
	}
	a.cfg.Notify(err)
	c.Stop(c.Self())
}

// failedReply is the answer to request msg that failed with err.
func failedReply(msg any, err error) any {
	f := workerpb.FailureOf(err)
	switch m := msg.(type) {
	case *workerpb.StatusRequest:
		return &workerpb.Status{Peer: m.Peer, Failure: f}
	case *workerpb.Form:
		return &workerpb.Formed{Peer: m.Peer, Failure: f}
	case *workerpb.RunStep:
		return &workerpb.StepDone{Peer: m.Peer, Failure: f, Generation: m.Generation, Step: m.Step}
	case *workerpb.EvalRequest:
		return &workerpb.EvalDone{Peer: m.Peer, Failure: f}
	case *workerpb.WeightsRequest:
		return &workerpb.Weights{Peer: m.Peer, Failure: f}
	case *workerpb.SaveShard:
		return &workerpb.ShardSaved{Peer: m.Peer, Failure: f}
	case *CaptureRequest:
		return &Captured{Peer: m.Peer, Err: err}
	case *ExportRequest:
		return &Exported{Err: err}
	case *workerpb.PartChunk:
		return &workerpb.PartTaken{Peer: m.Peer, Failure: f}
	case *workerpb.Finish:
		return &workerpb.Finished{Peer: m.Peer, Failure: f}
	}
	return nil
}

// form places the worker in the generation m describes.
func (a *shellActor) form(m *workerpb.Form) *workerpb.Formed {
	f, err := FormOf(m)
	if err != nil {
		return &workerpb.Formed{Peer: m.Peer, Failure: workerpb.FailureOf(err)}
	}
	var comm collective.Communicator
	if !f.Standby() && f.Mesh.Size() > 1 {
		if a.cfg.Comms == nil {
			err = fmt.Errorf("%w: no communicator for a world of %d", ErrConfig, f.Mesh.Size())
		} else {
			comm, err = a.cfg.Comms(m)
		}
		if err != nil {
			a.w.Close()
			return &workerpb.Formed{Peer: m.Peer, Failure: workerpb.FailureOf(err)}
		}
	}
	a.shell.flight.Store(nil)
	if comm != nil {
		a.shell.flight.Store(collective.FlightOf(comm))
	}
	a.shell.rank.Store(int64(f.Rank))
	ctx, end := a.shell.begin()
	defer end()
	if err := a.w.Form(ctx, f, comm); err != nil {
		a.log.Warn("joining a generation failed", zap.Uint64("generation", f.Generation), zap.Error(err))
		a.w.Close()
		return &workerpb.Formed{Peer: m.Peer, Failure: workerpb.FailureOf(err)}
	}
	return &workerpb.Formed{Peer: m.Peer, Checksum: a.w.Checksum()}
}

// FormOf checks a Form from the wire and returns it as the worker takes it.
func FormOf(m *workerpb.Form) (Form, error) {
	f := Form{Generation: m.Generation, Rank: int(m.Rank), Step: int(m.Step), Cursor: data.Cursor(m.Cursor), RollBack: m.RollBack,
		World0: int(m.World0), ZeroGroup: int(m.ZeroGroup), Source: Source{Kind: SourceKind(m.Source), Step: int(m.CheckpointStep)}}
	if m.Rank < 0 {
		f.Rank = -1
		return f, nil
	}
	if m.Dp > mesh.MaxSize || m.Pp > mesh.MaxSize || m.Tp > mesh.MaxSize || m.ZeroGroup > mesh.MaxSize || m.Step > math.MaxInt32 || m.CheckpointStep > math.MaxInt32 {
		return f, fmt.Errorf("%w: form out of range: %v", ErrConfig, m)
	}
	var err error
	if f.Mesh, err = mesh.New(int(m.Dp), int(m.Pp), int(m.Tp)); err != nil {
		return f, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	switch {
	case f.Rank >= f.Mesh.Size():
		return f, fmt.Errorf("%w: rank %d of a %v world", ErrConfig, f.Rank, f.Mesh)
	case len(m.Addrs) != 0 && len(m.Addrs) != f.Mesh.Size():
		return f, fmt.Errorf("%w: %d addresses for a %v world", ErrConfig, len(m.Addrs), f.Mesh)
	case f.Source.Kind > FromCheckpoint:
		return f, fmt.Errorf("%w: unknown state source %d", ErrConfig, m.Source)
	case f.ZeroGroup > 0 && f.Mesh.DP%f.ZeroGroup != 0:
		return f, fmt.Errorf("%w: ZeRO shard groups of %d in a %v world", ErrConfig, f.ZeroGroup, f.Mesh)
	case f.Source.Kind == FromReplica && len(m.Roots) != f.Mesh.Slots(f.ZeroGroup):
		return f, fmt.Errorf("%w: %d roots for %d slots of a %v world (ZeRO groups of %d)", ErrConfig, len(m.Roots), f.Mesh.Slots(f.ZeroGroup), f.Mesh, f.ZeroGroup)
	}
	for slot, r := range m.Roots {
		if r < 0 || int(r) >= f.Mesh.Size() || f.Mesh.Slot(int(r), f.ZeroGroup) != slot {
			return f, fmt.Errorf("%w: slot %d's root %d is not a rank holding that slot in a %v world (ZeRO groups of %d)", ErrConfig, slot, r, f.Mesh, f.ZeroGroup)
		}
		f.Source.Roots = append(f.Source.Roots, int(r))
	}
	return f, nil
}

// step runs one step, gated and abortable.
func (a *shellActor) step(m *workerpb.RunStep) *workerpb.StepDone {
	done := &workerpb.StepDone{Peer: m.Peer, Generation: m.Generation, Step: m.Step, Rank: uint32(max(0, a.w.Rank()))}
	if g := a.cfg.Gate; g != nil {
		if !g.Hold() {
			done.Failure = workerpb.FailureOf(fmt.Errorf("%w: a new world is being formed", ErrStale))
			return done
		}
		defer g.Release()
	}
	ctx, end := a.shell.begin()
	defer end()
	flight := a.shell.flight.Load()
	var mark uint64
	if flight != nil {
		mark = flight.Next()
	}
	req := StepRequest{Generation: m.Generation, Step: int(m.Step), Cursor: data.Cursor(m.Cursor),
		Batch: int(m.Batch), LR: m.Lr, GlobalTargets: int(m.GlobalTargets), Checksum: m.Checksum, LossScale: m.LossScale,
		LossScaleTracker: int(m.LossScaleTracker), Round: m.Round}
	if m.AsyncKind != 0 {
		req.Async = &AsyncStep{Kind: AsyncKind(m.AsyncKind), Weights: m.Weights, Grads: m.Grads}
	}
	res, err := a.w.Step(ctx, req)
	if a.cfg.ShipTrace && a.w.rec != nil && a.w.st != nil {
		tl := a.w.rec.Take()
		st := a.w.st.coord.PP
		done.Spans, done.Mem = shipSpans(tl.Spans[st]), shipMem(tl.Mem[st])
	}
	if err != nil {
		done.Failure = workerpb.FailureOf(err)
		a.log.Warn("step failed", zap.Uint64("step", m.Step), zap.Error(err))
		return done
	}
	done.LossSum, done.Targets, done.Correct = res.LossSum, uint64(res.Targets), uint64(res.Correct)
	done.Skipped = res.Skipped
	done.StepMs, done.ComputeMs, done.ScheduleMs = res.StepMs, res.ComputeMs, res.ScheduleMs
	done.CommMs, done.ExposedCommMs = res.CommMs, res.ExposedMs
	done.GradNorm, done.Checksum = res.GradNorm, res.Checksum
	done.PeakActivationBytes, done.PeakMicroBatches = res.PeakAct, uint32(res.PeakMicro)
	done.ParamBytes, done.GradHeldBytes, done.OptimizerBytes = res.ParamBytes, res.GradBytes, res.OptimBytes
	done.PeakParamBytes, done.PeakGradBytes = res.PeakParamBytes, res.PeakGradBytes
	done.SentAllReduceBytes, done.SentReduceScatterBytes = res.Sent.AllReduce, res.Sent.ReduceScatter
	done.SentAllGatherBytes, done.SentBroadcastBytes = res.Sent.AllGather, res.Sent.Broadcast
	done.SyncBytes = res.SyncBytes
	done.Grads = res.Grads
	if flight != nil {
		for op := range flight.Since(mark) {
			if k, ok := collective.ParseKind(op.Kind); ok && op.State == collective.FlightDone {
				done.Collectives = append(done.Collectives, &workerpb.OpTime{Kind: uint32(k), Seconds: op.End.Sub(op.Start).Seconds()})
			}
		}
	}
	return done
}

func (a *shellActor) eval(m *workerpb.EvalRequest) *workerpb.EvalDone {
	if m.Generation != a.w.Generation() {
		return &workerpb.EvalDone{Peer: m.Peer, Failure: workerpb.FailureOf(fmt.Errorf("%w: evaluation for generation %d in %d", ErrStale, m.Generation, a.w.Generation()))}
	}
	if m.Lo > math.MaxInt32 || m.Hi > math.MaxInt32 {
		return &workerpb.EvalDone{Peer: m.Peer, Failure: workerpb.FailureOf(fmt.Errorf("%w: rows [%d, %d)", ErrData, m.Lo, m.Hi))}
	}
	ctx, end := a.shell.begin()
	defer end()
	res, rows, err := a.w.Evaluate(ctx, int(m.Lo), int(m.Hi))
	return &workerpb.EvalDone{Peer: m.Peer, Failure: workerpb.FailureOf(err), LossSum: res.LossSum, Targets: uint64(res.Targets),
		Correct: uint64(res.Correct), Rows: uint64(rows)}
}

func (a *shellActor) weights(m *workerpb.WeightsRequest) *workerpb.Weights {
	if m.Generation != a.w.Generation() || a.w.Holding().Part < 0 {
		return &workerpb.Weights{Peer: m.Peer, Failure: workerpb.FailureOf(fmt.Errorf("%w: no stage in generation %d", ErrStale, m.Generation))}
	}
	ctx, end := a.shell.begin()
	defer end()
	data, err := a.w.Weights(ctx)
	if err != nil {
		return &workerpb.Weights{Peer: m.Peer, Failure: workerpb.FailureOf(err)}
	}
	if m.Floats {
		return &workerpb.Weights{Peer: m.Peer, Values: data}
	}
	return &workerpb.Weights{Peer: m.Peer, Data: FloatBytes(data)}
}

func (a *shellActor) saveShard(m *workerpb.SaveShard) *workerpb.ShardSaved {
	meta, err := shardMeta(m.Meta)
	if err != nil {
		a.log.Error("a checkpoint request does not decode", zap.Uint32("peer", m.Peer), zap.Uint64("step", m.Step), zap.Error(err))
		return &workerpb.ShardSaved{Peer: m.Peer, Failure: workerpb.FailureOf(err)}
	}
	if m.Generation != a.w.Generation() || meta.Step != int64(a.w.Holding().Applied) {
		return &workerpb.ShardSaved{Peer: m.Peer, Failure: workerpb.FailureOf(fmt.Errorf("%w: checkpoint of step %d in generation %d; this worker is at step %d of %d",
			ErrStale, meta.Step, m.Generation, a.w.Holding().Applied, a.w.Generation()))}
	}
	n, err := a.w.SaveShard(meta, m.Dir, m.Tmp)
	if err != nil {
		a.log.Warn("checkpoint shard failed", zap.Uint64("step", m.Step), zap.Error(err))
	}
	return &workerpb.ShardSaved{Peer: m.Peer, Failure: workerpb.FailureOf(err), Bytes: uint64(n)}
}

// shardMeta reads SaveShard.meta. It stays the checkpoint's own JSON: it
// is the manifest's metadata block (checkpoint.Meta, which manifest.json
// carries as JSON, its config an uninterpreted JSON object), and a second
// schema of it would have to follow the manifest's. Bytes that do
// not decode are an ErrWire (the trainer sent them; no config is wrong).
func shardMeta(b []byte) (checkpoint.Meta, error) {
	var meta checkpoint.Meta
	if err := json.Unmarshal(b, &meta); err != nil {
		return checkpoint.Meta{}, fmt.Errorf("%w: checkpoint meta: %v", ErrWire, err)
	}
	return meta, nil
}

// FloatBytes encodes float32 values little-endian (Weights.Data).
func FloatBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// BytesFloats decodes little-endian float32 values; a length that is not a
// multiple of 4 is an error.
func BytesFloats(b []byte) ([]float32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("%w: %d bytes of float32 data", ErrWire, len(b))
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}
