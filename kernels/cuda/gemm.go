//go:build cuda

package cuda

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// Gemm implements kernels.Backend. FP32 tiles by default (128×128 when M and
// N allow, else 64×64); with TF32 enabled
// (Config.TF32) and every dimension at least TF32MinDim, the mma.sync
// tensor-core kernel. α = 0 runs with K = 0, so that C = β·C and nothing of
// A or B is read, as in BLAS and the CPU backend. bf16 or fp16 A and B
// (AllocAs) take k_gemm_low (lowprec.go).
func (be *Backend) Gemm(g kernels.GemmArgs, a, b, c kernels.Buffer) {
	g = g.Normalize()
	A, B, C := be.anyBuf("Gemm", a), be.anyBuf("Gemm", b), be.anyBuf("Gemm", c)
	checkGemm(g, A.n, B.n, C.n)
	if A.dt != kernels.F32 || B.dt != kernels.F32 || C.dt != kernels.F32 {
		if A.dt == kernels.F32 || B.dt == kernels.F32 {
			panic(fmt.Sprintf("kernels/cuda: Gemm: A %v, B %v, C %v: fp32 operands take an fp32 C, 16-bit ones are both of one type", A.dt, B.dt, C.dt))
		}
		if g.M != 0 && g.N != 0 {
			be.gemmLow(g, A, B, C)
		}
		return
	}
	if g.M == 0 || g.N == 0 {
		return
	}
	k := g.K
	if g.Alpha == 0 {
		k = 0
	}
	kern, tile := kGemmF32, gemmTile
	if g.M >= gemmTileBig && g.N >= gemmTileBig {
		kern, tile = kGemmF32Big, gemmTileBig
	}
	if be.tf32() && g.M >= be.cfg.TF32MinDim && g.N >= be.cfg.TF32MinDim && k >= be.cfg.TF32MinDim {
		kern, tile = kGemmTF32, tcTile
	}
	be.launch(kern, be.gemmGrid(g, tile), [3]int{blockThreads, 1, 1},
		argBool(g.TransA), argBool(g.TransB), argInt(g.M), argInt(g.N), argInt(k), argF32(g.Alpha), argF32(g.Beta),
		A.arg(), argInt(g.LDA), argInt(g.StrideA), B.arg(), argInt(g.LDB), argInt(g.StrideB),
		C.arg(), argInt(g.LDC), argInt(g.StrideC), argInt(g.Batch))
}

// gemmGrid is the grid of a GEMM kernel with tile×tile blocks of C: x over
// column tiles, y over row tiles, z over the batch, each capped (the
// kernels grid-stride).
func (be *Backend) gemmGrid(g kernels.GemmArgs, tile int) [3]int {
	return [3]int{
		min((g.N+tile-1)/tile, be.maxRowBlocks),
		min((g.M+tile-1)/tile, be.info.maxGridY),
		min(g.Batch, be.info.maxGridZ),
	}
}

// checkGemm panics with a message naming the offending argument when the
// sizes, leading dimensions, strides or buffer lengths are inconsistent.
func checkGemm(g kernels.GemmArgs, lenA, lenB, lenC int) {
	if err := g.Check(lenA, lenB, lenC); err != nil {
		panic("kernels/cuda: Gemm: " + err.Error())
	}
}
