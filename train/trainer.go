package train

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/replica"
)

// Summary is what a finished run reports (troupe train --json prints it).
type Summary struct {
	Model       string  `json:"model"`
	Params      int     `json:"params"`
	Data        string  `json:"data"`
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
	Saved        string  `json:"saved,omitempty"`
}

// Options are a run's collaborators.
type Options struct {
	// Logger receives structured progress; nil logs nothing.
	Logger *zap.Logger
	// Progress, when set, gets a live progress bar (a terminal).
	Progress io.Writer
	// OnStep, when set, receives every step's metrics on the training
	// loop's goroutine (a service embedding troupe publishes progress with
	// it); it must return quickly.
	OnStep func(StepMetrics)
	// StopAfter, when positive, ends the run after that many steps (counted
	// from the start of training) as if it had been interrupted there:
	// tests and chaos experiments use it to stop a run at a chosen step.
	StopAfter int
}

// logger is o.Logger, or one that drops everything.
func (o Options) logger() *zap.Logger {
	if o.Logger == nil {
		return zap.NewNop()
	}
	return o.Logger
}

// Run trains cfg to completion or until ctx is cancelled.
func Run(ctx context.Context, cfg Config, o Options) (*Summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := o.logger()
	trainSet, testSet, err := OpenData(&cfg)
	if err != nil {
		return nil, err
	}
	start, samplerState := 0, (*data.SamplerState)(nil)
	if cfg.Resume {
		if start, samplerState, err = resumePoint(&cfg, log); err != nil {
			return nil, err
		}
	}
	eng, model, err := newEngine(&cfg, trainSet, testSet, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := eng.close(); err != nil {
			log.Warn("shutting down the workers", zap.Error(err))
		}
	}()
	steps := cfg.Steps
	if cfg.Epochs > 0 {
		steps = int(math.Ceil(cfg.Epochs * float64(trainSet.Len()) / float64(cfg.Batch)))
	}
	sampler, err := data.NewSampler(trainSet.Len(), cfg.Seed, cfg.Shuffle)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if samplerState != nil {
		if err := sampler.Restore(*samplerState); err != nil {
			return nil, fmt.Errorf("train: --resume: the checkpoint's data sampler does not fit this run: %w", err)
		}
	}
	if start > steps {
		return nil, fmt.Errorf("train: --resume: the checkpoint is at step %d, past --steps %d", start, steps)
	}
	dp, isDP := eng.(*dpEngine)
	ckpt, err := newCheckpointer(&cfg, !isDP || dp.local != nil, log)
	if err != nil {
		return nil, err
	}
	defer ckpt.close()
	caps := model.Set.Backend().Caps()
	log.Info("training",
		zap.String("model", model.Describe), zap.String("data", trainSet.Name()),
		zap.Int("train_samples", trainSet.Len()), zap.Int("steps", steps), zap.Int("batch", cfg.Batch),
		zap.String("optimizer", cfg.Optim.Name), zap.Float64("lr", cfg.LR), zap.String("device", caps.Device),
		zap.Int("dp", cfg.DP), zap.Int("procs", cfg.Procs), zap.Int("threads", cfg.Threads), zap.String("simd", caps.SIMD))

	l := &loop{cfg: &cfg, log: log, eng: eng, model: model, train: trainSet, test: testSet, sampler: sampler,
		sched: cfg.schedule(steps), steps: steps, start: start, ckpt: ckpt, stopAfter: o.StopAfter, onStep: o.OnStep}
	if cfg.MetricsOut != "" {
		if l.metrics, err = newMetricsWriter(cfg.MetricsOut); err != nil {
			return nil, err
		}
		defer func() {
			if l.metrics != nil {
				l.metrics.close()
			}
		}()
	}
	if o.Progress != nil {
		l.bar = newProgress(o.Progress, steps)
	}
	sum, err := l.run(ctx)
	if err != nil {
		return nil, err
	}
	if err := ckpt.close(); err != nil {
		return nil, fmt.Errorf("train: the last checkpoint write failed: %w", err)
	}
	if cfg.Save != "" {
		w, err := eng.weights()
		if err != nil {
			return nil, fmt.Errorf("train: fetching the final weights: %w", err)
		}
		if err := model.Set.SetHostWeights(w); err != nil {
			return nil, err
		}
		meta := map[string]string{"format": "pt", "troupe_model": model.Describe, "step": fmt.Sprint(steps)}
		if err := model.Set.SaveWeights(cfg.Save, meta); err != nil {
			return nil, err
		}
		sum.Saved = cfg.Save
		log.Info("saved weights", zap.String("path", cfg.Save))
	}
	if l.metrics != nil {
		if err := l.metrics.close(); err != nil {
			return nil, fmt.Errorf("train: --metrics-out: %w", err)
		}
		l.metrics = nil
	}
	return sum, nil
}

