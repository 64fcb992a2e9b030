package actors

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors/actorspb"
	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/ddp"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
)

// WorkerActorName is the Worker actor's name in a worker process's system,
// so that a Coordinator elsewhere addresses it knowing the system's address.
const WorkerActorName = "worker"

// TrainProtocol is the version of the training wire messages; a worker
// whose hello carries another is refused (an unknown message type would
// crash the receiving process).
const TrainProtocol = 1

// workerActor is the shell around a ddp.Stepper (a data-parallel replica
// or a pipeline stage): it turns RunStep, EvalRequest and WeightsRequest
// messages into calls and answers them. A step runs inside Receive: the
// mailbox holds the next request meanwhile, so the replica is only ever
// touched by this actor.
type workerActor struct {
	w     ddp.Stepper
	rank  int
	stage int
	log   *zap.Logger
}

// SpawnWorker spawns the Worker actor for w (rank, pipeline stage) under
// name (WorkerActorName in a worker process; any unique name in one
// process).
func SpawnWorker(sys *System, name string, rank, stage int, w ddp.Stepper) (*actor.PID, error) {
	a := &workerActor{w: w, rank: rank, stage: stage, log: sys.Logger().With(zap.Int("rank", rank))}
	props := actor.PropsFromProducer(func() actor.Actor { return a },
		// A failed Worker does not restart with half-updated state; the
		// Coordinator sees it stop and fails the step.
		actor.WithSupervisor(actor.NewOneForOneStrategy(0, 0, func(any) actor.Directive { return actor.StopDirective })))
	return sys.Root().SpawnNamed(props, name)
}

func (a *workerActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actorspb.RunStep:
		c.Respond(a.step(m))
	case *actorspb.EvalRequest:
		res, rows, err := a.w.Evaluate(int(m.Lo), int(m.Hi))
		done := &actorspb.EvalDone{LossSum: res.LossSum, Targets: uint64(res.Targets), Correct: uint64(res.Correct), Rows: uint64(rows), Rank: uint32(a.rank)}
		if err != nil {
			done.Error = err.Error()
		}
		c.Respond(done)
	case *actorspb.SaveShard:
		n, err := a.saveShard(m)
		done := &actorspb.ShardSaved{Rank: uint32(a.rank), Bytes: uint64(n)}
		if err != nil {
			done.Error = err.Error()
			a.log.Warn("checkpoint shard failed", zap.Uint64("step", m.Step), zap.Error(err))
		}
		c.Respond(done)
	case *actorspb.WeightsRequest:
		c.Respond(&actorspb.Weights{Data: floatsToBytes(a.w.Weights()), Rank: uint32(a.rank)})
	}
}

func (a *workerActor) step(m *actorspb.RunStep) *actorspb.StepDone {
	req := ddp.StepRequest{
		Generation: m.Generation, Step: m.Step, Cursor: data.Cursor(m.Cursor),
		Batch: int(m.Batch), Accum: int(m.Accum), LR: m.Lr, GlobalTargets: int(m.GlobalTargets), Checksum: m.Checksum,
	}
	res, err := a.w.Step(context.Background(), req)
	done := &actorspb.StepDone{
		Generation: m.Generation, Step: m.Step, Rank: uint32(a.rank),
		LossSum: res.LossSum, Targets: uint64(res.Targets), Correct: uint64(res.Correct),
		ComputeMs: res.ComputeMs, CommMs: res.CommMs, ExposedCommMs: res.ExposedMs,
		GradNorm: res.GradNorm, Checksum: res.Checksum, PeakActivationBytes: res.PeakAct, StepMs: res.StepMs,
		Stage: uint32(a.stage), PeakMicroBatches: uint32(res.PeakMicro), ScheduleMs: res.ScheduleMs,
	}
	for _, sp := range res.Spans {
		done.Spans = append(done.Spans, &actorspb.StageSpan{Kind: uint32(sp.Kind), Micro: int32(sp.Micro), Peer: int32(sp.Peer),
			Start: sp.Start, End: sp.End})
	}
	for _, ev := range res.Mem {
		done.Mem = append(done.Mem, &actorspb.StageMem{T: ev.T, Micro: int32(ev.Micro), Bytes: ev.Bytes, Released: ev.Released})
	}
	if err != nil {
		done.Error = err.Error()
		a.log.Warn("step failed", zap.Uint64("step", m.Step), zap.Error(err))
	}
	return done
}

