package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

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

// asyncExecutor trains asynchronously (Config.Sync async): DP replicas
// and a parameter server, each a worker actor holding the whole model in
// a world of its own (one rank), all in this process. A step is one
// update of the server: an idle replica takes the server's weights,
// computes the gradient of the step's batch, and the server applies it
// (ps.Core admits it when at most MaxStaleness updates landed since those
// weights; otherwise another replica computes the batch again on fresh
// weights). The step loop keeps up to DP steps in flight (Window), so the
// replicas never wait for each other, only for the server's update.
//
// The server holds the only master weights and optimizer state: the
// evaluations, the weights to save and the checkpoints are its (the
// embedded groupExecutor's); a checkpoint is a one-rank world's, which
// any world resumes from.
type asyncExecutor struct {
	*groupExecutor // the parameter server's
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

	// beforeCompute, when set (tests), runs after a replica took the
	// server's weights and before it computes: a test holds a replica
	// there to make its gradient stale by a known number of updates.
	beforeCompute func(ctx context.Context, replica int, version uint64) error
}

// startAsync starts the server and j's DP replicas, formed at step from
// (the server's version): all as actors of this process, or with
// Config.Procs the replicas as worker processes (command argv), one each,
// and the server here.
func startAsync(ctx context.Context, j *job, argv []string, from int, cursor data.Cursor, log *zap.Logger) (_ *asyncExecutor, err error) {
	cfg := &j.cfg
	world, err := mesh.New(cfg.DP, 1, 1)
	if err != nil {
		return nil, fieldErr("DP", "%v", err)
	}
	core, err := ps.New(uint64(from), cfg.MaxStaleness)
	if err != nil {
		return nil, fieldErr("MaxStaleness", "%v", err)
	}
	procs := cfg.Procs > 0
	if procs && len(argv) == 0 {
		return nil, fieldErr("Procs", "needs Options.WorkerCommand: the command that runs one worker process (a program calling RunWorkerProcess; troupe's own is troupe __worker)")
	}
	sys, err := actors.NewSystem(actors.SystemConfig{Remote: procs, Logger: log})
	if err != nil {
		return nil, err
	}
	var stops []func() error
	stop := func() error {
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			if err := stops[i](); err != nil && !errors.Is(err, collective.ErrClosed) {
				errs = append(errs, err)
			}
		}
		return errors.Join(append(errs, sys.Close())...)
	}
	e := &asyncExecutor{world: world, log: log, core: core, lost: make([]bool, cfg.DP),
		replicas: make([]*groupExecutor, cfg.DP), freed: make(chan struct{})}
	defer func() {
		if err != nil {
			if e.groupExecutor == nil {
				stop()
				return
			}
			e.Close()
		}
	}()
	one, _ := mesh.New(1, 1, 1)
	group := func(name string, pid *actor.PID) (*groupExecutor, error) {
		g, err := newGroupExecutor(sys, name, []*actor.PID{pid}, func(int) string { return name }, one, 0, []int{0}, cfg, log)
		if err != nil {
			return nil, err
		}
		g.local, g.parts = !procs, j.partsLayout()
		g.learnControls([]*actor.PID{pid})
		return g, nil
	}
	// The server, and without worker processes the replicas: actors of a
	// world of DP + 1 here (0 the server), the kernel threads split among
	// the replicas (the server computes only between their passes: its
	// updates, evaluations and checkpoints).
	local := 1
	if !procs {
		local += cfg.DP
	}
	all, err := mesh.New(local, 1, 1)
	if err != nil {
		return nil, fieldErr("DP", "%v", err)
	}
	server := j.workerSpec()
	server.Straggler = nil
	pids, closers, err := spawnLocal(sys, j, all, max(1, local-1), func(i int) *worker.Spec {
		if i == 0 {
			return server
		}
		return j.replicaSpec(i - 1)
	}, nil, nil, log)
	stops = append(stops, closers...)
	if err != nil {
		return nil, err
	}
	if e.groupExecutor, err = group("parameter server", pids[0]); err != nil {
		return nil, err
	}
	e.groupExecutor.local = true
	e.groupExecutor.stop = stop
	forms := []*workerpb.Form{firstForm(j, one, from, cursor, nil)(0, 0)}
	if procs {
		addrs, err := e.launchReplicas(ctx, sys, j, argv, &stops, log)
		if err != nil {
			return nil, err
		}
		for r, a := range addrs {
			pids = append(pids, actor.NewPID(a, worker.ActorName))
			forms = append(forms, firstForm(j, one, from, cursor, addrs[r:r+1])(0, 0))
		}
	} else {
		for range cfg.DP {
			forms = append(forms, forms[0])
		}
	}
	for r := range cfg.DP {
		g, err := group(fmt.Sprintf("replica %d", r), pids[1+r])
		if err != nil {
			return nil, err
		}
		e.imu.Lock()
		e.replicas[r], e.idle = g, append(e.idle, r)
		e.imu.Unlock()
	}
	for i, g := range append([]*groupExecutor{e.groupExecutor}, e.replicas...) {
		if err := g.Form(ctx, func(int, uint32) *workerpb.Form { return forms[i] }); err != nil {
			return nil, fmt.Errorf("train: forming %s: %w", g.peerName(0), err)
		}
	}
	return e, nil
}

