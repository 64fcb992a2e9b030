//go:build amd64 && !noasm

package cpu

import "golang.org/x/sys/cpu"

//go:generate go run gen_bf16.go

// bf16Kernel12x32 is in gemm_bf16_amd64.s (generated): a 12×32 tile over k
// steps of packed bf16-pair panels with VDPBF16PS. k ≥ 1.
//
//go:noescape
func bf16Kernel12x32(k int, a *float32, rsa, ksa int, b *float32, ksb int, c *float32, ldc int, alpha, beta float32)

// avx512BF16Kernel multiplies bf16 pairs (see pairKernel): 24 zmm
// accumulators for a 12×32 tile, two B vectors and two broadcast
// registers.
//
// A k block is 512 pair steps (K = 1,024 bf16 values): twice the fp32
// kernels' 256 floats in steps, so the B micro-panel (64 KiB) no longer
// fits the L1d and streams from L2, but a product with K ≤ 1,024 sums C in
// one pass instead of two, writing the fp32 C once rather than writing
// it, reading it back and writing it again. On the 2-vCPU AMD EPYC
// (Zen 5) the 1,024³ product went from 634 to 670 GFLOP/s at two threads
// (PyTorch 679) and from 362 to 374 at one (medians of eight alternated
// rounds, docs/BENCHMARKS.md §26). Products with K ≤ 512 are unchanged
// (one k block either way).
var avx512BF16Kernel = &gemmKernel{
	name: "avx512bf16",
	mr:   12, nr: 32,
	mc: 144, kc: 512, nc: 4096,
	tile: func(k int, a []float32, rsa, ksa int, b []float32, ksb int, c []float32, ldc int, alpha, beta float32) {
		_ = a[11*rsa+(k-1)*ksa]
		_ = b[(k-1)*ksb+31]
		_ = c[11*ldc+31]
		bf16Kernel12x32(k, &a[0], rsa, ksa, &b[0], ksb, &c[0], ldc, alpha, beta)
	},
	packA: packAPanel12T8,
	// Pair words are 32-bit words: the fp32 kernel's assembly packing
	// moves them as they are (the Go loop took 4 % of a bf16 GPT step).
	packB: packBPanel32,
}

// packAPanel12T8 is packAPanel12 with the 8×8 transposes of packT8 for
// whole steps of 8 k values: rows 0–7, then rows 4–11 (4–7 written twice,
// the same values), the last kc mod 8 values in Go.
func packAPanel12T8(dst, a []float32, lda int, trans bool, rows, kc int) {
	kc8 := kc &^ 7
	if trans || rows < 12 || kc8 == 0 {
		packAPanel12(dst, a, lda, trans, rows, kc)
		return
	}
	d := dst[:12*kc]
	_ = a[11*lda+kc-1]
	packT8(&d[0], &a[0], lda, kc8, 12)
	packT8(&d[4], &a[4*lda], lda, kc8, 12)
	for i := range 12 {
		for p, v := range a[i*lda+kc8 : i*lda+kc] {
			d[(kc8+p)*12+i] = v
		}
	}
}

// bf16PairKernel is the native bf16 kernel when the CPU (and the OS, which
// must save the zmm registers) has AVX-512 BF16.
func bf16PairKernel() *gemmKernel {
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16 {
		return avx512BF16Kernel
	}
	return nil
}
