package cpu

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/convert"
)

// Low-precision GEMM (kernels.LowPrecision): A and B bf16 or fp16, C fp32
// or the operands' type, products and sums in fp32.
//
// Two paths, chosen at run time:
//
//   - native bf16 (AVX-512 BF16): op(A) and op(B) are rearranged into
//     matrices of 32-bit words that each hold a pair of bf16 values
//     adjacent in k (A' is M×⌈K/2⌉, B' is ⌈K/2⌉×N), and the fp32 driver
//     (blocking, packing, threads) runs on them with a micro-kernel whose
//     k step is VDPBF16PS: two products and their sum per lane.
//   - widening (every other CPU, and fp16): the operands are widened to
//     fp32 and the fp32 GEMM runs (AVX2+FMA where the CPU has it).
//
// A C of a low type is computed in fp32 and rounded once.

// bf16Native is the native bf16 micro-kernel on this CPU (nil: none).
var bf16Native = bf16PairKernel()

// lowPath names the path a low-precision GEMM of dt takes.
func (be *Backend) lowPath(dt kernels.DType) string {
	if dt == kernels.BF16 && be.bf16 != nil {
		return be.bf16.name
	}
	return "widen+" + activeKernel.name
}

// floatPool holds the scratch matrices of low-precision GEMMs.
var floatPool = sync.Pool{New: func() any { return new([]float32) }}

func getFloats(n int) *[]float32 {
	p := floatPool.Get().(*[]float32)
	*p = grow(*p, n)
	return p
}

// gemmLow is Gemm with a bf16 or fp16 operand; kern is the native bf16
// kernel to use (nil: widen).
//
// The buffers are only type-asserted (no method called), so that they do
// not escape: Gemm's fp32 path allocates nothing.
func gemmLow(kern *gemmKernel, threads int, g kernels.GemmArgs, a, b, c kernels.Buffer) {
	ha, okA := a.(Half)
	hb, okB := b.(Half)
	hc, lowC := c.(Half)
	c32, okC := c.(Buf)
	if !okA || !okB || ha.T != hb.T || !(okC || lowC && hc.T == ha.T) {
		panic(fmt.Sprintf("kernels/cpu: Gemm: A %v, B %v, C %v: want A and B both bf16 or both fp16, C fp32 or their type",
			dtypeOf(a), dtypeOf(b), dtypeOf(c)))
	}
	g = g.Normalize()
	lenC := len(c32)
	if lowC {
		lenC = len(hc.V)
	}
	checkGemm(g, len(ha.V), len(hb.V), lenC)
	if g.M == 0 || g.N == 0 {
		return
	}
	// C in fp32: the buffer itself, or a copy of a low one.
	var cp *[]float32
	if lowC {
		cp = getFloats(len(hc.V))
		c32 = *cp
		if g.Beta != 0 {
			forRowsC(threads, g, func(off int) { convert.FromLow(hc.T, c32[off:off+g.N], hc.V[off:off+g.N]) })
		}
	}
	if g.K == 0 || g.Alpha == 0 {
		for bt := range g.Batch {
			scaleC(c32[bt*g.StrideC:], g.M, g.N, g.LDC, g.Beta)
		}
	} else if kern != nil && ha.T == kernels.BF16 {
		gemmPairs(kern, threads, g, ha.V, hb.V, c32)
	} else {
		gemmWidened(threads, g, ha, hb, c32)
	}
	if lowC {
		forRowsC(threads, g, func(off int) { convert.ToLow(hc.T, hc.V[off:off+g.N], c32[off:off+g.N]) })
		floatPool.Put(cp)
	}
}

// dtypeOf is a CPU buffer's type, by concrete type assertions only.
func dtypeOf(b kernels.Buffer) kernels.DType {
	if h, ok := b.(Half); ok {
		return h.T
	}
	return kernels.F32
}

// forRowsC calls f with the offset of every row of C (every batch
// member), on up to threads goroutines when C is large enough to share:
// a 16-bit C converted on one goroutine kept the other threads of a
// product waiting for it.
func forRowsC(threads int, g kernels.GemmArgs, f func(off int)) {
	rows := g.Batch * g.M
	parallelFor(rows, threads, max(1, grainSimple/max(g.N, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			f(r/g.M*g.StrideC + r%g.M*g.LDC)
		}
	})
}

