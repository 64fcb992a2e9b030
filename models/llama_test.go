package models_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/train"
)

// python is Debian's interpreter, where python3-torch installs.
const python = "/usr/bin/python3"

// refScript is the float64 PyTorch reference of Hugging Face
// LlamaForCausalLM's semantics and names.
var refScript = filepath.Join("..", "scripts", "torch_llama_ref.py")

// needTorch skips when PyTorch is not importable.
func needTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command(python, "-c", "import torch, numpy").Run(); err != nil {
		t.Skipf("PyTorch not available (%v): apt-get install python3-torch python3-numpy", err)
	}
}

// llamaShape is a tiny Llama: the options troupe takes and the reference
// reads.
type llamaShape struct {
	vocab, context, d, layers, heads, kv, ffn int
	theta, eps                                float64
	tie                                       bool
}

func (s llamaShape) args(c *train.Config) {
	c.Model, c.Context = "llama", s.context
	for k, v := range map[string]any{"d-model": s.d, "n-layers": s.layers, "n-heads": s.heads, "n-kv-heads": s.kv,
		"ffn-hidden": s.ffn, "rope-theta": s.theta, "norm-eps": s.eps, "tie": s.tie} {
		c.SetModelArg(k, v)
	}
}

func (s llamaShape) ref() map[string]any {
	return map[string]any{"vocab": s.vocab, "context": s.context, "d": s.d, "layers": s.layers, "heads": s.heads,
		"kv_heads": s.kv, "ffn": s.ffn, "theta": s.theta, "eps": s.eps, "tie": s.tie}
}

// refRun is what the reference computed: the loss of every step and the
// weights after the last.
type refRun struct {
	Losses []float64
	Final  map[string][]float64
	Loaded int
}

// torchRef runs the reference with args (shape, init, training) as JSON.
func torchRef(t *testing.T, args map[string]any) refRun {
	t.Helper()
	in, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, refScript)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("PyTorch reference: %v\n%s", err, stderr.String())
	}
	var r refRun
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// tokenFile writes a stream of n windows of context tokens (plus one) drawn
// from the vocabulary, as troupe's safetensors token data.
func tokenFile(t *testing.T, seed uint64, vocab, context, n int) (string, []int32) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 99))
	toks := make([]int32, n*context+1)
	for i := range toks {
		toks[i] = int32(r.IntN(vocab))
	}
	toks[0] = int32(vocab - 1) // the last id occurs: the data's vocabulary is the whole one
	path := filepath.Join(t.TempDir(), "tokens.safetensors")
	if err := safetensors.WriteFile(path, []safetensors.Tensor{safetensors.NewI32("tokens", []int{len(toks)}, toks)},
		map[string]string{"vocab_size": fmt.Sprint(vocab)}); err != nil {
		t.Fatal(err)
	}
	return path, toks
}

