package train

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/troupe-ml/troupe/pipeline"
)

// Pipeline runs (and DP × PP) through the whole trainer must match one
// worker on the whole batch; the tolerance is the float32 summation-order
// bound of TestDataParallelMatchesOneWorker. Replicas of a stage are
// compared bit for bit every step.
func TestPipelineMatchesOneWorker(t *testing.T) {
	gpt := tinyGPT()
	gpt.SetModelArg("n-layers", 3)
	mlp := tinyMLP()
	mlp.SetModelArg("layers", []int{12, 10, 9, 8, 3})
	for name, base := range map[string]Config{"mlp": mlp, "gpt": gpt} {
		base.Steps, base.Batch = 10, 16
		ref := losses(t, base)
		for _, tc := range []struct {
			dp, pp, m int
			sched     pipeline.Kind
			recompute bool
		}{
			{1, 2, 4, pipeline.KindGPipe, false}, {1, 2, 4, pipeline.Kind1F1B, true}, {1, 4, 4, pipeline.Kind1F1B, false},
			{1, 4, 8, pipeline.KindGPipe, true}, {2, 2, 2, pipeline.Kind1F1B, false},
		} {
			t.Run(fmt.Sprintf("%s/dp%d/pp%d/m%d/%s/recompute=%v", name, tc.dp, tc.pp, tc.m, tc.sched, tc.recompute), func(t *testing.T) {
				cfg := base
				cfg.DP, cfg.PP, cfg.MicroBatches, cfg.PipelineSchedule, cfg.Recompute, cfg.CheckEvery = tc.dp, tc.pp, tc.m, tc.sched, tc.recompute, 1
				got := losses(t, cfg)
				for i := range ref {
					if math.Abs(got[i]-ref[i]) > 1e-4*math.Abs(ref[i]) {
						t.Errorf("step %d: loss %v, one worker %v", i+1, got[i], ref[i])
					}
				}
			})
		}
	}
}

// A pipeline run reports its measured bubble beside the formula, the peak
// micro-batches alive on stage 0, and writes a trace with a track per stage.
func TestPipelineMetricsAndTrace(t *testing.T) {
	cfg := tinyMLP()
	cfg.SetModelArg("layers", []int{12, 10, 9, 8, 3})
	cfg.Steps, cfg.Batch, cfg.PP, cfg.MicroBatches, cfg.PipelineSchedule = 3, 16, 2, 4, pipeline.KindGPipe
	cfg.Trace = filepath.Join(t.TempDir(), "trace.json")
	cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
	if _, err := Run(t.Context(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, m := range readMetrics(t, cfg.MetricsOut) {
		if m.PP != 2 || m.Micro != 4 || m.FormulaBubble != 0.2 {
			t.Errorf("pp %d, micro %d, formula %v; want 2, 4, 0.2", m.PP, m.Micro, m.FormulaBubble)
		}
		if m.BubbleFraction <= 0 || m.BubbleFraction >= 1 {
			t.Errorf("measured bubble %v, want in (0, 1)", m.BubbleFraction)
		}
		if m.PeakMicro != 4 {
			t.Errorf("GPipe kept %d micro-batches alive on stage 0, want all 4", m.PeakMicro)
		}
	}
	tr := readTrace(t, cfg.Trace)
	for _, stage := range []string{"stage 0", "stage 1"} {
		if !tr[stage] {
			t.Errorf("trace has no track %q (tracks: %v)", stage, tr)
		}
	}
}

// --partition time cuts where the measured costs balance; the run then
// trains like any other pipeline.
func TestPartitionByTime(t *testing.T) {
	cfg := tinyMLP()
	cfg.SetModelArg("layers", []int{12, 64, 9, 8, 3})
	cfg.Steps, cfg.Batch, cfg.PP, cfg.MicroBatches, cfg.Partition = 4, 16, 2, 2, "time"
	ref := tinyMLP()
	ref.Steps, ref.Batch = 4, 16
	ref.SetModelArg("layers", cfg.ModelArgs["layers"])
	want := losses(t, ref)
	got := losses(t, cfg)
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-4*math.Abs(want[i]) {
			t.Errorf("step %d: loss %v, one worker %v", i+1, got[i], want[i])
		}
	}
}
