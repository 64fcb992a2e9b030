package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/safetensors"
)

// llamaRef runs ../scripts/torch_llama_ref.py (Hugging Face
// LlamaForCausalLM's semantics in float64 PyTorch) with args as JSON.
func llamaRef(t *testing.T, args map[string]any) (losses []float64, final map[string][]float64, loaded int) {
	t.Helper()
	in, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "../scripts/torch_llama_ref.py")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("PyTorch reference: %v\n%s", err, stderr.String())
	}
	var r struct {
		Losses []float64
		Final  map[string][]float64
		Loaded int
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	return r.Losses, r.Final, r.Loaded
}

// TestLlamaWorkerProcesses: troupe train --model llama as 2 worker
// processes, data-parallel and tensor-parallel (4 heads on 1 kv head,
// which 2 shards cannot split: k_proj and v_proj are replicated and their
// gradients summed between the processes), from weights PyTorch wrote
// with Hugging Face's names, gives the per-step losses of Hugging Face
// LlamaForCausalLM's semantics in float64 PyTorch within 1e-4 relative
// (torchTol: float32 sums in another order) over 10 AdamW steps and its
// final weights within 1e-4; the weights --save writes load in PyTorch
// strictly by LlamaForCausalLM's names and shapes. The vocabulary, 37, is
// not divided by 2.
func TestLlamaWorkerProcesses(t *testing.T) {
	needTorch(t)
	const vocab, ctx, windows = 37, 8, 24
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(7, 8))
	toks := make([]int32, windows*ctx+1)
	for i := range toks {
		toks[i] = int32(r.IntN(vocab))
	}
	toks[0] = vocab - 1
	data := filepath.Join(dir, "tokens.safetensors")
	if err := safetensors.WriteFile(data, []safetensors.Tensor{safetensors.NewI32("tokens", []int{len(toks)}, toks)},
		map[string]string{"vocab_size": fmt.Sprint(vocab)}); err != nil {
		t.Fatal(err)
	}
	init := filepath.Join(dir, "init.safetensors")
	shape := map[string]any{"vocab": vocab, "context": ctx, "d": 16, "layers": 2, "heads": 4, "kv_heads": 1, "ffn": 24,
		"theta": 10000.0, "eps": 1e-5, "tie": false}
	args := map[string]any{"seed": 11, "init_out": init, "perturb_norms": true, "tokens": toks, "batch": 8, "steps": 10,
		"lr": 1e-3, "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.999, "adam_eps": 1e-8}
	for k, v := range shape {
		args[k] = v
	}
	want, final, _ := llamaRef(t, args)
	base := []string{"train", "--model", "llama", "--d-model", "16", "--n-layers", "2", "--n-heads", "4", "--n-kv-heads", "1",
		"--ffn-hidden", "24", "--rope-theta", "10000", "--norm-eps", "1e-5", "--context", "8", "--data", data, "--init", init,
		"--shuffle=false", "--batch", "8", "--steps", "10", "--optimizer", "adamw", "--lr", "0.001", "--lr-schedule", "constant",
		"--lr-warmup", "0", "--clip", "0", "--threads", "2", "--check-every", "1"}
	for _, w := range [][]string{{"--procs", "2"}, {"--procs", "2", "--tp", "2"}} {
		t.Run(strings.Join(w, " "), func(t *testing.T) {
			saved := filepath.Join(t.TempDir(), "w.safetensors")
			compareLosses(t, runLosses(t, append(append(append([]string{}, base...), w...), "--save", saved)), want)
			f, err := safetensors.Open(saved)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for name, ref := range final {
				got, _, err := f.Float32(name)
				if err != nil {
					t.Errorf("--save: %v", err)
					continue
				}
				if len(got) != len(ref) {
					t.Errorf("%s: %d values saved, PyTorch has %d", name, len(got), len(ref))
					continue
				}
				for i := range ref {
					if d := math.Abs(float64(got[i]) - ref[i]); d > torchTol || math.IsNaN(d) {
						t.Errorf("%s[%d]: final weight %.7g, PyTorch %.7g", name, i, got[i], ref[i])
						break
					}
				}
			}
			check := map[string]any{"init_in": init, "saved": saved}
			for k, v := range shape {
				check[k] = v
			}
			if _, _, n := llamaRef(t, check); n != len(final) {
				t.Errorf("PyTorch loaded %d tensors of --save, the model has %d", n, len(final))
			}
		})
	}
}
