package train

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// stepStats is what one optimizer step of a world reports to the loop.
type stepStats struct {
	worker.Result
	GradNorm  float64
	ComputeMs float64
	CommMs    float64
	BubbleMs  float64
	// Overlap is the share of communication hidden behind compute.
	Overlap float64
	PeakAct int64
	// PeakMicro is the most micro-batches alive at once on stage 0;
	// BubbleFraction the measured idle share of the pipeline schedule.
	PeakMicro      int
	BubbleFraction float64
	// ParamBytes, GradHeldBytes and OptimBytes are the most parameter,
	// gradient and optimizer-state bytes any rank holds; Sent the most
	// bytes any rank sent in the step's collectives, by kind.
	ParamBytes, GradHeldBytes, OptimBytes int64
	PeakParamBytes, PeakGradBytes         int64
	Sent                                  worker.SentBytes
	// SyncBytes is the most bytes any rank sent to its part's other
	// replicas (worker.StepResult.SyncBytes).
	SyncBytes int64
	// StragglerRank is the replica that computed longest beside the
	// others of its model part, StragglerLagMs by how much it passed their
	// median (−1 and 0: no part has two replicas).
	StragglerRank  int
	StragglerLagMs float64
	// RankComputeMs is every rank's compute time, by mesh rank.
	RankComputeMs []float64
	// Collectives are every rank's collective operations.
	Collectives []CollectiveTime
	// Skipped: the loss scaler's overflow check skipped the update on
	// every rank.
	Skipped bool
	// Asynchronous training (asyncExecutor): the staleness of the applied
	// gradient, the gradients of this batch rejected as too stale before
	// it, and the replica whose gradient was applied.
	Staleness, Rejected, Replica int
}

// groupExecutor drives the worker actors of one world (a generation)
// through a group call: a request to every rank, every answer back. Where
// the workers live (this process, worker processes, the members of an
// elastic generation) is its launcher's business: the launcher builds it
// whole, with the strategies that depend on it (execSetup), and nothing
// here branches on it.
type groupExecutor struct {
	sys   *actors.System
	group *actors.Group
	log   *zap.Logger
	mesh  mesh.Mesh
	gen   uint64
	// peerName names a group peer (logs).
	peerName func(int) string
	// peers maps mesh ranks to group peers; size is the group's size (an
	// elastic generation's group also holds its standby members).
	peers []int
	size  int
	// controls are the workers' control actors by peer (aborts).
	controls []*actor.PID
	// stepLag bounds how much later than the first rank the last one
	// answers a step (the collective timeout: the ranks of a synchronous
	// step finish together, and one that does not is hung).
	stepLag time.Duration
	// dumpDir receives the flight-recorder dumps of a hung step
	// (Config.DumpDir).
	dumpDir string
	execSetup
}

// execWorld is the world an executor drives: mesh rank r of generation
// gen is group peer peers[r], whose worker is pids[peers[r]] (a worker
// process's group learns its PIDs from its hello, but its address is
// known before), named by peerName.
type execWorld struct {
	mesh     mesh.Mesh
	gen      uint64
	peers    []int
	pids     []*actor.PID
	peerName func(int) string
}

// execSetup is what a groupExecutor does that depends on where its
// workers live and what job it serves: chosen once by the launcher that
// builds it.
type execSetup struct {
	// saver writes Save's checkpoints (noSaver without a checkpoint
	// directory).
	saver saver
	// salvager looks at a failed step (noSalvage: the failure ends the
	// run).
	salvager salvager
	// weightsInMemory: the workers are actors of this process, which hand
	// their weights over as they are instead of encoding them.
	weightsInMemory bool
	// trace records the pipeline's spans (nil: no trace).
	trace *tracer
	// parts says how a replica's parts make the whole model (Weights).
	parts partsLayout
	// zeroShards is the ZeRO-3 shard group's size (0 below stage 3): its
	// ranks hold a shard of the weights each, so they evaluate and gather
	// the weights together, and replicas compare shard by shard.
	zeroShards int
	// stop ends what the launcher started, after the group (nil: nothing).
	stop func() error
}

// workerGroup is the group that calls the workers at pids (by peer, nil
// for a worker process that says hello), named name in sys: a call waits
// up to cfg's StepTimeout.
func workerGroup(sys *actors.System, name string, pids []*actor.PID, peerName func(int) string, cfg *Config) (*actors.Group, error) {
	return actors.NewGroup(sys, actors.GroupConfig{Name: name, Peers: pids, PeerName: peerName, Protocol: worker.Protocol, CallTimeout: cfg.StepTimeout})
}

