package train

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/actors/actorspb"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/ddp"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/replica"
)

// dpEngine drives a world of Worker actors through the Coordinator actor:
// RunStep out to every rank, StepDone back. The workers are local actors
// (one process, chunks passed by pointer) or live in worker processes
// (see procs.go); nothing here depends on which.
type dpEngine struct {
	sys      *actors.System
	coord    *actor.PID
	world    int
	timeout  time.Duration
	cleanup  []func() error
	gen      uint64
	accum    int
	log      *zap.Logger
	lastDone []*actorspb.StepDone
}

// threadsPerWorker splits the thread budget over the local workers.
func threadsPerWorker(cfg *Config, local int) int {
	total := cfg.Threads
	if total <= 0 {
		total = runtime.GOMAXPROCS(0)
	}
	return max(1, total/local)
}

// commConfig is the communicators' configuration from the run's.
func commConfig(cfg *Config, log *zap.Logger) actors.CommConfig {
	cc := actors.DefaultCommConfig()
	if cfg.CollectiveTimeout > 0 {
		cc.Collective.Timeout = cfg.CollectiveTimeout
	}
	if cfg.Transport != "" {
		cc.Transport = actors.Transport(cfg.Transport)
	}
	cc.Logger = log
	return cc
}

// newWorker builds rank's replica and its ddp.Worker.
func newWorker(cfg *Config, rank, world int, threads int, comm collective.Communicator, trainSet, testSet data.Dataset) (*ddp.Worker, io.Closer, error) {
	be, err := kernels.Open(cfg.Device, kernels.Options{Threads: threads})
	if err != nil {
		return nil, nil, fmt.Errorf("train: --device %s: %w", cfg.Device, err)
	}
	closer, _ := be.(io.Closer)
	model, err := BuildModel(cfg, be, trainSet)
	if err != nil {
		return nil, closer, err
	}
	opt, err := optim.New(model.Set, cfg.Optim)
	if err != nil {
		return nil, closer, err
	}
	w, err := ddp.NewWorker(ddp.WorkerConfig{
		Rank: rank, World: world, Replica: replica.New(model, opt), Comm: comm,
		Train: trainSet, Test: testSet, Shuffle: cfg.Shuffle, Seed: cfg.Seed,
		BucketBytes: int64(cfg.BucketMB * (1 << 20)), ClipNorm: cfg.ClipNorm,
	})
	return w, closer, err
}

// newLocalDP starts cfg.DP workers as actors of this process.
func newLocalDP(cfg *Config, trainSet, testSet data.Dataset, log *zap.Logger) (_ *dpEngine, err error) {
	sys, err := actors.NewSystem(actors.SystemConfig{Logger: log})
	if err != nil {
		return nil, err
	}
	e := &dpEngine{sys: sys, world: cfg.DP, timeout: cfg.StepTimeout, log: log, accum: cfg.Accum}
	e.cleanup = append(e.cleanup, sys.Close)
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	comms, err := actors.StartLocal(sys, cfg.DP, commConfig(cfg, log))
	if err != nil {
		return nil, err
	}
	for _, c := range comms {
		e.cleanup = append(e.cleanup, c.Close)
	}
	threads := threadsPerWorker(cfg, cfg.DP)
	pids := make([]*actor.PID, cfg.DP)
	for r := range pids {
		w, closer, err := newWorker(cfg, r, cfg.DP, threads, comms[r], trainSet, testSet)
		if closer != nil {
			e.cleanup = append(e.cleanup, closer.Close)
		}
		if err != nil {
			return nil, err
		}
		if pids[r], err = actors.SpawnWorker(sys, fmt.Sprintf("%s-%d", actors.WorkerActorName, r), r, w); err != nil {
			return nil, err
		}
	}
	if e.coord, err = actors.SpawnCoordinator(sys, actors.CoordinatorConfig{Workers: pids, CallTimeout: cfg.StepTimeout}); err != nil {
		return nil, err
	}
	return e, nil
}

// call sends msg to the Coordinator and waits for its answer, a little
// longer than the Coordinator's own call timeout so that it reports first.
func (e *dpEngine) call(msg any) (any, error) {
	res, err := e.sys.Root().RequestFuture(e.coord, msg, e.timeout+30*time.Second).Result()
	if err != nil {
		return nil, fmt.Errorf("train: coordinator: %w", err)
	}
	return res, nil
}

func (e *dpEngine) step(step int, cur data.Cursor, b *data.Batch, lr float64, checksum bool) (stepStats, error) {
	var st stepStats
	req := &actorspb.RunStep{
		Generation: e.gen, Step: uint64(step), Cursor: uint64(cur), Batch: uint32(b.Rows), Accum: uint32(e.accum), Lr: lr,
		GlobalTargets: uint64(globalTargets(b)), Checksum: checksum, World: uint32(e.world),
	}
	res, err := e.call(&actors.StepCall{Req: req})
	if err != nil {
		return st, err
	}
	rep := res.(*actors.StepReport)
	if rep.Err != nil {
		return st, rep.Err
	}
	st.World, st.Generation = e.world, e.gen
	var hidden float64
	for _, d := range rep.Dones {
		st.LossSum += d.LossSum
		st.Targets += int(d.Targets)
		st.Correct += int(d.Correct)
		st.ComputeMs = math.Max(st.ComputeMs, d.ComputeMs)
		st.CommMs = math.Max(st.CommMs, d.CommMs)
		st.PeakAct = max(st.PeakAct, d.PeakActivationBytes)
		if d.CommMs > 0 {
			hidden += 1 - d.ExposedCommMs/d.CommMs
		}
	}
	st.Overlap = hidden / float64(len(rep.Dones))
	st.GradNorm = rep.Dones[0].GradNorm
	if checksum {
		for r, d := range rep.Dones {
			if d.Checksum != rep.Dones[0].Checksum {
				return st, fmt.Errorf("%w: after step %d rank %d's parameters (checksum %016x) differ from rank 0's (%016x)",
					ErrDiverged, step+1, r, d.Checksum, rep.Dones[0].Checksum)
			}
		}
	}
	return st, nil
}

func globalTargets(b *data.Batch) int {
	n := 0
	for _, y := range b.Y {
		if y >= 0 {
			n++
		}
	}
	return n
}

func (e *dpEngine) eval(lo, hi int) (replica.Result, error) {
	res, err := e.call(&actors.EvalCall{Lo: lo, Hi: hi})
	if err != nil {
		return replica.Result{}, err
	}
	rep := res.(*actors.EvalReport)
	if rep.Err != nil {
		return replica.Result{}, rep.Err
	}
	return replica.Result{LossSum: rep.Done.LossSum, Targets: int(rep.Done.Targets), Correct: int(rep.Done.Correct)}, nil
}

func (e *dpEngine) weights() ([]float32, error) {
	res, err := e.call(&actors.WeightsCall{})
	if err != nil {
		return nil, err
	}
	rep := res.(*actors.WeightsReport)
	return rep.Weights, rep.Err
}

func (e *dpEngine) close() error {
	var errs []error
	for i := len(e.cleanup) - 1; i >= 0; i-- {
		if err := e.cleanup[i](); err != nil && !errors.Is(err, collective.ErrClosed) {
			errs = append(errs, err)
		}
	}
	e.cleanup = nil
	return errors.Join(errs...)
}
