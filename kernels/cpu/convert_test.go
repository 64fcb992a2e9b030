package cpu

import (
	"math"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
)

// The backend's conversions (vector where this CPU has them) give the
// reference conversions' bits: widening every 16-bit pattern, narrowing a
// stride through every fp32 pattern (NaNs, infinities, subnormals, ties),
// at lengths that leave every tail.
func TestConversionsMatchReference(t *testing.T) {
	t.Logf("vector conversions: bf16 %v, fp16 %v", vecPaths()[0], vecPaths()[1])
	for _, dt := range []kernels.DType{kernels.BF16, kernels.F16} {
		h := make([]uint16, 1<<16)
		for i := range h {
			h[i] = uint16(i)
		}
		got, want := make([]float32, len(h)), make([]float32, len(h))
		fromLow(dt, got, h)
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
			toLow(dt, g, f[:n])
			kernels.ToLow(dt, w, f[:n])
			for i := range g {
				if g[i] != w[i] {
					t.Fatalf("%v narrowing %v (%#08x), length %d: %#04x, want %#04x", dt, f[i], math.Float32bits(f[i]), n, g[i], w[i])
				}
			}
		}
	}
}

// pairRows (vector where this CPU has it) matches its reference loop at
// every tail length.
func TestPairRows(t *testing.T) {
	for _, n := range []int{0, 1, 15, 16, 17, 100} {
		lo, hi := make([]uint16, n), make([]uint16, n)
		for i := range lo {
			lo[i], hi[i] = uint16(3*i+1), uint16(0xffff-7*i)
		}
		got, want := make([]float32, n), make([]float32, n)
		pairRows(got, lo, hi)
		pairRowsGo(want, lo, hi)
		if i := firstBitDiff(got, want); i >= 0 {
			t.Fatalf("n=%d: word %d is %#08x, want %#08x", n, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
		}
	}
}