// newGroupExecutor drives world w's workers through g, which it then owns
// (Close closes it), doing what s says: a step's ranks answer within
// cfg's CollectiveTimeout of each other (stepLag). A zero saver or
// salvager is noSaver or noSalvage.
func newGroupExecutor(sys *actors.System, g *actors.Group, w execWorld, s execSetup, cfg *Config, log *zap.Logger) *groupExecutor {
	if s.saver == nil {
		s.saver = noSaver{}
	}
	if s.salvager == nil {
		s.salvager = noSalvage{}
	}
	controls := make([]*actor.PID, len(w.pids))
	for p, pid := range w.pids {
		controls[p] = actor.NewPID(pid.Address, worker.ControlName(pid.Id))
	}
	return &groupExecutor{sys: sys, group: g, log: log, mesh: w.mesh, gen: w.gen, peers: w.peers, size: len(w.pids), peerName: w.peerName,
		controls: controls, stepLag: cfg.CollectiveTimeout, dumpDir: cfg.DumpDir, execSetup: s}
}

// startGroupExecutor is newGroupExecutor over a new group of w's workers,
// named name.
func startGroupExecutor(sys *actors.System, name string, w execWorld, s execSetup, cfg *Config, log *zap.Logger) (*groupExecutor, error) {
	g, err := workerGroup(sys, name, w.pids, w.peerName, cfg)
	if err != nil {
		return nil, err
	}
	return newGroupExecutor(sys, g, w, s, cfg, log), nil
}

// RankName names mesh rank r's worker: "rank r", or its member and rank
// in an elastic job (whose peers are members).
func (e *groupExecutor) RankName(r int) string {
	if r < 0 || r >= len(e.peers) {
		return rankName(r)
	}
	if n := e.peerName(e.peers[r]); n != rankName(r) {
		return fmt.Sprintf("%s (rank %d)", n, r)
	}
	return rankName(r)
}

// rankName names a peer of Run's worlds, where peers are ranks.
func rankName(p int) string { return fmt.Sprintf("rank %d", p) }

func (e *groupExecutor) Mesh() mesh.Mesh    { return e.mesh }
func (e *groupExecutor) Generation() uint64 { return e.gen }

// call sends one request per peer (by mesh rank when byRank) and returns
// the replies. When ctx ends first, every worker is told to abort what it
// runs, so that none stays in a collective its peers left.
func (e *groupExecutor) call(ctx context.Context, msgs []any) ([]any, error) {
	return e.callWithin(ctx, msgs, 0)
}

// callWithin is call for requests the ranks finish together (a step):
// once one answered, one silent lag later fails the call, named (see
// actors.Group.CallWithin).
func (e *groupExecutor) callWithin(ctx context.Context, msgs []any, lag time.Duration) ([]any, error) {
	replies, err := e.group.CallWithin(ctx, msgs, lag)
	if err != nil && ctx.Err() != nil {
		e.abort(context.Cause(ctx).Error())
	}
	return replies, err
}

// abort tells every worker to abort what it runs.
func (e *groupExecutor) abort(reason string) {
	for _, c := range e.controls {
		e.sys.Root().Send(c, &workerpb.Abort{Reason: reason})
	}
}

// byRank makes a request for every rank of the mesh with mk, addressed to
// its peer; peers without a rank get none.
func (e *groupExecutor) byRank(mk func(rank int, peer uint32) any) []any {
	msgs := make([]any, e.size)
	for r, p := range e.peers {
		msgs[p] = mk(r, uint32(p))
	}
	return msgs
}

// evalRanks are the ranks that together hold one whole model: replica 0's
// parts (its stages' tensor-parallel shards), in order.
func (e *groupExecutor) evalRanks() []int {
	out := make([]int, e.mesh.Parts())
	for p := range out {
		out[p] = e.mesh.PartRank(p, 0)
	}
	return out
}

// passRanks are the ranks that run an evaluation or a weight gather
// together: the eval ranks, and with ZeRO-3 the rest of their shard
// groups (each holds a shard of the weights; only replica 0 reports).
func (e *groupExecutor) passRanks() []int {
	if e.zeroShards <= 1 {
		return e.evalRanks()
	}
	var out []int
	for r := range e.mesh.Size() {
		if e.mesh.Coord(r).DP < e.zeroShards {
			out = append(out, r)
		}
	}
	return out
}

// onEvalRanks makes a request for each rank of passRanks.
func (e *groupExecutor) onEvalRanks(mk func(peer uint32) any) []any {
	msgs := make([]any, e.size)
	for _, r := range e.passRanks() {
		p := e.peers[r]
		msgs[p] = mk(uint32(p))
	}
	return msgs
}

// Form places every worker: form(rank, peer) is each rank's Form.
func (e *groupExecutor) Form(ctx context.Context, form func(rank int, peer uint32) *workerpb.Form) error {
	_, err := e.call(ctx, e.byRank(func(r int, p uint32) any { return form(r, p) }))
	return err
}

