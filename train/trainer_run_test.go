package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/worker"
)

// fakeExecutor is an executor with scripted outcomes: no workers, no
// actors, no network. Step may be called concurrently (a window over one).
type fakeExecutor struct {
	window int
	// loss is step's mean loss (0-based step; nil: 1); fail, when set,
	// runs in step's place and its error fails the step.
	loss func(step int) float64
	fail func(ctx context.Context, step int) error

	mu sync.Mutex
	// running counts the steps in Step now, done the steps that returned;
	// evals and saves are done when each evaluation and checkpoint began;
	// busy records a Save or Evaluate that found a step in flight.
	running, done int
	evals, saves  []int
	busy          []string
}

var _ executor = (*fakeExecutor)(nil)

func (f *fakeExecutor) Mesh() mesh.Mesh     { return mesh.Mesh{PP: 1, DP: 1, TP: 1} }
func (f *fakeExecutor) Generation() uint64  { return 0 }
func (f *fakeExecutor) RankName(int) string { return "fake" }
func (f *fakeExecutor) Window() int         { return f.window }

func (f *fakeExecutor) Step(ctx context.Context, req worker.StepRequest) (stepStats, error) {
	f.mu.Lock()
	f.running++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running--
		f.done++
		f.mu.Unlock()
	}()
	if f.fail != nil {
		if err := f.fail(ctx, req.Step); err != nil {
			return stepStats{}, err
		}
	}
	loss := 1.0
	if f.loss != nil {
		loss = f.loss(req.Step)
	}
	const targets = 8
	return stepStats{Result: worker.Result{LossSum: loss * targets, Targets: targets}}, nil
}

func (f *fakeExecutor) Evaluate(ctx context.Context, lo, hi int) (worker.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if lo == 0 {
		f.evals = append(f.evals, f.done)
		f.quiet("evaluation")
	}
	return worker.Result{LossSum: 0.5 * float64(hi-lo), Targets: hi - lo}, nil
}

func (f *fakeExecutor) Save(ctx context.Context, meta checkpoint.Meta) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if int(meta.Step) != f.done {
		f.busy = append(f.busy, fmt.Sprintf("checkpoint of step %d after %d steps", meta.Step, f.done))
	}
	f.saves = append(f.saves, f.done)
	f.quiet("checkpoint")
	return time.Millisecond, nil
}

// quiet records what found a step in flight (f.mu held).
func (f *fakeExecutor) quiet(what string) {
	if f.running > 0 {
		f.busy = append(f.busy, fmt.Sprintf("%s after %d steps beside %d in flight", what, f.done, f.running))
	}
}

func (f *fakeExecutor) Weights(context.Context) ([]float32, error) { return nil, nil }
func (f *fakeExecutor) Applied(context.Context) ([]int, error)     { return nil, nil }