// gemmWidened widens A and B to fp32 (their whole extent, so that leading
// dimensions and strides stay) and runs the fp32 GEMM.
func gemmWidened(threads int, g kernels.GemmArgs, a, b Half, c []float32) {
	pa, pb := getFloats(len(a.V)), getFloats(len(b.V))
	convert.FromLow(a.T, *pa, a.V)
	convert.FromLow(b.T, *pb, b.V)
	p := gemmProblem{GemmArgs: g, kern: activeKernel, A: *pa, B: *pb, C: c}
	p.execute(p.threads(threads))
	floatPool.Put(pa)
	floatPool.Put(pb)
}

// gemmPairs runs the native bf16 kernel: op(A) and op(B) rearranged into
// pair words (pairWithinRows, pairRowsOf, or the data itself), then the
// fp32 driver over ⌈K/2⌉ steps.
//
// Where op(A) or op(B) already holds its k pairs side by side in memory
// (A not transposed, B transposed: a row-major x·Wᵀ) with even K, leading
// dimensions and strides, the 16-bit data is read as pair words in place:
// no copy. A K×N B (not transposed) with even K is paired as the driver
// packs its panels (gemmProblem.B16): no copy either.
func gemmPairs(kern *gemmKernel, threads int, g kernels.GemmArgs, a, b []uint16, c []float32) {
	k2 := (g.K + 1) / 2
	even := g.K%2 == 0 && (g.Batch == 1 || g.StrideA%2 == 0 && g.StrideB%2 == 0)
	pg := kernels.GemmArgs{M: g.M, N: g.N, K: k2, Alpha: g.Alpha, Beta: g.Beta, LDC: g.LDC, Batch: g.Batch, StrideC: g.StrideC}
	var A, B []float32
	var pa, pb *[]float32
	if w, ok := pairWords(a); ok && even && !g.TransA && g.LDA%2 == 0 {
		A, pg.LDA, pg.StrideA = w, g.LDA/2, g.StrideA/2
	} else if g.TransA {
		// Stored K×M: rows 2p and 2p+1 interleaved make row p of op(A)'
		// transposed, which the driver reads as such.
		pa = getFloats(g.Batch * k2 * g.M)
		for bt := range g.Batch {
			pairRowsPar(threads, (*pa)[bt*k2*g.M:], a[bt*g.StrideA:], g.K, g.M, g.LDA)
		}
		A, pg.TransA, pg.LDA, pg.StrideA = *pa, true, g.M, k2*g.M
	} else {
		pa = getFloats(g.Batch * g.M * k2)
		for bt := range g.Batch {
			pairWithinRowsPar(threads, (*pa)[bt*g.M*k2:], a[bt*g.StrideA:], g.M, g.K, g.LDA)
		}
		A, pg.LDA, pg.StrideA = *pa, k2, g.M*k2
	}
	var B16 []uint16
	if w, ok := pairWords(b); ok && even && g.TransB && g.LDB%2 == 0 {
		B, pg.TransB, pg.LDB, pg.StrideB = w, true, g.LDB/2, g.StrideB/2
	} else if !g.TransB && g.K%2 == 0 {
		// Stored K×N: paired as its panels are packed.
		B16, pg.LDB, pg.StrideB = b, g.LDB, g.StrideB
	} else if !g.TransB {
		pb = getFloats(g.Batch * k2 * g.N)
		for bt := range g.Batch {
			pairRowsPar(threads, (*pb)[bt*k2*g.N:], b[bt*g.StrideB:], g.K, g.N, g.LDB)
		}
		B, pg.LDB, pg.StrideB = *pb, g.N, k2*g.N
	} else {
		// Stored N×K: its rows paired in place of a copy, read transposed.
		pb = getFloats(g.Batch * g.N * k2)
		for bt := range g.Batch {
			pairWithinRowsPar(threads, (*pb)[bt*g.N*k2:], b[bt*g.StrideB:], g.N, g.K, g.LDB)
		}
		B, pg.TransB, pg.LDB, pg.StrideB = *pb, true, k2, g.N*k2
	}
	p := gemmProblem{GemmArgs: pg, kern: kern, A: A, B: B, B16: B16, C: c}
	// Threads by the real work: a pair step is two products.
	p.execute(max(1, min(threads, int(2*float64(g.M)*float64(g.N)*float64(g.K)*float64(g.Batch)/minFlopsPerThread))))
	if pa != nil {
		floatPool.Put(pa)
	}
	if pb != nil {
		floatPool.Put(pb)
	}
}

