package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// One replica computing on the server's weights and the server applying
// its gradient is --sync step --dp 1 split in two: the same passes on the
// same weights, the same clipping and optimizer update, the gradient and
// the weights moved exactly; the losses agree bit for bit (AdamW and
// SGD, MLP and GPT, clipping on). With three replicas and a bound of 0
// the server takes only gradients computed on its current weights (one
// of the replicas' concurrent gradients each update; which one is a
// matter of timing, so the batches' order, and the losses, are not
// step's).
func TestAsyncWithoutStalenessIsSequential(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func() Config
	}{
		{"gpt/adamw", func() Config { c := tinyGPT(); c.Steps = 8; return c }},
		{"mlp/sgd", func() Config { c := tinyMLP(); c.Steps = 8; c.ClipNorm = 0.5; return c }},
	} {
		ref := losses(t, tc.cfg())
		for _, dp := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/dp%d", tc.name, dp), func(t *testing.T) {
				cfg := tc.cfg()
				cfg.Sync, cfg.MaxStaleness, cfg.DP = "async", 0, dp
				ms := runMetrics(t, cfg)
				if len(ms) != len(ref) {
					t.Fatalf("%d steps, want %d", len(ms), len(ref))
				}
				for s, m := range ms {
					if dp == 1 && m.Loss != ref[s] {
						t.Errorf("step %d: loss %v, %v with --sync step --dp 1", s+1, m.Loss, ref[s])
					}
					if m.Async == nil || m.Async.Staleness != 0 {
						t.Fatalf("step %d: async metrics %+v, want staleness 0", s+1, m.Async)
					}
					// Every computation of the batch took the weights and
					// sent a gradient: 2 × 4 bytes a parameter each.
					if want := 2 * m.GradBytes * int64(1+m.Async.Rejected); m.SyncBytes != want {
						t.Errorf("step %d: sync_bytes %d, want %d (%d rejected)", s+1, m.SyncBytes, want, m.Async.Rejected)
					}
				}
			})
		}
	}
}

