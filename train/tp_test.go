package train

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/plan"
	"github.com/troupe-ml/troupe/worker"
)

// Tensor-parallel runs (alone, with data parallelism, with pipeline
// stages, with sequence parallelism) must match one worker on the same
// init and data: the losses within 1e-4 relative and the final weights
// within 1e-4 absolute. The shards sum the same products in another order
// (a row-parallel product is T partial sums added by the ring), so the
// float32 results differ by ~1e-7 relative per step; the bound leaves two
// orders of magnitude for compounding. The GPT's vocabulary (13) is
// divided by neither 2 nor 4, so the last vocabulary shard is padded, and
// it clips its gradients (the norm is summed over the shards, replicated
// parameters counted once). Replicas are compared bit for bit every step.
func TestTensorParallelMatchesOneWorker(t *testing.T) {
	gpt := tinyGPT()
	gpt.Steps, gpt.Batch = 8, 8
	gpt.SetModelArg("n-layers", 2)
	gpt.SetModelArg("n-heads", 4)
	mlp := tinyMLP()
	mlp.SetModelArg("layers", []int{12, 16, 8, 3})
	mlp.Steps, mlp.Batch = 8, 16
	type mode struct {
		dp, pp, tp, m int
		sp            bool
	}
	modes := []mode{{1, 1, 2, 1, false}, {1, 1, 4, 1, false}, {2, 1, 2, 1, false}, {1, 2, 2, 2, false}, {1, 1, 2, 1, true}, {1, 2, 2, 2, true}}
	for name, base := range map[string]Config{"gpt": gpt, "mlp": mlp} {
		refLosses, refWeights := lossesAndWeights(t, base)
		for _, md := range modes {
			if md.sp && base.Model == "mlp" {
				continue
			}
			t.Run(fmt.Sprintf("%s/dp%d/pp%d/tp%d/sp=%v", name, md.dp, md.pp, md.tp, md.sp), func(t *testing.T) {
				cfg := base
				cfg.DP, cfg.PP, cfg.TP, cfg.SequenceParallel, cfg.CheckEvery = md.dp, md.pp, md.tp, md.sp, 1
				if md.pp > 1 {
					cfg.MicroBatches = md.m
				}
				got, weights := lossesAndWeights(t, cfg)
				for i := range refLosses {
					if math.Abs(got[i]-refLosses[i]) > 1e-4*math.Abs(refLosses[i]) {
						t.Errorf("step %d: loss %v, one worker %v", i+1, got[i], refLosses[i])
					}
				}
				worst, at := 0.0, 0
				for i := range refWeights {
					if d := math.Abs(float64(weights[i] - refWeights[i])); d > worst {
						worst, at = d, i
					}
				}
				if worst > 1e-4 {
					t.Errorf("final weight %d is %v, one worker's %v", at, weights[at], refWeights[at])
				}
			})
		}
	}
}

// lossesAndWeights runs cfg and returns its losses and its final weights
// (as saved, in the whole model's order).
func lossesAndWeights(t *testing.T, cfg Config) ([]float64, []float32) {
	t.Helper()
	cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
	cfg.Save = filepath.Join(t.TempDir(), "w.safetensors")
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	var out []float64
	for _, m := range readMetrics(t, cfg.MetricsOut) {
		if m.TP != max(1, cfg.TP) && !(cfg.TP <= 1 && m.TP == 0) {
			t.Fatalf("metrics say tp %d, want %d", m.TP, cfg.TP)
		}
		out = append(out, m.Loss)
	}
	return out, savedWeights(t, cfg)
}

// savedWeights is the whole model's weights that the run of cfg saved
// (cfg.Save).
func savedWeights(t *testing.T, cfg Config) []float32 {
	t.Helper()
	_, train, _ := openForTest(t, &cfg)
	whole, err := BuildModel(&cfg, cpu.New(1), train)
	if err != nil {
		t.Fatal(err)
	}
	if err := whole.Set.LoadWeights(cfg.Save); err != nil {
		t.Fatal(err)
	}
	return whole.Set.HostWeights()
}

