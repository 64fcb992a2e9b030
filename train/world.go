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
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/replica"
	"github.com/troupe-ml/troupe/stage"
	"github.com/troupe-ml/troupe/trace"
)

// dpEngine drives a world of Worker actors (data-parallel replicas, or the
// stages of D pipelines) through the Coordinator actor: RunStep out to every
// rank, StepDone back. The workers are local actors (one process, chunks
// passed by pointer) or live in worker processes (see procs.go); nothing
// here depends on which.
type dpEngine struct {
	sys     *actors.System
	coord   *actor.PID
	plan    *worldPlan
	timeout time.Duration
	cleanup []func() error
	gen     uint64
	accum   int
	log     *zap.Logger
	// local are replica 0's stages in order when the workers are actors of
	// this process (nil for worker processes): checkpoints read them
	// between steps.
	local []ddp.Stepper
	// recorders and tw trace in-process pipelines (--trace); with shipped,
	// the stages are worker processes that send their spans in StepDone.
	recorders []*pipeline.Recorder
	tw        *trace.Writer
	tracePath string
	shipped   bool
}

// worldPlan lays a run's workers out: D replicas of P stages, the schedule
// and the units of each stage.
type worldPlan struct {
	grid  pipeline.Grid
	sched *pipeline.Schedule // nil without pipelining
	cuts  []pipeline.Range
	spec  nn.Spec
}

