package nn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
)

// passAt is one forward and backward of m computing in dt (kernels.F32:
// plain fp32), returning the loss, the gradients and the pool's peak.
func passAt(t *testing.T, be kernels.Backend, dt kernels.DType, m *nn.Model, x []float32, tokens, targets []int32) (float64, map[string][]float32, int64) {
	t.Helper()
	r, err := passIn(be, nil, dt, m, x, tokens, targets)
	if err != nil {
		t.Fatalf("%v: %v", dt, err)
	}
	return r.loss, r.grads, r.peak
}

// relErr is ‖a − b‖ / ‖b‖.
func relErr(a, b []float32) float64 {
	var d, n float64
	for i := range a {
		d += (float64(a[i]) - float64(b[i])) * (float64(a[i]) - float64(b[i]))
		n += float64(b[i]) * float64(b[i])
	}
	if n == 0 {
		return math.Sqrt(d)
	}
	return math.Sqrt(d / n)
}

// Mixed precision against fp32 on the same weights and batch: the loss and
// every gradient agree within a few of the low type's unit roundoffs.
//
// Tolerance: every GEMM operand (weights, activations, output gradients)
// is rounded once to the low type (relative error ≤ u: 2⁻⁸ for bf16,
// 2⁻¹¹ for fp16) and the products accumulate in fp32; a pass through a
// two-block GPT rounds a value some ten times on its way, errors that add
// like a random walk, √10·u ≈ 3u. The bounds are 8u on the gradients'
// relative norm and 4u on the loss: 3 % and 0.4 % for bf16. The MLP's
// ReLU derivative jumps at 0: a pre-activation within rounding distance
// of 0 switches its row's gradient on or off between the two runs, so the
// layers behind a ReLU (all but the last) get 16u, over 256 rows.
func TestMixedPrecisionMatchesFP32(t *testing.T) {
	be := cpu.New(2)
	r := rand.New(rand.NewPCG(21, 22))
	for _, dt := range []kernels.DType{kernels.BF16, kernels.F16} {
		u := 0x1p-8
		if dt == kernels.F16 {
			u = 0x1p-11
		}
		t.Run(dt.String()+"/MLP", func(t *testing.T) {
			m, err := nn.NewMLP(be, nn.MLPConfig{Sizes: []int{20, 16, 12, 5}}, 1)
			if err != nil {
				t.Fatal(err)
			}
			const rows = 256
			x := randF32(r, rows*20, 1)
			y := make([]int32, rows)
			for i := range y {
				y[i] = int32(r.IntN(5))
			}
			l32, g32, _ := passAt(t, be, kernels.F32, m, x, nil, y)
			lLow, gLow, _ := passAt(t, be, dt, m, x, nil, y)
			checkMixed(t, l32, lLow, g32, gLow, u, func(name string) float64 {
				if name == "fc3.weight" || name == "fc3.bias" {
					return 8 * u
				}
				return 16 * u
			})
		})
		for _, untied := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/GPT/untied=%v", dt, untied), func(t *testing.T) {
				cfg := nn.GPTConfig{Vocab: 11, Context: 8, DModel: 16, Layers: 2, Heads: 4, Untied: untied}
				m, err := nn.NewGPT(be, cfg, 3)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Set.SetHostWeights(randF32(r, m.Set.Len(), 0.3)); err != nil {
					t.Fatal(err)
				}
				tokens := make([]int32, 3*cfg.Context)
				targets := make([]int32, len(tokens))
				for i := range tokens {
					tokens[i], targets[i] = int32(r.IntN(cfg.Vocab)), int32(r.IntN(cfg.Vocab))
				}
				l32, g32, _ := passAt(t, be, kernels.F32, m, nil, tokens, targets)
				lLow, gLow, _ := passAt(t, be, dt, m, nil, tokens, targets)
				checkMixed(t, l32, lLow, g32, gLow, u, func(string) float64 { return 8 * u })
			})
		}
	}
}

func checkMixed(t *testing.T, l32, lLow float64, g32, gLow map[string][]float32, u float64, bound func(name string) float64) {
	t.Helper()
	if d := math.Abs(lLow-l32) / math.Abs(l32); d > 4*u {
		t.Errorf("loss %v, fp32 %v: relative difference %.2g > %.2g", lLow, l32, d, 4*u)
	}
	for name, g := range g32 {
		if e := relErr(gLow[name], g); e > bound(name) {
			t.Errorf("d%s: relative error %.3g > %.3g", name, e, bound(name))
		}
	}
}

// The activations saved for the backward pass are kept in bf16: the
// pool's peak falls to at most 60 % of fp32's on the default GPT's shape
// (0.57× measured: the saved activations halve, while one layer's
// transient buffers, such as a block's attention scores and probabilities,
// the logits and the gradients flowing back, stay fp32).
func TestMixedPrecisionHalvesActivations(t *testing.T) {
	be := cpu.New(2)
	r := rand.New(rand.NewPCG(23, 24))
	cfg := nn.GPTConfig{Vocab: 96, Context: 64, DModel: 128, Layers: 4, Heads: 4}
	m, err := nn.NewGPT(be, cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]int32, 8*cfg.Context)
	for i := range tokens {
		tokens[i] = int32(r.IntN(cfg.Vocab))
	}
	_, _, p32 := passAt(t, be, kernels.F32, m, nil, tokens, tokens)
	_, _, p16 := passAt(t, be, kernels.BF16, m, nil, tokens, tokens)
	t.Logf("peak activation bytes: fp32 %d, bf16 %d (%.2f×)", p32, p16, float64(p16)/float64(p32))
	if float64(p16) > 0.6*float64(p32) {
		t.Errorf("bf16 peak %d is more than 60%% of fp32's %d", p16, p32)
	}
}
