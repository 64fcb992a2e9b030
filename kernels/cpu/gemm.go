package cpu

import (
	"fmt"
	"sync"

	"github.com/troupe-ml/troupe/kernels"
)

// activeKernel is the micro-kernel Gemm uses: assembly where the CPU has it,
// else the portable one. Tests swap it to cover both paths.
var activeKernel = pickKernel()

func pickKernel() *gemmKernel {
	if k := simdKernel(); k != nil {
		return k
	}
	return goKernel
}

// simdName names the vector path GEMM takes on this CPU.
func simdName() string { return activeKernel.name }

// minFlopsPerThread is the least work worth handing to another goroutine:
// starting and joining one costs a few microseconds, about what the kernel
// does with 2^20 flops.
const minFlopsPerThread = 1 << 20

// Gemm implements kernels.Backend.
//
// It is a GotoBLAS/BLIS-style blocked product: op(B) is packed kc×nc at a
// time (L3), op(A) mc×kc at a time (L2), and a register-tile micro-kernel
// multiplies an A micro-panel by a B micro-panel (L1). The work (batch
// members, and row or column ranges of C) is split over up to be.threads
// goroutines, each with its own pack buffers, all joined before Gemm returns.
func (be *Backend) Gemm(g kernels.GemmArgs, a, b, c kernels.Buffer) {
	gemmWith(activeKernel, be.threads, g, a, b, c)
}

// gemmWith is Gemm with a chosen micro-kernel, so tests cover every kernel
// this CPU can run.
func gemmWith(kern *gemmKernel, threads int, g kernels.GemmArgs, a, b, c kernels.Buffer) {
	g = g.Normalize()
	A, B, C := F(a), F(b), F(c)
	checkGemm(g, len(A), len(B), len(C))
	if g.M == 0 || g.N == 0 {
		return
	}
	if g.K == 0 || g.Alpha == 0 {
		for bt := 0; bt < g.Batch; bt++ {
			scaleC(C[bt*g.StrideC:], g.M, g.N, g.LDC, g.Beta)
		}
		return
	}
	gemmParallel(kern, threads, g, A, B, C)
}

// checkGemm panics with a message naming the offending argument when the
// sizes, leading dimensions, strides or buffer lengths are inconsistent.
func checkGemm(g kernels.GemmArgs, lenA, lenB, lenC int) {
	if g.M < 0 || g.N < 0 || g.K < 0 {
		panic(fmt.Sprintf("kernels/cpu: Gemm: negative size M=%d N=%d K=%d", g.M, g.N, g.K))
	}
	rowsA, colsA := g.M, g.K
	if g.TransA {
		rowsA, colsA = g.K, g.M
	}
	rowsB, colsB := g.K, g.N
	if g.TransB {
		rowsB, colsB = g.N, g.K
	}
	checkOperand("A", rowsA, colsA, g.LDA, g.StrideA, g.Batch, lenA)
	checkOperand("B", rowsB, colsB, g.LDB, g.StrideB, g.Batch, lenB)
	checkOperand("C", g.M, g.N, g.LDC, g.StrideC, g.Batch, lenC)
}

func checkOperand(name string, rows, cols, ld, stride, batch, n int) {
	if rows == 0 || cols == 0 {
		return
	}
	if ld < cols {
		panic(fmt.Sprintf("kernels/cpu: Gemm: LD%s=%d is less than the %d columns of %s", name, ld, cols, name))
	}
	if batch > 1 && stride < 0 {
		panic(fmt.Sprintf("kernels/cpu: Gemm: negative Stride%s=%d", name, stride))
	}
	need := (batch-1)*stride + (rows-1)*ld + cols
	if need > n {
		panic(fmt.Sprintf("kernels/cpu: Gemm: %s needs %d elements (%d×%d, LD%s=%d, batch %d, Stride%s=%d), buffer has %d",
			name, need, rows, cols, name, ld, batch, name, stride, n))
	}
}

// scaleC sets the m×n matrix c to beta·c, and to zero when beta is 0 (so
// that NaNs in c do not survive, as in BLAS).
func scaleC(c []float32, m, n, ldc int, beta float32) {
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		if beta != 1 {
			for j := range row {
				row[j] *= beta
			}
		}
	}
}

// gemmScratch is one goroutine's pack buffers. They come from scratchPool,
// so steady-state calls allocate none.
type gemmScratch struct {
	a, b         []float32 // packed A and B blocks
	edgeA, edgeB []float32 // packed last micro-panel of an unpacked block
	tile         []float32 // an edge tile of C
}

var scratchPool = sync.Pool{New: func() any { return new(gemmScratch) }}

// grow returns buf resliced to n values, reallocating only when too small.
func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

// gemmTask is one independent piece of a Gemm: rows [i0, i1) and columns
// [j0, j1) of C for one batch member.
type gemmTask struct {
	batch, i0, i1, j0, j1 int
}

