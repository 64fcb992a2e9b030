package kerneltest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
)

// The references judge every backend, so they are checked here on their
// own: against hand-worked values, and the backward ones against central
// finite differences of the forward ones.

// fd returns the central difference of f at x[i] for a float32 input: the
// step is what the perturbed float32 really moved, so input rounding does
// not bias the quotient. Its truncation error is O(h²) ≈ 1e-6 relative.
func fd(x []float32, i int, f func() float64) float64 {
	x0 := x[i]
	hi, lo := x0+1e-3*max(1, abs32(x0)), x0-1e-3*max(1, abs32(x0))
	x[i] = hi
	fp := f()
	x[i] = lo
	fm := f()
	x[i] = x0
	return (fp - fm) / (float64(hi) - float64(lo))
}

func abs32(v float32) float32 { return float32(math.Abs(float64(v))) }

func closeTo(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.10g, want %.10g (tolerance %.2g)", what, got, want, tol)
	}
}

func TestRefGELU(t *testing.T) {
	// Φ(1) = 0.8413447461, Φ(−2) = 0.0227501319 (normal tables).
	closeTo(t, "GELU(1)", refGELU(1), 0.8413447461, 1e-10)
	closeTo(t, "GELU(-2)", refGELU(-2), -2*0.0227501319, 1e-10)
	closeTo(t, "GELU(0)", refGELU(0), 0, 0)
	for _, x := range []float64{-5, -1.3, -0.2, 0.4, 2.5} {
		h := 1e-5
		want := (refGELU(x+h) - refGELU(x-h)) / (2 * h)
		closeTo(t, "GELU'", refGELUGrad(x), want, 1e-8)
	}
}

func TestRefLayerNormBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 3, 5
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	x, gamma, beta, w := rnd(rows*cols), rnd(cols), rnd(cols), rnd(rows*cols)
	// Loss L = Σ w·y, so dy = w.
	loss := func() float64 {
		y, _, _ := refLayerNorm(x, gamma, beta, 0)
		var s float64
		for i, v := range y {
			s += float64(w[i]) * v
		}
		return s
	}
	_, m, rs := refLayerNorm(x, gamma, beta, 0)
	dx, dg, db, _ := refLayerNormBackward(w, x, narrow(m), narrow(rs), gamma)
	// The backward pass uses float32 mean and rstd, 1e-7 relative off the
	// exact ones; with the O(h²) difference error, 1e-5 absolute.
	for i := range x {
		closeTo(t, "dx", dx[i], fd(x, i, loss), 1e-5)
	}
	for j := range gamma {
		closeTo(t, "dgamma", dg[j], fd(gamma, j, loss), 1e-5)
		closeTo(t, "dbeta", db[j], fd(beta, j, loss), 1e-5)
	}
}

func TestRefCrossEntropy(t *testing.T) {
	loss, p := refCrossEntropy([]float64{0, 0, 0, 0}, 2)
	closeTo(t, "loss of uniform logits", loss, math.Log(4), 1e-15)
	closeTo(t, "p", p[0], 0.25, 1e-15)
	// Large logits: log-sum-exp stays finite.
	loss, _ = refCrossEntropy([]float64{1e4, 0, -1e4}, 1)
	closeTo(t, "loss with logits 1e4", loss, 1e4, 1e-9)
	// d loss/dx = p − onehot, which the suite scales by gradScale.
	x := []float32{0.3, -1, 2, 0.5}
	f := func() float64 { l, _ := refCrossEntropy(widen(x), 1); return l }
	_, p = refCrossEntropy(widen(x), 1)
	for i := range x {
		want := p[i]
		if i == 1 {
			want--
		}
		closeTo(t, "dloss/dx", want, fd(x, i, f), 1e-6)
	}
}