// launchReplicas starts the replicas' worker processes and waits for
// their hellos; it returns their addresses, by replica.
func (e *asyncExecutor) launchReplicas(ctx context.Context, sys *actors.System, j *job, argv []string, stops *[]func() error, log *zap.Logger) ([]string, error) {
	cfg := j.cfg
	n := cfg.DP
	hello, err := actors.NewGroup(sys, actors.GroupConfig{Name: "async-hello", Peers: make([]*actor.PID, n), Protocol: worker.Protocol,
		PeerName: func(r int) string { return fmt.Sprintf("replica %d", r) }, CallTimeout: cfg.StepTimeout})
	if err != nil {
		return nil, err
	}
	*stops = append(*stops, func() error { hello.Close(); return nil })
	addrs, err := freeAddrs(n)
	if err != nil {
		return nil, err
	}
	conf, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("train: encoding the worker config: %w", err)
	}
	env := append(os.Environ(), envWorkerConfig+"="+string(conf), envWorkerAddrs+"="+strings.Join(addrs, ","),
		envTrainer+"="+hello.PID().Address+"/"+hello.PID().Id)
	var wg sync.WaitGroup
	children, err := launch(argv, env, n, func(r int, cause string) {
		hello.Lost(r, cause)
		e.lose(r, cause)
	}, &wg)
	// Stopped first (stops run last to first): the processes end before
	// the actor system that talks to them.
	*stops = append(*stops, func() error { stopChildren(children, &wg); return nil })
	if err != nil {
		return nil, err
	}
	log.Info("started replica processes", zap.Int("procs", n), zap.Strings("addresses", addrs))
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := hello.Ready(rctx); err != nil {
		return nil, fmt.Errorf("train: waiting for %d replica processes: %w", n, err)
	}
	// Each replica's own group watches it from here on.
	hello.Close()
	return addrs, nil
}

// lose marks replica r lost (its process exited): its group fails what
// it runs, and no step is given to it again.
func (e *asyncExecutor) lose(r int, cause string) {
	e.imu.Lock()
	g := e.replicas[r]
	e.imu.Unlock()
	if g != nil {
		g.group.Lost(0, cause)
	}
}

// Mesh is the replicas' world (DP × 1 × 1).
func (e *asyncExecutor) Mesh() mesh.Mesh { return e.world }

// Window is how many steps may be in flight: one per replica.
func (e *asyncExecutor) Window() int { return len(e.replicas) }

// RankName names replica r.
func (e *asyncExecutor) RankName(r int) string { return fmt.Sprintf("replica %d", r) }

// Close stops the replicas' groups, then the server's, which stops every
// actor.
func (e *asyncExecutor) Close() error {
	for _, g := range e.replicas {
		if g != nil {
			g.group.Close()
		}
	}
	return e.groupExecutor.Close()
}

