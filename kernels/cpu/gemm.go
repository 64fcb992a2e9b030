package cpu

import "github.com/troupe-ml/troupe/kernels"

// simdName names the vector path GEMM takes on this CPU.
func simdName() string { return "generic" }

// Gemm implements kernels.Backend. Placeholder naive loop; replaced by the
// blocked, parallel, SIMD implementation.
func (be *Backend) Gemm(g kernels.GemmArgs, a, b, c kernels.Buffer) {
	g = g.Normalize()
	A, B, C := F(a), F(b), F(c)
	for bt := 0; bt < g.Batch; bt++ {
		oa, ob, oc := bt*g.StrideA, bt*g.StrideB, bt*g.StrideC
		for i := 0; i < g.M; i++ {
			for j := 0; j < g.N; j++ {
				var s float32
				for p := 0; p < g.K; p++ {
					var av, bv float32
					if g.TransA {
						av = A[oa+p*g.LDA+i]
					} else {
						av = A[oa+i*g.LDA+p]
					}
					if g.TransB {
						bv = B[ob+j*g.LDB+p]
					} else {
						bv = B[ob+p*g.LDB+j]
					}
					s += av * bv
				}
				ci := oc + i*g.LDC + j
				if g.Beta == 0 {
					C[ci] = g.Alpha * s
				} else {
					C[ci] = g.Alpha*s + g.Beta*C[ci]
				}
			}
		}
	}
}
