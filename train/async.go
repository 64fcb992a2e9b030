package train

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/ps"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// asyncExecutor trains asynchronously (Config.Sync async): DP replicas,
// each a worker holding the whole model in a world of its own (one rank;
// an actor of this process, a worker process, or an elastic member's
// worker), and the parameter servers, actors of this process (one, or
// ZeRO-3's shards of the model: Config.Servers). A step is one update of
// the servers: an idle replica takes their weights, computes the gradient
// of the step's batch, and the servers apply it (ps.Core admits it when
// at most MaxStaleness updates landed since those weights; otherwise
// another replica computes the batch again on fresh weights). The step
// loop keeps up to DP steps in flight (Window), so the replicas never
// wait for each other, only for the servers' update.
//
// The servers hold the only master weights and optimizer state: the
// evaluations, the weights to save and the checkpoints are theirs (the
// embedded groupExecutor's); a checkpoint is theirs, which any world
// resumes from.
type asyncExecutor struct {
	*groupExecutor // the parameter servers'
	replicas       []*groupExecutor
	world          mesh.Mesh // DP × 1 × 1: the replicas, as the metrics report them
	log            *zap.Logger

	// mu serialises what the server does: admission, its updates, and the
	// copy of its weights the replicas compute on (weights, at version
	// wver; nil when an update made it old).
	mu      sync.Mutex
	core    *ps.Core
	weights []float32
	wver    uint64

	// idle are the replicas free to take a step, longest idle first (so
	// that every replica gets work), lost those whose worker is gone (a
	// worker process that exited); freed is closed (and replaced)
	// whenever one becomes free or is lost.
	imu   sync.Mutex
	idle  []int
	lost  []bool
	freed chan struct{}

	// gen is the elastic generation the replicas serve (0 outside agents);
	// from is the servers' version at the start, started counts the steps
	// begun: every one was applied when the version is from + started
	// (settled).
	gen, from uint64
	started   atomic.Int64

	// stopRest stops the servers and what startAsync started with them
	// (nil: the servers are the caller's, the replicas' workers too).
	stopRest func() error

	// With worker processes: inc is each replica's incarnation (its
	// process started again after an exit), exited says its process
	// exited (handled once per incarnation), restarts what is left of
	// Config.MaxRestarts, pending the processes starting again, retired
	// the groups of replaced processes; bg owns the restarts, which
	// bgCancel stops (closing says Close began).
	procs    *replicaProcs
	inc      []int
	exited   []bool
	restarts int
	pending  int
	retired  []*groupExecutor
	closing  bool
	bg       sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc

	// beforeCompute, when set (tests), runs after a replica took the
	// server's weights and before it computes: a test holds a replica
	// there to make its gradient stale by a known number of updates.
	beforeCompute func(ctx context.Context, replica int, version uint64) error
}

// startAsync starts the servers and j's DP replicas, formed at step from
// (the servers' version): all as actors of this process, or with
// Config.Procs the replicas as worker processes (command argv), one each,
// and the servers here, which checkpoint to ck (nil: none).
func startAsync(ctx context.Context, j *job, wp workerProcs, ck *checkpointer, from int, cursor data.Cursor, log *zap.Logger) (_ *asyncExecutor, err error) {
	cfg := &j.cfg
	procs := cfg.Procs > 0
	if procs && len(wp.argv) == 0 {
		return nil, fieldErr("Procs", "needs Options.WorkerCommand: the command that runs one worker process (a program calling RunWorkerProcess; troupe's own is troupe __worker)")
	}
	sys, err := actors.NewSystem(actors.SystemConfig{Remote: procs, Logger: log})
	if err != nil {
		return nil, err
	}
	var stops []func() error
	stop := stopAll(&stops, sys)
	defer func() {
		if err != nil {
			stop()
		}
	}()
	// The servers, and without worker processes the replicas: actors of
	// this process, the kernel threads split among the replicas (the
	// servers compute only between their passes: their updates,
	// evaluations and checkpoints).
	share := 1
	if !procs {
		share = cfg.DP
	}
	servers, err := startServers(ctx, sys, j, ck, share, from, cursor, log)
	if err != nil {
		return nil, err
	}
	stops = append(stops, servers.Close)
	e, err := newAsyncExecutor(ctx, servers, cfg.DP, from, cfg, log)
	if err != nil {
		return nil, err
	}
	e.stopRest = stop
	defer func() {
		if err != nil {
			e.stopRest = nil // the first defer stops it
			e.Close()
		}
	}()
	// A group's actor is named after its worker and incarnation (a
	// replica's process started again gets a group of its own).
	group := func(name string, inc int, pid *actor.PID) (*groupExecutor, error) {
		return replicaGroup(sys, j, fmt.Sprintf("async %s #%d", name, inc), name, 0, pid, !procs, log)
	}
	if procs {
		err = e.startReplicaProcs(ctx, sys, j, wp, from, cursor, group, &stops, log)
	} else {
		err = e.startLocalReplicas(ctx, sys, j, servers, share, from, cursor, group, &stops, log)
	}
	if err != nil {
		return nil, err
	}
	return e, nil
}

