package train

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/train/leader"
	"github.com/troupe-ml/troupe/worker"
)

// refGradScaler is PyTorch's GradScaler.update, written from its
// documentation: on an inf, scale ×backoff and the growth tracker reset;
// else the tracker counts, and at growth_interval the scale ×growth and
// the tracker resets.
type refGradScaler struct {
	scale   float64
	tracker int
}

func (r *refGradScaler) update(foundInf bool, interval int) {
	if foundInf {
		r.scale *= 0.5
		r.tracker = 0
		return
	}
	r.tracker++
	if r.tracker == interval {
		r.scale *= 2
		r.tracker = 0
	}
}

// The loss scaler's arithmetic is GradScaler's over a random sequence of
// overflows, and an overflow at the floor is an error naming the step.
func TestLossScalerArithmetic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Precision, cfg.LossScaleInit, cfg.LossScaleWindow, cfg.LossScaleMin = "fp16", 1024, 3, 1e-30
	s := newLossScaler(&cfg)
	ref := refGradScaler{scale: 1024}
	rng := rand.New(rand.NewPCG(1, 2))
	for step := 1; step <= 500; step++ {
		inf := rng.IntN(4) == 0
		if err := s.update(inf, step); err != nil {
			t.Fatal(err)
		}
		ref.update(inf, 3)
		if s.Scale != ref.scale || s.GrowthTracker != ref.tracker {
			t.Fatalf("step %d: scale %g tracker %d, GradScaler %g %d", step, s.Scale, s.GrowthTracker, ref.scale, ref.tracker)
		}
	}
	cfg.LossScaleInit, cfg.LossScaleMin = 4, 1
	s = newLossScaler(&cfg)
	for step := 1; step <= 2; step++ {
		if err := s.update(true, step); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	if err := s.update(true, 3); !errors.Is(err, ErrLoss) || s.Scale != 1 {
		t.Fatalf("an overflow at the floor: %v (scale %g), want ErrLoss", err, s.Scale)
	}
	for _, spelling := range []DType{"float16", "half", "FP16"} {
		if cfg.Precision = spelling; newLossScaler(&cfg) == nil {
			t.Fatalf("--precision %s (fp16) has no loss scaler", spelling)
		}
	}
	for _, spelling := range []DType{"bf16", "bfloat16", "fp32", ""} {
		if cfg.Precision = spelling; newLossScaler(&cfg) != nil {
			t.Fatalf("--precision %q has a loss scaler", spelling)
		}
	}
}