// TestSoftmaxBackwardFormula: for y = softmax(s·x) and L = Σ dy·y, the suite's
// dx = s·y⊙(dy − Σ dy⊙y) is dL/dx.
func TestSoftmaxBackwardFormula(t *testing.T) {
	x, dy := []float32{0.2, -0.7, 1.1, 0.4, -2}, []float64{0.5, -1, 0.25, 2, 0}
	const s = 0.5
	f := func() float64 {
		row := widen(x)
		for i := range row {
			row[i] *= s
		}
		var l float64
		for i, v := range refSoftmax(row) {
			l += dy[i] * v
		}
		return l
	}
	row := widen(x)
	for i := range row {
		row[i] *= s
	}
	y := refSoftmax(row)
	var dot float64
	for i := range y {
		dot += dy[i] * y[i]
	}
	for i := range x {
		closeTo(t, "dx", s*y[i]*(dy[i]-dot), fd(x, i, f), 1e-6)
	}
}

func TestRefTranspose(t *testing.T) {
	// [[0 1 2] [3 4 5]] transposed is [[0 3] [1 4] [2 5]].
	got := refTranspose([]float32{0, 1, 2, 3, 4, 5}, []int{2, 3}, []int{1, 0})
	for i, want := range []float64{0, 3, 1, 4, 2, 5} {
		closeTo(t, "transpose", got[i], want, 0)
	}
	// [2, 1, 3] with perm [2, 0, 1]: dst[k, i, 0] = src[i, 0, k].
	got = refTranspose([]float32{0, 1, 2, 3, 4, 5}, []int{2, 1, 3}, []int{2, 0, 1})
	for i, want := range []float64{0, 3, 1, 4, 2, 5} {
		closeTo(t, "transpose 3-D", got[i], want, 0)
	}
}

func TestRefGemm(t *testing.T) {
	// A = [[1 2] [3 4]], B = [[5 6] [7 8]]: AB = [[19 22] [43 50]];
	// AᵀB = [[26 30] [38 44]]. C = 2·AᵀB + 1·[[1 1] [1 1]].
	a, b := []float32{1, 2, 3, 4}, []float32{5, 6, 7, 8}
	want, _ := refGemm(kernels.GemmArgs{M: 2, N: 2, K: 2, Alpha: 1}, a, b, []float32{9, 9, 9, 9})
	for i, w := range []float64{19, 22, 43, 50} {
		closeTo(t, "AB", want[i], w, 0)
	}
	want, _ = refGemm(kernels.GemmArgs{TransA: true, M: 2, N: 2, K: 2, Alpha: 2, Beta: 1}, a, b, []float32{1, 1, 1, 1})
	for i, w := range []float64{53, 61, 77, 89} {
		closeTo(t, "2AᵀB + C", want[i], w, 0)
	}
}

func TestRefOptimizers(t *testing.T) {
	// SGD with momentum, first step then second (see TestSGDHandWorked in
	// kernels/cpu for the arithmetic).
	h := kernels.SGDHyper{LR: 0.1, Momentum: 0.9, Dampening: 0.5, WeightDecay: 0.1}
	lr, wd := float64(h.LR), float64(h.WeightDecay)
	p, buf, _, _ := refSGD(1, 0.5, 123, h, true)
	closeTo(t, "sgd p1", p, 1-lr*(0.5+wd), 1e-9)
	closeTo(t, "sgd buf1", buf, 0.5+wd, 1e-9)
	p2, buf2, _, _ := refSGD(p, 0.5, buf, h, false)
	d := 0.5 + wd*p
	wantBuf := float64(h.Momentum)*buf + (1-float64(h.Dampening))*d
	closeTo(t, "sgd buf2", buf2, wantBuf, 1e-9)
	closeTo(t, "sgd p2", p2, p-lr*wantBuf, 1e-9)
	// AdamW step 1: m̂ = g and v̂ = g², so the step is lr·sign(g) for
	// |g| ≫ eps, after decoupled decay.
	a := kernels.AdamWHyper{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1}
	np, m, v, _, _ := refAdamW(2, -0.3, 0, 0, a, 1)
	closeTo(t, "adamw p1", np, 2*(1-0.01*float64(a.WeightDecay))+0.01, 1e-9)
	closeTo(t, "adamw m1", m, (1-float64(a.Beta1))*-0.3, 1e-12)
	closeTo(t, "adamw v1", v, (1-float64(a.Beta2))*0.09, 1e-12)
}
