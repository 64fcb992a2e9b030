package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/train/cadence"
	"github.com/troupe-ml/troupe/worker"
)

// executor runs the steps of one world; where its workers live (this
// process, worker processes, the members of an elastic generation) is its
// own business. Every call takes a context: cancelling it stops the call
// within a bounded time (a step in flight is aborted on every worker, and
// an aborted step applied nothing, or tore: see Applied).
type executor interface {
	// Mesh is the world's layout; Generation the elastic generation (0
	// outside elastic jobs).
	Mesh() mesh.Mesh
	Generation() uint64
	// Step runs one optimizer step on every rank.
	Step(ctx context.Context, req worker.StepRequest) (stepStats, error)
	// Evaluate runs held-out samples [lo, hi) through one replica.
	Evaluate(ctx context.Context, lo, hi int) (worker.Result, error)
	// Weights returns the whole model's weights.
	Weights(ctx context.Context) ([]float32, error)
	// Applied is the step each stage of one replica holds.
	Applied(ctx context.Context) ([]int, error)
	// Save writes a checkpoint of the state after meta.Step and returns
	// how long training paused for it.
	Save(ctx context.Context, meta checkpoint.Meta) (time.Duration, error)
	// RankName names mesh rank r's worker (logs).
	RankName(r int) string
	// Window is how many steps the loop may have in flight at once: 1
	// when every step involves every rank; the replicas under
	// asynchronous training, whose Step may then be called concurrently.
	Window() int
}

// trainer is the one step loop of troupe. It owns a run's policy: the
// learning-rate schedule, the sampler cursor, the evaluation, checkpoint
// and metrics cadence, the NaN check and the step metrics; it drives an
// executor. Run drives it with the workers of this process or of worker
// processes; an elastic leader with each generation's members.
type trainer struct {
	job   *job
	log   *zap.Logger
	sched optim.Schedule
	ckpt  *checkpointer
	// observe receives every step's metrics (files, callbacks, progress,
	// the members of an elastic job); an error ends the run.
	observe func(StepMetrics) error
	// stopAfter ends the loop after that step (Options.StopAfter).
	stopAfter int
	// logSteps logs a line every LogEvery steps (there is no progress bar).
	logSteps bool
	// scaler is fp16's dynamic loss scaler (nil otherwise).
	scaler *lossScaler
}

func newTrainer(j *job, log *zap.Logger, ckpt *checkpointer) *trainer {
	return &trainer{job: j, log: log, sched: j.cfg.lrSchedule(j.steps), ckpt: ckpt, observe: func(StepMetrics) error { return nil }, logSteps: true,
		scaler: newLossScaler(&j.cfg)}
}

// segment is a stretch of training on one executor.
type segment struct {
	ex executor
	// from is the first step (0-based), at sampler cursor cursor.
	from   int
	cursor data.Cursor
	// batch is the global batch of each step; lrScale multiplies the
	// schedule's rate (an elastic world under the linear scaling rule).
	batch   int
	lrScale float64
	// committed is when the elastic generation committed (its first step
	// reports the time since, resume_ms); zero outside elastic jobs.
	committed time.Time
	// stop, when set, ends the loop before its next step (an elastic
	// generation superseded: the step in flight completes, or aborts on
	// its own, and is reported either way).
	stop context.Context
}