// fp16 with an inf injected into rank 1's gradients at step 3 of a dp 2
// run: every rank skips that step (the replicas stay identical, checked
// every step), the metrics say so at step 3 only, the scale follows
// GradScaler's arithmetic, the checkpoint keeps the scaler and an
// optimizer that counted one update less, and the weights are the same
// bits as when rank 0 sees the inf instead; without the inf they differ.
func TestFP16OverflowSkipsOnEveryRank(t *testing.T) {
	run := func(overflow string) (Config, []StepMetrics) {
		t.Setenv(envOverflow, overflow)
		cfg := tinyGPT()
		cfg.DP, cfg.Batch, cfg.Steps, cfg.CheckEvery = 2, 8, 6, 1
		cfg.Precision, cfg.LossScaleWindow = "fp16", 2
		dir := t.TempDir()
		cfg.Save, cfg.MetricsOut = filepath.Join(dir, "w.safetensors"), filepath.Join(dir, "m.jsonl")
		cfg.CkptDir, cfg.CkptEvery = filepath.Join(dir, "ckpt"), 6
		if _, err := Run(context.Background(), cfg, Options{}); err != nil {
			t.Fatal(err)
		}
		return cfg, readMetrics(t, cfg.MetricsOut)
	}
	cfg1, ms := run("1:3")
	ref := refGradScaler{scale: 65536}
	for _, m := range ms {
		if m.Skipped != (m.Step == 3) {
			t.Errorf("step %d skipped: %v", m.Step, m.Skipped)
		}
		if m.LossScale != ref.scale {
			t.Errorf("step %d ran with scale %g, GradScaler's %g", m.Step, m.LossScale, ref.scale)
		}
		ref.update(m.Step == 3, 2)
	}
	ck, err := checkpoint.OpenLatest(checkpoint.OSFS{}, cfg1.CkptDir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if s := ck.Manifest.LossScaler; s == nil || s.Scale != ref.scale || s.GrowthTracker != ref.tracker {
		t.Errorf("checkpoint scaler %+v, want scale %g tracker %d", s, ref.scale, ref.tracker)
	}
	if o := ck.Manifest.Optimizer; o == nil || o.Steps != 5 {
		t.Errorf("checkpoint optimizer %+v: want 5 updates of 6 steps", o)
	}
	w1 := savedWeights(t, cfg1)
	cfg0, _ := run("0:3")
	w0 := savedWeights(t, cfg0)
	for i := range w1 {
		if math.Float32bits(w1[i]) != math.Float32bits(w0[i]) {
			t.Fatalf("weight %d: %v with rank 1's inf, %v with rank 0's", i, w1[i], w0[i])
		}
	}
	cfgN, _ := run("")
	if slices.Equal(savedWeights(t, cfgN), w1) {
		t.Error("the run without an overflow ends with the same weights: step 3 was not skipped")
	}
}

// fp16 resumed from a checkpoint continues the scaler (and the skipped
// update's optimizer count): the same losses and weights as one run.
func TestFP16ResumeContinuesTheScaler(t *testing.T) {
	t.Setenv(envOverflow, "0:2")
	dir := t.TempDir()
	cfg := tinyGPT()
	cfg.Steps, cfg.Precision, cfg.LossScaleWindow = 6, "fp16", 2
	cfg.MetricsOut, cfg.Save = filepath.Join(dir, "one.jsonl"), filepath.Join(dir, "one.safetensors")
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	one := readMetrics(t, cfg.MetricsOut)
	whole := savedWeights(t, cfg)

	cfg.CkptDir, cfg.CkptEvery = filepath.Join(dir, "ckpt"), 3
	cfg.MetricsOut, cfg.Save = filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "two.safetensors")
	if _, err := Run(context.Background(), cfg, Options{StopAfter: 3}); err != nil {
		t.Fatal(err)
	}
	cfg.Resume, cfg.MetricsOut = true, filepath.Join(dir, "b.jsonl")
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	two := append(readMetrics(t, filepath.Join(dir, "a.jsonl")), readMetrics(t, cfg.MetricsOut)...)
	for i := range one {
		if one[i].Loss != two[i].Loss || one[i].LossScale != two[i].LossScale {
			t.Fatalf("step %d: loss %v scale %g resumed, %v %g in one run", i+1, two[i].Loss, two[i].LossScale, one[i].Loss, one[i].LossScale)
		}
	}
	if !slices.Equal(savedWeights(t, cfg), whole) {
		t.Error("the resumed run's weights differ from the single run's")
	}
}

// Mixed precision runs in every world the layers run in: dp 2, pp 2 (1F1B,
// recompute), tp 2 (with sequence parallelism), ZeRO-1 and ZeRO-3 over dp
// 2, each against one worker in the same precision. The operands are
// rounded at the same places in every world, but the fp32 sums run in
// another order (a split batch, a split matrix), and a weight updated a
// few ulps apart can round to the neighbouring bf16 value in its compute
// copy: losses within 1e-3 relative and weights within 1e-3 absolute,
// against effects of 2⁻⁸ relative for a wrong rounding site.
func TestMixedPrecisionInEveryWorld(t *testing.T) {
	for _, p := range []DType{BF16, FP16} {
		base := tinyGPT()
		base.Batch, base.Steps, base.Precision = 8, 5, p
		base.SetModelArg("n-layers", 2)
		base.SetModelArg("n-heads", 4)
		dir := t.TempDir()
		one := base
		one.Save = filepath.Join(dir, "one.safetensors")
		ref := losses(t, one)
		refW := savedWeights(t, one)
		for i, w := range []func(*Config){
			func(c *Config) { c.DP = 2 },
			func(c *Config) { c.PP, c.MicroBatches, c.PipelineSchedule, c.Recompute = 2, 2, 1, true },
			func(c *Config) { c.TP, c.SequenceParallel = 2, true },
			func(c *Config) { c.DP, c.Zero = 2, 1 },
			func(c *Config) { c.DP, c.Zero = 2, 3 },
		} {
			cfg := base
			w(&cfg)
			cfg.Save = filepath.Join(dir, "w"+string(rune('a'+i))+".safetensors")
			got := losses(t, cfg)
			weights := savedWeights(t, cfg)
			for s := range ref {
				if math.Abs(got[s]-ref[s]) > 1e-3*math.Abs(ref[s]) {
					t.Errorf("%s world %d: step %d loss %v, one worker %v", p, i, s+1, got[s], ref[s])
				}
			}
			for k := range refW {
				if d := math.Abs(float64(weights[k] - refW[k])); d > 1e-3 {
					t.Fatalf("%s world %d: weight %d is %v, one worker's %v", p, i, k, weights[k], refW[k])
				}
			}
		}
	}
}

