package train

import (
	"context"
	"path/filepath"
	"testing"
)

// The MLP 784-256-10 (DefaultMLPConfig) on the real MNIST must reach 97%
// test accuracy within 2 epochs, in fp32 and in mixed precision (bf16,
// and fp16 with its loss scaler), whose final training loss (the mean of
// the last 400 steps, a fifth of the run: one batch's loss varies by far
// more than the 3 % compared) must be at most 3 % above fp32's: mixed
// precision trains no worse. Below fp32's is no defect, and where it lands
// depends on rounding: the same bf16 run gave 0.0467 and 0.0460 against
// fp32's 0.0476 when only the grouping of the GEMM's k blocks changed (its
// k block of 256 pair steps became 512), and fp16 gives 0.0461 (1.9–3.4 %
// below). A loss more than 10 % below, three times that spread, still
// fails: it would mean the runs differ in more than precision. Each run
// takes a few seconds.
func TestMNISTReaches97Percent(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two MNIST epochs per precision")
	}
	var ref float64
	for _, p := range []DType{FP32, BF16, FP16} {
		cfg := mlpDefaults()
		cfg.Precision = p
		cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
		sum, err := Run(context.Background(), cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ms := readMetrics(t, cfg.MetricsOut)
		var tail float64
		for _, m := range ms[len(ms)-400:] {
			tail += m.Loss / 400
		}
		t.Logf("%s, 2 epochs: test accuracy %.2f%%, held-out loss %.4f, last 400 steps' loss %.4f, %.0f samples/s", p, 100*sum.EvalAcc, sum.EvalLoss, tail, sum.SamplesPerS)
		if sum.EvalAcc < 0.97 {
			t.Errorf("%s: test accuracy %.2f%% after 2 epochs, want ≥ 97%%", p, 100*sum.EvalAcc)
		}
		if p == "fp32" {
			ref = tail
		} else if d := (tail - ref) / ref; d > 0.03 || d < -0.10 {
			t.Errorf("%s: final loss %.4f, fp32 %.4f: %+.1f%%, want at most 3%% above and 10%% below", p, tail, ref, 100*d)
		}
	}
}
