package cpu

import (
	"math"
	"testing"
)

// TestSwiGLUVecAccuracy sweeps swiglu and swigluBackward over gate values
// in [-100, 100] (both tails: σ underflowing to 0 and saturating at 1) with
// up = dy = 1, against float64: silu(g) and dup within 8 float32 ulp
// (2^-21) relative, dgate within 8 ulp of its terms σ + |g|·σ·(1 − σ) — the
// kerneltest bounds: exp32 (≤ 2e-7), then the add, divide and products, one
// rounding each. Where σ(g) leaves the float32 normal range (g < −87) the
// AVX2 exp gives 0 for it, so σ, silu and silu' there may be 0 instead of
// |g| times a denormal: an absolute slack of (1 + |g|)·2^-126. A NaN gate
// gives NaN.
func TestSwiGLUVecAccuracy(t *testing.T) {
	const n = 400_003
	const tol = 8.0 / (1 << 24)
	g, one := make([]float32, n), make([]float32, n)
	for i := range g {
		g[i] = -100 + 200*float32(i)/n
		one[i] = 1
	}
	g[n/2] = float32(math.NaN())
	y, dg, du := make([]float32, n), make([]float32, n), make([]float32, n)
	swiglu(y, g, one)
	swigluBackward(dg, du, one, g, one)
	for i, v := range g {
		if i == n/2 {
			if !math.IsNaN(float64(y[i])) || !math.IsNaN(float64(dg[i])) || !math.IsNaN(float64(du[i])) {
				t.Errorf("NaN gate: y %v, dgate %v, dup %v", y[i], dg[i], du[i])
			}
			continue
		}
		gv := float64(v)
		tiny := (1 + math.Abs(gv)) * 0x1p-126
		s := 1 / (1 + math.Exp(-gv))
		silu := gv * s
		if math.Abs(float64(y[i])-silu) > tol*math.Abs(silu)+tiny {
			t.Fatalf("silu(%g) = %g, want %g", v, y[i], silu)
		}
		if math.Abs(float64(du[i])-silu) > tol*math.Abs(silu)+tiny {
			t.Fatalf("dup at %g = %g, want %g", v, du[i], silu)
		}
		want, terms := s*(1+gv*(1-s)), s+math.Abs(gv)*s*(1-s)
		if math.Abs(float64(dg[i])-want) > tol*terms+tiny {
			t.Fatalf("silu'(%g) = %g, want %g", v, dg[i], want)
		}
	}
}

// TestSwiGLUTails: for every length 0–19 and start offset 0–8, swiglu and
// swigluBackward write exactly the elements asked for, with the bits each
// element has in the whole slice (what keeps the split kernels independent
// of the thread count), and in place (dgate over gate, dup over up) as
// out of place.
func TestSwiGLUTails(t *testing.T) {
	const sentinel = -7
	g, u, dy := make([]float32, 40), make([]float32, 40), make([]float32, 40)
	for i := range g {
		g[i] = float32(i%13)*0.77 - 5
		u[i] = 1 + float32(i%7)*0.1
		dy[i] = 0.5 - float32(i%5)*0.2
	}
	wantY, wantDg, wantDu := make([]float32, 40), make([]float32, 40), make([]float32, 40)
	swiglu(wantY, g, u)
	swigluBackward(wantDg, wantDu, dy, g, u)
	fresh := func() []float32 {
		d := make([]float32, 40)
		for i := range d {
			d[i] = sentinel
		}
		return d
	}
	same := func(what string, off, n int, got, want []float32) {
		t.Helper()
		for i, v := range got {
			w := float32(sentinel)
			if i >= off && i < off+n {
				w = want[i]
			}
			if math.Float32bits(v) != math.Float32bits(w) {
				t.Fatalf("%s, off %d, n %d: [%d] = %v, want %v", what, off, n, i, v, w)
			}
		}
	}
	for off := 0; off <= 8; off++ {
		for n := 0; n < 20; n++ {
			y := fresh()
			swiglu(y[off:off+n], g[off:off+n], u[off:off+n])
			same("swiglu", off, n, y, wantY)
			dg, du := fresh(), fresh()
			swigluBackward(dg[off:off+n], du[off:off+n], dy[off:off+n], g[off:off+n], u[off:off+n])
			same("dgate", off, n, dg, wantDg)
			same("dup", off, n, du, wantDu)
			gi, ui := fresh(), fresh()
			copy(gi[off:off+n], g[off:off+n])
			copy(ui[off:off+n], u[off:off+n])
			swigluBackward(gi[off:off+n], ui[off:off+n], dy[off:off+n], gi[off:off+n], ui[off:off+n])
			same("dgate in place", off, n, gi, wantDg)
			same("dup in place", off, n, ui, wantDu)
		}
	}
}
