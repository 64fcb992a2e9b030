package cpu

// gemmKernel is a GEMM micro-kernel, the packing routines that feed it and
// the cache blocking that suits it. The driver (gemm.go) cuts op(A) into
// mc×kc blocks of mr-row micro-panels and op(B) into kc×nc blocks of
// nr-column micro-panels, and calls tile for every mr×nr tile of C.
type gemmKernel struct {
	// name is what Caps().SIMD reports.
	name string
	// mr×nr is the register tile.
	mr, nr int
	// mc, kc, nc are the block sizes: mc is a multiple of mr, nc of nr.
	mc, kc, nc int
	// tile computes C = alpha·Ap·Bp + beta·C for one mr×nr tile over k
	// steps. Element (i, p) of the A micro-panel is a[i·rsa+p·ksa] (packed:
	// rsa = 1, ksa = mr); element (p, j) of the B micro-panel is
	// b[p·ksb+j] (packed: ksb = nr). c starts at the tile's first element,
	// rows ldc apart. beta == 0 must not read C, so that NaNs in an output
	// being overwritten vanish.
	tile func(k int, a []float32, rsa, ksa int, b []float32, ksb int, c []float32, ldc int, alpha, beta float32)
	// packA packs one A micro-panel: rows ≤ mr rows and kc columns of op(A)
	// starting at a[0] (element (i, p) at a[i·lda+p], or a[p·lda+i] when
	// trans), into dst[:kc·mr], zero-padding missing rows.
	packA func(dst, a []float32, lda int, trans bool, rows, kc int)
	// packB packs one B micro-panel: kc rows and cols ≤ nr columns of op(B)
	// starting at b[0] (element (p, j) at b[p·ldb+j], or b[j·ldb+p] when
	// trans), into dst[:kc·nr], zero-padding missing columns.
	packB func(dst, b []float32, ldb int, trans bool, cols, kc int)
}

// goKernel is the portable micro-kernel: a 4×4 tile in sixteen scalar
// accumulators, which the compiler keeps in registers on arm64 (32 FP
// registers) and mostly in registers on amd64. Blocking as for the assembly
// kernel, scaled to the smaller tile.
var goKernel = &gemmKernel{
	name: "generic",
	mr:   4, nr: 4,
	mc: 128, kc: 256, nc: 4096,
	tile: tileGo4x4,
	packA: func(dst, a []float32, lda int, trans bool, rows, kc int) {
		packAPanelGo(dst, a, lda, trans, rows, kc, 4)
	},
	packB: func(dst, b []float32, ldb int, trans bool, cols, kc int) {
		packBPanelGo(dst, b, ldb, trans, cols, kc, 4)
	},
}

func tileGo4x4(k int, a []float32, rsa, ksa int, b []float32, ksb int, c []float32, ldc int, alpha, beta float32) {
	var c00, c01, c02, c03 float32
	var c10, c11, c12, c13 float32
	var c20, c21, c22, c23 float32
	var c30, c31, c32, c33 float32
	// Row i of the A panel starts at ai; step p is at ai[p·ksa].
	a0, a1, a2, a3 := a, a[rsa:], a[2*rsa:], a[3*rsa:]
	for p := range k {
		pa, pb := p*ksa, p*ksb
		bb := b[pb : pb+4 : pb+4]
		b0, b1, b2, b3 := bb[0], bb[1], bb[2], bb[3]
		x0, x1, x2, x3 := a0[pa], a1[pa], a2[pa], a3[pa]
		c00 += x0 * b0
		c01 += x0 * b1
		c02 += x0 * b2
		c03 += x0 * b3
		c10 += x1 * b0
		c11 += x1 * b1
		c12 += x1 * b2
		c13 += x1 * b3
		c20 += x2 * b0
		c21 += x2 * b1
		c22 += x2 * b2
		c23 += x2 * b3
		c30 += x3 * b0
		c31 += x3 * b1
		c32 += x3 * b2
		c33 += x3 * b3
	}
	store4(c[0*ldc:0*ldc+4], c00, c01, c02, c03, alpha, beta)
	store4(c[1*ldc:1*ldc+4], c10, c11, c12, c13, alpha, beta)
	store4(c[2*ldc:2*ldc+4], c20, c21, c22, c23, alpha, beta)
	store4(c[3*ldc:3*ldc+4], c30, c31, c32, c33, alpha, beta)
}

func store4(c []float32, v0, v1, v2, v3, alpha, beta float32) {
	c = c[:4]
	if beta == 0 {
		c[0], c[1], c[2], c[3] = alpha*v0, alpha*v1, alpha*v2, alpha*v3
		return
	}
	c[0] = alpha*v0 + beta*c[0]
	c[1] = alpha*v1 + beta*c[1]
	c[2] = alpha*v2 + beta*c[2]
	c[3] = alpha*v3 + beta*c[3]
}