// pairWords reads 16-bit values as 32-bit pair words in place (the first
// and second of each pair in the low and high half: little-endian), when
// the data is 4-byte aligned.
func pairWords(v []uint16) ([]float32, bool) {
	if len(v) < 2 || uintptr(unsafe.Pointer(&v[0]))%4 != 0 {
		return nil, false
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&v[0])), len(v)/2), true
}

// pair is the 32-bit word of bf16 values lo (k even) and hi (k+1).
func pair(lo, hi uint16) float32 { return math.Float32frombits(uint32(lo) | uint32(hi)<<16) }

// pairRowsOf writes the ⌈k/2⌉ rows of n pair words that interleave rows
// 2p and 2p+1 of a k×n matrix stored with leading dimension ld (the last
// row of an odd k pairs with zero) into dst.
func pairRowsOf(dst []float32, src []uint16, k, n, ld int) {
	for p := range k / 2 {
		pairRows(dst[p*n:(p+1)*n], src[2*p*ld:2*p*ld+n], src[(2*p+1)*ld:(2*p+1)*ld+n])
	}
	if k%2 == 1 {
		row, lo := dst[(k/2)*n:(k/2+1)*n], src[(k-1)*ld:(k-1)*ld+n]
		for j, v := range lo {
			row[j] = pair(v, 0)
		}
	}
}

// pairRowsPar is pairRowsOf on up to threads goroutines, when the operand
// is large enough to share (a weight gradient's operands: 2048 rows).
func pairRowsPar(threads int, dst []float32, src []uint16, k, n, ld int) {
	if threads <= 1 || (k/2)*n < 2*grainSimple {
		pairRowsOf(dst, src, k, n, ld)
		return
	}
	parallelFor(k/2, threads, max(1, grainSimple/max(n, 1)), func(lo, hi int) {
		for p := lo; p < hi; p++ {
			pairRows(dst[p*n:(p+1)*n], src[2*p*ld:2*p*ld+n], src[(2*p+1)*ld:(2*p+1)*ld+n])
		}
	})
	if k%2 == 1 {
		pairRowsOf(dst[(k/2)*n:], src[(k-1)*ld:], 1, n, ld)
	}
}

// pairWithinRowsPar is pairWithinRows on up to threads goroutines, when
// the operand is large enough to share.
func pairWithinRowsPar(threads int, dst []float32, src []uint16, rows, k, ld int) {
	k2 := (k + 1) / 2
	if threads <= 1 || rows*k2 < 2*grainSimple {
		pairWithinRows(dst, src, rows, k, ld)
		return
	}
	parallelFor(rows, threads, max(1, grainSimple/max(k2, 1)), func(lo, hi int) {
		pairWithinRows(dst[lo*k2:], src[lo*ld:], hi-lo, k, ld)
	})
}

// pairRowsGo is pairRows' reference loop.
func pairRowsGo(dst []float32, lo, hi []uint16) {
	for j := range dst {
		dst[j] = pair(lo[j], hi[j])
	}
}

// packPairsGo packs kc pair rows and cols ≤ nr columns of a 16-bit
// matrix stored with leading dimension ld into a B micro-panel of pair
// words, dst[p·nr+j] = pair(src[2p·ld+j], src[(2p+1)·ld+j]), zero-padding
// columns past cols: pairRowsOf and packing in one pass.
func packPairsGo(dst []float32, src []uint16, ld, cols, kc, nr int) {
	d := dst[:kc*nr]
	if cols < nr {
		clear(d)
	}
	for p := range kc {
		pairRowsGo(d[p*nr:p*nr+cols], src[2*p*ld:2*p*ld+cols], src[(2*p+1)*ld:(2*p+1)*ld+cols])
	}
}

// pairWithinRows writes the rows×⌈k/2⌉ pair words of a rows×k matrix
// stored with leading dimension ld whose k pairs lie along its rows
// (values 2p and 2p+1 of a row; an odd k's last word pairs with zero).
func pairWithinRows(dst []float32, src []uint16, rows, k, ld int) {
	k2 := (k + 1) / 2
	for i := range rows {
		row, in := dst[i*k2:(i+1)*k2], src[i*ld:i*ld+k]
		for p := range k / 2 {
			row[p] = pair(in[2*p], in[2*p+1])
		}
		if k%2 == 1 {
			row[k2-1] = pair(in[k-1], 0)
		}
	}
}
