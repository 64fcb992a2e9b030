package train

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
)

// Data-parallel runs must match one worker on the whole batch. The sums
// run in a different order (per-rank partial sums, then the ring), so the
// float32 losses differ by ~1e-7 relative per step; 20 steps of compounding
// stay below 1e-5, and the bound is 1e-4 relative. Replicas are compared by
// checksum every step (--check-every 1) and must be bit-identical.
func TestDataParallelMatchesOneWorker(t *testing.T) {
	for name, base := range map[string]Config{"mlp": tinyMLP(), "gpt": tinyGPT()} {
		base.Steps, base.Batch = 20, 12
		ref := losses(t, base)
		for _, tc := range []struct{ dp, accum int }{{2, 1}, {4, 1}, {2, 2}} {
			t.Run(fmt.Sprintf("%s/dp%d/accum%d", name, tc.dp, tc.accum), func(t *testing.T) {
				cfg := base
				cfg.DP, cfg.Accum, cfg.CheckEvery = tc.dp, tc.accum, 1
				cfg.BucketMB = 0.001 // several buckets
				got := losses(t, cfg)
				for i := range ref {
					if math.Abs(got[i]-ref[i]) > 1e-4*math.Abs(ref[i]) {
						t.Errorf("step %d: loss %v with dp %d accum %d, %v with one worker", i+1, got[i], tc.dp, tc.accum, ref[i])
					}
				}
			})
		}
	}
}

func losses(t *testing.T, cfg Config) []float64 {
	t.Helper()
	cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	var out []float64
	for _, m := range readMetrics(t, cfg.MetricsOut) {
		if m.DP != cfg.DP {
			t.Fatalf("metrics say dp %d, want %d", m.DP, cfg.DP)
		}
		out = append(out, m.Loss)
	}
	return out
}
