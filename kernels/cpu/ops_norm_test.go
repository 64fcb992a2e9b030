package cpu

import (
	"math"
	"testing"
)

// TestLayerNormHandWorked: the row [1, 2, 3, 4] has mean 2.5 and biased
// variance 1.25, so with eps = 0, rstd = 1/√1.25 and x̂ = [−1.5, −0.5, 0.5,
// 1.5]·rstd.
func TestLayerNormHandWorked(t *testing.T) {
	y, mean, rstd := make(Buf, 4), make(Buf, 1), make(Buf, 1)
	New(1).LayerNorm(y, mean, rstd, Buf{1, 2, 3, 4}, Buf{1, 1, 2, 2}, Buf{0, 1, 0, 1}, 0)
	rs := 1 / math.Sqrt(1.25)
	want := []float64{-1.5 * rs, -0.5*rs + 1, 2 * 0.5 * rs, 2*1.5*rs + 1}
	if mean[0] != 2.5 || math.Abs(float64(rstd[0])-rs) > 1e-7 {
		t.Errorf("mean, rstd = %v, %v; want 2.5, %v", mean[0], rstd[0], rs)
	}
	for i := range want {
		if math.Abs(float64(y[i])-want[i]) > 1e-6 {
			t.Errorf("y[%d] = %v, want %v", i, y[i], want[i])
		}
	}
}

// TestLayerNormLargeMean: rows of 1e4 + small noise. E[x²] − mean² would
// subtract two numbers near 1e8 in float32 (ulp 8) and lose the variance of
// 0.25 entirely; two passes in float64 keep it. 1e-3 relative is float32
// rounding of x itself (ulp 1e-3 at 1e4 against a spread of 0.5).
func TestLayerNormLargeMean(t *testing.T) {
	const cols = 1000
	x := make(Buf, cols)
	for i := range x {
		x[i] = 1e4 + float32(i%2) - 0.5 // ±0.5: variance exactly 0.25
	}
	gamma, beta := make(Buf, cols), make(Buf, cols)
	for i := range gamma {
		gamma[i] = 1
	}
	y, mean, rstd := make(Buf, cols), make(Buf, 1), make(Buf, 1)
	New(1).LayerNorm(y, mean, rstd, x, gamma, beta, 0)
	if math.Abs(float64(rstd[0])-2) > 2e-3 {
		t.Errorf("rstd = %v, want 2 (variance 0.25)", rstd[0])
	}
	for i, v := range y[:4] {
		want := float64(2*(i%2) - 1)
		if math.Abs(float64(v)-want) > 2e-3 {
			t.Errorf("y[%d] = %v, want %v", i, v, want)
		}
	}
}

func TestNormNoAllocs(t *testing.T) {
	be := New(4)
	const rows, cols = 10, 100
	x, y, dy, dx := make(Buf, rows*cols), make(Buf, rows*cols), make(Buf, rows*cols), make(Buf, rows*cols)
	g, b, dg, db, m, r := make(Buf, cols), make(Buf, cols), make(Buf, cols), make(Buf, cols), make(Buf, rows), make(Buf, rows)
	mustNotAlloc(t, "LayerNorm", func() { be.LayerNorm(y, m, r, x, g, b, 1e-5) })
	mustNotAlloc(t, "LayerNormBackward", func() { be.LayerNormBackward(dx, dg, db, dy, x, m, r, g) })
}
