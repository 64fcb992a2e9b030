package nn_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
)

// python is Debian's interpreter, where python3-torch installs.
const python = "/usr/bin/python3"

// needTorch skips when PyTorch is not importable.
func needTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command(python, "-c", "import torch, numpy").Run(); err != nil {
		t.Skipf("PyTorch not available (%v): apt-get install python3-torch python3-numpy", err)
	}
}

// llamaTorch is Hugging Face's LlamaForCausalLM forward pass written out
// in float64 PyTorch (RMSNorm, rotate_half RoPE, repeat_kv, SwiGLU, the
// causal mask, an untied head and a mean cross-entropy ignoring −100),
// loading the weights by their Hugging Face names from a safetensors file.
// It reads its arguments as JSON on stdin and prints the loss and every
// weight's gradient as JSON.
const llamaTorch = `
import json, math, struct, sys
import numpy as np
import torch
import torch.nn.functional as F

a = json.load(sys.stdin)
raw = open(a["weights"], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
W = {}
for k, v in json.loads(raw[8:8 + n]).items():
    if k == "__metadata__":
        continue
    assert v["dtype"] == "F32", v
    lo, hi = v["data_offsets"]
    arr = np.frombuffer(raw[8 + n + lo:8 + n + hi], dtype="<f4").reshape(v["shape"])
    W[k] = torch.tensor(arr.astype(np.float64), requires_grad=True)

B, T, D, H, KV = a["batch"], a["context"], a["d"], a["heads"], a["kv_heads"]
hd, eps, theta, V = D // H, a["eps"], a["theta"], a["vocab"]

def rmsnorm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

def rotate_half(x):
    return torch.cat((-x[..., hd // 2:], x[..., :hd // 2]), dim=-1)

inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
emb = torch.cat((freqs, freqs), dim=-1)
cos, sin = emb.cos(), emb.sin()

def repeat_kv(x, rep):
    b, kv, t, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, rep, t, d).reshape(b, kv * rep, t, d)

tokens = torch.tensor(a["tokens"]).view(B, T)
targets = torch.tensor(a["targets"])
mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
h = W["model.embed_tokens.weight"][tokens]
for i in range(a["layers"]):
    p = "model.layers.%d." % i
    x = rmsnorm(h, W[p + "input_layernorm.weight"])
    q = (x @ W[p + "self_attn.q_proj.weight"].T).view(B, T, H, hd).transpose(1, 2)
    k = (x @ W[p + "self_attn.k_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
    v = (x @ W[p + "self_attn.v_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
    att = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(hd) + mask, dim=-1)
    o = (att @ v).transpose(1, 2).reshape(B, T, H * hd)
    h = h + o @ W[p + "self_attn.o_proj.weight"].T
    x = rmsnorm(h, W[p + "post_attention_layernorm.weight"])
    g, u = x @ W[p + "mlp.gate_proj.weight"].T, x @ W[p + "mlp.up_proj.weight"].T
    h = h + (F.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
logits = rmsnorm(h, W["model.norm.weight"]) @ W["lm_head.weight"].T
loss = F.cross_entropy(logits.reshape(-1, V), targets, ignore_index=-100)
loss.backward()
json.dump({"loss": loss.item(), "grads": {k: w.grad.flatten().tolist() for k, w in W.items()}}, sys.stdout)
`