// The MLP cut into two pipeline stages after its ReLU trains in bf16 and
// fp16 as one worker does: the activation function hands on its output in
// the compute type, and a stage's output crosses to the next stage in
// fp32 (nn.ForwardWith widens it, exactly). The stages compute what one
// worker computes, in the same order per micro-batch, and the two
// micro-batches' gradients are summed in fp32: losses within 1e-6
// relative (measured: equal).
func TestMixedPrecisionMLPPipeline(t *testing.T) {
	for _, p := range []DType{BF16, FP16} {
		base := tinyMLP()
		base.Precision = p
		ref := losses(t, base)
		cfg := base
		cfg.PP, cfg.MicroBatches = 2, 2
		got := losses(t, cfg)
		for s := range ref {
			if math.Abs(got[s]-ref[s]) > 1e-6*math.Abs(ref[s]) {
				t.Errorf("%s step %d: two stages %v, one worker %v", p, s+1, got[s], ref[s])
			}
		}
	}
}

// A new elastic leader's scaler: the state the job reported after the
// step it resumes at; else the state a worker that ran that step ran with
// (scale and growth tracker) updated by its outcome, checked against the
// job's report of the step before when there is one (a leader that died
// before reporting the step), used alone when there is none (a node that
// joined after the reports: the state comes from the member whose training
// state the generation takes); else unknown.
func TestLossScalerAtAHandOver(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Precision, cfg.LossScaleWindow = "fp16", 2
	s := newLossScaler(&cfg)
	known := map[int]checkpoint.ScalerState{
		9:  {Scale: 1024, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 2, GrowthTracker: 1},
		10: {Scale: 2048, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 2},
	}
	if st, ok := s.at(10, known, lastRun{}); !ok || st.Scale != 2048 {
		t.Errorf("a reported step: %+v %v", st, ok)
	}
	// Step 10 (index 9) unreported: it ran at 1024 and grew, or skipped.
	delete(known, 10)
	if st, ok := s.at(10, known, lastRun{Step: 9, Applied: 10, LossScale: 1024, Tracker: 1}); !ok || st.Scale != 2048 || st.GrowthTracker != 0 {
		t.Errorf("an unreported good step: %+v %v", st, ok)
	}
	if st, ok := s.at(10, known, lastRun{Step: 9, Applied: 10, LossScale: 1024, Tracker: 1, Skipped: true}); !ok || st.Scale != 512 || st.GrowthTracker != 0 {
		t.Errorf("an unreported skipped step: %+v %v", st, ok)
	}
	for _, last := range []lastRun{
		{Step: 8, Applied: 9, LossScale: 1024, Tracker: 1},  // the worker did not run step 10
		{Step: 9, Applied: 9, LossScale: 1024, Tracker: 1},  // it ran it but did not apply it
		{Step: 9, Applied: 10, LossScale: 4096, Tracker: 1}, // at another scale than the job's
		{Step: 9, Applied: 10, LossScale: 1024, Tracker: 0}, // with another tracker
	} {
		if st, ok := s.at(10, known, last); ok {
			t.Errorf("%+v: resolved to %+v", last, st)
		}
	}
	// Nothing reported here: the worker's state alone, with the job's
	// factors and interval.
	none := map[int]checkpoint.ScalerState{}
	if st, ok := s.at(10, none, lastRun{Step: 9, Applied: 10, LossScale: 1024, Tracker: 1}); !ok || st.Scale != 2048 || st.GrowthTracker != 0 || st.GrowthInterval != 2 {
		t.Errorf("a worker's state alone, good step: %+v %v", st, ok)
	}
	if st, ok := s.at(10, none, lastRun{Step: 9, Applied: 10, LossScale: 1024, Tracker: 0}); !ok || st.Scale != 1024 || st.GrowthTracker != 1 {
		t.Errorf("a worker's state alone, tracker counting: %+v %v", st, ok)
	}
	if _, ok := s.at(10, none, lastRun{Step: 9, Applied: 10}); ok {
		t.Error("a worker that ran without a scaler resolved")
	}
	if _, ok := s.at(12, known, lastRun{Step: 10, Applied: 11, LossScale: 1024}); ok {
		t.Error("a worker a step behind resolved")
	}
}

