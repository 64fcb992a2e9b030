package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The AVX2 ReLU, ReLU backward, SGD-momentum, add and column-sum loops give the same bits as
// their Go loops, element by element: they use the same comparisons and
// round every multiply and add separately. Checked at every length from 0
// to 40 (the 16-, 8- and masked tails), at 1000, at unaligned starts, and on
// inputs that hold the special values (±0, ±Inf, NaN, denormals). On a CPU
// without AVX2 (or with -tags noasm) both sides are the Go loop.
func TestSimpleKernelsMatchGoLoops(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 1e-40, -1e-40, 1, -1}
	fill := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			if r.IntN(5) == 0 {
				v[i] = special[r.IntN(len(special))]
			} else {
				v[i] = float32(r.NormFloat64())
			}
		}
		return v
	}
	same := func(what string, n int, got, want []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s, n=%d: element %d is %v (%#x), the Go loop gives %v (%#x)", what, n, i,
					got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
	}
	lengths := []int{1000, 1001}
	for n := 0; n <= 40; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		for _, off := range []int{0, 1, 3} {
			// Inputs start off elements into their slices: unaligned loads.
			x, dy := fill(n + off)[off:], fill(n + off)[off:]
			// Guard elements after the end catch a store past n.
			y, yGo := make([]float32, n+8), make([]float32, n+8)
			relu(y[:n], x)
			reluGo(yGo[:n], x)
			same("relu", n, y, yGo)
			reluBackward(y[:n], dy, x)
			reluBackwardGo(yGo[:n], dy, x)
			same("reluBackward", n, y, yGo)

			p, g, buf := fill(n), fill(n), fill(n)
			pGo, bufGo := append([]float32(nil), p...), append([]float32(nil), buf...)
			sgdMomentum(p, g, buf, 0.01, 1e-4, 0.9, 0.75)
			sgdMomentumGo(pGo, g, bufGo, 0.01, 1e-4, 0.9, 0.75)
			same("sgdMomentum weights", n, p, pGo)
			same("sgdMomentum buffer", n, buf, bufGo)

			a, b := fill(n + off)[off:], fill(n)
			add(y[:n], a, b)
			addGo(yGo[:n], a, b)
			same("add", n, y, yGo)
			copy(yGo, a)
			add(yGo[:n], yGo[:n], b) // in place
			same("add in place", n, yGo, y)

			// float64 column sums over 3 rows of n+off values, the first n
			// of each row.
			rows := fill(3 * (n + off))
			acc, accGo := make([]float64, n+4), make([]float64, n+4)
			for j := range acc {
				acc[j] = float64(j) / 7
				accGo[j] = acc[j]
			}
			sumCols(acc[:n], rows, 3, n+off)
			sumColsGo(accGo[:n], rows, 3, n+off)
			for j := range acc {
				if math.Float64bits(acc[j]) != math.Float64bits(accGo[j]) && !(math.IsNaN(acc[j]) && math.IsNaN(accGo[j])) {
					t.Fatalf("sumCols, n=%d: column %d is %v, the Go loop gives %v", n, j, acc[j], accGo[j])
				}
			}
		}
	}
}

// Fill sets every element, at every length around the doubling steps.
func TestFillEveryLength(t *testing.T) {
	be := New(1)
	for n := 0; n <= 70; n++ {
		b := be.Alloc(n)
		be.Fill(b, 2.5)
		for i, v := range F(b) {
			if v != 2.5 {
				t.Fatalf("n=%d: element %d is %v", n, i, v)
			}
		}
	}
}

func BenchmarkSimpleKernels(b *testing.B) {
	const n = 256 * 1024
	r := rand.New(rand.NewPCG(1, 1))
	x, y, dy := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], dy[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	b.Run("relu", func(b *testing.B) {
		b.SetBytes(8 * n)
		for b.Loop() {
			relu(y, x)
		}
	})
	b.Run("relu-go", func(b *testing.B) {
		b.SetBytes(8 * n)
		for b.Loop() {
			reluGo(y, x)
		}
	})
	b.Run("relu-backward", func(b *testing.B) {
		b.SetBytes(12 * n)
		for b.Loop() {
			reluBackward(y, dy, x)
		}
	})
	b.Run("relu-backward-go", func(b *testing.B) {
		b.SetBytes(12 * n)
		for b.Loop() {
			reluBackwardGo(y, dy, x)
		}
	})
	p, buf := make([]float32, n), make([]float32, n)
	b.Run("sgd-momentum", func(b *testing.B) {
		b.SetBytes(20 * n)
		for b.Loop() {
			sgdMomentum(p, dy, buf, 0.01, 0, 0.9, 1)
		}
	})
	b.Run("sgd-momentum-go", func(b *testing.B) {
		b.SetBytes(20 * n)
		for b.Loop() {
			sgdMomentumGo(p, dy, buf, 0.01, 0, 0.9, 1)
		}
	})
}
