package e2e

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
)

// TestTensorParallelWorlds: from the same --init weights and data, --tp 2
// and 4, with --sequence-parallel, in one process and as worker processes
// (--procs, alone and with --dp), give one worker's per-step losses within
// 1e-4 relative and its final weights (--save) within 1e-4 absolute. The
// GPT's vocabulary (65) is divided by neither 2 nor 4, so the last shard
// of the embedding and the head is padded. Replicas are compared bit for
// bit every step (--check-every 1).
func TestTensorParallelWorlds(t *testing.T) {
	gpt, err := models.NewGPT(cpu.New(1), models.GPT{Vocab: 65, Context: 16, DModel: 32, Layers: 2, Heads: 4}, 11)
	gptInit := writeInit(t, gpt, err)
	mlp, err := models.NewMLP(cpu.New(1), models.MLP{Sizes: []int{784, 64, 10}}, 11)
	mlpInit := writeInit(t, mlp, err)
	for _, tc := range []struct {
		name   string
		model  []string
		whole  *nn.Model
		worlds [][]string
	}{
		{"gpt", []string{"--model", "gpt", "--d-model", "32", "--n-layers", "2", "--n-heads", "4", "--context", "16",
			"--data", "synthetic-tokens", "--init", gptInit, "--batch", "16"}, gpt, [][]string{
			{"--tp", "2"}, {"--tp", "4"}, {"--tp", "2", "--sequence-parallel"}, {"--procs", "2", "--tp", "2"},
			{"--procs", "2", "--tp", "2", "--sequence-parallel"}, {"--procs", "4", "--dp", "2", "--tp", "2"},
			{"--procs", "4", "--pp", "2", "--tp", "2", "--micro-batches", "2"},
		}},
		{"mlp", []string{"--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp", "--init", mlpInit, "--batch", "32"}, mlp,
			[][]string{{"--tp", "2"}, {"--procs", "2", "--tp", "2"}}},
	} {
		base := append(append([]string{"train"}, tc.model...), "--steps", "12", "--check-every", "1", "--threads", "2")
		ref, refW := runLossesAndWeights(t, base, tc.whole)
		for _, w := range tc.worlds {
			t.Run(tc.name+"/"+strings.Join(w, " "), func(t *testing.T) {
				got, gotW := runLossesAndWeights(t, append(append([]string{}, base...), w...), tc.whole)
				if len(got) != len(ref) {
					t.Fatalf("%d steps logged, want %d", len(got), len(ref))
				}
				matchesOneWorker(t, got, ref, gotW, refW)
			})
		}
	}
}

// runLossesAndWeights runs troupe with args, saving the final weights, and
// returns the losses and the weights (loaded into a copy of whole).
func runLossesAndWeights(t *testing.T, args []string, whole *nn.Model) ([]float64, []float32) {
	t.Helper()
	save := filepath.Join(t.TempDir(), "w.safetensors")
	l := runLosses(t, append(args, "--save", save))
	m, err := nn.Build(cpu.New(1), whole.Spec, 1, 0, whole.Units)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Set.LoadWeights(save); err != nil {
		t.Fatal(err)
	}
	return l, m.Set.HostWeights()
}

// TestZeroWorlds: ZeRO-1 as worker processes (--procs 2 --zero 1, and with
// --tp 2) gives one worker's losses and final weights; its checkpoint,
// each process writing its shard of the optimizer state, resumes in one
// worker with the uninterrupted run's losses.
func TestZeroWorlds(t *testing.T) {
	gpt, err := models.NewGPT(cpu.New(1), models.GPT{Vocab: 65, Context: 16, DModel: 32, Layers: 2, Heads: 4}, 11)
	gptInit := writeInit(t, gpt, err)
	base := []string{"train", "--model", "gpt", "--d-model", "32", "--n-layers", "2", "--n-heads", "4", "--context", "16",
		"--data", "synthetic-tokens", "--init", gptInit, "--batch", "16", "--steps", "12", "--threads", "2",
		"--lr-schedule", "constant"} // the first half of the run below stops at step 6 with the same rates
	ref, refW := runLossesAndWeights(t, append([]string{}, base...), gpt)
	for _, w := range [][]string{{"--procs", "2", "--zero", "1"}, {"--procs", "4", "--tp", "2", "--zero", "1", "--check-every", "1"},
		{"--procs", "2", "--zero", "2", "--accum", "2"}, {"--procs", "2", "--zero", "3", "--check-every", "1"},
		{"--procs", "4", "--zero", "3", "--pp", "2", "--micro-batches", "2"}} {
		t.Run(strings.Join(w, " "), func(t *testing.T) {
			got, gotW := runLossesAndWeights(t, append(append([]string{}, base...), w...), gpt)
			matchesOneWorker(t, got, ref, gotW, refW)
		})
	}
	ckpt := t.TempDir()
	args := append(append([]string{}, base...), "--procs", "2", "--zero", "1", "--ckpt-dir", ckpt, "--ckpt-every", "6")
	for i, a := range args {
		if a == "12" {
			args[i] = "6"
		}
	}
	runLosses(t, args)
	resumed := runLosses(t, append(append([]string{}, base...), "--ckpt-dir", ckpt, "--resume"))
	if len(resumed) != 6 {
		t.Fatalf("resumed run logged %d steps, want steps 7-12", len(resumed))
	}
	for i, l := range resumed {
		if want := ref[6+i]; math.Abs(l-want) > 1e-4*math.Abs(want) {
			t.Errorf("step %d after resuming a ZeRO checkpoint in one worker: loss %.7f, uninterrupted %.7f", 7+i, l, want)
		}
	}
}

// matchesOneWorker checks a run against one worker's: losses within 1e-4
// relative, final weights within 1e-4 absolute (float32 sums in another
// order).
func matchesOneWorker(t *testing.T, got, ref []float64, gotW, refW []float32) {
	t.Helper()
	for i := range ref {
		if math.Abs(got[i]-ref[i]) > 1e-4*math.Abs(ref[i]) {
			t.Errorf("step %d: loss %.7f, one worker %.7f", i+1, got[i], ref[i])
		}
	}
	for i := range refW {
		if d := math.Abs(float64(gotW[i] - refW[i])); d > 1e-4 {
			t.Fatalf("final weight %d: %v, one worker's %v", i, gotW[i], refW[i])
		}
	}
}