// The member whose state a generation takes: the first part's root, by
// mesh rank; none when the state comes from a checkpoint or the seed.
func TestSourceMember(t *testing.T) {
	l := leader.Layout{Rank: []int{-1, 1, 0, 2}, Source: worker.Source{Kind: worker.FromReplica, Roots: []int{0, 1}}}
	if i := sourceMember(l); i != 2 {
		t.Errorf("member %d, want 2 (mesh rank 0)", i)
	}
	l.Source = worker.Source{Kind: worker.FromCheckpoint, Step: 5}
	if i := sourceMember(l); i != -1 {
		t.Errorf("a checkpoint's state: member %d", i)
	}
}

// Gradients in a 16-bit wire type (--reduce-dtype) in every world that
// reduces them between replicas: data parallelism, ZeRO-1 and ZeRO-2
// (reduce-scatter), hybrid ZeRO (its replicate all-reduce), a pipeline
// (the tied embedding's sum across stages) and tensor parallelism beside
// data parallelism. Each is compared with the same world reducing in
// fp32: the reductions send exactly half the bytes (the gathers of ZeRO's
// weights are unchanged), the replicas stay identical (checked every step),
// and the losses stay within 1e-4 relative (measured: up to 5e-6 for bf16):
// each gradient is rounded to 2⁻⁸ (bf16) or 2⁻¹¹ (fp16) relative a few
// times, and AdamW's update divides by the gradient's own scale, so a
// weight's update is off by about 2⁻⁸ of lr. (The collective tests check
// the reduction itself bit for bit.)
func TestReduceDTypeInEveryWorld(t *testing.T) {
	base := tinyGPT()
	base.Batch, base.Steps, base.CheckEvery, base.ClipNorm = 8, 4, 1, 0
	base.SetModelArg("n-layers", 2)
	base.SetModelArg("n-heads", 4)
	worlds := []struct {
		name string
		set  func(*Config)
	}{
		{"dp2", func(c *Config) { c.DP = 2 }},
		{"dp2/zero1", func(c *Config) { c.DP, c.Zero = 2, 1 }},
		{"dp2/zero2", func(c *Config) { c.DP, c.Zero = 2, 2 }},
		{"dp4/zero2/group2", func(c *Config) { c.DP, c.Zero, c.ZeroGroup = 4, 2, 2 }},
		{"dp2/pp2", func(c *Config) { c.DP, c.PP, c.MicroBatches = 2, 2, 2 }},
		{"dp2/tp2/bf16", func(c *Config) { c.DP, c.TP, c.Precision = 2, 2, "bf16" }},
	}
	for _, w := range worlds {
		ref := base
		w.set(&ref)
		refLosses := losses(t, ref)
		refM := stepMetrics(t, ref)
		// Tensor parallelism's own all-reduces (activations, the loss)
		// stay fp32: those of one replica of the same size, alone.
		var tpBytes int64
		if ref.TP > 1 {
			alone := ref
			alone.DP, alone.Batch = 1, ref.Batch/ref.DP
			tpBytes = stepMetrics(t, alone).SentAllReduceBytes
			refM.SentAllReduceBytes -= tpBytes
		}
		for _, wire := range []DType{BF16, FP16} {
			t.Run(w.name+"/"+string(wire), func(t *testing.T) {
				cfg := ref
				cfg.ReduceDType = wire
				got := losses(t, cfg)
				for s := range refLosses {
					if math.Abs(got[s]-refLosses[s]) > 1e-4*math.Abs(refLosses[s]) {
						t.Errorf("step %d: loss %v, %v with fp32 reductions", s+1, got[s], refLosses[s])
					}
				}
				m := stepMetrics(t, cfg)
				m.SentAllReduceBytes -= tpBytes
				if refM.SentAllReduceBytes+refM.SentReduceScatterBytes == 0 ||
					2*m.SentAllReduceBytes != refM.SentAllReduceBytes || 2*m.SentReduceScatterBytes != refM.SentReduceScatterBytes ||
					m.SentAllGatherBytes != refM.SentAllGatherBytes {
					t.Errorf("sent all-reduce %d, reduce-scatter %d, all-gather %d bytes; %d, %d, %d in fp32",
						m.SentAllReduceBytes, m.SentReduceScatterBytes, m.SentAllGatherBytes,
						refM.SentAllReduceBytes, refM.SentReduceScatterBytes, refM.SentAllGatherBytes)
				}
			})
		}
	}
}