// run trains from seg.from to the job's last step (or Options.StopAfter).
// It returns the summary so far also with an error; when ctx ended, the
// error wraps its cause.
func (t *trainer) run(ctx context.Context, seg segment) (sum *Summary, err error) {
	defer func() {
		if err != nil && ctx.Err() != nil && !errors.Is(err, context.Cause(ctx)) {
			err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
	}()
	j := t.job
	sum = &Summary{Model: j.describe, Params: j.params, Data: j.train.Name(), Steps: seg.from, StartStep: seg.from, World: seg.ex.Mesh().Size()}
	sampler, err := data.NewSampler(j.train.Len(), j.cfg.Seed, j.cfg.Shuffle)
	if err != nil {
		return sum, fmt.Errorf("train: %w", err)
	}
	r := &runState{sum: sum, sampler: sampler, start: time.Now(), lastDone: time.Now(), nextCursor: seg.cursor}
	defer func() { r.stats.summarize(sum, r.start, j.tokensPerRow()) }()
	fl := newInflight(ctx, seg.ex)
	defer fl.stop()
	cad := t.cadence(seg, fl.window)
	for !cad.Finished() {
		if err := t.startSteps(ctx, seg, fl, r, cad); err != nil {
			return sum, err
		}
		if cad.Running() == 0 { // only a superseded generation leaves none in flight
			return sum, cad.Stopped()
		}
		if done, err := t.complete(ctx, seg, fl, r, cad); err != nil || done {
			return sum, err
		}
	}
	return sum, nil
}

// cadence is the run's policy for seg, from the job's configuration.
func (t *trainer) cadence(seg segment, window int) *cadence.Cadence {
	cfg := &t.job.cfg
	return cadence.New(cadence.Config{From: seg.from, Steps: t.job.steps, StopAfter: t.stopAfter, Window: window,
		Eval: t.job.test != nil, EvalEvery: cfg.EvalEvery, CkptEvery: cfg.CkptEvery, Save: t.ckpt != nil, SaveLast: true,
		Salvaged: isAdopted})
}

// isAdopted reports whether a failed step completed on another replica
// (an *adoptedError).
func isAdopted(err error) bool {
	var adopted *adoptedError
	return errors.As(err, &adopted)
}

// runState is what trainer.run carries from step to step: the sampler and
// the next step to start at its cursor, the batch buffers, the figures of
// the completed steps and the summary.
type runState struct {
	sum             *Summary
	sampler         *data.Sampler
	stats           runStats
	b               data.Batch
	idx             []int
	start, lastDone time.Time
	// nextCursor is the sampler cursor of the next step to start.
	nextCursor data.Cursor
}

// startSteps starts the steps the cadence asks for (with a window of
// one, a step at a time). Steps complete, and are reported, in the order
// they complete. It returns the run's cancellation as an error; a
// superseded generation (seg.stop) only stops the starts.
func (t *trainer) startSteps(ctx context.Context, seg segment, fl *inflight, r *runState, cad *cadence.Cadence) error {
	j, cfg := t.job, &t.job.cfg
	for {
		step, ok := cad.Next()
		if !ok {
			return nil
		}
		if ctx.Err() != nil {
			return cad.Cancel(context.Cause(ctx))
		}
		if seg.stop != nil && seg.stop.Err() != nil {
			cad.Supersede(context.Cause(seg.stop))
			return nil
		}
		r.idx = r.sampler.At(r.nextCursor, seg.batch, r.idx)
		j.train.Fill(r.idx, &r.b)
		cad.Started()
		fl.start(worker.StepRequest{Step: step, Cursor: r.nextCursor, Batch: seg.batch, LR: t.sched.LR(step) * seg.lrScale,
			GlobalTargets: globalTargets(&r.b), Checksum: cfg.CheckEvery > 0 && (step+1)%cfg.CheckEvery == 0,
			LossScale: t.scaler.scale(), LossScaleTracker: t.scaler.tracker(), Round: cfg.roundAt(step, t.total())})
		r.nextCursor += data.Cursor(seg.batch)
	}
}

// complete takes the next step to complete: the cadence checks its
// outcome; complete updates the loss scaler, the figures and the summary,
// runs what the cadence says follows it (evaluation, checkpoint) and
// reports and logs it. done: the run stops after it (Options.StopAfter).
func (t *trainer) complete(ctx context.Context, seg segment, fl *inflight, r *runState, cad *cadence.Cadence) (done bool, err error) {
	j, cfg, sum := t.job, &t.job.cfg, r.sum
	step := cad.Completed()
	o := fl.next()
	req, st, t0 := o.req, o.st, o.t0
	if fl.window > 1 {
		// Steps overlap: a step's time is the time since the one before
		// it completed (the rate the job trains at).
		t0 = r.lastDone
	}
	r.lastDone = time.Now()
	cursor, lr, lossScale := req.Cursor, req.LR, req.LossScale
	loss := st.LossSum / math.Max(1, float64(st.Targets))
	a := cad.Done(loss, o.err)
	var adopted *adoptedError
	if a.Salvaged && errors.As(o.err, &adopted) {
		// The step may count: its line goes with the error, for the next
		// generation to report if it continues after it.
		loss := adopted.Stats.LossSum / math.Max(1, float64(adopted.Stats.Targets))
		adopted.Metrics = t.metrics(seg, step, cursor, lr, loss, adopted.Stats, time.Since(t0))
	}
	if a.Err != nil {
		return false, a.Err
	}
	m := t.metrics(seg, step, cursor, lr, loss, st, time.Since(t0))
	if err := t.scaled(&m, st, step, lossScale); err != nil {
		return false, err
	}
	r.stats.add(m, st)
	if step == seg.from {
		sum.FirstLoss = loss
	}
	sum.Steps, sum.FinalLoss, sum.Samples = step+1, loss, sum.Samples+int64(seg.batch)
	// The samples trained by the completed steps (the step's own batch's
	// end, unless steps complete out of order).
	cursor = seg.cursor + data.Cursor((step+1-seg.from)*seg.batch)
	last := step == j.steps-1
	if cfg.sync().Async() {
		sum.addAsync(st)
		m.Samples, m.Epoch = int64(cursor), float64(cursor)/float64(j.train.Len())
	}
	if err := t.afterStep(ctx, seg, a, &m, r.sampler, cursor, sum); err != nil {
		return false, err
	}
	t.logStep(seg, &m, step, lr, loss, last, r.start)
	if a.Stop && !last {
		t.log.Info("stopping early", zap.Int("after_step", step+1))
	}
	return a.Stop, nil
}

// scaled updates the fp16 loss scaler with step's outcome (nothing
// without one) and puts its state in m.
func (t *trainer) scaled(m *StepMetrics, st stepStats, step int, lossScale float64) error {
	if t.scaler == nil {
		return nil
	}
	if err := t.scaler.update(st.Skipped, step+1); err != nil {
		return err
	}
	m.LossScale, m.Skipped, m.Scaler = lossScale, st.Skipped, t.scaler.state()
	if st.Skipped {
		t.log.Warn("gradients overflowed: step skipped on every rank", zap.Int("step", step+1),
			zap.Float64("loss_scale", lossScale), zap.Float64("next_scale", t.scaler.Scale))
	}
	return nil
}

// logStep logs a straggler past the threshold and, every LogEvery steps
// (and the first and the last), the step.
func (t *trainer) logStep(seg segment, m *StepMetrics, step int, lr, loss float64, last bool, start time.Time) {
	j, cfg := t.job, &t.job.cfg
	if th := cfg.StragglerThreshold; th > 0 && m.StragglerLagMs > ms(th) {
		t.log.Warn("straggler", zap.Int("step", m.Step), zap.String("rank", seg.ex.RankName(m.StragglerRank)),
			zap.Float64("lag_ms", m.StragglerLagMs), zap.Float64("compute_ms", m.ComputeMs), zap.Duration("threshold", th))
	}
	if t.logSteps && ((step+1)%cfg.LogEvery == 0 || step == seg.from || last) {
		t.log.Info("step", zap.Uint64("generation", m.Generation), zap.Int("step", step+1), zap.Int("of", j.steps),
			zap.Float64("loss", loss), zap.Float64("lr", lr), zap.Float64("step_ms", m.StepMs), zap.Float64("samples_per_s", m.SamplesPerS),
			zap.Stringer("world", seg.ex.Mesh()), zap.Float64("epoch", m.Epoch), zap.Duration("eta", eta(start, step+1-seg.from, j.steps-seg.from)))
	}
}

// inflight runs the loop's steps: one at a time on the loop's goroutine
// with a window of one; with a larger window each on a goroutine of its
// own, which stop cancels and waits for.
type inflight struct {
	ex     executor
	window int
	// results holds the outcomes of started steps as they complete.
	results chan stepOutcome
	parent  context.Context
	ctx     context.Context
	cancel  context.CancelCauseFunc
	wg      sync.WaitGroup
}

// stepOutcome is what a started step gave.
type stepOutcome struct {
	req worker.StepRequest
	st  stepStats
	err error
	t0  time.Time
}

// errAbandoned cancels the steps in flight when the loop ends early.
var errAbandoned = errors.New("train: the step loop ended")

func newInflight(ctx context.Context, ex executor) *inflight {
	w := max(1, ex.Window())
	f := &inflight{ex: ex, window: w, parent: ctx, results: make(chan stepOutcome, w)}
	f.ctx, f.cancel = context.WithCancelCause(ctx)
	return f
}

// start runs req's step (at once with a window of one).
func (f *inflight) start(req worker.StepRequest) {
	t0 := time.Now()
	if f.window == 1 {
		st, err := f.ex.Step(f.parent, req)
		f.results <- stepOutcome{req: req, st: st, err: err, t0: t0}
		return
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		st, err := f.ex.Step(f.ctx, req)
		f.results <- stepOutcome{req: req, st: st, err: err, t0: t0}
	}()
}

// next returns the outcome of the first started step to complete that
// next has not returned yet.
func (f *inflight) next() stepOutcome {
	return <-f.results
}

// stop cancels the steps still in flight and waits for them.
func (f *inflight) stop() {
	f.cancel(errAbandoned)
	f.wg.Wait()
}

// total is the number of steps the loop runs from the start of training:
// the job's, or fewer with Options.StopAfter (the last step ends a
// synchronisation round).
func (t *trainer) total() int {
	if t.stopAfter > 0 && t.stopAfter < t.job.steps {
		return t.stopAfter
	}
	return t.job.steps
}

// afterStep does what the cadence asks after step m.Step (its metrics,
// completed with what it does): evaluate, checkpoint; then observe.
func (t *trainer) afterStep(ctx context.Context, seg segment, a cadence.After, m *StepMetrics, sampler *data.Sampler, cursor data.Cursor, sum *Summary) error {
	if a.Evaluate {
		var err error
		if m.EvalLoss, m.EvalAcc, err = t.evaluate(ctx, seg.ex, m.Step); err != nil {
			return err
		}
		sum.EvalLoss, sum.EvalAcc = m.EvalLoss, m.EvalAcc
	}
	if a.Save {
		st := sampler.State()
		st.Cursor = cursor
		meta := t.ckpt.meta(m.Step, seg.ex.Generation(), st, t.sched)
		meta.LossScaler = t.scaler.state()
		pause, err := seg.ex.Save(ctx, meta)
		if err != nil {
			return err
		}
		m.CkptPauseMs = ms(pause)
	}
	return t.observe(*m)
}

// metrics is step's line of the metrics.
func (t *trainer) metrics(seg segment, step int, cursor data.Cursor, lr, loss float64, st stepStats, took time.Duration) StepMetrics {
	j, m := t.job, seg.ex.Mesh()
	stepMs := ms(took)
	sm := StepMetrics{
		Step: step + 1, Loss: loss, LR: lr, SamplesPerS: float64(seg.batch) / took.Seconds(),
		StepMs: stepMs, ComputeMs: st.ComputeMs, CommMs: st.CommMs, BubbleMs: st.BubbleMs,
		World: m.Size(), Generation: seg.ex.Generation(), Cursor: uint64(cursor), Batch: seg.batch,
		Epoch:   float64(cursor+data.Cursor(seg.batch)) / float64(j.train.Len()),
		Samples: int64(cursor) + int64(seg.batch), GradNorm: st.GradNorm,
		DP: m.DP, PP: m.PP, TP: m.TP, Micro: j.cfg.MicroBatches, Accum: j.cfg.Accum, GradBytes: int64(4 * j.params),
		OverlapFraction: st.Overlap, PeakActBytes: st.PeakAct, ParamBytes: st.ParamBytes, GradHeldBytes: st.GradHeldBytes, OptimizerBytes: st.OptimBytes,
		PeakParamBytes: st.PeakParamBytes, PeakGradBytes: st.PeakGradBytes,
		SentAllReduceBytes: st.Sent.AllReduce, SentReduceScatterBytes: st.Sent.ReduceScatter, SentAllGatherBytes: st.Sent.AllGather,
		SentBroadcastBytes: st.Sent.Broadcast, PeakMicro: st.PeakMicro, BubbleFraction: st.BubbleFraction,
		StragglerRank: st.StragglerRank, StragglerLagMs: st.StragglerLagMs, RankComputeMs: st.RankComputeMs,
		Collectives: st.Collectives, SyncBytes: st.SyncBytes,
	}
	if j.cfg.sync().Async() {
		sm.Async = &AsyncMetrics{Staleness: st.Staleness, Rejected: st.Rejected, Replica: st.Replica}
		sm.StragglerRank = -1
	}
	if j.cfg.sync().Local() {
		sm.SyncRound, sm.SyncRounds = j.cfg.roundAt(step, t.total()), j.cfg.roundsUpTo(step, t.total())
	}
	if m.PP > 1 {
		sm.FormulaBubble = pipeline.FormulaBubble(m.PP, j.cfg.MicroBatches)
	}
	sm.TokensPerS = sm.SamplesPerS * float64(j.tokensPerRow())
	if j.accuracy && st.Targets > 0 {
		sm.Accuracy = float64(st.Correct) / float64(st.Targets)
	}
	if step == seg.from && !seg.committed.IsZero() {
		sm.ResumeMs = ms(time.Since(seg.committed))
	}
	return sm
}

// evaluate runs the held-out set (its first EvalBatches batches, when set)
// in order, a batch at a time, and returns the mean loss per target and
// the accuracy per row.
func (t *trainer) evaluate(ctx context.Context, ex executor, after int) (loss, acc float64, err error) {
	cfg := &t.job.cfg
	n := t.job.test.Len()
	if cfg.EvalBatches > 0 && cfg.EvalBatches*cfg.Batch < n {
		n = cfg.EvalBatches * cfg.Batch
	}
	var res worker.Result
	for lo := 0; lo < n; lo += cfg.Batch {
		r, err := ex.Evaluate(ctx, lo, min(lo+cfg.Batch, n))
		if err != nil {
			return 0, 0, fmt.Errorf("train: evaluating after step %d: %w", after, err)
		}
		res.LossSum += r.LossSum
		res.Targets += r.Targets
		res.Correct += r.Correct
	}
	if res.Targets == 0 {
		return 0, 0, nil
	}
	loss = res.LossSum / float64(res.Targets)
	fields := []zap.Field{zap.Uint64("generation", ex.Generation()), zap.Int("step", after), zap.Float64("eval_loss", loss)}
	if t.job.accuracy {
		acc = float64(res.Correct) / float64(n)
		fields = append(fields, zap.Float64("eval_accuracy", acc))
	}
	t.log.Info("eval", fields...)
	return loss, acc, nil
}

// saveWeights writes the whole model's weights after step to the Save path.
func (t *trainer) saveWeights(ctx context.Context, ex executor, step int) error {
	path := t.job.cfg.Save
	whole, err := t.wholeModel(ctx, ex)
	if err != nil {
		return err
	}
	meta := map[string]string{"format": "pt", "troupe_model": t.job.describe, "step": fmt.Sprint(step)}
	if err := whole.Set.SaveWeights(path, meta); err != nil {
		return fmt.Errorf("%w: weights to %s: %w", ErrOutput, path, err)
	}
	t.log.Info("saved weights", zap.String("path", path), zap.Int("step", step))
	return nil
}

// wholeModel is the whole model, on the CPU backend, with the weights the
// workers hold.
func (t *trainer) wholeModel(ctx context.Context, ex executor) (*nn.Model, error) {
	w, err := ex.Weights(ctx)
	if err != nil {
		return nil, fmt.Errorf("train: fetching the weights: %w", err)
	}
	whole, err := nn.BuildWhole(cpu.New(1), t.job.model, t.job.cfg.Seed)
	if err != nil {
		return nil, err
	}
	if err := whole.Set.SetHostWeights(w); err != nil {
		return nil, err
	}
	return whole, nil
}

func globalTargets(b *data.Batch) int { return b.Terms(0, b.Rows) }

// runStats gathers the per-step figures a summary reports.
type runStats struct {
	step, compute, comm []float64
	hidden              float64
}

func (s *runStats) add(m StepMetrics, st stepStats) {
	s.step = append(s.step, m.StepMs)
	s.compute = append(s.compute, st.ComputeMs)
	s.comm = append(s.comm, st.CommMs)
	s.hidden += st.Overlap
}

func (s *runStats) summarize(sum *Summary, start time.Time, tokensPerRow int) {
	sum.WallS = time.Since(start).Seconds()
	if sum.WallS > 0 {
		sum.SamplesPerS = float64(sum.Samples) / sum.WallS
	}
	sum.TokensPerS = sum.SamplesPerS * float64(tokensPerRow)
	sum.StepMsMed, sum.ComputeMsMed, sum.CommMsMed = median(s.step), median(s.compute), median(s.comm)
	if n := len(s.step); n > 0 {
		sum.Hidden = s.hidden / float64(n)
	}
}

func eta(start time.Time, done, total int) time.Duration {
	if done == 0 {
		return 0
	}
	per := time.Since(start) / time.Duration(done)
	return (per * time.Duration(total-done)).Round(time.Second)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
