//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
)

// pair runs the same kernels on the GPU backend and on the CPU reference
// backend, from the same host data, and compares what they produce.
type pair struct {
	t   *testing.T
	gpu kernels.Backend
	ref kernels.Backend
	rng *rand.Rand
}

// both is a value on both backends.
type both struct {
	g, c kernels.Buffer
	n    int
}

func (p *pair) randn(n int, sd float64) both {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(sd * p.rng.NormFloat64())
	}
	return p.up(v)
}

func (p *pair) up(v []float32) both {
	b := both{g: p.gpu.Alloc(len(v)), c: p.ref.Alloc(len(v)), n: len(v)}
	p.gpu.Upload(b.g, v)
	p.ref.Upload(b.c, v)
	return b
}

func (p *pair) zeros(n int) both {
	return both{g: p.gpu.Alloc(n), c: p.ref.Alloc(n), n: n}
}

func (p *pair) ids(n, vocab int) (kernels.Index, kernels.Index) {
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(p.rng.IntN(vocab))
	}
	g, c := p.gpu.AllocIndex(n), p.ref.AllocIndex(n)
	p.gpu.UploadIndex(g, v)
	p.ref.UploadIndex(c, v)
	return g, c
}

func (p *pair) get(b both) (gpu, ref []float32) {
	if err := p.gpu.Sync(); err != nil {
		p.t.Fatalf("Sync: %v", err)
	}
	gpu, ref = make([]float32, b.n), make([]float32, b.n)
	p.gpu.Download(gpu, b.g)
	p.ref.Download(ref, b.c)
	return gpu, ref
}

// close checks |gpu − ref| ≤ rtol·(|ref| + rms(ref)) for every value. The
// two backends may order sums differently and use exp and erf that differ
// in the last ulp or two; relative to the tensor's scale such differences
// stay near 1e-6, while an indexing error shows up at order 1.
func (p *pair) close(what string, b both, rtol float64) {
	p.t.Helper()
	g, r := p.get(b)
	var ss float64
	for _, v := range r {
		ss += float64(v) * float64(v)
	}
	rms := math.Sqrt(ss / math.Max(1, float64(len(r))))
	bad, worst := 0, 0
	for i := range g {
		d := math.Abs(float64(g[i]) - float64(r[i]))
		if !(d <= rtol*(math.Abs(float64(r[i]))+rms)) {
			if bad == 0 || d > math.Abs(float64(g[worst])-float64(r[worst])) {
				worst = i
			}
			bad++
		}
	}
	if bad > 0 {
		p.t.Errorf("%s: %d of %d values differ beyond %.0e relative (worst [%d]: gpu %g, cpu %g)", what, bad, len(g), rtol, worst, g[worst], r[worst])
	}
}

// gemmClose checks a GEMM result against the CPU's with the dot-product
// bound of kerneltest (both backends are within (K+4)·u·mag of the exact
// product, so they are within twice that of each other), mag being the
// product of |A| and |B|, plus TF32's input rounding when enabled.
func (p *pair) gemmClose(what string, g kernels.GemmArgs, a, b, c both, cBefore []float32, tf32 bool) {
	p.t.Helper()
	gpu, ref := p.get(c)
	abs := func(x both) kernels.Buffer {
		_, v := p.get(x)
		for i := range v {
			v[i] = float32(math.Abs(float64(v[i])))
		}
		buf := p.ref.Alloc(len(v))
		p.ref.Upload(buf, v)
		return buf
	}
	mag := p.ref.Alloc(c.n)
	ga := g
	ga.Alpha, ga.Beta = float32(math.Abs(float64(g.Alpha))), 0
	p.ref.Gemm(ga, abs(a), abs(b), mag)
	m := make([]float32, c.n)
	p.ref.Download(m, mag)
	const u = 1.0 / (1 << 24)
	k := float64(g.K + 4)
	bad, first := 0, -1
	for i := range gpu {
		mg := float64(m[i]) + math.Abs(float64(g.Beta)*float64(cBefore[i]))
		tol := 2 * k * u * mg
		if tf32 {
			tol += 2 * 2 * math.Ldexp(1, -11) * mg
		}
		if !(math.Abs(float64(gpu[i])-float64(ref[i])) <= tol) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		p.t.Errorf("%s: %d of %d values beyond the GEMM bound (first [%d]: gpu %g, cpu %g)", what, bad, len(gpu), first, gpu[first], ref[first])
	}
}

