package train

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/nn"
)

// Summary is what a finished run reports (troupe train --json prints it).
type Summary struct {
	Model  string `json:"model"`
	Params int    `json:"params"`
	Data   string `json:"data"`
	// Steps is the step the run reached, counted from the start of
	// training: the last one, or the last completed one of a run that
	// stopped or failed.
	Steps       int     `json:"steps"`
	StartStep   int     `json:"start_step"`
	Samples     int64   `json:"samples"`
	FirstLoss   float64 `json:"first_loss"`
	FinalLoss   float64 `json:"final_loss"`
	EvalLoss    float64 `json:"eval_loss,omitempty"`
	EvalAcc     float64 `json:"eval_accuracy,omitempty"`
	WallS       float64 `json:"wall_s"`
	SamplesPerS float64 `json:"samples_per_s"`
	TokensPerS  float64 `json:"tokens_per_s,omitempty"`
	StepMsMed   float64 `json:"step_ms_median"`
	// ComputeMsMed and CommMsMed are medians over steps (the slowest rank's);
	// Hidden is the mean share of communication hidden behind compute.
	ComputeMsMed float64 `json:"compute_ms_median"`
	CommMsMed    float64 `json:"comm_ms_median"`
	Hidden       float64 `json:"comm_hidden_fraction"`
	World        int     `json:"world"`
	// Saved is the path the weights were written to, and SavedStep the
	// step they belong to (the last one, or the last completed one of a
	// stopped run).
	Saved     string `json:"saved,omitempty"`
	SavedStep int    `json:"saved_step,omitempty"`
	// StalenessHist counts the applied gradients by staleness (index s:
	// computed s updates before their own) and Rejected the gradients
	// rejected as too stale (--sync async only).
	StalenessHist []int64 `json:"staleness_histogram,omitempty"`
	Rejected      int64   `json:"rejected,omitempty"`
	// Trained is the whole model with its trained weights, on the CPU
	// backend (Options.KeepModel): run it with Predict or Evaluate, read
	// its weights with Trained.Set.StateDict, or save them with
	// Trained.Set.SaveWeights.
	Trained *nn.Model `json:"-"`
}

// addAsync counts an asynchronous update in the staleness histogram.
func (s *Summary) addAsync(st stepStats) {
	for len(s.StalenessHist) <= st.Staleness {
		s.StalenessHist = append(s.StalenessHist, 0)
	}
	s.StalenessHist[st.Staleness]++
	s.Rejected += int64(st.Rejected)
}

// Options are a run's collaborators; the zero value logs nothing and
// calls nothing.
type Options struct {
	// Logger receives structured progress; nil logs nothing.
	Logger *zap.Logger
	// Progress, when set, gets a live progress bar (a terminal) instead of
	// a log line every Config.LogEvery steps, and the output of the worker
	// processes (Procs), which must not run into the bar: give it the
	// Terminal the logger writes to.
	Progress io.Writer
	// OnStep, when set, receives every step's metrics, in step order, on
	// the goroutine that called Run or RunAgent (a service embedding troupe
	// publishes progress with it); it must return quickly. An elastic agent
	// sees every step its job trains while it is a member (the steps
	// replayed after a restore from a checkpoint again).
	OnStep func(StepMetrics)
	// OnWorld, when set, receives every world the job forms (once for Run;
	// every generation for an elastic agent), on the same goroutine as
	// OnStep.
	OnWorld func(WorldInfo)
	// StopAfter, when positive, ends the run after that many steps (counted
	// from the start of training) as if the job ended there: tests and
	// chaos experiments use it to stop at a chosen step. An elastic agent
	// leaves its job after that step.
	StopAfter int
	// Registerer, when set, also gets the run's Prometheus metrics (a
	// service embedding troupe serves them with its own; they are
	// unregistered when Run or RunAgent returns). Config.MetricsAddr
	// serves them on their own.
	Registerer prometheus.Registerer
	// MetricLabels are constant labels on every one of the run's
	// Prometheus metrics (an agent adds its node's name as "node"): runs
	// that share a Registerer at the same time need label sets of their
	// own, e.g. {"run": "a"} and {"run": "b"}.
	MetricLabels prometheus.Labels
	// WorkerCommand is the command that runs one worker process of a
	// Config.Procs world: a program that calls RunWorkerProcess (troupe's
	// own is `troupe __worker`). It is needed, and used, only with Procs.
	WorkerCommand []string
	// Train and Test, when set, are the data the run trains on and holds
	// out (rows the program has in memory: data.InMemory, or any Dataset),
	// in place of Config.Data; Test may be nil (no evaluation). Every
	// worker of this process reads them; worker processes (Config.Procs)
	// cannot, and are refused. An elastic agent's job must give each
	// agent the same data.
	Train, Test data.Dataset
	// KeepModel returns the trained model in Summary.Trained (Run).
	KeepModel bool
	// Dump, when set, asks for the flight recorders at each receive: Run
	// writes every rank's into Config.DumpDir (a directory per receive,
	// for troupe explain hang) and logs their alignment; an agent or a
	// worker process writes its own worker's. The CLI sends one on
	// SIGUSR1.
	Dump <-chan struct{}

	// beforeCompute is asyncExecutor.beforeCompute (tests).
	beforeCompute func(ctx context.Context, replica int, version uint64) error
	// ckptFS replaces the file system checkpoints are written to (tests:
	// a disk that fills up).
	ckptFS checkpoint.FS
	// membership adds options to an agent's elastic node (tests: a network
	// that loses rendezvous messages).
	membership []elastic.Option
	// beforeLead, when set, is called by an agent's leader before each
	// generation's step loop, with the number of members its cluster has
	// (tests: a standby that must have joined before the job ends).
	beforeLead func(members func() int)
}