// newAsyncExecutor trains asynchronously on servers (formed at step from;
// its caller's, unless it sets stopRest) with up to dp replicas, which the
// caller adds. What it starts in the background (restarts) outlives ctx,
// not the executor.
func newAsyncExecutor(ctx context.Context, servers *groupExecutor, dp, from int, cfg *Config, log *zap.Logger) (*asyncExecutor, error) {
	world, err := mesh.New(dp, 1, 1)
	if err != nil {
		return nil, fieldErr("DP", "%v", err)
	}
	core, err := ps.New(uint64(from), cfg.MaxStaleness)
	if err != nil {
		return nil, fieldErr("MaxStaleness", "%v", err)
	}
	e := &asyncExecutor{groupExecutor: servers, world: world, log: log, core: core, from: uint64(from), lost: make([]bool, dp),
		replicas: make([]*groupExecutor, dp), inc: make([]int, dp), exited: make([]bool, dp), restarts: cfg.MaxRestarts,
		freed: make(chan struct{})}
	e.bgCtx, e.bgCancel = context.WithCancel(context.WithoutCancel(ctx))
	return e, nil
}

// add makes g replica r's group and r idle.
func (e *asyncExecutor) add(r int, g *groupExecutor) {
	e.imu.Lock()
	defer e.imu.Unlock()
	e.replicas[r], e.idle = g, append(e.idle, r)
	e.broadcastLocked()
}

// lose marks replica r's incarnation inc lost (its process exited): its
// group fails what it runs, no step is given to it, and while restarts
// are left a new process takes its place.
func (e *asyncExecutor) lose(r, inc int, cause string) {
	e.imu.Lock()
	defer e.imu.Unlock()
	if e.replicas[r] == nil || e.inc[r] != inc || e.exited[r] {
		return
	}
	// A step's call may have found it lost first (its group watches the
	// process too, and then the step said so); the restart is this exit's
	// either way.
	e.exited[r] = true
	first := e.loseLocked(r, cause)
	if e.closing {
		return
	}
	if e.restarts == 0 {
		if first {
			// Idle when its process exited: no step's call saw it go.
			e.log.Warn("replica lost; the job goes on without it", zap.Int("replica", r), zap.String("cause", cause))
		}
		return
	}
	e.restarts--
	e.pending++
	e.log.Warn("replica process exited; starting it again", zap.Int("replica", r), zap.String("cause", cause), zap.Int("restarts_left", e.restarts))
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		g, err := e.procs.start(e.bgCtx, r, inc+1, e.lose)
		e.imu.Lock()
		defer e.imu.Unlock()
		e.pending--
		e.broadcastLocked()
		if err != nil {
			e.log.Warn("replica process did not start again", zap.Int("replica", r), zap.Error(err))
			return
		}
		if e.closing {
			g.group.Close()
			return
		}
		e.retired = append(e.retired, e.replicas[r]) // a step may still hold it: closed with the rest
		e.replicas[r], e.inc[r], e.lost[r], e.exited[r] = g, inc+1, false, false
		e.idle = append(e.idle, r)
		e.log.Info("replica rejoined: it computes on the server's current weights", zap.Int("replica", r), zap.Int("incarnation", inc+1))
	}()
}

// Generation is the elastic generation the replicas serve (0 outside
// agents).
func (e *asyncExecutor) Generation() uint64 { return e.gen }

// settled returns the servers' version and whether every step begun was
// applied (none in flight, none abandoned): then the batches applied are
// exactly those begun, and training may continue after them.
func (e *asyncExecutor) settled() (uint64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.core.Version()
	return v, v-e.from == uint64(e.started.Load())
}

// loseMember takes replica r out (its elastic member failed): what it
// runs fails, and no step goes to it.
func (e *asyncExecutor) loseMember(r int, cause string) {
	e.imu.Lock()
	defer e.imu.Unlock()
	if r < len(e.replicas) && e.replicas[r] != nil {
		e.loseLocked(r, cause)
	}
}

