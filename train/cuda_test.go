//go:build cuda && cudaemu

package train

import (
	"math"
	"testing"

	_ "github.com/troupe-ml/troupe/kernels/cuda" // registers "cuda" (the CPU emulator under cudaemu)
)

// Mixed precision on the CUDA backend, run on its CPU emulator: the tiny
// GPT trained in bf16 and fp16 (with the loss scaler) on "cuda" gives the
// CPU backend's losses in the same precision. Both round the same operands
// at the same places; the GEMMs' fp32 sums run in other orders (mma.sync's
// against the CPU's blocks), a few ulps that can flip a rounding of a
// 16-bit value now and then: within 1e-4 relative over 3 steps, against
// a precision whose own rounding is 2⁻⁸ (bf16) and 2⁻¹¹ (fp16).
// (go test -tags cuda,cudaemu ./train -run CUDA; .ci/run does.)
func TestMixedPrecisionOnCUDA(t *testing.T) {
	for _, p := range []DType{BF16, FP16} {
		cfg := tinyGPT()
		cfg.Steps, cfg.Batch, cfg.Precision, cfg.Threads = 3, 2, p, 1
		ref := losses(t, cfg)
		cfg.Device = "cuda"
		got := losses(t, cfg)
		for s := range ref {
			if math.Abs(got[s]-ref[s]) > 1e-4*math.Abs(ref[s]) {
				t.Errorf("%s step %d: cuda loss %v, cpu %v", p, s+1, got[s], ref[s])
			}
		}
		t.Logf("%s: cuda %v, cpu %v", p, got, ref)
	}
}