// planWorld cuts the model into cfg.PP stages (--stage-layers, or balanced
// by parameter count, or by measured time) and builds the schedule.
func planWorld(cfg *Config, model *nn.Model, ds data.Dataset) (*worldPlan, error) {
	g, err := pipeline.NewGrid(cfg.DP, cfg.PP)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	p := &worldPlan{grid: g, spec: model.Spec, cuts: []pipeline.Range{{Lo: 0, Hi: model.Units}}}
	if cfg.PP == 1 {
		return p, nil
	}
	switch {
	case cfg.StageLayers != "":
		p.cuts, err = pipeline.ParseStageLayers(cfg.StageLayers, model.Units, cfg.PP)
	case cfg.Partition == "time":
		p.cuts, err = timeCuts(cfg, model, ds)
	default:
		var costs []float64
		if costs, err = pipeline.ParamCosts(pipeline.LayerParams(model)); err == nil {
			p.cuts, err = pipeline.Partition(costs, cfg.PP)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: cutting %d units into %d stages: %v", ErrConfig, model.Units, cfg.PP, err)
	}
	kind, err := pipeline.ParseKind(cfg.PipelineSchedule)
	if err != nil {
		return nil, fmt.Errorf("%w: --schedule: %v", ErrConfig, err)
	}
	if p.sched, err = pipeline.Build(pipeline.Config{Kind: kind, Stages: cfg.PP, MicroBatches: cfg.MicroBatches, Recompute: cfg.Recompute}); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return p, nil
}

// evalRanks are the ranks that together hold one whole model (replica 0's
// stages, in order).
func (p *worldPlan) evalRanks() []int { return p.grid.PipelineGroup(0) }

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

// deviceFor spreads the ranks of a machine over the backend's devices: one
// Worker per GPU (rank r on device r mod the device count).
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

// newStepper builds rank's worker: its model units, optimizer and backend,
// as a data-parallel replica or a pipeline stage.
func newStepper(cfg *Config, plan *worldPlan, rank, threads int, comm collective.Communicator, rec *pipeline.Recorder, trainSet, testSet data.Dataset) (ddp.Stepper, io.Closer, error) {
	be, err := kernels.Open(cfg.Device, kernels.Options{Threads: threads, Device: deviceFor(cfg.Device, rank)})
	if err != nil {
		return nil, nil, fmt.Errorf("train: --device %s: %w", cfg.Device, err)
	}
	closer, _ := be.(io.Closer)
	_, st := plan.grid.Coords(rank)
	cut := plan.cuts[st]
	model, err := buildUnits(cfg, be, plan.spec, cut.Lo, cut.Hi)
	if err != nil {
		return nil, closer, err
	}
	opt, err := optim.New(model.Set, cfg.Optim)
	if err != nil {
		return nil, closer, err
	}
	if err := restore(cfg, model, opt); err != nil {
		return nil, closer, err
	}
	if plan.sched == nil {
		w, err := ddp.NewWorker(ddp.WorkerConfig{
			Rank: rank, World: plan.grid.Size(), Replica: replica.New(model, opt), Comm: comm,
			Train: trainSet, Test: testSet, Shuffle: cfg.Shuffle, Seed: cfg.Seed,
			BucketBytes: int64(cfg.BucketMB * (1 << 20)), ClipNorm: cfg.ClipNorm,
		})
		return w, closer, err
	}
	w, err := stage.NewWorker(stage.Config{
		Grid: plan.grid, Rank: rank, Schedule: plan.sched, Model: model, Opt: opt, Comm: comm,
		Train: trainSet, Test: testSet, Shuffle: cfg.Shuffle, Seed: cfg.Seed, ClipNorm: cfg.ClipNorm, Recorder: rec,
	})
	return w, closer, err
}

// newLocalWorld starts every worker as an actor of this process.
func newLocalWorld(cfg *Config, plan *worldPlan, trainSet, testSet data.Dataset, log *zap.Logger) (_ *dpEngine, err error) {
	sys, err := actors.NewSystem(actors.SystemConfig{Logger: log})
	if err != nil {
		return nil, err
	}
	size := plan.grid.Size()
	e := &dpEngine{sys: sys, plan: plan, timeout: cfg.StepTimeout, log: log, accum: cfg.Accum}
	e.cleanup = append(e.cleanup, sys.Close)
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	comms, err := actors.StartLocal(sys, size, commConfig(cfg, log))
	if err != nil {
		return nil, err
	}
	for _, c := range comms {
		e.cleanup = append(e.cleanup, c.Close)
	}
	if plan.sched != nil {
		origin := time.Now()
		for range plan.grid.Replicas {
			rec, err := pipeline.NewRecorder(plan.grid.Stages, origin)
			if err != nil {
				return nil, err
			}
			e.recorders = append(e.recorders, rec)
		}
		if cfg.Trace != "" {
			e.tw, e.tracePath = trace.NewWriter(origin), cfg.Trace
		}
	}
	threads := threadsPerWorker(cfg, size)
	pids := make([]*actor.PID, size)
	for r := range pids {
		replicaIdx, st := plan.grid.Coords(r)
		var rec *pipeline.Recorder
		if e.recorders != nil {
			rec = e.recorders[replicaIdx]
		}
		w, closer, err := newStepper(cfg, plan, r, threads, comms[r], rec, trainSet, testSet)
		if closer != nil {
			e.cleanup = append(e.cleanup, closer.Close)
		}
		if err != nil {
			return nil, err
		}
		if pids[r], err = actors.SpawnWorker(sys, fmt.Sprintf("%s-%d", actors.WorkerActorName, r), r, st, w); err != nil {
			return nil, err
		}
		if replicaIdx == 0 {
			e.local = append(e.local, w)
		}
	}
	if e.coord, err = actors.SpawnCoordinator(sys, actors.CoordinatorConfig{Workers: pids, CallTimeout: cfg.StepTimeout, EvalRanks: plan.evalRanks()}); err != nil {
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
		GlobalTargets: uint64(globalTargets(b)), Checksum: checksum, World: uint32(e.plan.grid.Size()),
	}
	res, err := e.call(&actors.StepCall{Req: req})
	if err != nil {
		return st, err
	}
	rep := res.(*actors.StepReport)
	if rep.Err != nil {
		return st, rep.Err
	}
	st, err = aggregateStep(e.plan.grid, e.plan.sched != nil, rep.Dones, step, checksum)
	if err != nil {
		return st, err
	}
	st.Generation = e.gen
	for d, rec := range e.recorders {
		tl := rec.Take()
		if e.tw != nil {
			if err := tl.WriteTrace(e.tw, pipeline.TraceOptions{Pid: d, Process: fmt.Sprintf("replica %d", d), Scale: 1e6}); err != nil {
				return st, fmt.Errorf("train: --trace: %w", err)
			}
		}
	}
	if e.shipped && e.tw != nil {
		if err := e.writeShippedTrace(rep.Dones); err != nil {
			return st, err
		}
	}
	return st, nil
}

// writeShippedTrace adds one step of worker processes' pipeline stages to
// the trace: each replica's timeline from the spans its stages sent.
func (e *dpEngine) writeShippedTrace(dones []*actorspb.StepDone) error {
	g := e.plan.grid
	tls := make([]*pipeline.Timeline, g.Replicas)
	for d := range tls {
		tls[d] = pipeline.NewTimeline(g.Stages, "s")
	}
	for _, done := range dones {
		if int(done.Rank) >= g.Size() {
			return fmt.Errorf("train: --trace: a step answer from rank %d of %d", done.Rank, g.Size())
		}
		spans, mem, err := actors.StageTrace(done)
		if err != nil {
			return fmt.Errorf("train: --trace: %w", err)
		}
		d, stage := g.Coords(int(done.Rank))
		tls[d].Spans[stage], tls[d].Mem[stage] = spans, mem
	}
	for d, tl := range tls {
		if err := tl.WriteTrace(e.tw, pipeline.TraceOptions{Pid: d, Process: fmt.Sprintf("replica %d", d), Scale: 1e6}); err != nil {
			return fmt.Errorf("train: --trace: %w", err)
		}
	}
	return nil
}

// aggregateStep combines the ranks' answers to one step on grid g: the
// loss and targets summed, the slowest rank's times, the share of
// communication hidden, stage 0's memory and gradient norm, the measured
// bubble of a pipeline, and (when checksum) the check that the replicas
// of each stage hold the same bits.
func aggregateStep(g pipeline.Grid, pipelined bool, dones []*actorspb.StepDone, step int, checksum bool) (stepStats, error) {
	st := stepStats{World: g.Size()}
	var hidden float64
	for _, d := range dones {
		st.LossSum += d.LossSum
		st.Targets += int(d.Targets)
		st.Correct += int(d.Correct)
		st.ComputeMs = math.Max(st.ComputeMs, d.ComputeMs)
		st.CommMs = math.Max(st.CommMs, d.CommMs)
		if d.CommMs > 0 {
			hidden += 1 - d.ExposedCommMs/d.CommMs
		}
	}
	st.Overlap = hidden / float64(len(dones))
	st.GradNorm = dones[0].GradNorm
	st.PeakAct = dones[0].PeakActivationBytes
	st.PeakMicro = int(dones[0].PeakMicroBatches)
	if pipelined {
		st.BubbleFraction, st.BubbleMs = measuredBubble(g, dones)
	}
	if checksum {
		for r, d := range dones {
			first := dones[r-r%g.Replicas]
			if d.Checksum != first.Checksum {
				return st, fmt.Errorf("%w: after step %d rank %d's parameters (checksum %016x) differ from rank %d's (%016x), the same stage",
					ErrDiverged, step+1, r, d.Checksum, r-r%g.Replicas, first.Checksum)
			}
		}
	}
	return st, nil
}

// measuredBubble is the idle share of the pipeline schedule, averaged over
// replicas: 1 − Σ_s busy_s / (P × the slowest stage's schedule time), and
// the idle time per stage that it means.
func measuredBubble(g pipeline.Grid, dones []*actorspb.StepDone) (frac, idleMs float64) {
	for d := range g.Replicas {
		var busy, span float64
		for _, r := range g.PipelineGroup(d) {
			busy += dones[r].ComputeMs
			span = math.Max(span, dones[r].ScheduleMs)
		}
		if span > 0 {
			f := 1 - busy/(float64(g.Stages)*span)
			frac += f / float64(g.Replicas)
			idleMs += f * span / float64(g.Replicas)
		}
	}
	return frac, idleMs
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

func (e *dpEngine) eval(lo, hi int) (replica.Result, error) { return evalCall(e.call, lo, hi) }

// evalCall evaluates test rows [lo, hi) through a Coordinator that call
// reaches: the loss and targets summed over the eval ranks.
func evalCall(call func(any) (any, error), lo, hi int) (replica.Result, error) {
	res, err := call(&actors.EvalCall{Lo: lo, Hi: hi})
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
	if e.coord != nil {
		// The Coordinator goes first: workers stopping now is no failure.
		_ = e.sys.Root().StopFuture(e.coord).Wait()
		e.coord = nil
	}
	if e.tw != nil {
		if err := e.tw.WriteFile(e.tracePath); err != nil {
			errs = append(errs, fmt.Errorf("train: writing --trace %s: %w", e.tracePath, err))
		}
		e.tw = nil
	}
	for i := len(e.cleanup) - 1; i >= 0; i-- {
		if err := e.cleanup[i](); err != nil && !errors.Is(err, collective.ErrClosed) {
			errs = append(errs, err)
		}
	}
	e.cleanup = nil
	return errors.Join(errs...)
}