// loseLocked takes replica r out unless it is already: its group fails
// what it runs (cause), and no step goes to it. It reports whether r was
// taken out now.
func (e *asyncExecutor) loseLocked(r int, cause string) bool {
	if e.lost[r] {
		return false
	}
	e.replicas[r].group.Lost(0, cause)
	e.dropLocked(r)
	return true
}

// Mesh is the replicas' world (DP × 1 × 1).
func (e *asyncExecutor) Mesh() mesh.Mesh { return e.world }

// Window is how many steps may be in flight: one per replica.
func (e *asyncExecutor) Window() int { return len(e.replicas) }

// RankName names replica r.
func (e *asyncExecutor) RankName(r int) string { return fmt.Sprintf("replica %d", r) }

// Close stops the replicas' groups, then, when the executor started them,
// the servers and everything else it started (stopRest).
func (e *asyncExecutor) Close() error {
	e.imu.Lock()
	e.closing = true
	e.imu.Unlock()
	e.bgCancel()
	e.bg.Wait()
	for _, g := range append(e.replicas, e.retired...) {
		if g != nil {
			g.group.Close()
		}
	}
	if e.stopRest == nil {
		return nil // the servers are the caller's
	}
	return e.stopRest()
}

// Step trains req's batch as one update of the server: computed by an
// idle replica on the server's weights, applied when fresh enough, else
// computed again (by another replica when one is free) on newer weights.
// Steps run concurrently (up to Window); each returns once its update is
// applied.
func (e *asyncExecutor) Step(ctx context.Context, req worker.StepRequest) (stepStats, error) {
	e.started.Add(1)
	tried := make([]bool, len(e.replicas)) // replicas whose gradient for this batch was too stale
	var st stepStats
	for {
		r, g, err := e.acquire(ctx, tried)
		if err != nil {
			return st, err
		}
		weights, base, err := e.pull(ctx)
		if err == nil && e.beforeCompute != nil {
			err = e.beforeCompute(ctx, r, base)
		}
		var done *workerpb.StepDone
		if err == nil {
			done, err = g.one(ctx, &workerpb.RunStep{Step: uint64(req.Step), Cursor: uint64(req.Cursor), Batch: uint32(req.Batch),
				Lr: req.LR, GlobalTargets: uint64(req.GlobalTargets), AsyncKind: uint32(worker.AsyncCompute), Weights: weights})
		}
		if errors.Is(err, collective.ErrPeerLost) && ctx.Err() == nil {
			// Its process is gone: the batch goes to another replica, the
			// job goes on with the others (the server holds every
			// parameter).
			n, first := e.markLost(r, g)
			if n == 0 {
				return st, fmt.Errorf("train: step %d: every replica was lost, the last: %w", req.Step+1, err)
			}
			if first {
				e.log.Warn("replica lost; the job goes on without it", zap.Int("replica", r), zap.Int("step", req.Step+1), zap.Error(err))
			}
			e.retryAll(tried)
			continue
		}
		e.release(r, g)
		if err != nil {
			return st, fmt.Errorf("replica %d: %w", r, err)
		}
		// The replica took the weights and sent its gradient back.
		st.SyncBytes += 4 * int64(len(weights)+len(done.Grads))
		v, applied, err := e.push(ctx, req, base, done.Grads)
		if err != nil {
			return st, err
		}
		if v.Admitted {
			st.Result = worker.Result{LossSum: done.LossSum, Targets: int(done.Targets), Correct: int(done.Correct)}
			st.ComputeMs, st.PeakAct = done.ComputeMs, done.PeakActivationBytes
			st.GradNorm, st.ParamBytes, st.GradHeldBytes, st.OptimBytes = applied.GradNorm, applied.ParamBytes, applied.GradHeldBytes, applied.OptimizerBytes
			st.PeakParamBytes, st.PeakGradBytes = applied.ParamBytes, applied.GradHeldBytes
			st.Staleness, st.Replica, st.StragglerRank = v.Staleness, r, -1
			return st, nil
		}
		st.Rejected++
		e.log.Debug("stale gradient rejected", zap.Int("step", req.Step+1), zap.Int("replica", r),
			zap.Int("staleness", v.Staleness), zap.Int("max_staleness", e.core.MaxStaleness()))
		tried[r] = true
		e.retryAll(tried)
	}
}

// pull returns the server's weights and their version, fetched once per
// version.
func (e *asyncExecutor) pull(ctx context.Context) ([]float32, uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.weights == nil || e.wver != e.core.Version() {
		w, err := e.groupExecutor.Weights(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("the parameter server's weights: %w", err)
		}
		e.weights, e.wver = w, e.core.Version()
	}
	return e.weights, e.wver, nil
}

