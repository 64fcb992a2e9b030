package cpu

import (
	"sync"

	"github.com/troupe-ml/troupe/kernels"
)

// activeKernel is the micro-kernel Gemm uses: assembly where the CPU has it,
// else the portable one.
var activeKernel = pickKernel()

func pickKernel() *gemmKernel {
	if ks := simdKernels(); len(ks) > 0 {
		return ks[0]
	}
	return goKernel
}

// simdName names the vector path GEMM takes on this CPU.
func simdName() string { return activeKernel.name }

// Gemm implements kernels.Backend.
//
// It is a GotoBLAS/BLIS-style blocked product: op(B) is packed kc×nc at a
// time, op(A) mc×kc at a time, and a register-tile micro-kernel multiplies
// an A micro-panel (from L2) by a B micro-panel (from L1) into a tile of C.
// Small operands that would be read only a few times are used in place
// instead of packed. The work is spread over up to be.threads goroutines
// (gemm_parallel.go), all joined before Gemm returns.
//
// bf16 and fp16 operands take gemm_low.go's paths.
func (be *Backend) Gemm(g kernels.GemmArgs, a, b, c kernels.Buffer) {
	if isLow(a) || isLow(b) || isLow(c) {
		gemmLow(be.bf16, be.threads, g, a, b, c)
		return
	}
	gemmWith(activeKernel, be.threads, g, a, b, c)
}

func isLow(b kernels.Buffer) bool {
	_, ok := b.(Half)
	return ok
}

// gemmWith is Gemm with a chosen micro-kernel, so tests cover every kernel
// this CPU can run.
func gemmWith(kern *gemmKernel, threads int, g kernels.GemmArgs, a, b, c kernels.Buffer) {
	if p, ok := prepareGemm(kern, g, a, b, c); ok {
		p.execute(p.threads(threads))
	}
}

// prepareGemm checks the arguments and handles the products with nothing
// to multiply (M, N, K or Alpha zero); ok says whether a product remains.
func prepareGemm(kern *gemmKernel, g kernels.GemmArgs, a, b, c kernels.Buffer) (p gemmProblem, ok bool) {
	g = g.Normalize()
	A, B, C := F(a), F(b), F(c)
	checkGemm(g, len(A), len(B), len(C))
	if g.M == 0 || g.N == 0 {
		return p, false
	}
	if g.K == 0 || g.Alpha == 0 {
		for bt := range g.Batch {
			scaleC(C[bt*g.StrideC:], g.M, g.N, g.LDC, g.Beta)
		}
		return p, false
	}
	return gemmProblem{GemmArgs: g, kern: kern, A: A, B: B, C: C}, true
}

// execute computes the product on threads goroutines.
func (p gemmProblem) execute(threads int) {
	if threads <= 1 {
		// Kept apart from the goroutines' closures, which move the problem
		// to the heap: the single-threaded path allocates nothing.
		p.serial()
		return
	}
	hp := new(gemmProblem)
	*hp = p
	hp.parallel(threads)
}