// matchesOneWorker checks a run against one worker's: losses within 1e-4
// relative, final weights within 1e-4 absolute (float32 sums in another
// order; a wrong or missing term is orders of magnitude larger).
func matchesOneWorker(t *testing.T, got, ref []float64, weights, refWeights []float32) {
	t.Helper()
	for i := range ref {
		if math.Abs(got[i]-ref[i]) > 1e-4*math.Abs(ref[i]) {
			t.Errorf("step %d: loss %v, one worker %v", i+1, got[i], ref[i])
		}
	}
	for i := range refWeights {
		if d := math.Abs(float64(weights[i] - refWeights[i])); d > 1e-4 {
			t.Fatalf("final weight %d is %v, one worker's %v", i, weights[i], refWeights[i])
		}
	}
}

// A tensor-parallel rank holds 1/T of every cut matrix and the whole of
// the rest: param_bytes in the metrics is exactly that, for T = 2 and 4.
func TestTensorParallelParamBytes(t *testing.T) {
	cfg := tinyGPT()
	cfg.Steps = 1
	cfg.SetModelArg("n-layers", 2)
	cfg.SetModelArg("n-heads", 4)
	_, train, _ := openForTest(t, &cfg)
	whole, err := BuildModel(&cfg, cpu.New(1), train)
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range []int{1, 2, 4} {
		var want int64
		layout, err := nn.Layout(whole.Spec, 0, whole.Units, nn.TP{Rank: tp - 1, Size: tp})
		if err != nil {
			t.Fatal(err)
		}
		cut, kept := 0, 0
		for _, p := range layout {
			want += 4 * int64(p.Size())
			if p.Split != nil {
				cut += p.Size()
			} else {
				kept += p.Size()
			}
		}
		c := cfg
		c.TP = tp
		c.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
		if _, err := Run(t.Context(), c, Options{}); err != nil {
			t.Fatal(err)
		}
		got := readMetrics(t, c.MetricsOut)[0].ParamBytes
		if got != want {
			t.Errorf("tp %d: param_bytes %d, want %d", tp, got, want)
		}
		// The cut matrices are 1/T of the whole model's (the vocabulary
		// rounded up to a multiple of T).
		vocab := train.Classes()
		padded := (vocab + tp - 1) / tp * tp
		wholeCut := whole.Set.Len() - kept + (padded-vocab)*whole.Set.Get("tok.weight").Shape[1]
		if cut*tp != wholeCut {
			t.Errorf("tp %d: a rank holds %d values of the cut matrices, the whole model %d (padded)", tp, cut, wholeCut)
		}
	}
}