// StageTrace is what a pipeline stage shipped in its StepDone: its spans
// and memory events (see ddp.StepResult), checked, since they come from
// another process: op kinds must be known, times finite and ordered.
func StageTrace(d *actorspb.StepDone) ([]pipeline.Span, []pipeline.MemEvent, error) {
	spans := make([]pipeline.Span, 0, len(d.Spans))
	for _, s := range d.Spans {
		k := pipeline.OpKind(s.Kind)
		if uint32(k) != s.Kind || !k.Valid() || !(s.Start <= s.End) || math.IsInf(s.Start, 0) || math.IsInf(s.End, 0) {
			return nil, nil, fmt.Errorf("%w: rank %d shipped a bad pipeline span (op %d, %v to %v)", ErrWire, d.Rank, s.Kind, s.Start, s.End)
		}
		spans = append(spans, pipeline.Span{Op: pipeline.Op{Kind: k, Micro: int(s.Micro), Peer: int(s.Peer)}, Start: s.Start, End: s.End})
	}
	mem := make([]pipeline.MemEvent, 0, len(d.Mem))
	for _, e := range d.Mem {
		if math.IsNaN(e.T) || math.IsInf(e.T, 0) || e.Bytes < 0 {
			return nil, nil, fmt.Errorf("%w: rank %d shipped a bad memory event (t %v, %d bytes)", ErrWire, d.Rank, e.T, e.Bytes)
		}
		mem = append(mem, pipeline.MemEvent{T: e.T, Micro: int(e.Micro), Bytes: e.Bytes, Released: e.Released})
	}
	return spans, mem, nil
}

// saveShard writes this rank's share of a checkpoint (its stage's
// tensors, split among the stage's data-parallel ranks) into dir/tmp.
func (a *workerActor) saveShard(m *actorspb.SaveShard) (int64, error) {
	model, opt := a.w.State()
	return SaveShard(m, model, opt, a.rank, a.stage)
}

// SaveShard writes the share of a checkpoint that rank (at pipeline stage
// stage) holds: its stage's tensors, split among the stage's data-parallel
// ranks, into m.Dir/m.Tmp, with its part manifest. It returns the bytes of
// the stage's state snapshot.
func SaveShard(m *actorspb.SaveShard, model *nn.Model, opt optim.Optimizer, rank, stage int) (int64, error) {
	var meta checkpoint.Meta
	if err := json.Unmarshal(m.Meta, &meta); err != nil {
		return 0, fmt.Errorf("checkpoint meta: %w", err)
	}
	if meta.World.DP < 1 {
		return 0, fmt.Errorf("checkpoint meta: world %v", meta.World)
	}
	snap := &checkpoint.Snapshot{Meta: meta}
	if err := snap.AddStage(stage, model, opt); err != nil {
		return 0, err
	}
	shard, err := snap.Shard(stage, rank%meta.World.DP)
	if err != nil {
		return 0, err
	}
	fsys := checkpoint.OSFS{}
	tmp := filepath.Join(m.Dir, m.Tmp)
	part, err := checkpoint.WriteShard(fsys, tmp, shard)
	if err != nil {
		return 0, err
	}
	if err := checkpoint.WritePart(fsys, tmp, part); err != nil {
		return 0, err
	}
	return snap.Bytes(), nil
}

func floatsToBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// BytesToFloats decodes little-endian float32 values (Weights.Data).
func BytesToFloats(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