// push offers a gradient computed on version base to the servers, which
// apply it as their next update when the core admits it.
func (e *asyncExecutor) push(ctx context.Context, req worker.StepRequest, base uint64, grads []float32) (ps.Verdict, *workerpb.StepDone, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v, err := e.core.Admit(base)
	if err != nil || !v.Admitted {
		return v, nil, err
	}
	// Every server takes the whole gradient (by pointer: they are actors
	// of this process) and applies its shard.
	srv := e.groupExecutor
	replies, err := srv.call(ctx, srv.byRank(func(_ int, p uint32) any {
		return &workerpb.RunStep{Peer: p, Generation: srv.gen, Step: v.Version - 1, Cursor: uint64(req.Cursor), Batch: uint32(req.Batch),
			Lr: req.LR, AsyncKind: uint32(worker.AsyncApply), Grads: grads}
	}))
	if err != nil {
		return v, nil, fmt.Errorf("the parameter servers' update %d: %w", v.Version, err)
	}
	e.core.Applied()
	// What the most loaded server holds (the shards differ by rounding).
	var done *workerpb.StepDone
	for _, r := range replies {
		d := r.(*workerpb.StepDone)
		if done == nil {
			done = d
			continue
		}
		done.ParamBytes, done.GradHeldBytes = max(done.ParamBytes, d.ParamBytes), max(done.GradHeldBytes, d.GradHeldBytes)
		done.OptimizerBytes = max(done.OptimizerBytes, d.OptimizerBytes)
	}
	return v, done, nil
}

// acquire takes an idle replica not in skip, waiting for one, and
// returns it with its group.
func (e *asyncExecutor) acquire(ctx context.Context, skip []bool) (int, *groupExecutor, error) {
	for {
		e.imu.Lock()
		if e.aliveLocked() == 0 {
			e.imu.Unlock()
			return -1, nil, fmt.Errorf("train: %w: every replica was lost", collective.ErrPeerLost)
		}
		for i, r := range e.idle {
			if !skip[r] {
				e.idle = slices.Delete(e.idle, i, i+1)
				g := e.replicas[r]
				e.imu.Unlock()
				return r, g, nil
			}
		}
		freed := e.freed
		e.imu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return -1, nil, context.Cause(ctx)
		}
	}
}

// retryAll clears tried when every live replica is in it: each was too
// slow for the batch once (or the others are lost), and any may try it
// again.
func (e *asyncExecutor) retryAll(tried []bool) {
	e.imu.Lock()
	defer e.imu.Unlock()
	for r, t := range tried {
		if !t && !e.lost[r] {
			return
		}
	}
	clear(tried)
}

// markLost takes replica r out when g is still its group (its process
// exited), and returns how many replicas are alive or starting again and
// whether r was taken out now (not already, by its process's exit).
func (e *asyncExecutor) markLost(r int, g *groupExecutor) (alive int, first bool) {
	e.imu.Lock()
	defer e.imu.Unlock()
	if e.replicas[r] == g && !e.lost[r] {
		e.dropLocked(r)
		first = true
	}
	return e.aliveLocked(), first
}

// dropLocked marks replica r lost and takes it out of the idle ones.
func (e *asyncExecutor) dropLocked(r int) {
	e.lost[r] = true
	if i := slices.Index(e.idle, r); i >= 0 {
		e.idle = slices.Delete(e.idle, i, i+1)
	}
	e.broadcastLocked()
}

// aliveLocked counts the replicas alive or starting again.
func (e *asyncExecutor) aliveLocked() int {
	n := e.pending
	for _, l := range e.lost {
		if !l {
			n++
		}
	}
	return n
}

// broadcastLocked wakes the steps waiting for a replica.
func (e *asyncExecutor) broadcastLocked() {
	close(e.freed)
	e.freed = make(chan struct{})
}

// release frees replica r, which ran on g (unless g was replaced).
func (e *asyncExecutor) release(r int, g *groupExecutor) {
	e.imu.Lock()
	defer e.imu.Unlock()
	if e.replicas[r] == g && !e.lost[r] && !slices.Contains(e.idle, r) {
		e.idle = append(e.idle, r)
	}
	e.broadcastLocked()
}

// one runs a step request on the group's one worker and returns its
// answer.
func (e *groupExecutor) one(ctx context.Context, m *workerpb.RunStep) (*workerpb.StepDone, error) {
	m.Peer, m.Generation = uint32(e.peers[0]), e.gen
	replies, err := e.call(ctx, []any{m})
	if err != nil {
		return nil, err
	}
	return replies[0].(*workerpb.StepDone), nil
}
