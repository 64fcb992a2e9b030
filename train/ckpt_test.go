package train

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/troupe-ml/troupe/checkpoint"
)

// A run stopped after step k and resumed with --resume gives per-step
// losses bit-identical to an uninterrupted run of the same world: weights,
// optimizer moments and step count, the LR schedule's position and the
// sampler's cursor all come back exactly.
func TestResumeIsBitIdentical(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dp, pp int
	}{{"dp1", 1, 1}, {"dp2", 2, 1}, {"pp2", 1, 2}} {
		for model, base := range map[string]Config{"gpt": tinyGPT(), "mlp": tinyMLP()} {
			t.Run(tc.name+"/"+model, func(t *testing.T) {
				base.Steps, base.Batch, base.DP, base.PP = 12, 8, tc.dp, tc.pp
				if tc.pp > 1 {
					base.MicroBatches = 2
				}
				whole := losses(t, base)

				cfg := base
				cfg.CkptDir, cfg.CkptEvery = t.TempDir(), 4
				cfg.MetricsOut = filepath.Join(t.TempDir(), "first.jsonl")
				if _, err := Run(context.Background(), cfg, Options{StopAfter: 6}); err != nil {
					t.Fatal(err)
				}
				if got, err := checkpoint.Latest(checkpoint.OSFS{}, cfg.CkptDir); err != nil || got != 4 {
					t.Fatalf("latest checkpoint %d (%v), want step 4", got, err)
				}
				cfg.Resume = true
				cfg.MetricsOut = filepath.Join(t.TempDir(), "resumed.jsonl")
				sum, err := Run(context.Background(), cfg, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if sum.StartStep != 4 {
					t.Fatalf("resumed at step %d, want 4", sum.StartStep)
				}
				resumed := readMetrics(t, cfg.MetricsOut)
				if len(resumed) != 8 {
					t.Fatalf("resumed run logged %d steps, want steps 5-12", len(resumed))
				}
				for _, m := range resumed {
					if m.Loss != whole[m.Step-1] {
						t.Errorf("step %d: resumed loss %v, uninterrupted %v (must be bit-identical)", m.Step, m.Loss, whole[m.Step-1])
					}
				}
			})
		}
	}
}

// A checkpoint written by one world loads into another (2 replicas into a
// 2-stage pipeline and back): the next steps match the run that never
// changed world, within the float32 tolerance of a different summation
// order.
func TestResumeIntoAnotherWorld(t *testing.T) {
	base := tinyGPT()
	base.NLayers, base.Steps, base.Batch = 2, 8, 8
	ref := losses(t, base)
	dir := t.TempDir()
	cfg := base
	cfg.DP, cfg.CkptDir, cfg.CkptEvery = 2, dir, 4
	if _, err := Run(context.Background(), cfg, Options{StopAfter: 4}); err != nil {
		t.Fatal(err)
	}
	cfg = base
	cfg.PP, cfg.MicroBatches, cfg.CkptDir, cfg.Resume = 2, 2, dir, true
	cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, m := range readMetrics(t, cfg.MetricsOut) {
		if d := m.Loss - ref[m.Step-1]; d > 1e-4*ref[m.Step-1] || -d > 1e-4*ref[m.Step-1] {
			t.Errorf("step %d: loss %v after resharding dp2 → pp2, %v without", m.Step, m.Loss, ref[m.Step-1])
		}
	}
}

func TestResumeWithoutCheckpointStartsFromScratch(t *testing.T) {
	cfg := tinyMLP()
	cfg.CkptDir, cfg.Resume = t.TempDir(), true
	sum, err := Run(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.StartStep != 0 || sum.Steps != cfg.Steps {
		t.Fatalf("start %d of %d, want a whole run from 0", sum.StartStep, sum.Steps)
	}
	_ = fmt.Sprint()
}
