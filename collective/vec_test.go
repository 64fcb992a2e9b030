package collective

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAddToMatchesScalar: the vector add gives the bits of one float32
// addition per element, for every length and alignment (a sum of two
// float32s is correctly rounded, so there is a single right answer).
func TestAddToMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for n := 0; n < 200; n++ {
		for off := 0; off < 3; off++ {
			a := make([]float32, n+off)
			b := make([]float32, n+off)
			for i := range a {
				a[i] = float32(rng.NormFloat64() * 1e3)
				b[i] = float32(rng.NormFloat64())
			}
			if len(a) > 0 {
				a[len(a)/2] = float32(math.Inf(1))
			}
			want := make([]float32, n)
			for i := range want {
				want[i] = a[off+i] + b[off+i]
			}
			addTo(a[off:], b[off:])
			for i := range want {
				if math.Float32bits(a[off+i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d off=%d i=%d: %v, want %v", n, off, i, a[off+i], want[i])
				}
			}
		}
	}
}

func BenchmarkAddTo(b *testing.B) {
	for _, n := range []int{64 << 10, 4 << 20} {
		dst, src := make([]float32, n), make([]float32, n)
		b.Run("", func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			for i := 0; i < b.N; i++ {
				addTo(dst, src)
			}
		})
	}
}
