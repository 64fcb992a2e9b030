package train

import (
	"context"
	"path/filepath"
	"testing"
)

// The MLP 784-256-10 (DefaultMLPConfig) on the real MNIST must reach 97%
// test accuracy within 2 epochs. The run takes a few seconds.
func TestMNISTReaches97Percent(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two MNIST epochs")
	}
	cfg := DefaultMLPConfig()
	sum, err := Run(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("2 epochs: test accuracy %.2f%%, held-out loss %.4f, %.0f samples/s", 100*sum.EvalAcc, sum.EvalLoss, sum.SamplesPerS)
	if sum.EvalAcc < 0.97 {
		t.Fatalf("test accuracy %.2f%% after 2 epochs, want ≥ 97%%", 100*sum.EvalAcc)
	}
}

// The default GPT (troupe train with no flags) must bring its training loss
// to at most 55% of the first step's within 300 steps. The last ten steps'
// mean is compared, so one lucky batch cannot pass it.
func TestDefaultGPTLossFalls(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the default GPT for 300 steps")
	}
	cfg := DefaultConfig()
	cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
	cfg.EvalBatches = 4
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, cfg.MetricsOut)
	if len(ms) != 300 {
		t.Fatalf("%d steps, want 300", len(ms))
	}
	var tail float64
	for _, m := range ms[len(ms)-10:] {
		tail += m.Loss / 10
	}
	t.Logf("first loss %.4f, mean of the last 10 %.4f (%.1f%%)", ms[0].Loss, tail, 100*tail/ms[0].Loss)
	if tail > 0.55*ms[0].Loss {
		t.Fatalf("loss fell from %.4f to %.4f: %.1f%% of the first step, want ≤ 55%%", ms[0].Loss, tail, 100*tail/ms[0].Loss)
	}
}