// Step runs one optimizer step on every rank.
func (e *groupExecutor) Step(ctx context.Context, req worker.StepRequest) (stepStats, error) {
	replies, err := e.callWithin(ctx, e.byRank(func(_ int, p uint32) any {
		return &workerpb.RunStep{Peer: p, Generation: e.gen, Step: uint64(req.Step), Cursor: uint64(req.Cursor), Batch: uint32(req.Batch),
			Lr: req.LR, GlobalTargets: uint64(req.GlobalTargets), Checksum: req.Checksum, LossScale: req.LossScale,
			LossScaleTracker: uint32(req.LossScaleTracker), Round: req.Round}
	}), e.stepLag)
	if err != nil {
		// A hang: the ranks' flight recorders are asked before the abort
		// changes what they hold (each control actor takes the question,
		// then the abort), and aligned after it.
		var q *flightAsk
		reason := fmt.Sprintf("step %d hung", req.Step+1)
		if hangLike(err, e.salvager.continues()) {
			q = e.askFlights(reason)
		}
		// The others must not wait in a collective for a rank that left
		// the step; the step may still have completed on some replicas.
		e.abort("the step failed on another rank: " + err.Error())
		if q != nil {
			err = e.hang(q, err, e.dumpDir, reason)
		}
		return e.salvager.salvage(ctx, e, req, err)
	}
	dones := make([]*workerpb.StepDone, e.mesh.Size())
	for r, p := range e.peers {
		dones[r] = replies[p].(*workerpb.StepDone)
	}
	st, err := aggregateStep(e.mesh, e.zeroShards, dones, req.Step, req.Checksum)
	if err != nil {
		return st, err
	}
	if e.trace != nil {
		if err := e.trace.step(dones); err != nil {
			return st, err
		}
	}
	return st, nil
}

// Evaluate runs held-out samples [lo, hi) through one replica.
func (e *groupExecutor) Evaluate(ctx context.Context, lo, hi int) (worker.Result, error) {
	replies, err := e.call(ctx, e.onEvalRanks(func(p uint32) any {
		return &workerpb.EvalRequest{Peer: p, Generation: e.gen, Lo: uint64(lo), Hi: uint64(hi)}
	}))
	if err != nil {
		return worker.Result{}, err
	}
	var res worker.Result
	for _, r := range replies {
		if d, ok := r.(*workerpb.EvalDone); ok {
			res.LossSum += d.LossSum
			res.Targets += int(d.Targets)
			res.Correct += int(d.Correct)
		}
	}
	return res, nil
}

// Weights returns the whole model's weights: replica 0's parts' put
// together.
func (e *groupExecutor) Weights(ctx context.Context) ([]float32, error) {
	replies, err := e.call(ctx, e.onEvalRanks(func(p uint32) any {
		return &workerpb.WeightsRequest{Peer: p, Generation: e.gen, Floats: e.weightsInMemory}
	}))
	if err != nil {
		return nil, err
	}
	var parts [][]float32
	for _, r := range e.evalRanks() {
		m := replies[e.peers[r]].(*workerpb.Weights)
		w := m.Values
		if w == nil {
			if w, err = worker.BytesFloats(m.Data); err != nil {
				return nil, err
			}
		}
		parts = append(parts, w)
	}
	return e.parts.merge(parts)
}

// Applied returns the step each eval rank holds (after an aborted step
// they may disagree: a torn step).
func (e *groupExecutor) Applied(ctx context.Context) ([]int, error) {
	replies, err := e.call(ctx, e.onEvalRanks(func(p uint32) any { return &workerpb.StatusRequest{Peer: p} }))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, r := range e.evalRanks() {
		out = append(out, int(replies[e.peers[r]].(*workerpb.Status).Applied))
	}
	return out, nil
}

// Save writes a checkpoint of the state after meta.Step and returns how
// long training paused for it, as the executor's saver does.
func (e *groupExecutor) Save(ctx context.Context, meta checkpoint.Meta) (time.Duration, error) {
	meta.World = checkpoint.World{DP: e.mesh.DP, PP: e.mesh.PP, TP: e.mesh.TP}
	return e.saver.save(ctx, e, meta)
}

// Close stops the group, then what the launcher started, and writes the
// trace.
func (e *groupExecutor) Close() error {
	e.group.Close()
	var errs []error
	if e.trace != nil {
		errs = append(errs, e.trace.close())
	}
	if e.stop != nil {
		errs = append(errs, e.stop())
	}
	return errors.Join(errs...)
}

// Window is 1: a step involves every rank.
func (e *groupExecutor) Window() int { return 1 }