// TestModelShapes runs a GPT transformer block's kernels at the default
// model's shapes (d_model 128, 4 heads, context 64, MLP 512; batch 4 to keep
// the emulator quick) on the GPU and the CPU backend and compares the two:
// every kernel the GPT uses, with the grids, loops and views those sizes
// produce. With TF32 the large GEMMs take the tensor-core path.
func TestModelShapes(t *testing.T) {
	for _, tf32 := range []bool{false, true} {
		t.Run(fmt.Sprintf("tf32=%v", tf32), func(t *testing.T) {
			be := open(t, tf32)
			if tf32 && !be.tf32() {
				t.Skip("no tensor cores")
			}
			modelShapes(t, &pair{t: t, gpu: be, ref: cpu.New(1), rng: rand.New(rand.NewPCG(3, 4))}, tf32)
		})
	}
}

func modelShapes(t *testing.T, p *pair, tf32 bool) {
	const B, T, D, H, V, F = 4, 64, 128, 4, 96, 512
	const rows, hd = B * T, D / H
	const rtol = 1e-5

	// Embedding of token ids, and its gradient.
	gi, ci := p.ids(rows, V)
	table := p.randn(V*D, 0.02)
	x := p.zeros(rows * D)
	p.gpu.Embedding(x.g, table.g, gi)
	p.ref.Embedding(x.c, table.c, ci)
	p.close("Embedding", x, 0)
	dtab := p.randn(V*D, 0.01)
	dx := p.randn(rows*D, 1)
	p.gpu.EmbeddingBackward(dtab.g, dx.g, gi)
	p.ref.EmbeddingBackward(dtab.c, dx.c, ci)
	p.close("EmbeddingBackward", dtab, rtol)

	// LayerNorm forward and backward.
	x = p.randn(rows*D, 1)
	gamma, beta := p.randn(D, 1), p.randn(D, 0.1)
	y, mean, rstd := p.zeros(rows*D), p.zeros(rows), p.zeros(rows)
	p.gpu.LayerNorm(y.g, mean.g, rstd.g, x.g, gamma.g, beta.g, 1e-5)
	p.ref.LayerNorm(y.c, mean.c, rstd.c, x.c, gamma.c, beta.c, 1e-5)
	p.close("LayerNorm y", y, rtol)
	p.close("LayerNorm rstd", rstd, rtol)
	dy := p.randn(rows*D, 1)
	dgam, dbet := p.randn(D, 0.1), p.randn(D, 0.1)
	dxx := p.zeros(rows * D)
	p.gpu.LayerNormBackward(dxx.g, dgam.g, dbet.g, dy.g, x.g, mean.g, rstd.g, gamma.g)
	p.ref.LayerNormBackward(dxx.c, dgam.c, dbet.c, dy.c, x.c, mean.c, rstd.c, gamma.c)
	p.close("LayerNormBackward dx", dxx, rtol)
	p.close("LayerNormBackward dgamma", dgam, rtol)
	p.close("LayerNormBackward dbeta", dbet, rtol)

	// Linear layers: QKV projection forward (x·Wᵀ), weight gradient
	// (dyᵀ·x, accumulating), input gradient (dy·W).
	w := p.randn(3*D*D, 0.05)
	for _, c := range []struct {
		name    string
		g       kernels.GemmArgs
		a, b, c both
	}{
		{"qkv x·Wᵀ", kernels.GemmArgs{TransB: true, M: rows, N: 3 * D, K: D, Alpha: 1}, x, w, p.zeros(rows * 3 * D)},
		{"dW dyᵀ·x", kernels.GemmArgs{TransA: true, M: 3 * D, N: D, K: rows, Alpha: 1, Beta: 1}, p.randn(rows*3*D, 1), x, p.randn(3*D*D, 0.1)},
		{"dx dy·W", kernels.GemmArgs{M: rows, N: D, K: 3 * D, Alpha: 1}, p.randn(rows*3*D, 1), w, p.zeros(rows * D)},
		{"MLP up", kernels.GemmArgs{TransB: true, M: rows, N: F, K: D, Alpha: 1}, x, p.randn(F*D, 0.05), p.zeros(rows * F)},
		{"att q·kᵀ", kernels.GemmArgs{TransB: true, M: T, N: T, K: hd, Alpha: 1, Batch: B * H}, p.randn(rows*D, 1), p.randn(rows*D, 1), p.zeros(B * H * T * T)},
		{"att p·v", kernels.GemmArgs{M: T, N: hd, K: T, Alpha: 1, Batch: B * H}, p.randn(B*H*T*T, 0.1), p.randn(rows*D, 1), p.zeros(rows * D)},
		{"att dv pᵀ·dy", kernels.GemmArgs{TransA: true, M: T, N: hd, K: T, Alpha: 1, Batch: B * H}, p.randn(B*H*T*T, 0.1), p.randn(rows*D, 1), p.zeros(rows * D)},
		{"LM head", kernels.GemmArgs{TransB: true, M: rows, N: V, K: D, Alpha: 1}, x, p.randn(V*D, 0.05), p.zeros(rows * V)},
	} {
		_, before := p.get(c.c)
		p.gpu.Gemm(c.g, c.a.g, c.b.g, c.c.g)
		p.ref.Gemm(c.g, c.a.c, c.b.c, c.c.c)
		n := c.g.Normalize()
		p.gemmClose("Gemm "+c.name, c.g, c.a, c.b, c.c, before, tf32 && n.M >= 64 && n.N >= 64 && n.K >= 64)
	}

	// Attention probabilities and their gradient.
	att := p.randn(B*H*T*T, 2)
	pr := p.zeros(B * H * T * T)
	p.gpu.CausalSoftmax(pr.g, att.g, T, 1/float32(math.Sqrt(hd)))
	p.ref.CausalSoftmax(pr.c, att.c, T, 1/float32(math.Sqrt(hd)))
	p.close("CausalSoftmax", pr, rtol)
	dp, da := p.randn(B*H*T*T, 1), p.zeros(B*H*T*T)
	p.gpu.SoftmaxBackward(da.g, dp.g, pr.g, T, 0.125)
	p.ref.SoftmaxBackward(da.c, dp.c, pr.c, T, 0.125)
	p.close("SoftmaxBackward", da, rtol)

	// Head split [B, T, H, hd] → [B, H, T, hd].
	q, qh := p.randn(rows*D, 1), p.zeros(rows*D)
	p.gpu.Transpose(qh.g, q.g, []int{B, T, H, hd}, []int{0, 2, 1, 3})
	p.ref.Transpose(qh.c, q.c, []int{B, T, H, hd}, []int{0, 2, 1, 3})
	p.close("Transpose", qh, 0)

	// MLP activation, bias and its gradient.
	h, hg := p.randn(rows*F, 2), p.zeros(rows*F)
	p.gpu.GELU(hg.g, h.g)
	p.ref.GELU(hg.c, h.c)
	p.close("GELU", hg, rtol)
	dh := p.randn(rows*F, 1)
	p.gpu.GELUBackward(dh.g, dh.g, h.g)
	p.ref.GELUBackward(dh.c, dh.c, h.c)
	p.close("GELUBackward (in place)", dh, rtol)
	bias, db := p.randn(F, 1), p.randn(F, 1)
	p.gpu.AddBias(h.g, bias.g)
	p.ref.AddBias(h.c, bias.c)
	p.close("AddBias", h, rtol)
	p.gpu.SumRows(db.g, dh.g)
	p.ref.SumRows(db.c, dh.c)
	p.close("SumRows", db, rtol)
	p.gpu.Add(h.g, h.g, hg.g)
	p.ref.Add(h.c, h.c, hg.c)
	p.close("Add (residual)", h, rtol)

	// Loss, accuracy, gradient norm and the optimizer step.
	logits := p.randn(rows*V, 2)
	gt, ct := p.ids(rows, V)
	losses, dl := p.zeros(rows), p.zeros(rows*V)
	p.gpu.SoftmaxCrossEntropy(losses.g, dl.g, logits.g, gt, 1/float32(rows))
	p.ref.SoftmaxCrossEntropy(losses.c, dl.c, logits.c, ct, 1/float32(rows))
	p.close("SoftmaxCrossEntropy losses", losses, rtol)
	p.close("SoftmaxCrossEntropy dlogits", dl, rtol)
	if g, c := p.gpu.ArgmaxCorrect(logits.g, gt), p.ref.ArgmaxCorrect(logits.c, ct); g != c {
		t.Errorf("ArgmaxCorrect: gpu %d, cpu %d", g, c)
	}
	const nParams = 200003
	grads := p.randn(nParams, 0.01)
	if g, c := p.gpu.SumSquares(grads.g), p.ref.SumSquares(grads.c); math.Abs(g-c) > 1e-12*c {
		t.Errorf("SumSquares: gpu %.17g, cpu %.17g", g, c)
	}
	params, m, v := p.randn(nParams, 0.02), p.zeros(nParams), p.zeros(nParams)
	for step := 1; step <= 3; step++ {
		hyp := kernels.AdamWHyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
		p.gpu.AdamWStep(params.g, grads.g, m.g, v.g, hyp, step)
		p.ref.AdamWStep(params.c, grads.c, m.c, v.c, hyp, step)
	}
	p.close("AdamW params after 3 steps", params, rtol)
}