// Step trains req's batch as one update of the server: computed by an
// idle replica on the server's weights, applied when fresh enough, else
// computed again (by another replica when one is free) on newer weights.
// Steps run concurrently (up to Window); each returns once its update is
// applied.
func (e *asyncExecutor) Step(ctx context.Context, req worker.StepRequest) (stepStats, error) {
	tried := make([]bool, len(e.replicas)) // replicas whose gradient for this batch was too stale
	var st stepStats
	for {
		r, err := e.acquire(ctx, tried)
		if err != nil {
			return st, err
		}
		weights, base, err := e.pull(ctx)
		if err == nil && e.beforeCompute != nil {
			err = e.beforeCompute(ctx, r, base)
		}
		var done *workerpb.StepDone
		if err == nil {
			done, err = e.replicas[r].one(ctx, &workerpb.RunStep{Step: uint64(req.Step), Cursor: uint64(req.Cursor), Batch: uint32(req.Batch),
				Lr: req.LR, GlobalTargets: uint64(req.GlobalTargets), AsyncKind: uint32(worker.AsyncCompute), Weights: weights})
		}
		if errors.Is(err, actors.ErrPeerLost) && ctx.Err() == nil {
			// Its process is gone: the batch goes to another replica, the
			// job goes on with the others (the server holds every
			// parameter).
			if n := e.markLost(r); n == 0 {
				return st, fmt.Errorf("train: step %d: every replica was lost, the last: %w", req.Step+1, err)
			}
			e.log.Warn("replica lost; the job goes on without it", zap.Int("replica", r), zap.Int("step", req.Step+1), zap.Error(err))
			if !e.untried(tried) {
				clear(tried)
			}
			continue
		}
		e.release(r)
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
		if !e.untried(tried) {
			clear(tried) // every replica was too slow once: any may try again
		}
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

// push offers a gradient computed on version base to the server, which
// applies it as its next update when the core admits it.
func (e *asyncExecutor) push(ctx context.Context, req worker.StepRequest, base uint64, grads []float32) (ps.Verdict, *workerpb.StepDone, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v, err := e.core.Admit(base)
	if err != nil || !v.Admitted {
		return v, nil, err
	}
	done, err := e.groupExecutor.one(ctx, &workerpb.RunStep{Step: v.Version - 1, Cursor: uint64(req.Cursor), Batch: uint32(req.Batch),
		Lr: req.LR, AsyncKind: uint32(worker.AsyncApply), Grads: grads})
	if err != nil {
		return v, nil, fmt.Errorf("the parameter server's update %d: %w", v.Version, err)
	}
	e.core.Applied()
	return v, done, nil
}

// acquire takes an idle replica not in skip, waiting for one.
func (e *asyncExecutor) acquire(ctx context.Context, skip []bool) (int, error) {
	for {
		e.imu.Lock()
		if !slices.Contains(e.lost, false) {
			e.imu.Unlock()
			return -1, fmt.Errorf("train: %w: every replica was lost", actors.ErrPeerLost)
		}
		for i, r := range e.idle {
			if !skip[r] {
				e.idle = slices.Delete(e.idle, i, i+1)
				e.imu.Unlock()
				return r, nil
			}
		}
		freed := e.freed
		e.imu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return -1, context.Cause(ctx)
		}
	}
}

// untried reports whether a live replica is not in tried.
func (e *asyncExecutor) untried(tried []bool) bool {
	e.imu.Lock()
	defer e.imu.Unlock()
	for r, t := range tried {
		if !t && !e.lost[r] {
			return true
		}
	}
	return false
}

// markLost takes replica r out for good and returns how many are left.
func (e *asyncExecutor) markLost(r int) int {
	e.imu.Lock()
	defer e.imu.Unlock()
	e.lost[r] = true
	close(e.freed)
	e.freed = make(chan struct{})
	n := 0
	for _, l := range e.lost {
		if !l {
			n++
		}
	}
	return n
}

// release frees replica r.
func (e *asyncExecutor) release(r int) {
	e.imu.Lock()
	defer e.imu.Unlock()
	e.idle = append(e.idle, r)
	close(e.freed)
	e.freed = make(chan struct{})
}

// Staleness is the server's count of admitted gradients by staleness and
// of rejected ones.
func (e *asyncExecutor) Staleness() ([]int64, int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.Histogram(), e.core.Rejected()
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