// gemmParallel splits the product into tasks and runs them on up to
// threads goroutines.
func gemmParallel(kern *gemmKernel, threads int, g kernels.GemmArgs, A, B, C []float32) {
	flops := 2 * float64(g.M) * float64(g.N) * float64(g.K) * float64(g.Batch)
	if limit := int(flops / minFlopsPerThread); threads > limit {
		threads = max(1, limit)
	}
	// Batch members are the cheapest split (no shared packing); split C
	// itself only as far as needed to give every goroutine equal work.
	parts := threads / gcd(g.Batch, threads)
	mp, np := splitTiles(kern, g.M, g.N, g.K, parts)
	nTasks := g.Batch * mp * np
	sp := taskSplit{mp: mp, np: np, mTiles: ceilDiv(g.M, kern.mr), nTiles: ceilDiv(g.N, kern.nr)}
	if threads <= 1 {
		// No closure here: the single-threaded path allocates nothing.
		runTasks(kern, g, sp, 0, nTasks, A, B, C)
		return
	}
	parallelFor(nTasks, threads, 1, func(lo, hi int) {
		runTasks(kern, g, sp, lo, hi, A, B, C)
	})
}

// taskSplit cuts each batch member's C into mp row ranges × np column
// ranges, on tile boundaries.
type taskSplit struct {
	mp, np, mTiles, nTiles int
}

// task returns the t-th task: batch member t/(mp·np), then row-major over
// the mp×np grid.
func (sp taskSplit) task(t, mr, nr, m, n int) gemmTask {
	bt, r := t/(sp.mp*sp.np), t%(sp.mp*sp.np)
	pi, pj := r/sp.np, r%sp.np
	return gemmTask{
		batch: bt,
		i0:    pi * sp.mTiles / sp.mp * mr, i1: min(m, (pi+1)*sp.mTiles/sp.mp*mr),
		j0: pj * sp.nTiles / sp.np * nr, j1: min(n, (pj+1)*sp.nTiles/sp.np*nr),
	}
}

// runTasks runs tasks [lo, hi) in order with one set of pack buffers.
func runTasks(kern *gemmKernel, g kernels.GemmArgs, sp taskSplit, lo, hi int, A, B, C []float32) {
	s := scratchPool.Get().(*gemmScratch)
	for t := lo; t < hi; t++ {
		gemmTile(kern, s, g, sp.task(t, kern.mr, kern.nr, g.M, g.N), A, B, C)
	}
	scratchPool.Put(s)
}

// splitTiles chooses how many row ranges (mp) and column ranges (np) to
// cut C into so that mp·np ≈ parts: the split minimising the largest
// part's work, counting the padded tiles it computes and the operands it
// packs.
func splitTiles(kern *gemmKernel, m, n, k, parts int) (mp, np int) {
	mTiles, nTiles := ceilDiv(m, kern.mr), ceilDiv(n, kern.nr)
	best := -1.0
	mp, np = 1, 1
	for cm := 1; cm <= parts; cm++ {
		if parts%cm != 0 {
			continue
		}
		cn := parts / cm
		cm, cn := min(cm, mTiles), min(cn, nTiles)
		rows := ceilDiv(mTiles, cm) * kern.mr
		cols := ceilDiv(nTiles, cn) * kern.nr
		// A packed value costs about as much as a few dozen flops.
		cost := 2*float64(rows)*float64(cols)*float64(k) + 32*float64(rows+cols)*float64(k)
		if best < 0 || cost < best || (cost == best && cm*cn > mp*np) {
			best, mp, np = cost, cm, cn
		}
	}
	return mp, np
}

// Packing a block costs a pass over it; it pays when the kernel then reads
// each packed micro-panel many times. A B micro-panel is read once per A
// micro-panel (m/mr times) and an A micro-panel once per B micro-panel
// (n/nr times). Below these many reads the kernel takes the operand where
// it lies (B: kc rows of nr values, ldb apart; A: mr rows or columns, lda
// apart), which is what makes batched attention-sized products fast.
// Transposed B always gets packed: the kernel needs each k step's nr values
// adjacent.
const (
	packMinReads = 8
)

// panels describes the micro-panels of one block of A or B: panel q starts
// at data[q·step], and element (i, p) of an A panel is at i·rs+p·ks (B
// panels: (p, j) at p·ks+j). When the block is not packed but its last
// panel is partial, that panel is packed into edge (strides 1 and mr for A,
// nr for B) so the kernel never reads past the matrix.
type panels struct {
	data      []float32
	step      int
	rs, ks    int
	edge      []float32
	edgeIndex int
	edgeKS    int
}

func (pn *panels) panel(q int) (data []float32, rs, ks int) {
	if pn.edge != nil && q == pn.edgeIndex {
		return pn.edge, 1, pn.edgeKS
	}
	return pn.data[q*pn.step:], pn.rs, pn.ks
}