// A sharded run's checkpoint holds its shards' blocks of the whole tensors
// (tensor-parallel shards, ZeRO shards of the optimizer state); it resumes
// bit for bit into the same world, and into other worlds (tp 2 → 1, tp 1
// → 4, pp 2 × tp 2 → dp 4, tp 2 → pp 2 × tp 2, ZeRO dp 4 → one worker,
// ZeRO dp 2 × tp 2 → ZeRO dp 4, one worker → ZeRO dp 2 × pp 2) with the
// losses of the run that never changed world within 1e-4 relative.
func TestShardedCheckpointResume(t *testing.T) {
	base := tinyGPT()
	base.Steps, base.Batch = 8, 8
	base.SetModelArg("n-layers", 2)
	base.SetModelArg("n-heads", 4)
	ref := losses(t, base)
	type world struct{ dp, pp, tp, zero int }
	for _, tc := range []struct{ from, to world }{
		{world{1, 1, 2, 0}, world{1, 1, 2, 0}}, {world{1, 1, 2, 0}, world{1, 1, 1, 0}}, {world{1, 1, 1, 0}, world{1, 1, 4, 0}},
		{world{1, 2, 2, 0}, world{4, 1, 1, 0}}, {world{1, 1, 2, 0}, world{1, 2, 2, 0}},
		// ZeRO-1: every rank writes its shard of the optimizer state.
		{world{2, 1, 1, 1}, world{2, 1, 1, 1}}, {world{4, 1, 1, 1}, world{1, 1, 1, 0}}, {world{2, 1, 2, 1}, world{4, 1, 1, 1}},
		{world{1, 1, 1, 0}, world{2, 2, 1, 1}}, {world{2, 1, 1, 2}, world{2, 1, 1, 2}}, {world{4, 1, 1, 2}, world{2, 1, 1, 1}},
		{world{2, 1, 1, 3}, world{2, 1, 1, 3}}, {world{4, 1, 1, 3}, world{2, 1, 1, 1}}, {world{4, 1, 1, 3}, world{1, 1, 1, 0}},
		{world{1, 1, 2, 0}, world{2, 1, 2, 3}},
	} {
		t.Run(fmt.Sprintf("%v→%v", tc.from, tc.to), func(t *testing.T) {
			set := func(c *Config, w world) {
				c.DP, c.PP, c.TP, c.Zero, c.MicroBatches = w.dp, w.pp, w.tp, w.zero, 1
				if w.pp > 1 {
					c.MicroBatches = 2
				}
			}
			dir := t.TempDir()
			cfg := base
			set(&cfg, tc.from)
			cfg.CkptDir, cfg.CkptEvery = dir, 4
			if _, err := Run(context.Background(), cfg, Options{StopAfter: 4}); err != nil {
				t.Fatal(err)
			}
			cfg = base
			set(&cfg, tc.to)
			want, tol := ref, 1e-4
			if tc.from == tc.to {
				// Resuming the same world is bit-identical to not stopping.
				want, tol = losses(t, cfg), 0
			}
			cfg.CkptDir, cfg.Resume = dir, true
			cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
			sum, err := Run(context.Background(), cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if sum.StartStep != 4 {
				t.Fatalf("resumed at step %d, want 4", sum.StartStep)
			}
			for _, m := range readMetrics(t, cfg.MetricsOut) {
				if math.Abs(m.Loss-want[m.Step-1]) > tol*math.Abs(want[m.Step-1]) {
					t.Errorf("step %d: loss %v after resuming in %v, %v uninterrupted", m.Step, m.Loss, tc.to, want[m.Step-1])
				}
			}
		})
	}
}

// ZeRO-1 over the data-parallel replicas (alone, hybrid, with
// accumulation, pipeline stages and tensor parallelism) matches one
// worker: losses within 1e-4 relative, final weights within 1e-4
// absolute, with SGD momentum and AdamW; every rank holds 1/D of the
// optimizer state (optimizer_bytes), and the step's collectives send what
// plain data parallelism's all-reduce sends, as a reduce-scatter and an
// all-gather.
func TestZeroMatchesOneWorker(t *testing.T) {
	gpt := tinyGPT()
	gpt.Steps, gpt.Batch = 8, 8
	gpt.SetModelArg("n-layers", 2)
	gpt.SetModelArg("n-heads", 4)
	mlp := tinyMLP()
	mlp.SetModelArg("layers", []int{12, 16, 8, 3})
	mlp.Steps, mlp.Batch = 8, 16
	gptSGD, mlpAdamW := gpt, mlp
	gptSGD.Optim, gptSGD.LR = optim.Config{Name: "sgd", Momentum: 0.9}, 0.05
	mlpAdamW.Optim, mlpAdamW.LR = optim.DefaultConfig("adamw"), 1e-2
	type world struct{ zero, dp, group, accum, pp, tp int }
	every := []world{
		{1, 2, 0, 1, 1, 1}, {1, 4, 0, 1, 1, 1}, {1, 4, 2, 1, 1, 1}, {1, 2, 0, 2, 1, 1}, {1, 2, 0, 1, 2, 1}, {1, 2, 0, 1, 1, 2},
		{2, 2, 0, 1, 1, 1}, {2, 4, 2, 1, 1, 1}, {2, 2, 0, 2, 1, 1}, {2, 2, 0, 1, 2, 1}, {2, 2, 0, 1, 1, 2},
		{3, 2, 0, 1, 1, 1}, {3, 4, 0, 1, 1, 1}, {3, 4, 2, 1, 1, 1}, {3, 2, 0, 2, 1, 1}, {3, 2, 0, 1, 2, 1}, {3, 2, 0, 1, 1, 2},
	}
	// The worlds for the other optimizer of each model.
	named := []world{{1, 2, 0, 1, 1, 1}, {2, 2, 0, 1, 1, 1}, {3, 2, 0, 1, 1, 1}, {3, 4, 0, 1, 1, 1}, {1, 2, 0, 1, 2, 1}}
	for name, tc := range map[string]struct {
		base   Config
		worlds []world
	}{"gpt-adamw": {gpt, every}, "mlp-sgd": {mlp, every}, "gpt-sgd": {gptSGD, named}, "mlp-adamw": {mlpAdamW, named}} {
		base := tc.base
		refLosses, refWeights := lossesAndWeights(t, base)
		for _, w := range tc.worlds {
			t.Run(fmt.Sprintf("%s/zero%d/dp%d/group%d/accum%d/pp%d/tp%d", name, w.zero, w.dp, w.group, w.accum, w.pp, w.tp), func(t *testing.T) {
				cfg := base
				cfg.DP, cfg.ZeroGroup, cfg.Accum, cfg.PP, cfg.TP, cfg.Zero, cfg.CheckEvery = w.dp, w.group, w.accum, w.pp, w.tp, w.zero, 1
				if w.pp > 1 {
					cfg.MicroBatches, cfg.Accum = 2, 1
				}
				got, weights := lossesAndWeights(t, cfg)
				matchesOneWorker(t, got, refLosses, weights, refWeights)
			})
		}
	}
}

// ZeRO-1's memory and traffic: with D replicas each rank holds 1/D of the
// AdamW state (up to one element per bucket where D does not divide it),
// and a step's reduce-scatter and all-gather send exactly the bytes plain
// data parallelism's ring all-reduce sends (pinned to the ring: buckets
// this small would otherwise run recursive doubling, which sends log₂D
// whole buckets for fewer steps). (Without clipping: with it ZeRO adds one
// all-reduce of a single value, the shards' norm.)
func TestZeroMemoryAndTraffic(t *testing.T) {
	base := tinyGPT()
	base.Steps, base.Batch, base.BucketMB, base.ClipNorm = 2, 8, 0.01, 0
	base.SetModelArg("d-model", 32)
	base.SetModelArg("n-layers", 4)
	base.SetModelArg("n-heads", 4)
	base.AllReduceAlgo = "ring"
	for _, dp := range []int{2, 4} {
		plain := base
		plain.DP = dp
		zero := plain
		zero.Zero = 1
		p, z := stepMetrics(t, plain), stepMetrics(t, zero)
		n := p.ParamBytes / 4
		if p.OptimizerBytes != 8*n {
			t.Errorf("dp %d: plain data parallelism holds %d optimizer bytes, want 2 × 4 × %d", dp, p.OptimizerBytes, n)
		}
		lo, hi := 8*n/int64(dp), 8*(n/int64(dp)+64) // ≤ one more element per bucket (at most 64 here)
		if z.OptimizerBytes < lo || z.OptimizerBytes > hi {
			t.Errorf("dp %d: ZeRO-1 holds %d optimizer bytes, want 1/%d of %d (%d to %d)", dp, z.OptimizerBytes, dp, 8*n, lo, hi)
		}
		if p.SentAllReduceBytes == 0 || z.SentAllReduceBytes != 0 || z.SentReduceScatterBytes+z.SentAllGatherBytes != p.SentAllReduceBytes {
			t.Errorf("dp %d: plain all-reduce sent %d bytes; ZeRO-1 sent %d in all-reduces, %d + %d in reduce-scatters and all-gathers",
				dp, p.SentAllReduceBytes, z.SentAllReduceBytes, z.SentReduceScatterBytes, z.SentAllGatherBytes)
		}
		t.Logf("dp %d: optimizer %d → %d bytes per rank; %d bytes sent per step either way", dp, p.OptimizerBytes, z.OptimizerBytes, p.SentAllReduceBytes)
		// ZeRO-2 holds its owned gradients and the buckets in flight (at
		// most three: two reducing, one filling, and one owned chunk being
		// added) instead of all of them, and sends what ZeRO-1 sends with
		// one micro-batch.
		zero.Zero, zero.BucketMB = 2, 0.002
		z2 := stepMetrics(t, zero)
		zero.BucketMB = base.BucketMB
		biggest := largestBucket(t, zero)
		bound := 4*(n/int64(dp)+int64(n)/int64(dp)/10) + 4*4*biggest // owned (+10 % for uneven chunks), 3 buckets and a chunk
		if z2.PeakGradBytes >= p.GradHeldBytes || z2.PeakGradBytes > bound {
			t.Errorf("dp %d: ZeRO-2 held up to %d gradient bytes; plain data parallelism %d, the bound %d", dp, z2.PeakGradBytes, p.GradHeldBytes, bound)
		}
		if z2.SentReduceScatterBytes+z2.SentAllGatherBytes != p.SentAllReduceBytes {
			t.Errorf("dp %d: ZeRO-2 sends %d + %d, plain data parallelism %d", dp, z2.SentReduceScatterBytes, z2.SentAllGatherBytes, p.SentAllReduceBytes)
		}
		t.Logf("dp %d: gradients %d → %d bytes held per rank between steps, %d at the peak (ZeRO-2)", dp, p.GradHeldBytes, z2.GradHeldBytes, z2.PeakGradBytes)
		// ZeRO-3 holds its owned weights and the layers being gathered
		// (the largest layer at most three times: computing, prefetched,
		// and a shared one), and sends 1.5 times plain data parallelism's
		// bytes: an all-gather forward and one backward, a reduce-scatter;
		// a little more here because the tied embedding's layer is gathered
		// for the LM head too (2.6 % of this small model's parameters).
		zero.Zero = 3
		z3 := stepMetrics(t, zero)
		layer := largestLayer(t, zero)
		wbound := 4*(n/int64(dp)+n/int64(dp)/10) + 3*4*layer
		if z3.PeakParamBytes >= p.ParamBytes || z3.PeakParamBytes > wbound {
			t.Errorf("dp %d: ZeRO-3 held up to %d weight bytes; plain data parallelism %d, the bound %d", dp, z3.PeakParamBytes, p.ParamBytes, wbound)
		}
		sent := float64(z3.SentAllGatherBytes + z3.SentReduceScatterBytes)
		if r := sent / float64(p.SentAllReduceBytes); z3.SentAllReduceBytes != 0 || r < 1.5 || r > 1.53 {
			t.Errorf("dp %d: ZeRO-3 sent %d + %d + %d bytes, %.3f times plain data parallelism's %d", dp, z3.SentAllReduceBytes,
				z3.SentAllGatherBytes, z3.SentReduceScatterBytes, r, p.SentAllReduceBytes)
		}
		t.Logf("dp %d: weights %d → %d bytes held per rank between steps, %d at the peak (ZeRO-3), %.3f× the bytes sent", dp, p.ParamBytes, z3.ParamBytes, z3.PeakParamBytes, sent/float64(p.SentAllReduceBytes))
	}
}

// largestLayer is the most parameter values one layer of cfg's model
// holds.
func largestLayer(t *testing.T, cfg Config) int64 {
	t.Helper()
	_, train, _ := openForTest(t, &cfg)
	m, err := BuildModel(&cfg, cpu.New(1), train)
	if err != nil {
		t.Fatal(err)
	}
	var most int64
	for _, l := range m.Layers {
		var n int64
		for _, p := range l.Params() {
			n += int64(p.Size())
		}
		most = max(most, n)
	}
	return most
}

// stepMetrics runs cfg and returns its last step's metrics line.
func stepMetrics(t *testing.T, cfg Config) StepMetrics {
	t.Helper()
	cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, cfg.MetricsOut)
	return ms[len(ms)-1]
}

