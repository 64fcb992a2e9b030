package collective

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// Hierarchical all-reduce, for groups whose ranks run on several hosts with
// several ranks on each (one process per GPU on every machine), as Horovod's
// HOROVOD_HIERARCHICAL_ALLREDUCE and NCCL's two-level rings do it. With L
// ranks on each of H hosts, rank r holding local index i on its host:
//
//  1. reduce-scatter inside the host (a ring of the L local ranks): r ends
//     with the host's sum of chunk OwnedChunk(i, L) of the buffer;
//  2. all-reduce of that chunk across the hosts (the H ranks of local index
//     i, one per host, each owning the same chunk): every one of them ends
//     with the sum over all ranks, divided by H·L for Avg;
//  3. all-gather inside the host: every local rank gets every chunk.
//
// Steps 1 and 3 never leave the host (the data plane carries them through
// shared memory between processes of one host); only step 2 crosses the
// network, moving 2(H−1)/H of a 1/L piece per rank: a host sends the
// buffer's worth 2(H−1)/H times over its links, where a flat ring of all
// H·L ranks sends its cross-host edges 2(P−1)/P buffers each.
//
// Each step is an operation of its own group: the local reduce-scatter and
// the local all-gather are two groups with the same members (tagged apart),
// the cross-host all-reduce a third; a barrier across hosts in a fourth
// ends each all-reduce, so that as with the ring it completes on a rank
// only once every rank holds its result (a step lost on one host fails the
// other hosts too). Every rank issues step 1 of its all-reduces in call
// order, and each following step of an all-reduce once the step before it
// completed and the same step of the all-reduce before it was issued:
// every group sees its operations in the same order on every rank, while
// the buckets of one backward pass overlap (bucket b's cross-host step
// runs while bucket b+1 reduces inside the host).
//
// A failed step fails the all-reduce and every later one on this
// communicator; the steps this rank will not run are skipped (Core.Skip),
// which fails them on the peers at once (hierState.step says why). A
// trainer opens new groups for the next world.
//
// Only float32 reductions run hierarchically (a 16-bit wire keeps the ring,
// whose all-gather sends the 16-bit values), and only above the recursive
// doubling threshold (small buffers are latency-bound: one exchange
// pattern over all ranks beats three).

// HierLayout places a rank for a hierarchical all-reduce: Local are the
// group ranks on its host in rank order (its local index is its position
// there), Cross the group ranks of the same local index on every host, in
// the order of the hosts' lowest ranks.
type HierLayout struct {
	Local []int
	Cross []int
	// Hosts is the number of hosts H, PerHost the ranks on each (L).
	Hosts, PerHost int
}

// PlanHierarchical lays rank of a group out by its members' hosts (hosts[r]
// names group rank r's host). ok is false when a hierarchical all-reduce
// does not apply: a host unknown (""), fewer than two hosts or two ranks
// per host, or hosts with different numbers of ranks.
func PlanHierarchical(hosts []string, rank int) (l HierLayout, ok bool) {
	if rank < 0 || rank >= len(hosts) {
		return HierLayout{}, false
	}
	var order []string
	on := map[string][]int{}
	for r, h := range hosts {
		if h == "" {
			return HierLayout{}, false
		}
		if _, seen := on[h]; !seen {
			order = append(order, h)
		}
		on[h] = append(on[h], r)
	}
	L := len(on[hosts[0]])
	if len(order) < 2 || L < 2 {
		return HierLayout{}, false
	}
	for _, h := range order {
		if len(on[h]) != L {
			return HierLayout{}, false
		}
	}
	l = HierLayout{Local: on[hosts[rank]], Hosts: len(order), PerHost: L}
	i := slices.Index(l.Local, rank)
	for _, h := range order {
		l.Cross = append(l.Cross, on[h][i])
	}
	return l, true
}

// LocalIndex is the rank's place among the ranks of its host.
func (l HierLayout) LocalIndex(rank int) int { return slices.Index(l.Local, rank) }

