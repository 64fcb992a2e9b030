//go:build amd64 && !noasm

package cpu

//go:generate go run gen_avx512.go

// sgemmKernel16x16AVX512 (gemm_avx512_amd64.s, generated) computes the
// 16×16 tile C = alpha·A·B + beta·C over k ≥ 1 steps; arguments as for
// sgemmKernel6x16.
//
//go:noescape
func sgemmKernel16x16AVX512(k int, a *float32, rsa, ksa int, b *float32, ksb int, c *float32, ldc int, alpha, beta float32)

// avx512Kernel is the AVX-512F micro-kernel: sixteen zmm accumulators for a
// 16×16 tile and each A value broadcast from memory into its FMA, so that a
// k step is one B load and sixteen FMAs. On a core with two 512-bit FMA
// pipes that is twice the AVX2 kernel's work per instruction; on the shapes
// of the small models (d_model 128, attention heads of 32) it ran 1.3–1.8×
// the AVX2 kernel's GFLOP/s. nr = 16 keeps the B panels and packing of the
// AVX2 kernel; a 16-row A panel is packed by the same routines transposed.
// Blocking as the AVX2 kernel's: kc = 256 gives the same k blocks, so the
// two kernels produce the same bits.
var avx512Kernel = &gemmKernel{
	name: "avx512",
	mr:   16, nr: 16,
	mc: 192, kc: 256, nc: 4096,
	tile: func(k int, a []float32, rsa, ksa int, b []float32, ksb int, c []float32, ldc int, alpha, beta float32) {
		_ = a[15*rsa+(k-1)*ksa]
		_ = b[(k-1)*ksb+15]
		_ = c[15*ldc+15]
		sgemmKernel16x16AVX512(k, &a[0], rsa, ksa, &b[0], ksb, &c[0], ldc, alpha, beta)
	},
	packA: packAPanel16,
	packB: packBPanel16,
}

// packAPanel16 packs an A micro-panel of 16 rows: packing 16 rows of op(A)
// is packing 16 columns of its transpose.
func packAPanel16(dst, a []float32, lda int, trans bool, rows, kc int) {
	packBPanel16(dst, a, lda, !trans, rows, kc)
}