// fakeTrainer is a trainer of cfg (the tiny MLP's data, with held-out
// rows) over ex, and the metrics it reports.
func fakeTrainer(t *testing.T, cfg Config) (*trainer, *[]StepMetrics) {
	t.Helper()
	if cfg.CkptEvery > 0 {
		cfg.CkptDir = t.TempDir()
	}
	j, err := openJob(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ckpt, err := newCheckpointer(&j.cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	tr := newTrainer(j, zap.NewNop(), ckpt)
	var seen []StepMetrics
	tr.observe = func(m StepMetrics) error {
		seen = append(seen, m)
		return nil
	}
	return tr, &seen
}

func steps(ms []StepMetrics) []int {
	out := make([]int, len(ms))
	for i, m := range ms {
		out[i] = m.Step
	}
	return out
}

// TestTrainerRunEvalAndCheckpointCadence: an evaluation every EvalEvery
// steps and after the last, a checkpoint every CkptEvery steps (the last
// included), each with no step in flight, whatever the window.
func TestTrainerRunEvalAndCheckpointCadence(t *testing.T) {
	for _, window := range []int{1, 3} {
		t.Run(fmt.Sprint("window=", window), func(t *testing.T) {
			cfg := tinyMLP()
			cfg.Steps, cfg.EvalEvery, cfg.CkptEvery = 12, 5, 4
			tr, seen := fakeTrainer(t, cfg)
			ex := &fakeExecutor{window: window}
			sum, err := tr.run(context.Background(), segment{ex: ex, batch: cfg.Batch, lrScale: 1})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Steps != 12 || !slices.Equal(steps(*seen), []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}) {
				t.Fatalf("%d steps, reported %v", sum.Steps, steps(*seen))
			}
			if !slices.Equal(ex.evals, []int{5, 10, 12}) || !slices.Equal(ex.saves, []int{4, 8, 12}) || ex.busy != nil {
				t.Fatalf("evaluations after %v, checkpoints after %v (%v), want [5 10 12] and [4 8 12] on a quiet executor", ex.evals, ex.saves, ex.busy)
			}
			for _, m := range *seen {
				if eval, save := m.EvalLoss != 0, m.CkptPauseMs != 0; eval != slices.Contains(ex.evals, m.Step) || save != slices.Contains(ex.saves, m.Step) {
					t.Errorf("step %d's line: eval_loss %v, ckpt_pause_ms %v", m.Step, m.EvalLoss, m.CkptPauseMs)
				}
			}
		})
	}
}

// TestTrainerRunStopsAfter: Options.StopAfter ends the run after that
// step, without the job's last evaluation.
func TestTrainerRunStopsAfter(t *testing.T) {
	cfg := tinyMLP()
	cfg.Steps, cfg.EvalEvery, cfg.CkptEvery = 12, 5, 4
	tr, seen := fakeTrainer(t, cfg)
	tr.stopAfter = 6
	ex := &fakeExecutor{window: 1}
	sum, err := tr.run(context.Background(), segment{ex: ex, batch: cfg.Batch, lrScale: 1})
	if err != nil || sum.Steps != 6 || len(*seen) != 6 || !slices.Equal(ex.evals, []int{5}) || !slices.Equal(ex.saves, []int{4}) {
		t.Fatalf("%v: %d steps, evaluations after %v, checkpoints after %v; want 6, [5], [4]", err, sum.Steps, ex.evals, ex.saves)
	}
}

// TestTrainerRunDivergence: a NaN or infinite loss ends the run with
// ErrLoss (permanent, class diverged) at that step; the steps before it
// are reported and checkpointed as usual, and nothing is saved after it
// (the diverged state is no checkpoint).
func TestTrainerRunDivergence(t *testing.T) {
	for _, bad := range []float64{math.NaN(), math.Inf(1)} {
		t.Run(fmt.Sprint(bad), func(t *testing.T) {
			cfg := tinyMLP()
			cfg.Steps, cfg.CkptEvery = 8, 2
			tr, seen := fakeTrainer(t, cfg)
			ex := &fakeExecutor{window: 1, loss: func(step int) float64 {
				if step == 3 {
					return bad
				}
				return 1
			}}
			sum, err := tr.run(context.Background(), segment{ex: ex, batch: cfg.Batch, lrScale: 1})
			if !errors.Is(err, ErrLoss) || failure.CodeOf(err) != failure.Diverged || failure.Transient(err) {
				t.Fatalf("err = %v, want ErrLoss of class diverged", err)
			}
			if sum.Steps != 3 || !slices.Equal(steps(*seen), []int{1, 2, 3}) || !slices.Equal(ex.saves, []int{2}) || ex.done != 4 {
				t.Fatalf("%d steps, reported %v, checkpoints after %v, %d run; want 3, [1 2 3], [2], 4", sum.Steps, steps(*seen), ex.saves, ex.done)
			}
		})
	}
}

// TestTrainerRunSalvagedStep: a step that failed on some ranks but
// completed on another replica ends the generation with its transient
// error, and its metrics line goes with the error (not to the
// observers), for the next generation to report.
func TestTrainerRunSalvagedStep(t *testing.T) {
	cfg := tinyMLP()
	cfg.Steps = 6
	tr, seen := fakeTrainer(t, cfg)
	lost := failure.Wrapf(failure.PeerLost, "member n2 failed")
	ex := &fakeExecutor{window: 1, fail: func(_ context.Context, step int) error {
		if step == 2 {
			return &adoptedError{Stats: stepStats{Result: worker.Result{LossSum: 6, Targets: 4}}, Err: lost}
		}
		return nil
	}}
	sum, err := tr.run(context.Background(), segment{ex: ex, batch: cfg.Batch, lrScale: 1})
	var adopted *adoptedError
	if !errors.As(err, &adopted) || !errors.Is(err, lost) || !failure.Transient(err) {
		t.Fatalf("err = %v, want the salvaged step's transient error", err)
	}
	if m := adopted.Metrics; m.Step != 3 || m.Loss != 1.5 || m.Batch != cfg.Batch {
		t.Fatalf("the salvaged step's line: step %d, loss %v, batch %d; want 3, 1.5, %d", m.Step, m.Loss, m.Batch, cfg.Batch)
	}
	if sum.Steps != 2 || !slices.Equal(steps(*seen), []int{1, 2}) {
		t.Fatalf("%d steps, reported %v; want the 2 before it", sum.Steps, steps(*seen))
	}
}

// TestTrainerRunCancelled: cancelling the context while a step is in
// flight ends the run promptly with the cancellation, every step's
// goroutine stopped.
func TestTrainerRunCancelled(t *testing.T) {
	for _, window := range []int{1, 3} {
		t.Run(fmt.Sprint("window=", window), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			cfg := tinyMLP()
			cfg.Steps = 50
			tr, _ := fakeTrainer(t, cfg)
			blocked := make(chan struct{})
			ex := &fakeExecutor{window: window, fail: func(ctx context.Context, step int) error {
				if step < 4 {
					return nil
				}
				if step == 4 {
					close(blocked)
				}
				<-ctx.Done() // a worker aborting its step on cancellation
				return fmt.Errorf("fake step %d: %w", step+1, context.Cause(ctx))
			}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				sum *Summary
				err error
			}
			out := make(chan result, 1)
			go func() {
				sum, err := tr.run(ctx, segment{ex: ex, batch: cfg.Batch, lrScale: 1})
				out <- result{sum, err}
			}()
			<-blocked
			cancel()
			select {
			case r := <-out:
				if !errors.Is(r.err, context.Canceled) || failure.CodeOf(r.err) != failure.Canceled {
					t.Fatalf("err = %v, want the cancellation", r.err)
				}
				// Step 5 starts once at most window-1 earlier steps are in
				// flight or not taken yet: those complete; it never does.
				if r.sum.Steps < 5-window || r.sum.Steps > 4 {
					t.Fatalf("%d steps reported after a cancellation in step 5, want %d to 4", r.sum.Steps, 5-window)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the run did not return within 10 s of its cancellation")
			}
		})
	}
}