// loop is the step loop's state.
type loop struct {
	cfg     *Config
	log     *zap.Logger
	eng     engine
	model   *nn.Model
	train   data.Dataset
	test    data.Dataset
	sampler *data.Sampler
	sched   optim.Schedule
	steps   int
	start   int
	ckpt    *checkpointer
	// stopAfter ends the loop early (Options.StopAfter); onStep sees
	// every step's metrics (Options.OnStep).
	stopAfter int
	onStep    func(StepMetrics)
	metrics   *metricsWriter
	bar       *progress
	batch     data.Batch
	idx       []int
}

func (l *loop) run(ctx context.Context) (*Summary, error) {
	cfg := l.cfg
	sum := &Summary{Model: l.model.Describe, Params: l.model.Set.Len(), Data: l.train.Name(), Steps: l.steps, StartStep: l.start}
	start := time.Now()
	stepTimes := make([]float64, 0, l.steps)
	computeTimes := make([]float64, 0, l.steps)
	commTimes := make([]float64, 0, l.steps)
	tokensPerRow := 0
	if l.model.Input == nn.TokenInput {
		tokensPerRow = l.model.Context
	}
	for step := l.start; step < l.steps; step++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("train: stopped at step %d: %w", step, err)
		}
		t0 := time.Now()
		cur := l.sampler.Cursor()
		l.idx = l.sampler.Next(cfg.Batch, l.idx[:0])
		l.train.Fill(l.idx, &l.batch)
		lr := l.sched.LR(step)
		check := cfg.CheckEvery > 0 && (step+1)%cfg.CheckEvery == 0
		st, err := l.eng.step(step, cur, &l.batch, lr, check)
		if err != nil {
			return nil, fmt.Errorf("train: step %d: %w", step, err)
		}
		stepMs := ms(time.Since(t0))
		stepTimes = append(stepTimes, stepMs)
		computeTimes = append(computeTimes, st.ComputeMs)
		commTimes = append(commTimes, st.CommMs)
		sum.Hidden += st.Overlap / float64(l.steps)
		loss := st.LossSum / math.Max(1, float64(st.Targets))
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return nil, fmt.Errorf("train: step %d: loss is %v (diverged; lower --lr or set --clip)", step, loss)
		}
		if step == l.start {
			sum.FirstLoss = loss
		}
		sum.FinalLoss = loss
		sum.Samples += int64(cfg.Batch)
		m := StepMetrics{
			Step: step + 1, Loss: loss, LR: lr,
			SamplesPerS: float64(cfg.Batch) / (stepMs / 1e3),
			StepMs:      stepMs, ComputeMs: st.ComputeMs, CommMs: st.CommMs, BubbleMs: st.BubbleMs,
			World: st.World, Generation: st.Generation,
			Cursor: uint64(cur), Batch: cfg.Batch,
			Epoch:   float64(l.sampler.Cursor()) / float64(l.train.Len()),
			Samples: sum.Samples, GradNorm: st.GradNorm,
			DP: cfg.DP, PP: cfg.PP, Micro: cfg.MicroBatches, Accum: cfg.Accum, GradBytes: int64(4 * l.model.Set.Len()),
			OverlapFraction: st.Overlap, PeakActBytes: st.PeakAct, PeakMicro: st.PeakMicro,
			BubbleFraction: st.BubbleFraction,
		}
		if cfg.PP > 1 {
			m.FormulaBubble = pipeline.FormulaBubble(cfg.PP, cfg.MicroBatches)
		}
		if tokensPerRow > 0 {
			m.TokensPerS = m.SamplesPerS * float64(tokensPerRow)
		}
		if l.model.Input == nn.DenseInput && st.Targets > 0 {
			m.Accuracy = float64(st.Correct) / float64(st.Targets)
		}
		last := step == l.steps-1
		if l.test != nil && (last || (cfg.EvalEvery > 0 && (step+1)%cfg.EvalEvery == 0)) {
			el, ea, err := l.evaluate()
			if err != nil {
				return nil, fmt.Errorf("train: evaluating after step %d: %w", step+1, err)
			}
			m.EvalLoss, m.EvalAcc = el, ea
			sum.EvalLoss, sum.EvalAcc = el, ea
			fields := []zap.Field{zap.Int("step", step+1), zap.Float64("eval_loss", el)}
			if l.model.Input == nn.DenseInput {
				fields = append(fields, zap.Float64("eval_accuracy", ea))
			}
			l.log.Info("eval", fields...)
		}
		if l.ckpt != nil && cfg.CkptEvery > 0 && (step+1)%cfg.CkptEvery == 0 {
			pause, err := l.ckpt.save(l.eng, l.ckpt.meta(step+1, st.Generation, l.sampler, l.sched))
			if err != nil {
				return nil, err
			}
			m.CkptPauseMs = ms(pause)
		}
		if l.metrics != nil {
			if err := l.metrics.write(m); err != nil {
				return nil, err
			}
		}
		if l.onStep != nil {
			l.onStep(m)
		}
		if l.stopAfter > 0 && step+1 >= l.stopAfter {
			l.log.Info("stopping early", zap.Int("after_step", step+1))
			break
		}
		if l.bar != nil {
			l.bar.update(step+1, loss, m.SamplesPerS, m.TokensPerS)
		} else if (step+1)%cfg.LogEvery == 0 || step == 0 || last {
			l.log.Info("step", zap.Int("step", step+1), zap.Int("of", l.steps), zap.Float64("loss", loss),
				zap.Float64("lr", lr), zap.Float64("step_ms", stepMs), zap.Float64("samples_per_s", m.SamplesPerS),
				zap.Float64("epoch", m.Epoch), zap.Duration("eta", eta(start, step+1-l.start, l.steps-l.start)))
		}
	}
	if l.bar != nil {
		l.bar.finish()
	}
	sum.WallS = time.Since(start).Seconds()
	if sum.WallS > 0 {
		sum.SamplesPerS = float64(sum.Samples) / sum.WallS
	}
	sum.TokensPerS = sum.SamplesPerS * float64(tokensPerRow)
	sum.StepMsMed = median(stepTimes)
	sum.ComputeMsMed = median(computeTimes)
	sum.CommMsMed = median(commTimes)
	sum.World = cfg.DP * cfg.PP
	return sum, nil
}