// A replica held after taking the server's weights (as a slow or stopped
// worker is) does not stop the others: the job trains past the bound
// while it waits; its gradient, then too stale, is rejected and its batch
// computed again on fresh weights by another replica; no applied gradient
// is older than the bound, and every step's batch is applied once.
func TestAsyncHeldReplicaIsOvertaken(t *testing.T) {
	const bound, ahead = 2, 6 // the others train `ahead` > bound updates while replica 1 is held
	cfg := tinyMLP()
	cfg.Steps, cfg.DP, cfg.Sync, cfg.MaxStaleness = 30, 3, "async", bound
	cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
	var (
		mu       sync.Mutex
		heldAt   = int64(-1) // the version replica 1 was held at
		held     bool
		released = make(chan struct{})
		steps    int64
	)
	hold := func(ctx context.Context, replica int, version uint64) error {
		mu.Lock()
		first := replica == 1 && !held
		if first {
			held, heldAt = true, int64(version)
		}
		mu.Unlock()
		if !first {
			return nil
		}
		select {
		case <-released:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	onStep := func(m StepMetrics) {
		mu.Lock()
		defer mu.Unlock()
		steps = int64(m.Step)
		if held && heldAt >= 0 && steps >= heldAt+ahead {
			select {
			case <-released:
			default:
				close(released)
			}
		}
	}
	// Bounded: a replica that could not be overtaken would hold the job
	// until this deadline, an error rather than a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := Run(ctx, cfg, Options{OnStep: onStep, beforeCompute: hold})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-released:
	default:
		t.Fatal("replica 1 was never released: the others did not train past it")
	}
	ms := readMetrics(t, cfg.MetricsOut)
	if len(ms) != cfg.Steps || sum.Steps != cfg.Steps {
		t.Fatalf("%d steps trained, want %d", len(ms), cfg.Steps)
	}
	if sum.Rejected < 1 {
		t.Fatalf("no gradient rejected; replica 1's was %d+ updates old", ahead)
	}
	if len(sum.StalenessHist) > bound+1 {
		t.Fatalf("staleness histogram %v passes the bound %d", sum.StalenessHist, bound)
	}
	var applied, rejected int64
	trained := map[uint64]bool{}
	for i, m := range ms {
		if m.Step != i+1 || trained[m.Cursor] || m.Cursor%uint64(cfg.Batch) != 0 || m.Cursor >= uint64(cfg.Steps*cfg.Batch) {
			t.Fatalf("line %d: step %d, batch at cursor %d (seen before: %v): want step %d and each batch of the run once", i, m.Step, m.Cursor, trained[m.Cursor], i+1)
		}
		trained[m.Cursor] = true
		if m.Async == nil || m.Async.Staleness > bound {
			t.Fatalf("step %d: %+v passes the bound %d", m.Step, m.Async, bound)
		}
		applied++
		rejected += int64(m.Async.Rejected)
	}
	var hist int64
	for _, n := range sum.StalenessHist {
		hist += n
	}
	if hist != applied || rejected != sum.Rejected {
		t.Fatalf("histogram %v counts %d, %d steps; rejected %d in the lines, %d in the summary", sum.StalenessHist, hist, applied, rejected, sum.Rejected)
	}
}

// Asynchronous training reaches the loss of synchronous training at equal
// samples within 10 % (the goal): the MLP on its synthetic task,
// three replicas at bound 4 against --sync step, the same batches.
func TestAsyncLossNearSynchronous(t *testing.T) {
	base := tinyMLP()
	base.Data = "synthetic-mlp:features=12,classes=3,n=512,test=128"
	base.Steps, base.Batch = 120, 16
	sync, err := Run(context.Background(), base, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := base
	cfg.Sync, cfg.DP, cfg.MaxStaleness = "async", 3, 4
	async, err := Run(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("held-out loss: step %.4f, async %.4f (histogram %v, %d rejected)", sync.EvalLoss, async.EvalLoss, async.StalenessHist, async.Rejected)
	if !(async.EvalLoss <= 1.1*sync.EvalLoss) {
		t.Fatalf("async held-out loss %.4f, more than 10 %% above step's %.4f", async.EvalLoss, sync.EvalLoss)
	}
	if async.EvalLoss >= async.FirstLoss {
		t.Fatalf("async did not learn: %.4f → held-out %.4f", async.FirstLoss, async.EvalLoss)
	}
}

// A checkpoint is taken with no step in flight, so it holds exactly the
// updates of the steps before it (the parameter server's weights and
// optimizer state): with one replica (deterministic) a run resumed from
// it continues bit for bit.
func TestAsyncResumesFromCheckpoint(t *testing.T) {
	cfg := tinyGPT()
	cfg.Steps, cfg.Sync, cfg.MaxStaleness, cfg.DP = 10, "async", 0, 1
	cfg.CkptDir, cfg.CkptEvery = t.TempDir(), 5
	whole := runMetrics(t, cfg)
	cfg.CkptDir = t.TempDir()
	cfg.MetricsOut = filepath.Join(t.TempDir(), "a.jsonl")
	if _, err := Run(context.Background(), cfg, Options{StopAfter: 5}); err != nil {
		t.Fatal(err)
	}
	cfg.Resume = true
	rest := runMetrics(t, cfg)
	if len(rest) != 5 {
		t.Fatalf("the resumed run trained %d steps, want 5", len(rest))
	}
	for i, m := range rest {
		if w := whole[5+i]; m.Step != w.Step || m.Loss != w.Loss {
			t.Errorf("resumed step %d: loss %v, %v without the stop", m.Step, m.Loss, w.Loss)
		}
	}
}

// Sharded parameter servers (Servers K: ZeRO-3's shards, each applying
// its chunks of every update) train as one server does. With one replica
// (deterministic) the MLP's losses agree bit for bit (SGD is element-wise,
// no clipping); the GPT's (AdamW, clipping at 1) within 1e-6 relative:
// the clipping norm sums each shard's squares, rounded to float32 for the
// servers' all-reduce, where one server sums them all in float64 — a
// relative change of the norm of about 1e-7, which scales the update by
// as much. Each server holds 1/K of the weights and of the optimizer
// state (to the elements a bucket's cut into K chunks rounds).
func TestAsyncShardedServers(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func() Config
		tol  float64
	}{
		{"mlp/sgd", func() Config { c := tinyMLP(); c.Steps, c.ClipNorm = 8, 0; return c }, 0},
		{"gpt/adamw", func() Config { c := tinyGPT(); c.Steps = 8; return c }, 1e-6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg()
			cfg.Sync, cfg.MaxStaleness, cfg.DP = "async", 0, 1
			one := runMetrics(t, cfg)
			for _, K := range []int{2, 3} {
				cfg.Servers = K
				ms := runMetrics(t, cfg)
				if len(ms) != len(one) {
					t.Fatalf("%d servers: %d steps, want %d", K, len(ms), len(one))
				}
				for s, m := range ms {
					if d := math.Abs(m.Loss-one[s].Loss) / math.Abs(one[s].Loss); d > tc.tol {
						t.Errorf("%d servers, step %d: loss %v, %v with one server (relative %.2g > %g)", K, s+1, m.Loss, one[s].Loss, d, tc.tol)
					}
				}
				m, o := ms[len(ms)-1], one[len(one)-1]
				for _, b := range []struct {
					what         string
					shard, whole int64
				}{{"weights", m.ParamBytes, o.ParamBytes}, {"optimizer state", m.OptimizerBytes, o.OptimizerBytes}} {
					if lo, hi := b.whole/int64(K), b.whole/int64(K)+b.whole/20; b.shard < lo || b.shard > hi {
						t.Errorf("%d servers: the largest holds %d bytes of %s, want 1/%d of one server's %d (%d to %d)", K, b.shard, b.what, K, b.whole, lo, hi)
					}
				}
			}
		})
	}
}

// A checkpoint of sharded servers is the model's, whoever resumes it: one
// server, or three, continues bit for bit where two stopped.
func TestAsyncShardedServersResume(t *testing.T) {
	cfg := tinyMLP()
	cfg.Steps, cfg.ClipNorm, cfg.Sync, cfg.MaxStaleness, cfg.DP = 10, 0, "async", 0, 1
	whole := runMetrics(t, cfg)
	for _, K := range []int{1, 3} {
		cfg := cfg
		cfg.CkptDir, cfg.CkptEvery, cfg.Servers = t.TempDir(), 5, 2
		cfg.MetricsOut = filepath.Join(t.TempDir(), "a.jsonl")
		if _, err := Run(context.Background(), cfg, Options{StopAfter: 5}); err != nil {
			t.Fatal(err)
		}
		cfg.Resume, cfg.Servers = true, K
		rest := runMetrics(t, cfg)
		if len(rest) != 5 {
			t.Fatalf("resumed by %d servers: %d steps, want 5", K, len(rest))
		}
		for i, m := range rest {
			if w := whole[5+i]; m.Step != w.Step || m.Loss != w.Loss {
				t.Errorf("resumed by %d servers, step %d: loss %v, %v without the stop", K, m.Step, m.Loss, w.Loss)
			}
		}
	}
}

func TestAsyncConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		field string
		set   func(*Config)
	}{
		{"MaxStaleness", func(c *Config) { c.MaxStaleness = -1 }},
		{"Sync", func(c *Config) { c.PP, c.MicroBatches = 2, 2 }},
		{"Sync", func(c *Config) { c.TP = 2 }},
		{"Zero", func(c *Config) { c.Zero = 1 }},
		{"Procs", func(c *Config) { c.Procs = 3; c.DP = 2 }},
		{"Precision", func(c *Config) { c.Precision = "fp16" }},
		{"ReduceDType", func(c *Config) { c.ReduceDType = "bf16" }},
		{"CheckEvery", func(c *Config) { c.CheckEvery = 2 }},
		{"SyncEvery", func(c *Config) { c.SyncEvery = 4 }},
		{"MaxRestarts", func(c *Config) { c.MaxRestarts = 1 }}, // without Procs
		{"MaxRestarts", func(c *Config) { c.Procs, c.MaxRestarts = 2, -1 }},
		{"Servers", func(c *Config) { c.Servers = -1 }},
	} {
		cfg := tinyGPT()
		cfg.Sync, cfg.DP = "async", 2
		tc.set(&cfg)
		err := cfg.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: got %v, want an error naming %s", tc.field, err, tc.field)
		}
	}
	step := tinyGPT()
	step.DP, step.Procs, step.MaxRestarts = 2, 2, 1
	if err := step.Validate(); err == nil || !strings.Contains(err.Error(), "MaxRestarts") {
		t.Errorf("restarts under --sync step: %v, want an error naming MaxRestarts", err)
	}
	step = tinyGPT()
	step.DP, step.Servers = 2, 2
	if err := step.Validate(); err == nil || !strings.Contains(err.Error(), "Servers") {
		t.Errorf("servers under --sync step: %v, want an error naming Servers", err)
	}
	// Agents: the servers live on the leader; a new leader continues from
	// their checkpoint, which must exist.
	ac := AgentConfig{Name: "a", Listen: "127.0.0.1:0", Train: tinyGPT()}
	ac.Train.Sync = "async"
	var fe *FieldError
	if err := ac.Validate(); !errors.As(err, &fe) || fe.Field != "Train.CkptDir" {
		t.Errorf("agent without checkpoints: got %v, want an error naming Train.CkptDir", err)
	}
	ac.Train.CkptDir, ac.Rescale = t.TempDir(), LinearLR
	if err := ac.Validate(); !errors.As(err, &fe) || fe.Field != "Rescale" {
		t.Errorf("agent with linear-lr: got %v, want an error naming Rescale", err)
	}
	ac.Rescale = KeepGlobalBatch
	if err := ac.Validate(); err != nil {
		t.Errorf("agent: %v", err)
	}
}

// The staleness histogram and the rejections reach Prometheus from the
// metrics lines.
func TestAsyncPrometheus(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, err := newPromMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.observeStep(StepMetrics{Step: 1, Async: &AsyncMetrics{Staleness: 0}})
	p.observeStep(StepMetrics{Step: 2, Async: &AsyncMetrics{Staleness: 3, Rejected: 2}})
	p.observeStep(StepMetrics{Step: 3})
	fams := gathered(t, reg)
	h := fams["troupe_async_staleness"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() != 3 {
		t.Errorf("troupe_async_staleness: %d samples summing to %v, want 2 and 3", h.GetSampleCount(), h.GetSampleSum())
	}
	if r := value(fams["troupe_async_rejected_total"]); r != 2 {
		t.Errorf("troupe_async_rejected_total %v, want 2", r)
	}
}