// WorldInfo describes a world the job formed.
type WorldInfo struct {
	// Generation is the elastic generation (0 for Run's one world).
	Generation uint64 `json:"generation"`
	// Mesh is the layout, e.g. "dp2×pp2"; DP and PP its sizes.
	Mesh string `json:"mesh"`
	DP   int    `json:"dp"`
	PP   int    `json:"pp"`
	// Members are the elastic members by rank (nil for Run), and Standby
	// the members without a slot.
	Members []string `json:"members,omitempty"`
	Standby []string `json:"standby,omitempty"`
	// Step is where training continues; StateFrom where the state came
	// from: "seed", "checkpoint step N" or "surviving replicas".
	Step      int    `json:"step"`
	StateFrom string `json:"state_from"`
}

// logger is o.Logger, or one that drops everything.
func (o Options) logger() *zap.Logger {
	if o.Logger == nil {
		return zap.NewNop()
	}
	return o.Logger
}

// Run trains cfg in this process (Config.DP × Config.PP worker actors) or
// in Config.Procs worker processes, until the last step or until ctx is
// cancelled.
//
// Cancelling ctx aborts the step in flight on every worker (within a
// bounded time; nothing of an aborted step is applied, unless it tore:
// then the stages disagree about it) and stops the run. The weights of the
// last step every stage completed are then written to Config.Save when it
// is set (Summary.Saved and SavedStep say so; a torn step saves nothing,
// and the error says why); the last checkpoint in Config.CkptDir is
// complete (a write in flight is finished first). Run then returns the
// summary of the steps trained and an error wrapping context.Canceled.
// A checkpoint or metrics write that fails ends the run the same way,
// weights saved, with an error of class failure.Output
// (checkpoint.ErrWrite for a checkpoint); the checkpoint directory keeps
// its last committed checkpoint. Every output is probed before the first
// step (an error naming its field: *FieldError of class ErrOutput).
//
// Run's own goroutine drives the steps and calls Options.OnStep; it
// returns once every worker (and worker process) has stopped.
func Run(ctx context.Context, cfg Config, o Options) (*Summary, error) {
	if err := checkRun(&cfg, o); err != nil {
		return nil, err
	}
	j, err := openValidJob(cfg, o.given())
	if err != nil {
		return nil, err
	}
	cfg = j.cfg
	log := o.logger()
	from, cursor, scaler, err := startPoint(j, log)
	if err != nil {
		return nil, err
	}
	flights := &flightSource{}
	prom, err := openProm(&cfg, o, nil, flights, log)
	if err != nil {
		return nil, err
	}
	defer prom.close()
	ckpt, err := openCheckpointer(&cfg, o, prom, log)
	if err != nil {
		return nil, err
	}
	defer ckpt.close()
	ex, group, err := startExecutor(ctx, j, o, ckpt, from, cursor, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := ex.Close(); err != nil {
			log.Warn("shutting down the workers", zap.Error(err))
		}
	}()
	flights.set(func(reason string) ([]collective.FlightDump, []int) {
		return group.Flights(reason), group.meshRanks()
	})
	defer flights.set(nil)
	defer flights.watch(o.Dump, cfg.DumpDir, log)()
	m := ex.Mesh()
	announce(j, o, m, from, log)
	t := newTrainer(j, log, ckpt)
	t.scaler.restore(scaler)
	t.stopAfter = o.StopAfter
	out, err := newRunOutputs(&cfg, o, j.steps)
	if err != nil {
		return nil, err
	}
	out.prom = prom.m()
	prom.m().setWorld(0, m.Size(), 0)
	prom.setReady(true)
	defer out.close()
	t.observe, t.logSteps = out.observe, o.Progress == nil
	sum, err := t.run(ctx, segment{ex: ex, from: from, cursor: cursor, batch: cfg.Batch, lrScale: 1})
	out.finish()
	if err == nil {
		err = ckpt.close() // the last checkpoint, written in the background
	}
	if err != nil {
		if ctx.Err() == nil && failure.CodeOf(err) != failure.Output {
			return nil, err
		}
		// Stopped, or a checkpoint or the metrics could not be written:
		// the workers are sound, so the weights they hold are saved
		// before the run ends with err.
		return t.stopped(group, sum, err)
	}
	if err := t.keepWeights(ctx, ex, sum, o.KeepModel); err != nil {
		return nil, err
	}
	if err := out.close(); err != nil {
		return nil, err
	}
	return sum, nil
}