// evaluate runs the held-out set (or its first EvalBatches batches) in
// order and returns the mean loss and accuracy.
func (l *loop) evaluate() (loss, acc float64, err error) {
	return evaluate(l.cfg, l.test.Len(), l.eng.eval)
}

// evaluate runs the held-out set (its first EvalBatches batches, when
// set) through eval a batch at a time, and returns the mean loss per
// target and the accuracy per row.
func evaluate(cfg *Config, n int, eval func(lo, hi int) (replica.Result, error)) (loss, acc float64, err error) {
	if cfg.EvalBatches > 0 && cfg.EvalBatches*cfg.Batch < n {
		n = cfg.EvalBatches * cfg.Batch
	}
	var lossSum float64
	var targets, correct, rows int
	for lo := 0; lo < n; lo += cfg.Batch {
		hi := min(lo+cfg.Batch, n)
		res, err := eval(lo, hi)
		if err != nil {
			return 0, 0, err
		}
		lossSum += res.LossSum
		targets += res.Targets
		correct += res.Correct
		rows += hi - lo
	}
	if targets == 0 {
		return 0, 0, nil
	}
	return lossSum / float64(targets), float64(correct) / float64(rows), nil
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

// newEngine starts the configured world and returns it with a model of the
// run's shape on this process (the trained one for a single worker; for a
// world of workers, a copy that gives names and shapes to the weights).
func newEngine(cfg *Config, trainSet, testSet data.Dataset, log *zap.Logger) (engine, *nn.Model, error) {
	if cfg.DP == 1 && cfg.PP == 1 && cfg.Procs == 0 {
		be, err := kernels.Open(cfg.Device, kernels.Options{Threads: cfg.Threads})
		if err != nil {
			return nil, nil, fmt.Errorf("train: --device %s: %w", cfg.Device, err)
		}
		model, err := BuildModel(cfg, be, trainSet)
		if err != nil {
			return nil, nil, err
		}
		opt, err := optim.New(model.Set, cfg.Optim)
		if err != nil {
			return nil, nil, err
		}
		if err := restore(cfg, model, opt); err != nil {
			return nil, nil, err
		}
		return &singleEngine{r: replica.New(model, opt), test: testSet, accum: cfg.Accum, clipNorm: cfg.ClipNorm}, model, nil
	}
	model, err := BuildModel(cfg, cpu.New(1), trainSet)
	if err != nil {
		return nil, nil, err
	}
	plan, err := planWorld(cfg, model, trainSet)
	if err != nil {
		return nil, nil, err
	}
	if cfg.PP > 1 {
		// Worker processes take this cut as it is: a measured one
		// (--partition time) could come out differently in each.
		cfg.StageLayers = pipeline.FormatStageLayers(plan.cuts)
	}
	var eng *dpEngine
	if cfg.Procs > 0 {
		eng, err = newProcsWorld(cfg, plan, log)
	} else {
		eng, err = newLocalWorld(cfg, plan, trainSet, testSet, log)
	}
	if err != nil {
		return nil, nil, err
	}
	return eng, model, nil
}