// TestLlamaAgainstPyTorch builds a 2-layer tiny Llama from these layers
// (nn.Embedding, LlamaBlocks, a final RMSNorm, an untied head and
// CrossEntropy) with grouped-query attention (4 heads on 2 kv heads), rope
// theta 500, RMSNorm weights away from ones, and compares its loss and
// gradients with Hugging Face's semantics in float64 PyTorch from the same
// weights, loaded by their Hugging Face names. The Go side computes in
// float32, so the loss agrees to 1e-5 relative and each gradient to 1e-4
// of its tensor's largest value (float32 rounding through two blocks is
// ~1e-6 relative; a wrong term is O(1)).
func TestLlamaAgainstPyTorch(t *testing.T) {
	needTorch(t)
	const layers, vocab, batch = 2, 37, 3
	cfg := tinyLlama(2)
	cfg.Std = 0.1
	be := cpu.New(1)
	s := nn.NewParamSet(be, 23)
	model := []nn.Layer{nn.NewEmbedding(s, "model.embed_tokens", vocab, cfg.DModel, 1)}
	var norms []string
	for i := range layers {
		prefix := fmt.Sprintf("model.layers.%d", i)
		b, err := nn.NewLlamaBlock(s, prefix, cfg, nn.NoTP)
		if err != nil {
			t.Fatal(err)
		}
		model = append(model, b)
		norms = append(norms, prefix+".input_layernorm.weight", prefix+".post_attention_layernorm.weight")
	}
	model = append(model, nn.NewRMSNorm(s, "model.norm", cfg.DModel, float32(cfg.NormEps)), nn.NewLinear(s, "lm_head", cfg.DModel, vocab, false))
	s.Finalize()
	perturbWeights(be, s, 6, 1, 0.3, append(norms, "model.norm.weight")...)

	r := rand.New(rand.NewPCG(8, 9))
	rows := batch * cfg.Context
	tokens, targets := make([]int32, rows), make([]int32, rows)
	count := 0
	for i := range tokens {
		tokens[i], targets[i] = int32(r.IntN(vocab)), int32(r.IntN(vocab))
		if i%7 == 3 {
			targets[i] = -100
			continue
		}
		count++
	}
	pool := nn.NewPool(be)
	c := nn.NewCtx(be, pool)
	ids, tg := be.AllocIndex(rows), be.AllocIndex(rows)
	be.UploadIndex(ids, tokens)
	be.UploadIndex(tg, targets)
	s.ZeroGrads()
	logits := nn.Forward(c, model, nn.Act{Ids: ids, Rows: rows})
	sum, d := nn.CrossEntropy(c, logits, tg, float32(1/float64(count)))
	nn.Backward(c, model, d)
	loss := sum / float64(count)

	weights := filepath.Join(t.TempDir(), "llama.safetensors")
	if err := s.SaveWeights(weights, nil); err != nil {
		t.Fatal(err)
	}
	args, err := json.Marshal(map[string]any{
		"weights": weights, "batch": batch, "context": cfg.Context, "d": cfg.DModel, "heads": cfg.Heads,
		"kv_heads": cfg.KVHeads, "eps": cfg.NormEps, "theta": cfg.RopeTheta, "vocab": vocab, "layers": layers,
		"tokens": tokens, "targets": targets,
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", llamaTorch)
	cmd.Stdin = bytes.NewReader(args)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("PyTorch reference: %v\n%s", err, stderr.String())
	}
	var ref struct {
		Loss  float64
		Grads map[string][]float64
	}
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatal(err)
	}
	if math.Abs(loss-ref.Loss) > 1e-5*math.Abs(ref.Loss) {
		t.Errorf("loss %.9g, PyTorch %.9g", loss, ref.Loss)
	}
	if len(ref.Grads) != len(s.Params()) {
		t.Errorf("PyTorch has %d tensors, the model %d", len(ref.Grads), len(s.Params()))
	}
	for _, p := range s.Params() {
		want, ok := ref.Grads[p.Name]
		if !ok {
			t.Errorf("PyTorch has no %s", p.Name)
			continue
		}
		got := download(be, p.G)
		var top float64
		for _, w := range want {
			top = math.Max(top, math.Abs(w))
		}
		if top == 0 {
			t.Errorf("%s: PyTorch's gradient is zero; the test checks nothing there", p.Name)
		}
		for i, g := range got {
			if dd := math.Abs(float64(g) - want[i]); dd > 1e-4*top || math.IsNaN(dd) {
				t.Errorf("%s[%d]: gradient %.7g, PyTorch %.7g (|diff| %.3g > %.3g)", p.Name, i, g, want[i], dd, 1e-4*top)
				break
			}
		}
	}
	t.Logf("loss %.9g, PyTorch %.9g", loss, ref.Loss)
}
