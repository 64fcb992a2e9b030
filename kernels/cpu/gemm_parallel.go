package cpu

import (
	"sync"
	"sync/atomic"
	"time"
)

// minFlopsPerThread is the least work worth handing to another goroutine:
// starting, waking and joining one costs some microseconds, about what the
// kernel does with 2^20 flops.
const minFlopsPerThread = 1 << 20

// coopMinFlops is the least work per batch member for which the threads
// cooperate on one member (meeting after packing the shared operand and at
// its end) rather than take whole members each, when the members do not
// share out evenly.
const coopMinFlops = 16 << 20

// threads is how many goroutines the product is worth: at most limit, and
// at least minFlopsPerThread of work each.
func (p *gemmProblem) threads(limit int) int {
	flops := 2 * float64(p.M) * float64(p.N) * float64(p.K) * float64(p.Batch)
	return max(1, min(limit, int(flops/minFlopsPerThread)))
}

// serial computes the product on the calling goroutine.
func (p *gemmProblem) serial() {
	s := scratchPool.Get().(*gemmScratch)
	for bt := range p.Batch {
		p.member(s, bt)
	}
	scratchPool.Put(s)
}

// parallel computes the product on threads goroutines.
//
// Batched products whose members are small, or that have enough members to
// share out evenly, give each goroutine whole members, claimed one at a time
// so that a goroutine descheduled by the OS delays at most one member. A
// single large product (or a few) is computed member after member, each
// split into one block of C per goroutine (split), or, when it is too
// narrow for that, cooperatively (coop).
func (p *gemmProblem) parallel(threads int) {
	flops := 2 * float64(p.M) * float64(p.N) * float64(p.K)
	if p.Batch >= threads && (p.Batch%threads == 0 || p.Batch >= 4*threads || flops < coopMinFlops) {
		var next atomic.Int64
		runWorkers(threads, func(int) {
			s := scratchPool.Get().(*gemmScratch)
			for bt := int(next.Add(1) - 1); bt < p.Batch; bt = int(next.Add(1) - 1) {
				p.member(s, bt)
			}
			scratchPool.Put(s)
		})
		return
	}
	for bt := range p.Batch {
		if p.coopOnly || !p.split(threads, bt) {
			p.coop(threads, bt)
		}
	}
}

// splitMinPanels is the fewest micro-panels of the cut extent a goroutine's
// block of a split product holds.
const splitMinPanels = 4

// split computes batch member bt as threads blocks of C, one per
// goroutine, each a product of its own (member) whose operands the
// goroutine packs itself: C's columns cut when it has at least as many
// columns as rows (each goroutine packs all of op(A) and its columns of
// op(B)), else its rows. It returns false, having computed nothing, when
// the cut extent has fewer than splitMinPanels panels per goroutine.
//
// Packing an operand once and sharing it (coop) does less packing, but on
// a 2-vCPU AMD EPYC (Zen 5) guest two threads reading each other's packed
// panels ran the micro-kernel a third slower than alone, while two
// independent products ran at full speed side by side: a 1,024³ bf16
// product at two threads went from 518–521 to 628–638 GFLOP/s
// (docs/BENCHMARKS.md §25, with the commands). Each element of C is summed
// over the same k blocks in the same order as on one goroutine: the same
// bits.
func (p *gemmProblem) split(threads, bt int) bool {
	cols := p.N >= p.M
	n, r := p.M, p.kern.mr
	if cols {
		n, r = p.N, p.kern.nr
	}
	panels := ceilDiv(n, r)
	if panels < splitMinPanels*threads {
		return false
	}
	runWorkers(threads, func(w int) {
		q := p.block(bt, cols, w*panels/threads*r, min(n, (w+1)*panels/threads*r))
		s := scratchPool.Get().(*gemmScratch)
		q.member(s, 0)
		scratchPool.Put(s)
	})
	return true
}

// block is batch member bt's product restricted to C's columns (cols) or
// rows [lo, hi): a one-member problem over the same storage.
func (p *gemmProblem) block(bt int, cols bool, lo, hi int) gemmProblem {
	q := *p
	q.Batch, q.StrideA, q.StrideB, q.StrideC = 1, 0, 0, 0
	offA, offB, offC := bt*p.StrideA, bt*p.StrideB, bt*p.StrideC
	if cols {
		q.N = hi - lo
		offC += lo
		switch {
		case p.B16 != nil:
			offB += lo
		case p.TransB:
			offB += lo * p.LDB
		default:
			offB += lo
		}
	} else {
		q.M = hi - lo
		offC += lo * p.LDC
		if p.TransA {
			offA += lo
		} else {
			offA += lo * p.LDA
		}
	}
	q.A, q.C = p.A[offA:], p.C[offC:]
	if p.B16 != nil {
		q.B16 = p.B16[offB:]
	} else {
		q.B = p.B[offB:]
	}
	return q
}

// runWorkers runs body(0) on the calling goroutine and body(1…n−1) on the
// team (or new goroutines while it is busy), and returns when all have
// returned.
func runWorkers(n int, body func(w int)) {
	if teamRun(n, body) {
		return
	}
	var wg sync.WaitGroup
	wg.Add(n - 1)
	for w := 1; w < n; w++ {
		go func() {
			defer wg.Done()
			body(w)
		}()
	}
	body(0)
	wg.Wait()
}

