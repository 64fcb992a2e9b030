package nn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/models"
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
			m, err := models.NewMLP(be, models.MLP{Sizes: []int{20, 16, 12, 5}}, 1)
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
				cfg := models.GPT{Vocab: 11, Context: 8, DModel: 16, Layers: 2, Heads: 4, Untied: untied}
				m, err := models.NewGPT(be, cfg, 3)
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

// The activations saved for the backward pass are kept in bf16: after the
// forward pass every buffer on the tape is bf16, at its fp32 twin's
// length, except the LayerNorms' statistics (a value per row, fp32 by
// design), so the saved bytes are exactly half plus those. The pool's peak
// (what peak_activation_bytes reports) falls to at most 51.5 % of fp32's
// on the default GPT's shape at 8 sequences (0.511× measured; 0.524× before
// the MLP's hidden activation and its gradient stayed in bf16 throughout):
// besides the saved activations it holds the working buffers of the layer
// running, of which the fp32 ones do not halve — the residual stream (fp32
// in both, as under autocast), the loss's logits and their gradient. The
// accounting is deterministic, so the bound is exact, not statistical.
func TestMixedPrecisionHalvesActivations(t *testing.T) {
	be := cpu.New(2)
	r := rand.New(rand.NewPCG(23, 24))
	cfg := models.GPT{Vocab: 96, Context: 64, DModel: 128, Layers: 4, Heads: 4}
	m, err := models.NewGPT(be, cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]int32, 8*cfg.Context)
	for i := range tokens {
		tokens[i] = int32(r.IntN(cfg.Vocab))
	}
	saved := func(dt kernels.DType) (lens []int, types []kernels.DType) {
		pool := nn.NewPool(be)
		c := nn.NewCtx(be, pool)
		if err := c.SetPrecision(dt); err != nil {
			t.Fatal(err)
		}
		if dt != kernels.F32 {
			if err := nn.RefreshLow(be, dt, m.Set.Params()); err != nil {
				t.Fatal(err)
			}
		}
		ids := be.AllocIndex(len(tokens))
		be.UploadIndex(ids, tokens)
		out := nn.Forward(c, m.Layers, nn.Act{Ids: ids, Rows: len(tokens)})
		pool.Put(out.X)
		for c.Tape.Len() > 0 {
			b := c.Tape.Pop()
			lens, types = append(lens, b.Len()), append(types, kernels.DTypeOf(b))
			pool.Put(b)
		}
		return lens, types
	}
	l32, t32 := saved(kernels.F32)
	l16, t16 := saved(kernels.BF16)
	if len(l16) != len(l32) {
		t.Fatalf("bf16 saves %d buffers, fp32 %d", len(l16), len(l32))
	}
	var b32, b16, stats int64
	for i := range l32 {
		if l16[i] != l32[i] || t32[i] != kernels.F32 {
			t.Fatalf("saved buffer %d: %d %v values in bf16, %d %v in fp32", i, l16[i], t16[i], l32[i], t32[i])
		}
		if t16[i] == kernels.F32 {
			if l16[i] != len(tokens) {
				t.Errorf("saved buffer %d: %d fp32 values in bf16, not a statistic (%d rows)", i, l16[i], len(tokens))
			}
			stats += int64(4 * l16[i])
		} else if t16[i] != kernels.BF16 {
			t.Errorf("saved buffer %d is %v", i, t16[i])
		}
		b32 += int64(4 * l32[i])
		b16 += int64(t16[i].Size() * l16[i])
	}
	if 2*(b16-stats) != b32-stats {
		t.Errorf("saved activations: bf16 %d bytes (%d of statistics), fp32 %d", b16, stats, b32)
	}
	_, _, p32 := passAt(t, be, kernels.F32, m, nil, tokens, tokens)
	_, _, p16 := passAt(t, be, kernels.BF16, m, nil, tokens, tokens)
	t.Logf("saved activations: fp32 %d, bf16 %d bytes (%.3f×); pool peak: fp32 %d, bf16 %d (%.3f×)",
		b32, b16, float64(b16)/float64(b32), p32, p16, float64(p16)/float64(p32))
	if float64(p16) > 0.515*float64(p32) {
		t.Errorf("bf16 peak %d is more than 51.5%% of fp32's %d", p16, p32)
	}
}

