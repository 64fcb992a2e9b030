package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// minFlopsPerThread is the least work worth handing to another goroutine:
// starting, waking and joining one costs some microseconds, about what the
// kernel does with 2^20 flops.
const minFlopsPerThread = 1 << 20

// coopMinFlops is the least work per batch member for which the threads
// cooperate on one member (with barriers between blocks) rather than take
// whole members each.
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
// single large product (or a few) is computed cooperatively, member after
// member (coop).
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
		p.coop(threads, bt)
	}
}

// runWorkers runs body(0) on the calling goroutine and body(1…n−1) on new
// ones, and returns when all have returned.
func runWorkers(n int, body func(w int)) {
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

// wait returns when all n chunks of st are done. Steps end within a chunk's
// time (tens to hundreds of microseconds) of each other, so it first yields
// a few times before sleeping on the condition variable.
func (c *coopSync) wait(st *coopStep, n int) {
	for i := 0; int(st.done.Load()) < n; i++ {
		if i < 64 {
			runtime.Gosched()
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

// coopMaxCols bounds the columns of one chunk when the threads split
// columns: the chunk's packed B (kc×cols) stays within the L2.
const coopMaxCols = 512

// coop computes batch member bt with all threads working on it, BLIS style.
// When C has at least as many rows as columns, each kc×nc block of op(B) is
// packed once into a shared buffer (the threads packing disjoint panels),
// and then the threads claim row blocks of C, each packing its own A block.
// Otherwise the roles swap: a shared packed block of op(A) (up to 2·mc
// rows) and column ranges of C, each packing its own B. Every block is a
// step; a step starts when the previous one is done, which is what lets the
// shared buffer be reused and the k blocks accumulate in order.
func (p *gemmProblem) coop(threads, bt int) {
	kern := p.kern
	mr, nr := kern.mr, kern.nr
	kcMax := blockK(kern, p.K)
	nPC := ceilDiv(p.K, kcMax)
	rowsMode := p.M >= p.N
	offC := bt * p.StrideC

	// Chunks per step: a multiple of threads, so that they share out
	// evenly when every thread runs at the same speed.
	var outer, nPhases, chunk, nChunks int
	sh := scratchPool.Get().(*gemmScratch)
	if rowsMode {
		outer = kern.nc
		nPhases = ceilDiv(p.N, outer) * nPC
		nChunks = threads * ceilDiv(ceilDiv(p.M, kern.mc), threads)
		chunk = ceilDiv(ceilDiv(p.M, nChunks), mr) * mr
		nChunks = ceilDiv(p.M, chunk)
		sh.b = grow(sh.b, kcMax*min(kern.nc, ceilDiv(p.N, nr)*nr))
	} else {
		outer = 2 * kern.mc
		nPhases = ceilDiv(p.M, outer) * nPC
		nChunks = threads * ceilDiv(ceilDiv(p.N, coopMaxCols), threads)
		chunk = ceilDiv(ceilDiv(p.N, nChunks), nr) * nr
		nChunks = ceilDiv(p.N, chunk)
		sh.a = grow(sh.a, min(outer, ceilDiv(p.M, mr)*mr)*kcMax)
	}
	steps := make([]coopStep, 2*nPhases)
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
		for ph := range nPhases {
			o, pc := ph/nPC*outer, ph%nPC*kcMax
			kc := min(kcMax, p.K-pc)
			beta := p.betaAt(pc)
			packStep, computeStep := &steps[2*ph], &steps[2*ph+1]
			if rowsMode {
				// o is jc: share the kc×nc block of op(B) at (pc, jc).
				jc, nc := o, min(outer, p.N-o)
				nPack := ceilDiv(ceilDiv(nc, nr), coopShareGroup)
				src := p.bPanels(bt, pc, jc)
				for i, ok := packStep.next(nPack); ok; i, ok = packStep.next(nPack) {
					p.packB(sh.b, &src, i*coopShareGroup, min((i+1)*coopShareGroup, ceilDiv(nc, nr)), nc, kc)
					cs.finish(packStep, nPack)
				}
				cs.wait(packStep, nPack)
				bp := panels{data: sh.b, step: nr * kc, ks: nr}
				for i, ok := computeStep.next(nChunks); ok; i, ok = computeStep.next(nChunks) {
					ic := i * chunk
					mc := min(chunk, p.M-ic)
					src := p.aPanels(bt, ic, pc)
					p.packA(s.a, &src, 0, ceilDiv(mc, mr), mc, kc)
					ap := panels{data: s.a, step: mr * kc, rs: 1, ks: mr}
					macroKernel(kern, s, mc, nc, kc, p.Alpha, beta, &ap, &bp, p.C[offC+ic*p.LDC+jc:], p.LDC)
					cs.finish(computeStep, nChunks)
				}
				cs.wait(computeStep, nChunks)
				continue
			}
			// o is ic: share the mc×kc block of op(A) at (ic, pc).
			ic, mc := o, min(outer, p.M-o)
			nPack := ceilDiv(ceilDiv(mc, mr), coopShareGroup)
			src := p.aPanels(bt, ic, pc)
			for i, ok := packStep.next(nPack); ok; i, ok = packStep.next(nPack) {
				p.packA(sh.a, &src, i*coopShareGroup, min((i+1)*coopShareGroup, ceilDiv(mc, mr)), mc, kc)
				cs.finish(packStep, nPack)
			}
			cs.wait(packStep, nPack)
			ap := panels{data: sh.a, step: mr * kc, rs: 1, ks: mr}
			for i, ok := computeStep.next(nChunks); ok; i, ok = computeStep.next(nChunks) {
				jc := i * chunk
				nc := min(chunk, p.N-jc)
				src := p.bPanels(bt, pc, jc)
				p.packB(s.b, &src, 0, ceilDiv(nc, nr), nc, kc)
				bp := panels{data: s.b, step: nr * kc, ks: nr}
				macroKernel(kern, s, mc, nc, kc, p.Alpha, beta, &ap, &bp, p.C[offC+ic*p.LDC+jc:], p.LDC)
				cs.finish(computeStep, nChunks)
			}
			cs.wait(computeStep, nChunks)
		}
		scratchPool.Put(s)
	})
	scratchPool.Put(sh)
}