// checkGemm panics with a message naming the offending argument when the
// sizes, leading dimensions, strides or buffer lengths are inconsistent.
func checkGemm(g kernels.GemmArgs, lenA, lenB, lenC int) {
	if err := g.Check(lenA, lenB, lenC); err != nil {
		panic("kernels/cpu: Gemm: " + err.Error())
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

// gemmProblem is one validated, normalized Gemm call.
type gemmProblem struct {
	kernels.GemmArgs
	kern    *gemmKernel
	A, B, C []float32
	// B16, when set in place of B, is op(B) of the native bf16 path as
	// the 16-bit K'×N matrix it pairs (K' = 2K even, not transposed; LDB
	// and StrideB in 16-bit values): pair row p is rows 2p and 2p+1,
	// paired as its panels are packed (packPairs), so that B is not
	// rearranged in a pass of its own first. Its blocks are always packed.
	B16 []uint16
	// sharedFloats bounds the packed operand that cooperating threads share
	// (0: coopSharedFloats); tests lower it to cover several shared ranges.
	sharedFloats int
	// coopOnly makes threads cooperate on every member (coop) that they
	// would otherwise split (split): tests cover both.
	coopOnly bool
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

// Packing a block costs a pass over it; it pays when the kernel then reads
// each packed micro-panel many times. A B micro-panel is read once per A
// micro-panel (m/mr times) and an A micro-panel once per B micro-panel
// (n/nr times). Below packMinReads reads the kernel takes the operand where
// it lies (B: kc rows of nr values, ldb apart; A: mr rows or columns, lda
// apart), which is what makes batched attention-sized products fast.
// Transposed B is always packed: the kernel needs each k step's nr values
// adjacent.
const packMinReads = 8

// panels describes the micro-panels of one block of A or B: panel q starts
// at data[q·step], and element (i, p) of an A panel is at i·rs+p·ks (B
// panels: (p, j) at p·ks+j). When the block is not packed but its last
// panel is partial, that panel is packed into edge (strides 1 and mr for A,
// nr for B) so the kernel never reads past the matrix.
type panels struct {
	data      []float32
	data16    []uint16 // gemmProblem.B16's block in place (data unset)
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

// aPanels describes op(A) in place from op(A)[ic, pc] of batch member bt.
func (p *gemmProblem) aPanels(bt, ic, pc int) panels {
	o := bt * p.StrideA
	if p.TransA {
		return panels{data: p.A[o+pc*p.LDA+ic:], step: p.kern.mr, rs: 1, ks: p.LDA}
	}
	return panels{data: p.A[o+ic*p.LDA+pc:], step: p.kern.mr * p.LDA, rs: p.LDA, ks: 1}
}

// bPanels describes op(B) in place from op(B)[pc, jc] of batch member bt
// (ks is meaningful only without TransB).
func (p *gemmProblem) bPanels(bt, pc, jc int) panels {
	o := bt * p.StrideB
	if p.B16 != nil {
		return panels{data16: p.B16[o+2*pc*p.LDB+jc:], step: p.kern.nr}
	}
	if p.TransB {
		return panels{data: p.B[o+jc*p.LDB+pc:], step: p.kern.nr * p.LDB}
	}
	return panels{data: p.B[o+pc*p.LDB+jc:], step: p.kern.nr, ks: p.LDB}
}

// packA packs A micro-panels [q0, q1) of the mc×kc block src into dst.
func (p *gemmProblem) packA(dst []float32, src *panels, q0, q1, mc, kc int) {
	mr := p.kern.mr
	for q := q0; q < q1; q++ {
		p.kern.packA(dst[q*mr*kc:], src.data[q*src.step:], p.LDA, p.TransA, min(mr, mc-q*mr), kc)
	}
}

// packB packs B micro-panels [q0, q1) of the kc×nc block src into dst.
func (p *gemmProblem) packB(dst []float32, src *panels, q0, q1, nc, kc int) {
	nr := p.kern.nr
	if src.data16 != nil {
		for q := q0; q < q1; q++ {
			packPairs(dst[q*nr*kc:], src.data16[q*src.step:], p.LDB, min(nr, nc-q*nr), kc, nr)
		}
		return
	}
	for q := q0; q < q1; q++ {
		p.kern.packB(dst[q*nr*kc:], src.data[q*src.step:], p.LDB, p.TransB, min(nr, nc-q*nr), kc)
	}
}

// blockK is the k block size: at most kern.kc, with the k blocks of equal
// size (rounded up to a multiple of 8, what the packing routines move at a
// time) rather than a short last one whose kernel calls would be mostly
// overhead.
func blockK(kern *gemmKernel, k int) int {
	kc := ceilDiv(k, ceilDiv(k, kern.kc))
	return min(k, ceilDiv(kc, 8)*8, kern.kc)
}

// betaAt is the beta for the k block starting at pc: later k blocks add to
// what the first one wrote.
func (p *gemmProblem) betaAt(pc int) float32 {
	if pc > 0 {
		return 1
	}
	return p.Beta
}

// member computes batch member bt on the calling goroutine.
func (p *gemmProblem) member(s *gemmScratch, bt int) {
	kern := p.kern
	mr, nr := kern.mr, kern.nr
	m, n := p.M, p.N
	packA := ceilDiv(n, nr) >= packMinReads
	packB := p.packsB(m)
	kcMax := blockK(kern, p.K)
	if packA {
		s.a = grow(s.a, min(kern.mc, ceilDiv(m, mr)*mr)*kcMax)
	}
	if packB {
		s.b = grow(s.b, kcMax*min(kern.nc, ceilDiv(n, nr)*nr))
	}
	s.edgeA = grow(s.edgeA, mr*kcMax)
	s.edgeB = grow(s.edgeB, nr*kcMax)
	s.tile = grow(s.tile, mr*nr)
	offC := bt * p.StrideC

	for jc := 0; jc < n; jc += kern.nc {
		nc := min(kern.nc, n-jc)
		for pc := 0; pc < p.K; pc += kcMax {
			kc := min(kcMax, p.K-pc)
			bp := p.ownB(s, bt, pc, jc, nc, kc, packB)
			for ic := 0; ic < m; ic += kern.mc {
				mc := min(kern.mc, m-ic)
				ap := p.ownA(s, bt, ic, pc, mc, kc, packA)
				macroKernel(kern, s, mc, nc, kc, p.Alpha, p.betaAt(pc), &ap, &bp, p.C[offC+ic*p.LDC+jc:], p.LDC)
			}
		}
	}
}

// ownA is the mc×kc block of op(A) at (ic, pc) as the kernel reads it:
// packed into s.a when pack is set, else where it lies, with a partial
// last panel packed into s.edgeA.
func (p *gemmProblem) ownA(s *gemmScratch, bt, ic, pc, mc, kc int, pack bool) panels {
	mr := p.kern.mr
	ap := p.aPanels(bt, ic, pc)
	if pack {
		p.packA(s.a, &ap, 0, ceilDiv(mc, mr), mc, kc)
		return panels{data: s.a, step: mr * kc, rs: 1, ks: mr}
	}
	if mc%mr != 0 {
		e := mc / mr
		p.kern.packA(s.edgeA, ap.data[e*ap.step:], p.LDA, p.TransA, mc-e*mr, kc)
		ap.edge, ap.edgeIndex, ap.edgeKS = s.edgeA, e, mr
	}
	return ap
}

// packsB says whether op(B)'s blocks are packed for a product of m rows:
// a transposed or 16-bit B always, else when its panels are read often
// enough to pay for it.
func (p *gemmProblem) packsB(m int) bool {
	return p.TransB || p.B16 != nil || ceilDiv(m, p.kern.mr) >= packMinReads
}

// ownB is ownA for the kc×nc block of op(B) at (pc, jc) (a transposed or
// 16-bit B is always packed).
func (p *gemmProblem) ownB(s *gemmScratch, bt, pc, jc, nc, kc int, pack bool) panels {
	nr := p.kern.nr
	bp := p.bPanels(bt, pc, jc)
	if pack {
		p.packB(s.b, &bp, 0, ceilDiv(nc, nr), nc, kc)
		return panels{data: s.b, step: nr * kc, ks: nr}
	}
	if nc%nr != 0 {
		e := nc / nr
		p.kern.packB(s.edgeB, bp.data[e*bp.step:], p.LDB, false, nc-e*nr, kc)
		bp.edge, bp.edgeIndex, bp.edgeKS = s.edgeB, e, nr
	}
	return bp
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