// runWorld trains cfg and returns its per-step losses and its saved
// weights by name.
func runWorld(t *testing.T, cfg train.Config) ([]float64, map[string][]float32) {
	t.Helper()
	dir := t.TempDir()
	cfg.MetricsOut, cfg.Save = filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "w.safetensors")
	if _, err := train.Run(context.Background(), cfg, train.Options{}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(cfg.MetricsOut)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var losses []float64
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m struct {
			Loss *float64 `json:"loss"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m.Loss != nil {
			losses = append(losses, *m.Loss)
		}
	}
	return losses, savedWeights(t, cfg.Save)
}

func savedWeights(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	sf, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	out := map[string][]float32{}
	for _, name := range sf.Header.Names() {
		w, _, err := sf.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = w
	}
	return out
}

// Both sides are checked against the float64 reference: the losses within
// 1e-4 relative and every final weight within 1e-4 absolute. troupe
// computes in float32 (its sums in another order on each world); the
// loss's float32 error is ~1e-6 relative per step, and AdamW's update is
// lr·m/(√v+ε), so a gradient's float32 rounding moves a weight by about
// its relative error times lr = 1e-3: ~1e-9 per step. A wrong or missing
// term (a gradient not summed over a group, a mis-rotated head) changes a
// loss by ~1e-2 and weights by ~lr per step, orders of magnitude more.
const refTol = 1e-4

func matchesTorch(t *testing.T, losses []float64, weights map[string][]float32, ref refRun) {
	t.Helper()
	if len(losses) != len(ref.Losses) {
		t.Fatalf("troupe logged %d losses, PyTorch %d", len(losses), len(ref.Losses))
	}
	for i := range losses {
		if math.Abs(losses[i]-ref.Losses[i]) > refTol*math.Abs(ref.Losses[i]) {
			t.Errorf("step %d: loss %.9f, PyTorch %.9f", i+1, losses[i], ref.Losses[i])
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range ref.Final {
			if !yield(k) {
				return
			}
		}
	})
	if len(weights) != len(ref.Final) {
		t.Errorf("troupe saved %d tensors, PyTorch's state dict has %d", len(weights), len(ref.Final))
	}
	for _, name := range names {
		want := ref.Final[name]
		got, ok := weights[name]
		if !ok {
			t.Errorf("troupe saved no %s", name)
			continue
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d values saved, PyTorch has %d", name, len(got), len(want))
			continue
		}
		for i := range want {
			if d := math.Abs(float64(got[i]) - want[i]); d > refTol || math.IsNaN(d) {
				t.Errorf("%s[%d]: final weight %.7g, PyTorch %.7g", name, i, got[i], want[i])
				break
			}
		}
	}
}

// world is a training layout and its name.
type world struct {
	name string
	set  func(c *train.Config)
}

func tpWorld(name string, dp, pp, tp, m int, sp bool) world {
	return world{name, func(c *train.Config) {
		c.DP, c.PP, c.TP, c.MicroBatches, c.SequenceParallel = dp, pp, tp, m, sp
	}}
}

// TestLlamaMatchesPyTorch: from weights PyTorch initialised with Hugging
// Face's names (norm weights drawn in [0.7, 1.3], away from ones), every
// world troupe trains a Llama in gives the per-step losses and the final
// weights of Hugging Face LlamaForCausalLM's semantics trained in float64
// PyTorch with AdamW over 10 steps (see refTol). Three shapes: grouped-
// query attention (4 heads on 2 kv heads, which 2 shards split) with an
// untied head; 6 heads on 3 kv heads, which 2 shards cannot split (k_proj
// and v_proj replicated, their gradients summed over the group), with a
// tied head and rope theta 500; multi-query attention (1 kv head). The
// vocabulary, 37, is divided by neither 2 nor 4: the last vocabulary shard
// is padded.
func TestLlamaMatchesPyTorch(t *testing.T) {
	needTorch(t)
	const steps, batch, windows, lr = 10, 8, 24, 1e-3
	all := []world{
		{"one-worker", func(*train.Config) {}},
		tpWorld("dp2", 2, 1, 1, 1, false),
		tpWorld("tp2", 1, 1, 2, 1, false),
		tpWorld("tp2-sp", 1, 1, 2, 1, true),
		tpWorld("pp2", 1, 2, 1, 2, false),
		tpWorld("dp2xtp2", 2, 1, 2, 1, false),
		tpWorld("pp2xtp2", 1, 2, 2, 2, false),
		{"zero3-dp2", func(c *train.Config) { c.DP, c.Zero = 2, 3 }},
		{"accum2", func(c *train.Config) { c.Accum = 2 }},
		{"pp2-recompute", func(c *train.Config) { c.PP, c.MicroBatches, c.Recompute = 2, 2, true }},
		{"dp2xtp2-zero1", func(c *train.Config) { c.DP, c.TP, c.Zero = 2, 2, 1 }},
	}
	pick := func(names ...string) []world {
		var out []world
		for _, w := range all {
			if slices.Contains(names, w.name) {
				out = append(out, w)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		shape  llamaShape
		worlds []world
	}{
		{"gqa-4on2-untied", llamaShape{vocab: 37, context: 8, d: 16, layers: 2, heads: 4, kv: 2, ffn: 24, theta: 10000, eps: 1e-5}, all},
		{"gqa-6on3-tied-replicated-kv", llamaShape{vocab: 37, context: 8, d: 24, layers: 2, heads: 6, kv: 3, ffn: 20, theta: 500, eps: 1e-6, tie: true},
			pick("one-worker", "tp2", "tp2-sp", "pp2", "dp2xtp2", "pp2xtp2", "dp2xtp2-zero1", "zero3-dp2")},
		{"mqa-4on1", llamaShape{vocab: 37, context: 8, d: 16, layers: 1, heads: 4, kv: 1, ffn: 24, theta: 10000, eps: 1e-5},
			pick("one-worker", "tp2", "tp2-sp")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, toks := tokenFile(t, 5, tc.shape.vocab, tc.shape.context, windows)
			init := filepath.Join(t.TempDir(), "init.safetensors")
			args := tc.shape.ref()
			for k, v := range map[string]any{"seed": 3, "init_out": init, "perturb_norms": true, "tokens": toks, "batch": batch,
				"steps": steps, "lr": lr, "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.999, "adam_eps": 1e-8} {
				args[k] = v
			}
			ref := torchRef(t, args)
			base := train.DefaultConfig()
			tc.shape.args(&base)
			base.Data, base.Init, base.Shuffle = data, init, false
			base.Batch, base.Steps, base.LR = batch, steps, lr
			base.Schedule, base.Warmup, base.ClipNorm = train.Constant, 0, 0
			base.Threads, base.EvalBatches, base.LogEvery = 1, 1, 0
			for _, w := range tc.worlds {
				t.Run(w.name, func(t *testing.T) {
					cfg := base
					w.set(&cfg)
					cfg.CheckEvery = 1 // replicas bit for bit every step
					losses, weights := runWorld(t, cfg)
					matchesTorch(t, losses, weights, ref)
				})
			}
		})
	}
}
