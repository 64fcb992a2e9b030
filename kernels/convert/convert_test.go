package convert

import (
	"math"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
)

// The conversions (vector where this CPU has them) give the
// reference conversions' bits: widening every 16-bit pattern, narrowing a
// stride through every fp32 pattern (NaNs, infinities, subnormals, ties),
// at lengths that leave every tail.
func TestConversionsMatchReference(t *testing.T) {
	t.Logf("vector conversions: bf16 %v, fp16 %v", Paths()[0], Paths()[1])
	for _, dt := range []kernels.DType{kernels.BF16, kernels.F16} {
		checkAgainstReference(t, dt)
	}
}

// checkAgainstReference checks ToLow and FromLow for dt on the paths
// this process takes against the reference conversions.
func checkAgainstReference(t *testing.T, dt kernels.DType) {
	t.Helper()
	h := make([]uint16, 1<<16)
	for i := range h {
		h[i] = uint16(i)
	}
	got, want := make([]float32, len(h)), make([]float32, len(h))
	FromLow(dt, got, h)
	kernels.FromLow(dt, want, h)
	if i := firstBitDiff(got, want); i >= 0 {
		t.Fatalf("%v widening %#04x: %v, want %v", dt, h[i], got[i], want[i])
	}
	const stride = 4099
	f := make([]float32, 0, 1<<32/stride+1)
	for u := uint64(0); u < 1<<32; u += stride {
		f = append(f, math.Float32frombits(uint32(u)))
	}
	for _, n := range []int{len(f), 1, 15, 16, 17, 33} {
		g, w := make([]uint16, n), make([]uint16, n)
		ToLow(dt, g, f[:n])
		kernels.ToLow(dt, w, f[:n])
		for i := range g {
			if g[i] != w[i] {
				t.Fatalf("%v narrowing %v (%#08x), length %d: %#04x, want %#04x", dt, f[i], math.Float32bits(f[i]), n, g[i], w[i])
			}
		}
	}
}

// firstBitDiff is the first index where got and want differ in bits, or -1.
func firstBitDiff(got, want []float32) int {
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i
		}
	}
	return -1
}
