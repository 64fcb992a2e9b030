package cpu

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
)

// TestLlamaKernelsThreadInvariance: the Llama kernels give the same bits
// with 1 and 3 threads on inputs large enough to split (rows, elements and
// dw's columns are independent; each sum runs in one fixed order), as
// TestThreadCountInvariance requires of the others.
func TestLlamaKernelsThreadInvariance(t *testing.T) {
	const rows, cols, hd = 300, 1024, 64
	r := rand.New(rand.NewPCG(1, 2))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	x, w, dy, g, u := randn(rows*cols), randn(cols), randn(rows*cols), randn(rows*cols), randn(rows*cols)
	cos, sin := randn(rows*hd/2), randn(rows*hd/2)
	run := func(threads int) [][]float32 {
		be := New(threads)
		up := func(v []float32) kernels.Buffer {
			b := be.Alloc(len(v))
			be.Upload(b, v)
			return b
		}
		y, rstd, dx, dw := be.Alloc(len(x)), be.Alloc(rows), be.Alloc(len(x)), be.Alloc(cols)
		be.RMSNorm(y, rstd, up(x), up(w), 1e-6)
		be.RMSNormBackward(dx, dw, up(dy), up(x), rstd, up(w))
		sw, dg, du := be.Alloc(len(x)), be.Alloc(len(x)), be.Alloc(len(x))
		be.SwiGLU(sw, up(g), up(u))
		be.SwiGLUBackward(dg, du, up(dy), up(g), up(u))
		rot := be.Alloc(len(x))
		be.Rotary(rot, up(x), up(cos), up(sin), hd)
		sm := be.Alloc(len(x))
		be.CausalSoftmaxFrom(sm, up(x), 100, cols, 500, 0.3)
		var out [][]float32
		for _, b := range []kernels.Buffer{y, rstd, dx, dw, sw, dg, du, rot, sm} {
			out = append(out, slices.Clone(F(b)))
		}
		return out
	}
	one, three := run(1), run(3)
	for i := range one {
		if !slices.Equal(one[i], three[i]) {
			t.Errorf("output %d differs between 1 and 3 threads", i)
		}
	}
}