// gemmTile computes one task's block of C sequentially with the blocked
// algorithm.
func gemmTile(kern *gemmKernel, s *gemmScratch, g kernels.GemmArgs, t gemmTask, A, B, C []float32) {
	mr, nr := kern.mr, kern.nr
	m, n := t.i1-t.i0, t.j1-t.j0
	// The operands' origins for this task: op(A)[i0, 0], op(B)[0, j0], C[i0, j0].
	offA, offB := t.batch*g.StrideA, t.batch*g.StrideB
	if g.TransA {
		offA += t.i0
	} else {
		offA += t.i0 * g.LDA
	}
	if g.TransB {
		offB += t.j0 * g.LDB
	} else {
		offB += t.j0
	}
	offC := t.batch*g.StrideC + t.i0*g.LDC + t.j0

	packA := ceilDiv(n, nr) >= packMinReads
	packB := g.TransB || ceilDiv(m, mr) >= packMinReads
	kcMax := min(kern.kc, g.K)
	if packA {
		s.a = grow(s.a, min(kern.mc, ceilDiv(m, mr)*mr)*kcMax)
	}
	if packB {
		s.b = grow(s.b, kcMax*min(kern.nc, ceilDiv(n, nr)*nr))
	}
	s.edgeA = grow(s.edgeA, mr*kcMax)
	s.edgeB = grow(s.edgeB, nr*kcMax)
	s.tile = grow(s.tile, mr*nr)

	for jc := 0; jc < n; jc += kern.nc {
		nc := min(kern.nc, n-jc)
		for pc := 0; pc < g.K; pc += kern.kc {
			kc := min(kern.kc, g.K-pc)
			// Later k blocks add to what the first one wrote.
			beta := g.Beta
			if pc > 0 {
				beta = 1
			}
			// op(B)[pc, jc] and the distance between column panels.
			ob, bStep := offB+pc*g.LDB+jc, nr
			if g.TransB {
				ob, bStep = offB+jc*g.LDB+pc, nr*g.LDB
			}
			bp := panels{data: B[ob:], step: bStep, ks: g.LDB}
			if packB {
				for jr := 0; jr < nc; jr += nr {
					kern.packB(s.b[jr*kc:], B[ob+jr/nr*bStep:], g.LDB, g.TransB, min(nr, nc-jr), kc)
				}
				bp = panels{data: s.b, step: nr * kc, ks: nr}
			} else if nc%nr != 0 {
				q := nc / nr
				kern.packB(s.edgeB, B[ob+q*bStep:], g.LDB, false, nc-q*nr, kc)
				bp.edge, bp.edgeIndex, bp.edgeKS = s.edgeB, q, nr
			}
			for ic := 0; ic < m; ic += kern.mc {
				mc := min(kern.mc, m-ic)
				// op(A)[ic, pc] and the distance between row panels.
				oa, aStep := offA+ic*g.LDA+pc, mr*g.LDA
				ap := panels{rs: g.LDA, ks: 1}
				if g.TransA {
					oa, aStep = offA+pc*g.LDA+ic, mr
					ap = panels{rs: 1, ks: g.LDA}
				}
				ap.data, ap.step = A[oa:], aStep
				if packA {
					for ir := 0; ir < mc; ir += mr {
						kern.packA(s.a[ir*kc:], A[oa+ir/mr*aStep:], g.LDA, g.TransA, min(mr, mc-ir), kc)
					}
					ap = panels{data: s.a, step: mr * kc, rs: 1, ks: mr}
				} else if mc%mr != 0 {
					q := mc / mr
					kern.packA(s.edgeA, A[oa+q*aStep:], g.LDA, g.TransA, mc-q*mr, kc)
					ap.edge, ap.edgeIndex, ap.edgeKS = s.edgeA, q, mr
				}
				macroKernel(kern, s, mc, nc, kc, g.Alpha, beta, &ap, &bp, C[offC+ic*g.LDC+jc:], g.LDC)
			}
		}
	}
}

// macroKernel multiplies an mc×kc block of A by a kc×nc block of B into the
// mc×nc block of C at c. Edge tiles go through a scratch tile so the
// micro-kernel always writes a full mr×nr tile.
func macroKernel(kern *gemmKernel, s *gemmScratch, mc, nc, kc int, alpha, beta float32, ap, bp *panels, c []float32, ldc int) {
	mr, nr := kern.mr, kern.nr
	for jr := 0; jr < nc; jr += nr {
		b, _, ksb := bp.panel(jr / nr)
		cols := min(nr, nc-jr)
		for ir := 0; ir < mc; ir += mr {
			a, rsa, ksa := ap.panel(ir / mr)
			rows := min(mr, mc-ir)
			if rows == mr && cols == nr {
				kern.tile(kc, a, rsa, ksa, b, ksb, c[ir*ldc+jr:], ldc, alpha, beta)
				continue
			}
			kern.tile(kc, a, rsa, ksa, b, ksb, s.tile, nr, alpha, 0)
			for i := range rows {
				dst := c[(ir+i)*ldc+jr : (ir+i)*ldc+jr+cols]
				src := s.tile[i*nr : i*nr+cols]
				if beta == 0 {
					copy(dst, src)
					continue
				}
				for j, v := range src {
					dst[j] = v + beta*dst[j]
				}
			}
		}
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