// coopStep is one step of a cooperative product: n chunks that goroutines
// claim one at a time; the step is over when done reaches n.
type coopStep struct {
	claim, done atomic.Int32
}

// coopSync orders the steps: nobody starts step i+1 before step i is done.
type coopSync struct {
	mu   sync.Mutex
	cond sync.Cond
}

// next claims a chunk of st, or returns false when all are claimed.
func (st *coopStep) next(n int) (int, bool) {
	i := int(st.claim.Add(1) - 1)
	return i, i < n
}

// finish marks a chunk of st done and wakes the waiters after the last.
func (c *coopSync) finish(st *coopStep, n int) {
	if int(st.done.Add(1)) == n {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

// wait returns when all n chunks of st are done. Steps end within a
// chunk's time (tens to hundreds of microseconds) of each other, so it
// first spins, as the team's callers do (team.go), for up to teamSpin
// before it sleeps on the condition variable: a goroutine that slept
// here parked its thread, and waking it again (a futex, an IPI and a VM
// exit) cost more than the wait.
func (c *coopSync) wait(st *coopStep, n int) {
	deadline := time.Now().Add(teamSpin)
	for i := 0; int(st.done.Load()) < n; i++ {
		if i%64 != 63 || time.Now().Before(deadline) {
			spinPause()
			continue
		}
		c.mu.Lock()
		for int(st.done.Load()) < n {
			c.cond.Wait()
		}
		c.mu.Unlock()
		return
	}
}

// coopShareGroup is how many micro-panels of the shared operand one
// packing chunk covers.
const coopShareGroup = 4

// coopSharedFloats bounds the shared packed operand (8 MiB, a quarter of
// the L3): it holds all of K for a range of columns (or rows) of C, so that
// the threads meet only once per range rather than once per k block.
const coopSharedFloats = 2 << 20

// Chunk sizes when the threads split rows (of C, with op(A) rows packed
// privately) or columns (of C, with op(B) columns packed privately). The
// target is about 4 chunks per thread, so that a thread held up by the OS
// or a slower core costs the others at most a small chunk at the end; a
// chunk has at least 16 micro-panels, so that each B (or A) micro-panel
// brought into L1 serves 16 kernel calls.
const (
	coopChunksPerThread = 4
	coopMinPanels       = 16
	coopMaxCols         = 512 // a chunk's kc×cols packed B stays in L2
)

// coopFloor is the smallest chunk of an extent of n cut into panels of
// r: coopMinPanels panels, unless that would leave a thread without a
// chunk (the weight gradients of a small model, 128 to 512 wide with a
// long K, ran on one thread while the other waited).
func coopFloor(n, r, threads int) int {
	return min(coopMinPanels*r, ceilDiv(ceilDiv(n, threads), r)*r)
}

// coopCuts cuts an extent of n into panels of r and those into chunks of
// at most chunk (a multiple of r), as even as whole panels allow, in a
// number of chunks that the threads divide when there are panels enough:
// chunks of a fixed size left a short last one (1,024 rows of 12-row
// panels in 144-row chunks: seven of 144 and one of 16), so that with two
// threads one ran four full chunks while the other ran three and waited
// for a seventh of the product. Chunk i is [cuts[i], cuts[i+1]).
func coopCuts(n, r, chunk, threads int) []int {
	panels := ceilDiv(n, r)
	k := ceilDiv(panels, chunk/r)
	if t := ceilDiv(k, threads) * threads; t <= panels {
		k = t
	}
	cuts := make([]int, k+1)
	for i := range cuts {
		cuts[i] = min(n, i*panels/k*r)
	}
	return cuts
}

// coop computes batch member bt with all threads working on it, BLIS style.
// When C has at least as many rows as columns, op(B) is packed (for all of
// K, over a range of columns of C) into a buffer the threads share, each
// packing disjoint panels; then the threads claim row blocks of C and run
// the k blocks over them, each packing its own A blocks. Otherwise the roles
// swap: a shared packed op(A) for a range of rows, and column blocks of C,
// each packing its own B. Each range takes two steps, packing then
// computing; a step starts when the previous one is done, which is what
// lets the shared buffer be reused.
func (p *gemmProblem) coop(threads, bt int) {
	kern := p.kern
	mr, nr := kern.mr, kern.nr
	kcMax := blockK(kern, p.K)
	nPC := ceilDiv(p.K, kcMax)
	rowsMode := p.M >= p.N
	offC := bt * p.StrideC
	shared := p.sharedFloats
	if shared == 0 {
		shared = coopSharedFloats
	}

	// span is the extent of one shared range (columns of C in rows mode,
	// rows in columns mode), chunk that of one claimed block.
	var span, nRanges, chunk int
	sh := scratchPool.Get().(*gemmScratch)
	if rowsMode {
		span = max(nr, min(kern.nc, shared/(nPC*kcMax)/nr*nr))
		nRanges = ceilDiv(p.N, span)
		chunk = ceilDiv(ceilDiv(p.M, coopChunksPerThread*threads), mr) * mr
		chunk = min(max(chunk, coopFloor(p.M, mr, threads)), kern.mc)
		span = min(span, ceilDiv(p.N, nr)*nr)
		sh.b = grow(sh.b, nPC*kcMax*span)
	} else {
		span = max(mr, min(2*kern.mc, shared/(nPC*kcMax)/mr*mr))
		nRanges = ceilDiv(p.M, span)
		chunk = ceilDiv(ceilDiv(p.N, coopChunksPerThread*threads), nr) * nr
		chunk = min(max(chunk, coopFloor(p.N, nr, threads)), coopMaxCols)
		span = min(span, ceilDiv(p.M, mr)*mr)
		sh.a = grow(sh.a, nPC*kcMax*span)
	}
	var cuts []int
	if rowsMode {
		cuts = coopCuts(p.M, mr, chunk, threads)
	} else {
		cuts = coopCuts(p.N, nr, chunk, threads)
	}
	nChunks := len(cuts) - 1
	steps := make([]coopStep, 2*nRanges)
	var cs coopSync
	cs.cond.L = &cs.mu

	runWorkers(threads, func(int) {
		s := scratchPool.Get().(*gemmScratch)
		if rowsMode {
			s.a = grow(s.a, chunk*kcMax)
		} else {
			s.b = grow(s.b, kcMax*chunk)
		}
		s.tile = grow(s.tile, mr*nr)
		s.edgeA = grow(s.edgeA, mr*kcMax)
		s.edgeB = grow(s.edgeB, nr*kcMax)
		for r := range nRanges {
			packStep, computeStep := &steps[2*r], &steps[2*r+1]
			if rowsMode {
				// Share op(B)[:, jc:jc+nc]: k block q of it at sh.b[q·kcMax·span:].
				jc, nc := r*span, min(span, p.N-r*span)
				groups := ceilDiv(ceilDiv(nc, nr), coopShareGroup)
				nPack := nPC * groups
				for i, ok := packStep.next(nPack); ok; i, ok = packStep.next(nPack) {
					q, g := i/groups, i%groups
					pc := q * kcMax
					src := p.bPanels(bt, pc, jc)
					p.packB(sh.b[q*kcMax*span:], &src, g*coopShareGroup, min((g+1)*coopShareGroup, ceilDiv(nc, nr)), nc, min(kcMax, p.K-pc))
					cs.finish(packStep, nPack)
				}
				cs.wait(packStep, nPack)
				// as member does: A's panels are packed only when each is
				// read often enough to pay for it
				packOwn := ceilDiv(nc, nr) >= packMinReads
				for i, ok := computeStep.next(nChunks); ok; i, ok = computeStep.next(nChunks) {
					ic, mc := cuts[i], cuts[i+1]-cuts[i]
					for q := range nPC {
						pc := q * kcMax
						kc := min(kcMax, p.K-pc)
						ap := p.ownA(s, bt, ic, pc, mc, kc, packOwn)
						bp := panels{data: sh.b[q*kcMax*span:], step: nr * kc, ks: nr}
						macroKernel(kern, s, mc, nc, kc, p.Alpha, p.betaAt(pc), &ap, &bp, p.C[offC+ic*p.LDC+jc:], p.LDC)
					}
					cs.finish(computeStep, nChunks)
				}
				cs.wait(computeStep, nChunks)
				continue
			}
			// Share op(A)[ic:ic+mc, :]: k block q of it at sh.a[q·kcMax·span:].
			ic, mc := r*span, min(span, p.M-r*span)
			groups := ceilDiv(ceilDiv(mc, mr), coopShareGroup)
			nPack := nPC * groups
			for i, ok := packStep.next(nPack); ok; i, ok = packStep.next(nPack) {
				q, g := i/groups, i%groups
				pc := q * kcMax
				src := p.aPanels(bt, ic, pc)
				p.packA(sh.a[q*kcMax*span:], &src, g*coopShareGroup, min((g+1)*coopShareGroup, ceilDiv(mc, mr)), mc, min(kcMax, p.K-pc))
				cs.finish(packStep, nPack)
			}
			cs.wait(packStep, nPack)
			packOwn := p.packsB(mc)
			for i, ok := computeStep.next(nChunks); ok; i, ok = computeStep.next(nChunks) {
				jc, nc := cuts[i], cuts[i+1]-cuts[i]
				for q := range nPC {
					pc := q * kcMax
					kc := min(kcMax, p.K-pc)
					bp := p.ownB(s, bt, pc, jc, nc, kc, packOwn)
					ap := panels{data: sh.a[q*kcMax*span:], step: mr * kc, rs: 1, ks: mr}
					macroKernel(kern, s, mc, nc, kc, p.Alpha, p.betaAt(pc), &ap, &bp, p.C[offC+ic*p.LDC+jc:], p.LDC)
				}
				cs.finish(computeStep, nChunks)
			}
			cs.wait(computeStep, nChunks)
		}
		scratchPool.Put(s)
	})
	scratchPool.Put(sh)
}
