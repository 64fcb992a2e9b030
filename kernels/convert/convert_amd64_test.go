//go:build amd64 && !noasm

package convert

import (
	"testing"

	"github.com/troupe-ml/troupe/kernels"
)

// TestBF16VectorPaths checks each bf16 vector path this CPU runs, AVX2
// and AVX-512, against the reference conversions (the dispatch takes only
// the widest), and says which it could not run.
func TestBF16VectorPaths(t *testing.T) {
	if !vecBF16 {
		t.Skip("no AVX2: the bf16 vector conversions are not tested on this CPU")
	}
	saved := vecBF16x512
	defer func() { vecBF16x512 = saved }()
	vecBF16x512 = false
	t.Run("avx2", func(t *testing.T) { checkAgainstReference(t, kernels.BF16) })
	if !saved {
		t.Skip("no AVX-512F: the AVX-512 bf16 conversions are not tested on this CPU")
	}
	vecBF16x512 = true
	t.Run("avx512", func(t *testing.T) { checkAgainstReference(t, kernels.BF16) })
}

// BenchmarkBF16Paths times narrowing and widening 64 Ki values (L2
// resident) on each bf16 vector path this CPU runs.
func BenchmarkBF16Paths(b *testing.B) {
	const n = 1 << 16
	f, h := make([]float32, n), make([]uint16, n)
	for i := range f {
		f[i] = float32(i%1000) * 0.37
	}
	paths := []struct {
		name          string
		narrow, widen func()
	}{{"avx2", func() { f32ToBF16AVX2(&h[0], &f[0], n) }, func() { bf16ToF32AVX2(&f[0], &h[0], n) }}}
	if vecBF16x512 {
		paths = append(paths, struct {
			name          string
			narrow, widen func()
		}{"avx512", func() { f32ToBF16AVX512(&h[0], &f[0], n) }, func() { bf16ToF32AVX512(&f[0], &h[0], n) }})
	}
	for _, p := range paths {
		b.Run("narrow/"+p.name, func(b *testing.B) {
			b.SetBytes(6 * n)
			for b.Loop() {
				p.narrow()
			}
		})
		b.Run("widen/"+p.name, func(b *testing.B) {
			b.SetBytes(6 * n)
			for b.Loop() {
				p.widen()
			}
		})
	}
}
