package e2e

import (
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
	"github.com/troupe-ml/troupe/safetensors"
)

const python = "/usr/bin/python3"

// needTorch skips when Debian's python3-torch is absent (.ci/run installs it).
func needTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command(python, "-c", "import torch, numpy").Run(); err != nil {
		t.Skipf("PyTorch not available (%v): apt-get install python3-torch python3-numpy", err)
	}
}

func interop(t *testing.T, args ...string) string {
	t.Helper()
	out, errs, err := e2etest.Run(t, 5*time.Minute, python, append([]string{"../scripts/torch_interop.py"}, args...)...)
	if err != nil {
		t.Fatalf("torch_interop.py %v: %v\n%s", args, err, errs)
	}
	return out
}

// Both sides compute in float32 with different summation orders; over 20
// steps the losses drift apart by ~1e-6 relative. 1e-4 relative is far
// below the per-step change (~1e-2) a wrong update would cause.
const torchTol = 1e-4

func compareLosses(t *testing.T, got, want []float64) {
	t.Helper()
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("troupe logged %d losses, PyTorch %d", len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > torchTol*math.Abs(want[i]) {
			t.Errorf("step %d: troupe loss %.7f, PyTorch %.7f", i+1, got[i], want[i])
		}
	}
}

// TestPyTorchInterop: weights made by PyTorch load with --init, weights
// saved with --save load in PyTorch by name and shape, and both train to the
// same per-step losses from the same init and the same batches.
func TestPyTorchInterop(t *testing.T) {
	needTorch(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))

	t.Run("MLP", func(t *testing.T) {
		const n, feat, classes = 256, 20, 5
		x := make([]float32, n*feat)
		y := make([]int64, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		for i := range y {
			y[i] = int64(r.IntN(classes))
		}
		data := filepath.Join(dir, "mlp-data.safetensors")
		if err := safetensors.WriteFile(data, []safetensors.Tensor{
			safetensors.NewF32("x", []int{n, feat}, x), safetensors.NewI64("y", []int{n}, y),
		}, nil); err != nil {
			t.Fatal(err)
		}
		init := filepath.Join(dir, "mlp-init.safetensors")
		interop(t, "init", "--model", "mlp", "--layers", "20,32,16,5", "--out", init)
		metrics, saved := filepath.Join(dir, "mlp.jsonl"), filepath.Join(dir, "mlp-out.safetensors")
		e2etest.Troupe(t, 5*time.Minute, "train", "--model", "mlp", "--layers", "20,32,16,5", "--data", data, "--init", init,
			"--shuffle=false", "--batch", "32", "--steps", "20", "--optimizer", "sgd", "--momentum", "0.9",
			"--lr", "0.05", "--lr-schedule", "constant", "--metrics-out", metrics, "--save", saved)
		want := e2etest.Field(t, interop(t, "losses", "--model", "mlp", "--layers", "20,32,16,5", "--init", init, "--data", data,
			"--batch", "32", "--steps", "20", "--lr", "0.05", "--momentum", "0.9"), "loss")
		compareLosses(t, e2etest.Field(t, e2etest.ReadFile(t, metrics), "loss"), want)
		interop(t, "load", "--model", "mlp", "--layers", "20,32,16,5", saved)
	})

	t.Run("GPT", func(t *testing.T) {
		const vocab, ctx = 17, 16
		toks := make([]int64, 64*ctx+1)
		for i := range toks {
			toks[i] = int64(r.IntN(vocab))
		}
		data := filepath.Join(dir, "gpt-data.safetensors")
		if err := safetensors.WriteFile(data, []safetensors.Tensor{safetensors.NewI64("tokens", []int{len(toks)}, toks)},
			map[string]string{"vocab_size": "17"}); err != nil {
			t.Fatal(err)
		}
		shape := []string{"--vocab", "17", "--d-model", "32", "--n-layers", "2", "--n-heads", "4", "--context", "16"}
		init := filepath.Join(dir, "gpt-init.safetensors")
		interop(t, append([]string{"init", "--model", "gpt", "--out", init}, shape...)...)
		metrics, saved := filepath.Join(dir, "gpt.jsonl"), filepath.Join(dir, "gpt-out.safetensors")
		e2etest.Troupe(t, 5*time.Minute, "train", "--model", "gpt", "--d-model", "32", "--n-layers", "2", "--n-heads", "4",
			"--context", "16", "--data", data, "--init", init, "--shuffle=false", "--batch", "8", "--steps", "10",
			"--optimizer", "adamw", "--lr", "0.003", "--lr-schedule", "constant", "--lr-warmup", "0", "--clip", "0",
			"--metrics-out", metrics, "--save", saved)
		want := e2etest.Field(t, interop(t, append([]string{"losses", "--model", "gpt", "--init", init, "--data", data,
			"--batch", "8", "--steps", "10", "--optimizer", "adamw", "--lr", "0.003"}, shape...)...), "loss")
		compareLosses(t, e2etest.Field(t, e2etest.ReadFile(t, metrics), "loss"), want)
		interop(t, append([]string{"load", "--model", "gpt", saved}, shape...)...)
	})
}
