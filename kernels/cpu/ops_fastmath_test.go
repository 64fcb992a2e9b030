package cpu

import (
	"math"
	"testing"
)

// TestExp32Accuracy sweeps exp32 over the whole float32 range it handles by
// polynomial and compares with float64 math.Exp. The bound, 2e-7 relative
// (under 2 float32 ulp), is what the softmax tolerances in kerneltest assume.
func TestExp32Accuracy(t *testing.T) {
	worst := 0.0
	for x := float32(-87); x <= 88; x += 0.0007 {
		got := float64(exp32(x))
		want := math.Exp(float64(x))
		if rel := math.Abs(got-want) / want; rel > worst {
			worst = rel
		}
	}
	if worst > 2e-7 {
		t.Fatalf("exp32: worst relative error %.3g, want ≤ 2e-7", worst)
	}
	t.Logf("exp32 worst relative error %.3g", worst)
}

// TestExp32Edges checks the fallback region: underflow to denormals and 0,
// overflow to +Inf, NaN, and the boundaries of the polynomial range.
func TestExp32Edges(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, x := range []float32{-inf, -1000, -103.9, -100, -87.5, -87, 0, 88, 88.5, 88.8, 1000, inf} {
		got, want := exp32(x), float32(math.Exp(float64(x)))
		if got != want && math.Abs(float64(got-want)) > 2e-7*float64(want) {
			t.Errorf("exp32(%g) = %g, want %g", x, got, want)
		}
	}
	if nan := exp32(float32(math.NaN())); nan == nan {
		t.Errorf("exp32(NaN) = %g, want NaN", nan)
	}
}

// TestNormCDFAccuracy compares Φ from erfcHalf with float64 math.Erfc over
// the range where Φ is a normal float32 (x > -13). The bound is relative, in
// the tails too: 1e-6 covers the fit's 1.2e-7 plus a few float32 roundings in
// the polynomial, the division and exp32.
func TestNormCDFAccuracy(t *testing.T) {
	worst, worstX := 0.0, float32(0)
	for x := float32(-13); x <= 13; x += 0.0003 {
		got := float64(normCDF(x))
		want := 0.5 * math.Erfc(-float64(x)/math.Sqrt2)
		if rel := math.Abs(got-want) / want; rel > worst {
			worst, worstX = rel, x
		}
	}
	if worst > 1e-6 {
		t.Fatalf("normCDF: worst relative error %.3g at x=%g, want ≤ 1e-6", worst, worstX)
	}
	t.Logf("normCDF worst relative error %.3g at x=%g", worst, worstX)
}

// vecImpls are the slice implementations to test: the Go loops always, and
// the assembly kernels this CPU runs (asmVecImpls).
type vecImpl struct {
	name         string
	expSum       func(dst, src []float32, scale, shift float32) float64
	gelu         func(y, x []float32)
	geluBackward func(dx, dy, x []float32)
}

func vecImpls() []vecImpl {
	return append([]vecImpl{{"go", expSumGo, geluGo, geluBackwardGo}}, asmVecImpls()...)
}

// TestExpSumAccuracy: each term within 2e-7 relative of float64 exp of the
// float32 argument scale·x − shift (the AVX2 path forms it with one
// rounding, the Go path with two, both ≤ 1 ulp of an argument below 1 in
// size here), and the float64 sum within 1e-7 of the sum of the terms.
// Terms that leave the float32 normal range must be 0 or denormal.
func TestExpSumAccuracy(t *testing.T) {
	const n = 100_003
	src := make([]float32, n)
	for i := range src {
		src[i] = -60 + 61*float32(i)/n
	}
	for _, im := range vecImpls() {
		dst := make([]float32, n)
		s := im.expSum(dst, src, 1.5, 1)
		var want, got float64
		for i, v := range src {
			w := math.Exp(1.5*float64(v) - 1)
			want += w
			got += float64(dst[i])
			if w < 0x1p-126 {
				if dst[i] > 0x1p-126 {
					t.Fatalf("%s: exp(%g) = %g, want ≤ 2^-126", im.name, 1.5*v-1, dst[i])
				}
				continue
			}
			if rel := math.Abs(float64(dst[i])-w) / w; rel > 2e-7+math.Abs(1.5*float64(v)-1)*6e-8 {
				t.Fatalf("%s: exp(%g) = %g, want %g (relative error %.3g)", im.name, 1.5*v-1, dst[i], w, rel)
			}
		}
		if math.Abs(s-got) > 1e-12*got || math.Abs(s-want) > 2e-7*want {
			t.Errorf("%s: sum %v, terms add to %v, exact %v", im.name, s, got, want)
		}
	}
}

