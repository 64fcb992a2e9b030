package kerneltest

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/kernels"
)

// cSentinel fills the parts of C's storage outside the M×N matrices (row
// padding beyond N, gaps between batch members); Gemm must leave it alone.
const cSentinel = 12345

// testGemm runs every transpose combination over shapes from 1×1×1 to
// 33×100×1000, with packed and padded leading dimensions, several α/β, and
// strided batches. Padding and gaps in A and B hold NaN, so a read outside
// the matrices poisons the result; with β = 0, C starts as NaN, which must
// not leak through (BLAS: β = 0 means C is not read).
//
// Tolerance: a float32 dot product of K terms errs by at most
// γ_K·Σ|a·b| ≈ K·u·Σ|a·b| (Higham, recursive summation; blocked and FMA
// sums do better), and α and β add a few roundings: (K+4)·u·mag with mag =
// |α|·Σ|a·b| + |β·c|. On tensor cores (TF32) each input is rounded to 10
// mantissa bits first, a further 2·2⁻¹¹ relative per product.
func testGemm(s *suite) {
	type mnk struct{ m, n, k int }
	sizes := []mnk{{1, 1, 1}, {1, 7, 33}, {7, 1, 33}, {7, 33, 1}, {33, 7, 65}, {3, 4, 0}, {64, 64, 64}, {17, 130, 67}, {33, 100, 1000}}
	type ab struct{ alpha, beta float32 }
	scalars := []ab{{1, 0}, {0.5, -2}, {-1.25, 1}}
	for _, sz := range sizes {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for i, sc := range scalars {
				// Padding on every other case, so both the packed and
				// the strided path get every shape.
				pad := 0
				if i%2 == 1 {
					pad = 3
				}
				g := kernels.GemmArgs{TransA: tr[0], TransB: tr[1], M: sz.m, N: sz.n, K: sz.k, Alpha: sc.alpha, Beta: sc.beta}
				if pad > 0 {
					n := g.Normalize()
					g.LDA, g.LDB, g.LDC = n.LDA+pad, n.LDB+pad, n.LDC+pad
				}
				name := fmt.Sprintf("%s/%dx%dx%d/alpha=%g,beta=%g,pad=%d", transName(tr), sz.m, sz.n, sz.k, sc.alpha, sc.beta, pad)
				s.run(name, func(c *tcase) { c.gemm(g) })
			}
		}
	}
	for _, tr := range [][2]bool{{false, false}, {true, true}, {true, false}} {
		// Packed batches (strides 0) and batches with gaps.
		g := kernels.GemmArgs{TransA: tr[0], TransB: tr[1], M: 7, N: 9, K: 33, Alpha: 1, Beta: 0.5, Batch: 3}
		s.run(fmt.Sprintf("Batch/%s/packed", transName(tr)), func(c *tcase) { c.gemm(g) })
		n := g.Normalize()
		g.StrideA, g.StrideB, g.StrideC = n.StrideA+5, n.StrideB+2, n.StrideC+4
		s.run(fmt.Sprintf("Batch/%s/strided", transName(tr)), func(c *tcase) { c.gemm(g) })
	}
}

func transName(tr [2]bool) string {
	a, b := "N", "N"
	if tr[0] {
		a = "T"
	}
	if tr[1] {
		b = "T"
	}
	return a + b
}

// gemm runs one product and checks all of C's storage against refGemm.
func (c *tcase) gemm(g kernels.GemmArgs) {
	n := g.Normalize()
	a, b, cv := c.gemmOperands(n)
	want, mag := refGemm(g, a, b, cv)
	tol := rel(float64(n.K+4), mag)
	if c.be.Caps().TensorCores {
		for i := range tol {
			tol[i] += 2 * math.Ldexp(1, -11) * mag[i]
		}
	}
	cb := c.up(cv)
	c.be.Gemm(g, c.up(a), c.up(b), cb)
	c.check("C", c.down(cb), want, tol)
}

// gemmOperands draws the storage of a normalized product's A, B and C:
// the matrices random, the padding and gaps of A and B NaN (a read
// outside the matrices poisons the result), C's random (NaN when β = 0:
// it must not be read) and everything else of it the sentinel.
func (c *tcase) gemmOperands(n kernels.GemmArgs) (a, b, cv []float32) {
	rowsA, colsA, rowsB, colsB := n.M, n.K, n.K, n.N
	if n.TransA {
		rowsA, colsA = n.K, n.M
	}
	if n.TransB {
		rowsB, colsB = n.N, n.K
	}
	nan := float32(math.NaN())
	a = c.strided(n.Batch, rowsA, colsA, n.LDA, n.StrideA, nan)
	b = c.strided(n.Batch, rowsB, colsB, n.LDB, n.StrideB, nan)
	cv = make([]float32, max(0, (n.Batch-1)*n.StrideC+n.M*n.LDC))
	for i := range cv {
		cv[i] = cSentinel
	}
	for bt := 0; bt < n.Batch; bt++ {
		for i := 0; i < n.M; i++ {
			for j := 0; j < n.N; j++ {
				v := float32(c.rng.NormFloat64())
				if n.Beta == 0 {
					v = nan
				}
				cv[bt*n.StrideC+i*n.LDC+j] = v
			}
		}
	}
	return a, b, cv
}

// strided returns batch matrices of rows×cols stored with leading dimension
// ld, stride apart; everything outside the matrices (row padding from cols
// to ld, gaps between batch members) holds fill.
func (c *tcase) strided(batch, rows, cols, ld, stride int, fill float32) []float32 {
	n := max(0, (batch-1)*stride+rows*ld)
	v := make([]float32, n)
	for i := range v {
		v[i] = fill
	}
	for bt := 0; bt < batch; bt++ {
		for r := 0; r < rows; r++ {
			for j := 0; j < cols; j++ {
				v[bt*stride+r*ld+j] = float32(c.rng.NormFloat64())
			}
		}
	}
	return v
}