// sent is how many values rank sends in a hierarchical all-reduce of n
// values under cfg: its reduce-scatter and all-gather inside the host,
// and its chunk's all-reduce across hosts (by the algorithm cfg picks for
// that chunk).
func (l HierLayout) sent(cfg Config, n, rank int) int64 {
	i, L, H := l.LocalIndex(rank), l.PerHost, l.Hosts
	lo, hi := ChunkRange(n, L, OwnedChunk(i, L))
	c := hi - lo
	cross := slices.Index(l.Cross, rank)
	algo := cfg.AllReduceAlgorithm(c, Sum, H)
	return SentValues(KindReduceScatter, AlgoAuto, n, i, L, 0) + SentValues(KindAllReduce, algo, c, cross, H, 0) +
		SentValues(KindAllGather, AlgoAuto, n, i, L, 0)
}

// OnHosts returns world communicator c knowing the host of every world rank
// (hosts[r] names rank r's host; "" unknown): its groups that span several
// hosts with several ranks on each then run large float32 all-reduces
// hierarchically (unless Config.NoHierarchical). c must be a world
// communicator of this package.
//
// Unlike the one-level algorithms, after a failure a group's hierarchical
// all-reduces keep failing (hierState.step says why): open a new group, as
// a trainer does for its next world.
func OnHosts(c Communicator, hosts []string) (Communicator, error) {
	f, ok := c.(*frontend)
	if !ok || f.group != WorldGroup {
		return nil, fmt.Errorf("%w: OnHosts takes a world communicator of package collective, not %T", ErrBadArgument, c)
	}
	if len(hosts) != len(f.members) {
		return nil, fmt.Errorf("%w: %d hosts for %d ranks", ErrBadArgument, len(hosts), len(f.members))
	}
	g := f.derive(f.group, f.rank, f.members)
	g.closeFn = f.closeFn
	g.world = slices.Clone(hosts) // the world group's ranks are the world's
	g.hosts = g.world
	g.plan()
	return g, nil
}

// groupIDTagged is the id of a group of worldRanks created for purpose tag:
// apart from GroupID(worldRanks) and from other tags.
func groupIDTagged(worldRanks []int, tag string) uint32 {
	return groupHash(append([]byte(tag), 0), worldRanks)
}

// hierState runs one group's hierarchical all-reduces over its step
// groups. Each all-reduce has a goroutine that issues its steps after the
// first and resolves its handle; it ends when its last step resolved (a
// step group closed or a shell stopped resolves every step). Steps are
// issued in call order in each group: an all-reduce issues a step only
// after the one before it issued the same step (its turn channels).
type hierState struct {
	layout HierLayout
	size   int
	local  int // this rank's local index
	// rs, ar, ag are the groups of steps 1–3; done is the cross-host group
	// of the barrier that ends each all-reduce.
	rs, ar, ag, done Communicator
	// issued[k] is closed once the last all-reduce issued its step k+2;
	// nil before the first.
	issued [3]chan struct{}

	mu sync.Mutex
	// broken is the first failure of a step: every later step fails too
	// (see hierState.step).
	broken error
}

// hierItem is one hierarchical all-reduce on its way through the steps.
type hierItem struct {
	ctx    context.Context
	buf    []float32
	op     ReduceOp
	h      *Handle
	first  *Handle // step 1, whose id the all-reduce reports
	lo, hi int     // the chunk this rank carries across hosts
	step   *Handle // the step running now (nil: none was issued)
	err    error
	// turn[k] is closed when the all-reduce before this one issued its
	// step k+2, done[k] when this one did.
	turn, done [3]chan struct{}
}