// largestBucket is the most values one gradient bucket of cfg's model
// holds.
func largestBucket(t *testing.T, cfg Config) int64 {
	t.Helper()
	_, train, _ := openForTest(t, &cfg)
	m, err := BuildModel(&cfg, cpu.New(1), train)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := worker.NewPlan(m.Set, int64(cfg.BucketMB*(1<<20)))
	if err != nil {
		t.Fatal(err)
	}
	var most int64
	for _, b := range plan.Buckets {
		most = max(most, int64(b.Len()))
	}
	return most
}

// The model states a rank holds between steps (param_bytes,
// grad_held_bytes, optimizer_bytes) match `troupe plan memory --zero S
// --dp D` for fp32 AdamW (4-byte weights and gradients, K = 8) within 5 %,
// for every stage and dp 1, 2 and 4: the plan counts ceil(N/D) parameters a
// shard, the ranks' shards differ from that by at most one element a
// bucket.
func TestZeroMemoryMatchesThePlan(t *testing.T) {
	base := tinyGPT()
	base.Steps, base.Batch, base.BucketMB = 1, 8, 0.01
	base.SetModelArg("d-model", 32)
	base.SetModelArg("n-layers", 4)
	base.SetModelArg("n-heads", 4)
	for _, dp := range []int{1, 2, 4} {
		for stage := range 4 {
			cfg := base
			cfg.DP, cfg.Zero = dp, stage
			if dp == 1 {
				cfg.Zero = 0 // nothing to shard over
			}
			m := stepMetrics(t, cfg)
			n := m.GradBytes / 4
			want, err := plan.ZeRO(plan.ZeROConfig{Params: n, Stage: stage, DP: dp, K: 8, WeightBytes: 4, GradBytes: 4})
			if err != nil {
				t.Fatal(err)
			}
			got := float64(m.ParamBytes + m.GradHeldBytes + m.OptimizerBytes)
			if math.Abs(got-want.PerDeviceBytes) > 0.05*want.PerDeviceBytes {
				t.Errorf("dp %d ZeRO-%d: a rank holds %.0f bytes (weights %d, gradients %d, optimizer %d), the plan %.0f (%.0f, %.0f, %.0f)",
					dp, stage, got, m.ParamBytes, m.GradHeldBytes, m.OptimizerBytes, want.PerDeviceBytes, want.WeightBytes, want.GradientBytes, want.OptimizerBytes)
			}
			t.Logf("dp %d ZeRO-%d: measured %.0f bytes, plan %.0f (%+.2f %%)", dp, stage, got, want.PerDeviceBytes, 100*(got/want.PerDeviceBytes-1))
		}
	}
}