// A Linear with LowOutput writes what the plain one writes in fp32,
// rounded once to the compute type, bit for bit, also when the rows take
// several blocks of its fp32 scratch; with LowInputGrad its dx, written
// in the compute type over its saved input, is the plain one's fp32 dx
// rounded once. The forward pass's peak in the pool is below the plain
// layer's (no fp32 output as large as y).
func TestLinearLowOutputAndInputGrad(t *testing.T) {
	be := cpu.New(2)
	lp, _ := kernels.LowPrecisionOf(be)
	r := rand.New(rand.NewPCG(25, 26))
	const rows, in, out = 501, 37, 300 // 150,300 outputs: three scratch blocks, the last short
	s := nn.NewParamSet(be, 4)
	plain := nn.NewLinear(s, "l", in, out, true)
	s.Finalize()
	low := *plain // the same parameters
	low.LowOutput, low.LowInputGrad = true, true
	x := make([]float32, rows*in)
	dy := make([]float32, rows*out)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for i := range dy {
		dy[i] = float32(r.NormFloat64())
	}
	pass := func(l *nn.Linear) (y, dx kernels.Buffer, fwdPeak int64) {
		pool := nn.NewPool(be)
		c := nn.NewCtx(be, pool)
		if err := c.SetPrecision(kernels.BF16); err != nil {
			t.Fatal(err)
		}
		if err := nn.RefreshLow(be, kernels.BF16, s.Params()); err != nil {
			t.Fatal(err)
		}
		xb := pool.Get(len(x))
		be.Upload(xb, x)
		ya := l.Forward(c, nn.Act{X: xb, Rows: rows, Cols: in})
		fwdPeak = pool.PeakBytes()
		y = lp.AllocAs(rows*out, kernels.DTypeOf(ya.X))
		lp.Convert(y, ya.X)
		pool.Put(ya.X)
		db := pool.Get(len(dy))
		be.Upload(db, dy)
		s.ZeroGrads()
		da := l.Backward(c, nn.Act{X: db, Rows: rows, Cols: out})
		dx = lp.AllocAs(rows*in, kernels.DTypeOf(da.X))
		lp.Convert(dx, da.X)
		pool.Put(da.X)
		if pool.LiveBytes() != 0 {
			t.Fatalf("%d bytes still out", pool.LiveBytes())
		}
		return y, dx, fwdPeak
	}
	y32, dx32, p32 := pass(plain)
	y16, dx16, p16 := pass(&low)
	if kernels.DTypeOf(y32) != kernels.F32 || kernels.DTypeOf(y16) != kernels.BF16 || kernels.DTypeOf(dx32) != kernels.F32 || kernels.DTypeOf(dx16) != kernels.BF16 {
		t.Fatalf("types: y %v and %v, dx %v and %v", kernels.DTypeOf(y32), kernels.DTypeOf(y16), kernels.DTypeOf(dx32), kernels.DTypeOf(dx16))
	}
	for what, pair := range map[string][2]kernels.Buffer{"y": {y32, y16}, "dx": {dx32, dx16}} {
		want := lp.AllocAs(pair[0].Len(), kernels.BF16)
		lp.Convert(want, pair[0])
		w, g := download(be, want), download(be, pair[1])
		for i := range w {
			if math.Float32bits(w[i]) != math.Float32bits(g[i]) {
				t.Fatalf("%s[%d] = %v, the fp32 one rounded is %v", what, i, g[i], w[i])
			}
		}
	}
	t.Logf("forward's pool peak: plain %d, low %d bytes", p32, p16)
	if p16 >= p32 {
		t.Errorf("forward's pool peak %d with the low output, %d without", p16, p32)
	}
}
