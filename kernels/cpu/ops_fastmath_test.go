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

func BenchmarkExp32(b *testing.B) {
	xs := make([]float32, 4096)
	for i := range xs {
		xs[i] = float32(i%600)/50 - 12
	}
	b.ResetTimer()
	for b.Loop() {
		for i, x := range xs {
			xs[i] = exp32(x) - 12
		}
	}
}

func BenchmarkNormCDF(b *testing.B) {
	xs := make([]float32, 4096)
	for i := range xs {
		xs[i] = float32(i%600)/100 - 3
	}
	b.ResetTimer()
	for b.Loop() {
		for i, x := range xs {
			xs[i] = normCDF(x) - 3
		}
	}
}