// newHier opens the step groups of f (layout l).
func newHier(f *frontend, l HierLayout) (*hierState, error) {
	s := &hierState{layout: l, size: len(f.members), local: l.LocalIndex(f.rank)}
	var opened []Communicator
	open := func(ranks []int, tag string) (Communicator, error) {
		g, err := f.groupTagged(ranks, fmt.Sprintf("%s/%d", tag, f.group))
		if err != nil {
			for _, o := range opened {
				o.Close()
			}
			return nil, fmt.Errorf("hierarchical all-reduce: %s group %v: %w", tag, ranks, err)
		}
		opened = append(opened, g)
		return g, nil
	}
	var err error
	if s.rs, err = open(l.Local, "hier-rs"); err != nil {
		return nil, err
	}
	if s.ar, err = open(l.Cross, "hier-ar"); err != nil {
		return nil, err
	}
	if s.ag, err = open(l.Local, "hier-ag"); err != nil {
		return nil, err
	}
	if s.done, err = open(l.Cross, "hier-done"); err != nil {
		return nil, err
	}
	return s, nil
}

// allReduce issues step 1 of an all-reduce of buf and starts the goroutine
// that runs the rest. The caller serialises calls (frontend.mu).
func (s *hierState) allReduce(ctx context.Context, buf []float32, op ReduceOp) *Handle {
	L := s.layout.PerHost
	it := &hierItem{ctx: ctx, buf: buf, op: op, h: newHandle(KindAllReduce), turn: s.issued}
	for k := range it.done {
		it.done[k] = make(chan struct{})
	}
	s.issued = it.done
	it.lo, it.hi = ChunkRange(len(buf), L, OwnedChunk(s.local, L))
	it.step = s.step(s.rs, func() *Handle { return s.rs.ReduceScatter(ctx, buf, stepOp(op)) })
	it.first = it.step
	go s.run(it)
	return it.h
}

// step issues a step by start in group g, or, once a step failed on this
// rank (it.wait set s.broken), skips it (Core.Skip): g's generation aborts on every rank of g, and
// a peer that runs the step, or starts it later, fails it.
//
// After a failure no step runs again on this communicator (every later one
// is skipped): ranks whose groups aborted at different points of their
// all-reduces would otherwise pair one all-reduce's step with another's. A
// trainer abandons the step after a failure and opens new groups for the
// next world, as it does.
func (s *hierState) step(g Communicator, start func() *Handle) *Handle {
	s.mu.Lock()
	err := s.broken
	s.mu.Unlock()
	if err == nil {
		return start()
	}
	g.(*frontend).skip(err)
	return failedHandle(KindAllReduce, fmt.Errorf("%w: an earlier step of a hierarchical all-reduce on this rank failed: %w", ErrAborted, err))
}

// run issues steps 2–4 of it, each in its turn, and resolves it.
func (s *hierState) run(it *hierItem) {
	for k, g := range []Communicator{s.ar, s.ag, s.done} {
		it.wait(s)
		wait(it.turn[k])
		it.step = s.step(g, func() *Handle {
			switch k {
			case 0:
				return s.ar.AllReduce(it.ctx, it.buf[it.lo:it.hi:it.hi], stepOp(it.op))
			case 1:
				if it.op.Base() == Avg {
					divide(it.buf[it.lo:it.hi], float32(s.size))
				}
				return s.ag.AllGather(it.ctx, it.buf)
			}
			return s.done.Barrier(it.ctx)
		})
		close(it.done[k])
	}
	it.wait(s)
	it.h.resolve(it.first.ID(), it.err)
}

func wait(ch chan struct{}) {
	if ch != nil {
		<-ch
	}
}

// stepOp is what steps 1 and 2 reduce with: Avg sums, and the sum is
// divided once, by every rank, before step 3.
func stepOp(op ReduceOp) ReduceOp {
	if op.Base() == Max {
		return Max
	}
	return Sum
}

// wait waits for it's running step; its failure is it's error and breaks
// s.
func (it *hierItem) wait(s *hierState) {
	if it.step == nil {
		return
	}
	if err := it.step.Wait(); err != nil && it.err == nil {
		it.err = err
		s.mu.Lock()
		if s.broken == nil {
			s.broken = err
		}
		s.mu.Unlock()
	}
	it.step = nil
}

// close closes the step groups: what runs in them fails, and the
// all-reduces' goroutines end. The caller issues no more all-reduces.
func (s *hierState) close() {
	for _, g := range []Communicator{s.rs, s.ar, s.ag, s.done} {
		g.Close()
	}
}