// A checkpoint written under ZeRO-3 at dp 4 (every rank writing its
// shards of the weights and the optimizer state) resumes under ZeRO-1 at
// dp 2, whose checkpoint resumes in one worker: the losses of all nine
// steps are an uninterrupted worker's within 1e-4 relative and the final
// weights within 1e-4 absolute (float32 sums in other orders between the
// worlds; the restores themselves are bit for bit, see
// checkpoint.TestZeroStateCheckpointsReshard).
func TestZeroCheckpointChain(t *testing.T) {
	base := tinyGPT()
	base.Steps, base.Batch = 9, 8
	base.SetModelArg("n-layers", 2)
	base.SetModelArg("n-heads", 4)
	refLosses, refWeights := lossesAndWeights(t, base)
	dir := t.TempDir()
	var got []float64
	var final []float32
	for _, leg := range []struct{ zero, dp, stop int }{{3, 4, 3}, {1, 2, 6}, {0, 1, 0}} {
		cfg := base
		cfg.Zero, cfg.DP, cfg.CkptDir, cfg.CkptEvery, cfg.Resume = leg.zero, leg.dp, dir, 3, leg.zero != 3
		cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
		cfg.Save = filepath.Join(t.TempDir(), "w.safetensors")
		if _, err := Run(context.Background(), cfg, Options{StopAfter: leg.stop}); err != nil {
			t.Fatalf("ZeRO-%d dp %d: %v", leg.zero, leg.dp, err)
		}
		for _, m := range readMetrics(t, cfg.MetricsOut) {
			if m.Step != len(got)+1 {
				t.Fatalf("ZeRO-%d dp %d logged step %d after %d steps", leg.zero, leg.dp, m.Step, len(got))
			}
			got = append(got, m.Loss)
		}
		if leg.stop == 0 {
			final = savedWeights(t, cfg)
		}
	}
	if len(got) != len(refLosses) {
		t.Fatalf("the chain logged %d steps, want %d", len(got), len(refLosses))
	}
	matchesOneWorker(t, got, refLosses, final, refWeights)
}