// checkRun checks Run's configuration, its outputs (each probed before
// the first step) and that its data can reach its workers.
func checkRun(cfg *Config, o Options) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := cfg.probeOutputs(); err != nil {
		return err
	}
	if o.Train != nil && cfg.Procs > 0 {
		return fieldErr("Procs", "%d starts worker processes, which cannot read the data this program holds (Options.Train): run the workers in this process (DP, PP, TP without Procs)", cfg.Procs)
	}
	return nil
}

// openCheckpointer makes Run's checkpointer (nil without
// Config.CkptDir), on Options' test file system when one is set, its
// writes observed by the run's metrics.
func openCheckpointer(cfg *Config, o Options, prom *promRun, log *zap.Logger) (*checkpointer, error) {
	ckpt, err := newCheckpointer(cfg, log)
	if err != nil {
		return nil, err
	}
	if ckpt != nil && o.ckptFS != nil {
		ckpt.fsys = o.ckptFS
	}
	ckpt.setObserver(prom.m())
	return ckpt, nil
}

// runExecutor is the executor of Run's one world, which Run closes.
type runExecutor interface {
	executor
	Close() error
}

// startExecutor starts the workers of Run's world from step from at
// cursor: the replicas of the asynchronous parameter server, worker
// processes (Config.Procs), or worker actors in this process, which
// checkpoint to ck (nil: none). group is the executor's workers' group
// (under asynchronous training the parameter server's).
func startExecutor(ctx context.Context, j *job, o Options, ck *checkpointer, from int, cursor data.Cursor, log *zap.Logger) (runExecutor, *groupExecutor, error) {
	switch {
	case j.cfg.sync().Async():
		a, err := startAsync(ctx, j, workerProcsOf(o), ck, from, cursor, log)
		if err != nil {
			return nil, nil, err
		}
		a.beforeCompute = o.beforeCompute
		return a, a.groupExecutor, nil
	case j.cfg.Procs > 0:
		group, err := startProcs(ctx, j, workerProcsOf(o), ck, from, cursor, log)
		return group, group, err
	default:
		group, err := startLocal(ctx, j, ck, from, cursor, log)
		return group, group, err
	}
}

// announce logs what Run trains and tells Options.OnWorld of its world.
func announce(j *job, o Options, m mesh.Mesh, from int, log *zap.Logger) {
	cfg := &j.cfg
	log.Info("training", zap.String("model", j.describe), zap.String("data", j.train.Name()), zap.Int("train_samples", j.train.Len()),
		zap.Int("steps", j.steps), zap.Int("batch", cfg.Batch), zap.String("optimizer", cfg.Optim.Name), zap.Float64("lr", cfg.LR),
		zap.String("device", cfg.Device), zap.Stringer("world", m), zap.Int("procs", cfg.Procs), zap.Int("threads", cfg.Threads))
	if o.OnWorld != nil {
		source := "seed"
		if from > 0 {
			source = fmt.Sprintf("checkpoint step %d", from)
		}
		o.OnWorld(WorldInfo{Mesh: m.String(), DP: m.DP, PP: m.PP, Step: from, StateFrom: source})
	}
}

