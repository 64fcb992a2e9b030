//go:build amd64 && !noasm

package cpu

import "golang.org/x/sys/cpu"

// Implemented in gemm_amd64.s with AVX2 and FMA3; the Go wrappers below
// check the slice bounds the assembly relies on.

// sgemmKernel6x16 computes the 6×16 tile C = alpha·A·B + beta·C over k
// steps; A element (i, p) is a[i·rsa+p·ksa], B element (p, j) is
// b[p·ksb+j], C rows are ldc apart. beta == 0 does not read C.
//
//go:noescape
func sgemmKernel6x16(k int, a *float32, rsa, ksa int, b *float32, ksb int, c *float32, ldc int, alpha, beta float32)

// packB16N copies kc rows of 16 values, ldb apart, into dst.
//
//go:noescape
func packB16N(dst, src *float32, ldb, kc int)

// packB16T transposes 16 rows of kc8 values (kc8 a positive multiple of 8),
// ldb apart, into dst[p·16+j].
//
//go:noescape
func packB16T(dst, src *float32, ldb, kc8 int)

// packA6N transposes 6 rows of kc8 values (kc8 a positive multiple of 8),
// lda apart, into dst[p·6+i].
//
//go:noescape
func packA6N(dst, src *float32, lda, kc8 int)

// packA6T copies kc rows of 6 values, lda apart, into dst.
//
//go:noescape
func packA6T(dst, src *float32, lda, kc int)

// avx2Kernel is the AVX2+FMA micro-kernel with Zen 4 blocking: a 6×16 tile
// keeps 12 ymm accumulators and leaves 4 registers for the two B vectors and
// the A broadcasts, enough independent FMAs (12) to cover the 4-cycle FMA
// latency on two pipes. kc = 256 puts the B micro-panel (16 KiB) and an A
// micro-panel (6 KiB) in the 32 KiB L1d; the mc×kc A block (192 KiB) sits in
// the 1 MiB L2 with room for the C tiles and the next block's packing;
// the kc×nc B block (4 MiB) lives in the shared L3.
var avx2Kernel = &gemmKernel{
	name: "avx2+fma",
	mr:   6, nr: 16,
	mc: 192, kc: 256, nc: 4096,
	tile: func(k int, a []float32, rsa, ksa int, b []float32, ksb int, c []float32, ldc int, alpha, beta float32) {
		_ = a[5*rsa+(k-1)*ksa]
		_ = b[(k-1)*ksb+15]
		_ = c[5*ldc+15]
		sgemmKernel6x16(k, &a[0], rsa, ksa, &b[0], ksb, &c[0], ldc, alpha, beta)
	},
	packA: packAPanel6,
	packB: packBPanel16,
}

func packAPanel6(dst, a []float32, lda int, trans bool, rows, kc int) {
	if rows < 6 {
		packAPanelGo(dst, a, lda, trans, rows, kc, 6)
		return
	}
	d := dst[:6*kc]
	if trans {
		_ = a[(kc-1)*lda+5]
		packA6T(&d[0], &a[0], lda, kc)
		return
	}
	kc8 := kc &^ 7
	if kc8 > 0 {
		_ = a[5*lda+kc8-1]
		packA6N(&d[0], &a[0], lda, kc8)
	}
	for i := range 6 {
		row := a[i*lda+kc8 : i*lda+kc]
		for p, v := range row {
			d[(kc8+p)*6+i] = v
		}
	}
}

func packBPanel16(dst, b []float32, ldb int, trans bool, cols, kc int) {
	if cols < 16 {
		packBPanelGo(dst, b, ldb, trans, cols, kc, 16)
		return
	}
	d := dst[:16*kc]
	if !trans {
		_ = b[(kc-1)*ldb+15]
		packB16N(&d[0], &b[0], ldb, kc)
		return
	}
	kc8 := kc &^ 7
	if kc8 > 0 {
		_ = b[15*ldb+kc8-1]
		packB16T(&d[0], &b[0], ldb, kc8)
	}
	for j := range 16 {
		row := b[j*ldb+kc8 : j*ldb+kc]
		for p, v := range row {
			d[(kc8+p)*16+j] = v
		}
	}
}

// simdKernels returns the assembly micro-kernels the CPU (and the OS, which
// must save the ymm and zmm registers) supports, fastest first: AVX-512F,
// then AVX2 with FMA3.
func simdKernels() []*gemmKernel {
	var ks []*gemmKernel
	if cpu.X86.HasAVX512F {
		ks = append(ks, avx512Kernel)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, avx2Kernel)
	}
	return ks
}
