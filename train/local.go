package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// startLocal starts every worker of j's world as an actor of this process
// (chunks passed by pointer) and forms them at step from; checkpoints go
// to ck (nil: none).
func startLocal(ctx context.Context, j *job, ck *checkpointer, from int, cursor data.Cursor, log *zap.Logger) (_ *groupExecutor, err error) {
	cfg := &j.cfg
	m, err := mesh.New(cfg.DP, cfg.PP, cfg.TP)
	if err != nil {
		return nil, fieldErr("DP", "× {PP} × {TP}: %v", err)
	}
	sys, err := actors.NewSystem(actors.SystemConfig{Logger: log})
	if err != nil {
		return nil, err
	}
	var stops []func() error
	stop := stopAll(&stops, sys)
	handed := false // once the executor owns stop, it runs it
	defer func() {
		if err != nil && !handed {
			stop()
		}
	}()
	var comms []collective.Communicator
	if m.Size() > 1 {
		if comms, err = actors.StartLocal(sys, m.Size(), commConfig(cfg, log)); err != nil {
			return nil, err
		}
		for _, c := range comms {
			stops = append(stops, c.Close)
		}
	}
	var tr *tracer
	if cfg.Trace != "" {
		if tr, err = newTracer(m, cfg.Trace, time.Now(), true); err != nil {
			return nil, err
		}
	}
	spec := j.workerSpec()
	pids, closers, err := spawnLocal(sys, j, m, 0, m.Size(), func(int) *worker.Spec { return spec }, comms, tr, log)
	stops = append(stops, closers...)
	if err != nil {
		return nil, err
	}
	ex, err := startGroupExecutor(sys, "trainer", execWorld{mesh: m, peers: identity(m.Size()), pids: pids, peerName: rankName},
		execSetup{saver: capturing(ck), weightsInMemory: true, trace: tr, parts: j.partsLayout(), zeroShards: j.zeroShards(), stop: stop}, cfg, log)
	if err != nil {
		return nil, err
	}
	handed = true
	if err = ex.Form(ctx, firstForm(j, m, from, cursor, nil)); err != nil {
		return nil, errors.Join(fmt.Errorf("train: forming the workers: %w", err), ex.Close())
	}
	return ex, nil
}

// stopAll returns what runs *stops last to first (a closed communicator
// is not an error), then closes sys (when not nil).
func stopAll(stops *[]func() error, sys *actors.System) func() error {
	return func() error {
		var errs []error
		for i := len(*stops) - 1; i >= 0; i-- {
			if err := (*stops)[i](); err != nil && !errors.Is(err, collective.ErrClosed) {
				errs = append(errs, err)
			}
		}
		if sys != nil {
			errs = append(errs, sys.Close())
		}
		return errors.Join(errs...)
	}
}

// spawnLocal spawns a worker actor for every rank of m in sys, each on its
// own backend (the thread budget split among share workers), rank r with
// spec(r) and comms[r] (none: a world of one, or one its Form connects),
// named and placed on a device as the process's worker first+r. It
// returns their actors and what stops them.
func spawnLocal(sys *actors.System, j *job, m mesh.Mesh, first, share int, spec func(r int) *worker.Spec, comms []collective.Communicator, tr *tracer, log *zap.Logger) ([]*actor.PID, []func() error, error) {
	cfg := &j.cfg
	threads := threadsPerWorker(cfg, share)
	pids := make([]*actor.PID, m.Size())
	var stops []func() error
	for r := range pids {
		be, err := kernels.Open(cfg.Device, kernels.Options{Threads: threads, Device: deviceFor(cfg.Device, first+r)})
		if err != nil {
			return nil, stops, fieldErr("Device", "%s: %v", cfg.Device, err)
		}
		if c, ok := be.(io.Closer); ok {
			stops = append(stops, c.Close)
		}
		opts := []worker.Option{worker.WithLogger(log)}
		if c := m.Coord(r); tr != nil && c.TP == 0 {
			// A stage's shards run the same ops: shard 0 records them.
			opts = append(opts, worker.WithRecorder(tr.recorders[c.DP]))
		}
		w, err := worker.New(spec(r), be, opts...)
		if err != nil {
			return nil, stops, err
		}
		sc := worker.ShellConfig{Name: fmt.Sprintf("%s-%d", worker.ActorName, first+r), Logger: log.With(zap.Int("rank", r))}
		if comms != nil && comms[r] != nil {
			comm := comms[r]
			sc.Comms = func(*workerpb.Form) (collective.Communicator, error) { return comm, nil }
		}
		sh, err := worker.Spawn(sys, w, sc)
		if err != nil {
			return nil, stops, err
		}
		stops = append(stops, func() error { sh.Stop(); return nil })
		pids[r] = sh.PID()
	}
	return pids, stops, nil
}

// firstForm places rank r of a fresh world (Run's): from the seed, or from
// the checkpoint of step from.
func firstForm(j *job, m mesh.Mesh, from int, cursor data.Cursor, addrs []string) func(r int, p uint32) *workerpb.Form {
	return func(r int, p uint32) *workerpb.Form {
		f := &workerpb.Form{Peer: p, Dp: uint32(m.DP), Pp: uint32(m.PP), Tp: uint32(m.TP), Rank: int32(r), Addrs: addrs,
			Step: uint64(from), Cursor: uint64(cursor), World0: uint32(m.DP), ZeroGroup: uint32(j.zeroGroup(m.DP))}
		if from > 0 {
			f.Source, f.CheckpointStep = uint32(worker.FromCheckpoint), uint64(from)
		}
		return f
	}
}

func identity(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
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
	cc.Collective.Timeout = cfg.CollectiveTimeout
	cc.Transport = cfg.Transport
	if cfg.AllReduceAlgo == AllReduceRing {
		cc.Collective.SmallAllReduceBytes = -1
		cc.Collective.NoHierarchical = true
	}
	cc.Logger = log
	return cc
}

// deviceFor spreads the ranks of a machine over the backend's devices: one
// worker per GPU (rank r on device r mod the device count).
func deviceFor(backend string, rank int) int {
	devs, _ := kernels.Devices()
	n := 0
	for _, d := range devs {
		if d.Backend == backend {
			n++
		}
	}
	if n <= 1 {
		return 0
	}
	return rank % n
}