// keepWeights writes the trained weights to Config.Save and, with keep,
// returns the whole trained model in sum.Trained.
func (t *trainer) keepWeights(ctx context.Context, ex executor, sum *Summary, keep bool) error {
	if save := t.job.cfg.Save; save != "" {
		if err := t.saveWeights(ctx, ex, sum.Steps); err != nil {
			return err
		}
		sum.Saved, sum.SavedStep = save, sum.Steps
	}
	if keep {
		var err error
		if sum.Trained, err = t.wholeModel(ctx, ex); err != nil {
			return err
		}
	}
	return nil
}

// startPoint is where a run starts: step 0, or the latest checkpoint's
// step and cursor with Resume.
func startPoint(j *job, log *zap.Logger) (int, data.Cursor, *checkpoint.ScalerState, error) {
	if !j.cfg.Resume {
		return 0, 0, nil, nil
	}
	step, st, sc, err := resumePoint(&j.cfg, log)
	if err != nil || st == nil {
		return 0, 0, nil, err
	}
	s, err := data.NewSampler(j.train.Len(), j.cfg.Seed, j.cfg.Shuffle)
	if err != nil {
		return 0, 0, nil, err
	}
	if err := s.Restore(*st); err != nil {
		return 0, 0, nil, fmt.Errorf("train: resume: the checkpoint's data sampler does not fit this run: %w", err)
	}
	if step > j.steps {
		return 0, 0, nil, fieldErr("Steps", "%d: the checkpoint to resume is at step %d, past it", j.steps, step)
	}
	return step, s.Cursor(), sc, nil
}

// stopped ends a run that was cancelled (the workers' steps are aborted)
// or failed to write an output: the weights of the last step every stage
// holds are saved, and the summary so far returned with err.
func (t *trainer) stopped(ex *groupExecutor, sum *Summary, err error) (*Summary, error) {
	if failure.CodeOf(err) == failure.Output {
		t.log.Error("stopping: an output cannot be written", zap.Error(err))
	} else {
		t.log.Info("stopped", zap.Error(err))
	}
	if t.job.cfg.Save == "" {
		return sum, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.job.cfg.StepTimeout)
	defer cancel()
	applied, aerr := ex.Applied(ctx)
	if aerr != nil {
		return sum, errors.Join(err, fmt.Errorf("train: not saving the weights: %w", aerr))
	}
	for _, a := range applied[1:] {
		if a != applied[0] {
			return sum, errors.Join(err, fmt.Errorf("%w: not saving the weights: the step in flight tore (the stages hold steps %v)", ErrOutput, applied))
		}
	}
	if serr := t.saveWeights(ctx, ex, applied[0]); serr != nil {
		return sum, errors.Join(err, serr)
	}
	sum.Saved, sum.SavedStep = t.job.cfg.Save, applied[0]
	return sum, err
}

func (o *runOutputs) finish() {
	if o.bar != nil {
		o.bar.finish()
	}
}

// runOutputs are where Run's step metrics go: the metrics file, OnStep,
// the progress bar.
type runOutputs struct {
	metrics *metricsWriter
	onStep  func(StepMetrics)
	bar     *progress
	prom    *promMetrics
}

func newRunOutputs(cfg *Config, o Options, steps int) (*runOutputs, error) {
	out := &runOutputs{onStep: o.OnStep}
	if cfg.MetricsOut != "" {
		var err error
		if out.metrics, err = newMetricsWriter(cfg.MetricsOut); err != nil {
			return nil, err
		}
	}
	if o.Progress != nil {
		out.bar = newProgress(o.Progress, steps)
	}
	return out, nil
}

func (o *runOutputs) observe(m StepMetrics) error {
	if o.metrics != nil {
		if err := o.metrics.write(m); err != nil {
			return err
		}
	}
	o.prom.observeStep(m)
	if o.onStep != nil {
		o.onStep(m)
	}
	if o.bar != nil {
		o.bar.update(m.Step, m.Loss, m.SamplesPerS, m.TokensPerS)
	}
	return nil
}

// close flushes and closes the metrics file (once).
func (o *runOutputs) close() error {
	if o.metrics == nil {
		return nil
	}
	err := o.metrics.close()
	o.metrics = nil
	return err
}

// given is the data the options give in place of Config.Data (nil: none).
func (o *Options) given() *givenData {
	if o.Train == nil {
		return nil
	}
	return &givenData{train: o.Train, test: o.Test}
}
