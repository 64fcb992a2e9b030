//go:build amd64 && !noasm

package cpu

//go:generate go run gen_avx512.go

// sgemmKernel8x32AVX512 (gemm_avx512_amd64.s, generated) computes the 8×32
// tile C = alpha·A·B + beta·C over k ≥ 1 steps; arguments as for
// sgemmKernel6x16.
//
//go:noescape
func sgemmKernel8x32AVX512(k int, a *float32, rsa, ksa int, b *float32, ksb int, c *float32, ldc int, alpha, beta float32)

// In gemm_pack_amd64.s.

// packT8 transposes 8 rows of kc8 values (kc8 a positive multiple of 8), ld
// apart, into dst[p·dstride+j].
//
//go:noescape
func packT8(dst, src *float32, ld, kc8, dstride int)

// packN8 copies kc ≥ 1 rows of 8 values, ld apart, into dst.
//
//go:noescape
func packN8(dst, src *float32, ld, kc int)

// packN32 copies kc ≥ 1 rows of 32 values, ld apart, into dst.
//
//go:noescape
func packN32(dst, src *float32, ld, kc int)

// avx512Kernel is the AVX-512F micro-kernel: an 8×32 tile in sixteen zmm
// accumulators, a k step two B loads, eight A broadcasts and sixteen FMAs.
// On a core with two 512-bit FMA pipes (the Xeon these figures come from)
// that is twice the AVX2 kernel's work per instruction: on the products of
// the small models (d_model 128, heads of 32, SwiGLU 344) it ran at
// 130–175 GFLOP/s on one core where the AVX2 kernel ran at 90–100 (cache-hot
// operands, a shared machine). Eight rows divide the sequence lengths and
// widths those models have (64, 2048, 128, 344) and 32 columns their head
// and model widths. Blocking as the AVX2 kernel's: kc = 256 gives the same k
// blocks, so the two kernels produce the same bits. The B micro-panel
// (32 KiB) fits a 48 KiB L1d; where the L1d is 32 KiB (Zen 4, whose 512-bit
// FMAs are two 256-bit halves) it partly streams from L2, and this kernel
// has not been measured there.
var avx512Kernel = &gemmKernel{
	name: "avx512",
	mr:   8, nr: 32,
	mc: 192, kc: 256, nc: 4096,
	tile: func(k int, a []float32, rsa, ksa int, b []float32, ksb int, c []float32, ldc int, alpha, beta float32) {
		_ = a[7*rsa+(k-1)*ksa]
		_ = b[(k-1)*ksb+31]
		_ = c[7*ldc+31]
		sgemmKernel8x32AVX512(k, &a[0], rsa, ksa, &b[0], ksb, &c[0], ldc, alpha, beta)
	},
	packA: packAPanel8,
	packB: packBPanel32,
}

func packAPanel8(dst, a []float32, lda int, trans bool, rows, kc int) {
	if rows < 8 {
		packAPanelGo(dst, a, lda, trans, rows, kc, 8)
		return
	}
	d := dst[:8*kc]
	if trans {
		_ = a[(kc-1)*lda+7]
		packN8(&d[0], &a[0], lda, kc)
		return
	}
	kc8 := kc &^ 7
	if kc8 > 0 {
		_ = a[7*lda+kc8-1]
		packT8(&d[0], &a[0], lda, kc8, 8)
	}
	for i := range 8 {
		row := a[i*lda+kc8 : i*lda+kc]
		for p, v := range row {
			d[(kc8+p)*8+i] = v
		}
	}
}

func packBPanel32(dst, b []float32, ldb int, trans bool, cols, kc int) {
	if cols < 32 {
		packBPanelGo(dst, b, ldb, trans, cols, kc, 32)
		return
	}
	d := dst[:32*kc]
	if !trans {
		_ = b[(kc-1)*ldb+31]
		packN32(&d[0], &b[0], ldb, kc)
		return
	}
	kc8 := kc &^ 7
	if kc8 > 0 {
		_ = b[31*ldb+kc8-1]
		for q := range 4 {
			packT8(&d[8*q], &b[8*q*ldb], ldb, kc8, 32)
		}
	}
	for j := range 32 {
		row := b[j*ldb+kc8 : j*ldb+kc]
		for p, v := range row {
			d[(kc8+p)*32+j] = v
		}
	}
}