// TestExpSumSpecial: −Inf → 0, +Inf → +Inf, NaN → NaN, 0 → 1.
func TestExpSumSpecial(t *testing.T) {
	inf := float32(math.Inf(1))
	src := []float32{0, -inf, inf, float32(math.NaN()), -1000, 50}
	for _, im := range vecImpls() {
		dst := make([]float32, len(src))
		im.expSum(dst, src, 1, 0)
		if dst[0] != 1 || dst[1] != 0 || dst[2] != inf || !math.IsNaN(float64(dst[3])) || dst[4] != 0 ||
			math.Abs(float64(dst[5])/math.Exp(50)-1) > 2e-7 {
			t.Errorf("%s: exp(%v) = %v", im.name, src, dst)
		}
	}
}

// TestGELUVecAccuracy sweeps gelu and geluBackward over [-13, 13] against
// float64 math.Erfc: 1e-6 relative to the terms (x·Φ, and |Φ| + |x·φ| for
// the derivative), plus 3e-8·x² relative for the AVX2 path, which forms the
// exponent −x²/2 + p in float32 (its rounding is relative to x²/2).
func TestGELUVecAccuracy(t *testing.T) {
	const n = 200_001
	x, dy := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = -13 + 26*float32(i)/n
		dy[i] = 1
	}
	for _, im := range vecImpls() {
		y, dx := make([]float32, n), make([]float32, n)
		im.gelu(y, x)
		im.geluBackward(dx, dy, x)
		for i, v := range x {
			xv := float64(v)
			cdf := 0.5 * math.Erfc(-xv/math.Sqrt2)
			pdf := math.Exp(-xv*xv/2) / math.Sqrt(2*math.Pi)
			slack := 1e-6 + 3e-8*xv*xv
			if want := xv * cdf; math.Abs(float64(y[i])-want) > slack*math.Abs(want) {
				t.Fatalf("%s: GELU(%g) = %g, want %g", im.name, v, y[i], want)
			}
			if want := cdf + xv*pdf; math.Abs(float64(dx[i])-want) > slack*(cdf+math.Abs(xv*pdf)) {
				t.Fatalf("%s: GELU'(%g) = %g, want %g", im.name, v, dx[i], want)
			}
		}
	}
}

// TestVecTails: for every length 0–19 and start offset 0–8, the kernels
// write exactly the elements asked for (the AVX2 tail is a masked vector)
// and each element's bits do not depend on its position in the slice, which
// is what keeps split kernels independent of the thread count.
func TestVecTails(t *testing.T) {
	const sentinel = -7
	src, dy := make([]float32, 40), make([]float32, 40)
	for i := range src {
		src[i] = float32(i%13)*0.37 - 2
		dy[i] = 1 + float32(i%13)*0.01
	}
	for _, im := range vecImpls() {
		wantE, wantG, wantB := make([]float32, 40), make([]float32, 40), make([]float32, 40)
		im.expSum(wantE, src, 0.5, 0.25)
		im.gelu(wantG, src)
		im.geluBackward(wantB, dy, src)
		for off := 0; off <= 8; off++ {
			for n := 0; n < 20; n++ {
				for k, run := range []func(d []float32){
					func(d []float32) { im.expSum(d[off:off+n], src[off:off+n], 0.5, 0.25) },
					func(d []float32) { im.gelu(d[off:off+n], src[off:off+n]) },
					func(d []float32) { im.geluBackward(d[off:off+n], dy[off:off+n], src[off:off+n]) },
				} {
					want := [][]float32{wantE, wantG, wantB}[k]
					d := make([]float32, 40)
					for i := range d {
						d[i] = sentinel
					}
					run(d)
					for i, v := range d {
						w := float32(sentinel)
						if i >= off && i < off+n {
							w = want[i]
						}
						if math.Float32bits(v) != math.Float32bits(w) {
							t.Fatalf("%s kernel %d, off %d, n %d: [%d] = %v, want %v", im.name, k, off, n, i, v, w)
						}
					}
				}
			}
		}
	}
}

// BenchmarkVecMath times the exp/GELU loops on cache-resident data, so it
// measures their arithmetic rather than memory bandwidth.
func BenchmarkVecMath(b *testing.B) {
	const n = 1 << 16
	x, y, dy := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(i%600)/100 - 3
		dy[i] = 1
	}
	for _, im := range vecImpls() {
		b.Run("expSum/"+im.name, func(b *testing.B) {
			b.SetBytes(8 * n)
			for b.Loop() {
				im.expSum(y, x, 1, 3)
			}
		})
		b.Run("gelu/"+im.name, func(b *testing.B) {
			b.SetBytes(8 * n)
			for b.Loop() {
				im.gelu(y, x)
			}
		})
		b.Run("geluBackward/"+im.name, func(b *testing.B) {
			b.SetBytes(12 * n)
			for b.Loop() {
				im.geluBackward(y, dy, x)
			}
		})
	}
}
