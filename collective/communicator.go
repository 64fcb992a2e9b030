package collective

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/troupe-ml/troupe/kernels"
)

// Communicator runs collectives among the ranks of a group. It is what the
// trainer calls; the transport under it (MemNetwork, local actors, remote
// actors) does not show.
//
// Operations are asynchronous: each call returns a Handle at once, and the
// operation runs while the caller goes on (DDP-style overlap of gradient
// buckets with the backward pass). Every rank of the group must issue the
// same operations, with the same lengths, in the same order, as with NCCL
// and PyTorch DDP: operations are matched across ranks by (generation, op
// id), the op id counting calls in order. Methods are safe to call from
// several goroutines, but the order of calls is the order of operations, so
// one goroutine per rank should issue them.
//
// Ownership: the operation owns buf from the call until its Handle is done
// (Wait returned or Done closed); the caller must neither read nor write buf
// meanwhile. After that, no rank reads it any more, also when the operation
// failed.
//
// Failures: a peer that dies or stays silent past Config.Timeout, a
// mismatched operation or a canceled context fails the operation on every
// rank, with an *OpError naming the peer; the communicator then moves to the
// next generation and later operations run normally if the peers are alive.
// Ranks may disagree about an operation that was completing while the
// failure struck (one rank saw it complete, another did not), as with any
// message-passing protocol; a trainer therefore abandons the whole step on
// every rank after an error and agrees on the next one at a higher level.
type Communicator interface {
	// Rank is this rank's index in the group, Size the number of ranks.
	Rank() int
	Size() int
	// AllReduce replaces buf on every rank with the elementwise sum (or
	// average) over ranks; every rank ends with the same bits.
	AllReduce(ctx context.Context, buf []float32, op ReduceOp) *Handle
	// ReduceScatter leaves rank r holding the reduced values of chunk
	// OwnedChunk(r, Size()) of buf (ChunkRange(len(buf), Size(), chunk));
	// the rest of buf holds partial sums.
	ReduceScatter(ctx context.Context, buf []float32, op ReduceOp) *Handle
	// AllGather fills buf on every rank with every rank's chunk
	// OwnedChunk(r, Size()): the inverse of ReduceScatter.
	AllGather(ctx context.Context, buf []float32) *Handle
	// Broadcast copies root's buf into every rank's buf.
	Broadcast(ctx context.Context, buf []float32, root int) *Handle
	// Barrier completes on a rank once every rank has called it.
	Barrier(ctx context.Context) *Handle
	// NaiveAllReduce is AllReduce by gathering every buffer at rank 0 and
	// sending the result back: the baseline the ring is measured against.
	NaiveAllReduce(ctx context.Context, buf []float32, op ReduceOp) *Handle
	// Group returns a communicator over a subset of this communicator's
	// ranks (given by their ranks here; the new group's rank i is ranks[i])
	// that includes this rank. Every member must create the same group; its
	// operations are numbered apart from this communicator's. Data parallel
	// replicas within one pipeline stage form such a group.
	Group(ranks []int) (Communicator, error)
	// Close fails the pending operations with ErrClosed. Closing the world
	// communicator stops its transport; closing a group closes the group.
	Close() error
}

// Handle is a pending operation.
type Handle struct {
	done     chan struct{}
	err      error
	id       OpID
	kind     Kind
	resolved bool
	stop     func() bool
}

func newHandle(kind Kind) *Handle {
	return &Handle{done: make(chan struct{}), kind: kind}
}

func failedHandle(kind Kind, err error) *Handle {
	h := newHandle(kind)
	h.resolve(OpID{}, err)
	return h
}

// resolve is called once, by the goroutine that owns the Engine.
func (h *Handle) resolve(id OpID, err error) {
	if h.resolved {
		return
	}
	h.resolved = true
	if h.stop != nil {
		h.stop()
	}
	h.id, h.err = id, err
	close(h.done)
}

// Wait blocks until the operation is done and returns its error.
func (h *Handle) Wait() error {
	<-h.done
	return h.err
}

// Done is closed when the operation is done.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Err is the operation's error once it is done, nil before.
func (h *Handle) Err() error {
	select {
	case <-h.done:
		return h.err
	default:
		return nil
	}
}

// ID is the operation's (generation, op id), valid once it is done.
func (h *Handle) ID() OpID {
	<-h.done
	return h.id
}

// Kind is the operation's kind.
func (h *Handle) Kind() Kind { return h.kind }

// WaitAll waits for every handle and returns the first error.
func WaitAll(hs ...*Handle) error {
	var first error
	for _, h := range hs {
		if err := h.Wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

type reqType uint8

const (
	reqOp reqType = iota + 1
	reqCancel
	reqGroup
	reqCloseGroup
	// reqSkip stands for an operation this rank will not start (Core.Skip).
	reqSkip
	// reqClose is handled by the shell: it closes the Engine and stops.
	reqClose
)

// Request is what a Communicator posts to the shell that owns its rank's
// Engine; the shell hands it to Engine.Submit from its own goroutine.
type Request struct {
	typ    reqType
	group  uint32
	spec   Spec
	ctx    context.Context
	handle *Handle
	cause  error
	ranks  []int
	reply  chan error
}

// Fail answers a request that will never reach an Engine (its shell
// stopped with the request still in its mailbox): an operation's Handle
// resolves with err, a group request returns err. Call it from the shell's
// goroutine, once.
func (r *Request) Fail(err error) {
	if r.handle != nil {
		r.handle.resolve(OpID{}, err)
	}
	if r.reply != nil {
		select {
		case r.reply <- err:
		default:
		}
	}
}

// PostFunc delivers a Request to the shell's goroutine or mailbox. It must
// not block for long, and must return an error (ErrClosed) once the shell
// stopped.
type PostFunc func(*Request) error

// NewCommunicator returns the world communicator of rank rank among size
// ranks, posting its requests with post to the shell that owns e (the
// communicator reads only e's configuration and flight recorder, which
// never change). closeFn stops the shell; its Close calls it.
func NewCommunicator(rank, size int, post PostFunc, closeFn func() error, e *Engine) Communicator {
	members := make([]int, size)
	for i := range members {
		members[i] = i
	}
	return &frontend{group: WorldGroup, rank: rank, members: members, post: post, closeFn: closeFn, flight: e.flight, cfg: e.cfg}
}

// derive returns a frontend of group id (this rank at rank, members their
// world ranks) on f's shell, knowing the members' hosts when f knows them.
func (f *frontend) derive(id uint32, rank int, members []int) *frontend {
	g := &frontend{group: id, rank: rank, members: members, post: f.post, flight: f.flight, cfg: f.cfg, world: f.world}
	if f.world != nil {
		g.hosts = make([]string, len(members))
		for i, w := range members {
			g.hosts[i] = f.world[w]
		}
	}
	return g
}

// plan decides whether this group's large all-reduces run hierarchically.
func (f *frontend) plan() {
	if l, ok := PlanHierarchical(f.hosts, f.rank); ok && !f.cfg.NoHierarchical {
		f.layout = &l
	}
}

// Algorithms is a communicator that says which algorithm its AllReduce of
// n values with op runs (the frontends of this package, and wrappers that
// pass it on).
type Algorithms interface {
	AllReduceAlgorithm(n int, op ReduceOp) Algorithm
}

// AlgorithmOf is the algorithm c's AllReduce of n values with op runs:
// what c says (Algorithms), else the ring.
func AlgorithmOf(c Communicator, n int, op ReduceOp) Algorithm {
	if a, ok := c.(Algorithms); ok {
		return a.AllReduceAlgorithm(n, op)
	}
	return AlgoRing
}

// Flighted is a communicator whose operations a FlightRecorder records.
type Flighted interface {
	Flight() *FlightRecorder
}

// FlightOf returns the flight recorder of c's rank (nil: c has none).
func FlightOf(c Communicator) *FlightRecorder {
	if f, ok := c.(Flighted); ok {
		return f.Flight()
	}
	return nil
}

// WorldGroup is the group id of the world communicator.
const WorldGroup uint32 = 0

type frontend struct {
	group   uint32
	rank    int
	members []int // world rank of each group rank
	post    PostFunc
	closeFn func() error
	flight  *FlightRecorder
	cfg     Config
	// world names the host of every world rank, hosts of every group rank
	// (nil: unknown, see OnHosts); layout places this rank for
	// hierarchical all-reduces (nil: they do not apply).
	world, hosts []string
	layout       *HierLayout

	mu     sync.Mutex
	hier   *hierState // opened by the first hierarchical all-reduce
	closed bool
}

// AllReduceAlgorithm is the algorithm this group's AllReduce of n values
// with op runs (Config.AllReduceAlgorithm): hierarchical where that picks
// the ring for a float32 reduction and the group spans several hosts with
// several ranks on each (OnHosts).
func (f *frontend) AllReduceAlgorithm(n int, op ReduceOp) Algorithm {
	a := f.cfg.AllReduceAlgorithm(n, op, len(f.members))
	if a == AlgoRing && f.layout != nil && op.Wire() == kernels.F32 {
		return AlgoHierarchical
	}
	return a
}

// AllReduceSent is how many values this rank sends in its AllReduce of n
// values with op.
func (f *frontend) AllReduceSent(n int, op ReduceOp) int64 {
	a := f.AllReduceAlgorithm(n, op)
	if a == AlgoHierarchical {
		return f.layout.sent(f.cfg, n, f.rank)
	}
	return SentValues(KindAllReduce, a, n, f.rank, len(f.members), 0)
}

// Flight is the recorder of this rank's operations, in every group.
func (f *frontend) Flight() *FlightRecorder { return f.flight }

func (f *frontend) Rank() int { return f.rank }
func (f *frontend) Size() int { return len(f.members) }

func (f *frontend) AllReduce(ctx context.Context, buf []float32, op ReduceOp) *Handle {
	algo := f.AllReduceAlgorithm(len(buf), op)
	if algo == AlgoHierarchical {
		return f.hierAllReduce(ctx, buf, op)
	}
	return f.start(ctx, Spec{Kind: KindAllReduce, Buf: buf, Reduce: op, Algo: algo})
}

// hierAllReduce runs an all-reduce hierarchically, opening the step groups
// on first use.
func (f *frontend) hierAllReduce(ctx context.Context, buf []float32, op ReduceOp) *Handle {
	if err := CheckSpec(Spec{Kind: KindAllReduce, Buf: buf, Reduce: op}, len(f.members)); err != nil {
		return failedHandle(KindAllReduce, err)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return failedHandle(KindAllReduce, ErrClosed)
	}
	if f.hier == nil {
		h, err := newHier(f, *f.layout)
		if err != nil {
			return failedHandle(KindAllReduce, err)
		}
		f.hier = h
	}
	return f.hier.allReduce(ctx, buf, op)
}

func (f *frontend) ReduceScatter(ctx context.Context, buf []float32, op ReduceOp) *Handle {
	return f.start(ctx, Spec{Kind: KindReduceScatter, Buf: buf, Reduce: op})
}

func (f *frontend) AllGather(ctx context.Context, buf []float32) *Handle {
	return f.start(ctx, Spec{Kind: KindAllGather, Buf: buf})
}

func (f *frontend) Broadcast(ctx context.Context, buf []float32, root int) *Handle {
	return f.start(ctx, Spec{Kind: KindBroadcast, Buf: buf, Root: root})
}

func (f *frontend) Barrier(ctx context.Context) *Handle {
	return f.start(ctx, Spec{Kind: KindBarrier})
}

func (f *frontend) NaiveAllReduce(ctx context.Context, buf []float32, op ReduceOp) *Handle {
	return f.start(ctx, Spec{Kind: KindNaiveAllReduce, Buf: buf, Reduce: op})
}

func (f *frontend) start(ctx context.Context, spec Spec) *Handle {
	if err := CheckSpec(spec, len(f.members)); err != nil {
		return failedHandle(spec.Kind, err)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	h := newHandle(spec.Kind)
	req := &Request{typ: reqOp, group: f.group, spec: spec, ctx: ctx, handle: h}
	if ctx.Done() != nil {
		// Registered before posting, so the shell's resolve can stop it.
		h.stop = context.AfterFunc(ctx, func() {
			_ = f.post(&Request{typ: reqCancel, group: f.group, handle: h, cause: ctx.Err()})
		})
	}
	if err := f.post(req); err != nil {
		if h.stop != nil {
			h.stop()
		}
		h.resolve(OpID{}, err)
	}
	return h
}

// GroupID is the id that every member computes for a group: a hash of its
// members' world ranks in order (never WorldGroup).
func GroupID(worldRanks []int) uint32 { return groupHash(nil, worldRanks) }

// groupHash hashes prefix, then the world ranks in order; never
// WorldGroup.
func groupHash(prefix []byte, worldRanks []int) uint32 {
	h := fnv.New32a()
	h.Write(prefix)
	for _, r := range worldRanks {
		h.Write([]byte{byte(r >> 24), byte(r >> 16), byte(r >> 8), byte(r)})
	}
	id := h.Sum32()
	if id == WorldGroup {
		id = 1
	}
	return id
}

func (f *frontend) Group(ranks []int) (Communicator, error) {
	seen := make(map[int]bool, len(ranks))
	self := -1
	members := make([]int, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= len(f.members) || seen[r] {
			return nil, fmt.Errorf("%w: group ranks %v: rank %d is out of range [0, %d) or repeated", ErrBadArgument, ranks, r, len(f.members))
		}
		seen[r] = true
		if r == f.rank {
			self = i
		}
		members[i] = f.members[r]
	}
	if self < 0 {
		return nil, fmt.Errorf("%w: group ranks %v do not include this rank %d", ErrBadArgument, ranks, f.rank)
	}
	return f.open(GroupID(members), self, members)
}

// skip stands for the next operation of this group, which this rank will
// not start because of cause (Core.Skip): posted in its place, in order.
func (f *frontend) skip(cause error) {
	_ = f.post(&Request{typ: reqSkip, group: f.group, cause: cause}) // a stopped shell fails every peer anyway
}

// groupTagged is Group for a purpose tag: a group apart from the plain
// group of the same ranks. It never runs all-reduces hierarchically (the
// step groups of a hierarchical all-reduce are such groups).
func (f *frontend) groupTagged(ranks []int, tag string) (Communicator, error) {
	members := make([]int, len(ranks))
	self := -1
	for i, r := range ranks {
		members[i] = f.members[r]
		if r == f.rank {
			self = i
		}
	}
	if self < 0 {
		return nil, fmt.Errorf("%w: group ranks %v do not include this rank %d", ErrBadArgument, ranks, f.rank)
	}
	g, err := f.open(groupIDTagged(members, tag), self, members)
	if err == nil {
		g.(*frontend).layout = nil
	}
	return g, err
}

// open creates group id on the shell and returns its frontend.
func (f *frontend) open(id uint32, self int, members []int) (Communicator, error) {
	reply := make(chan error, 1)
	if err := f.post(&Request{typ: reqGroup, group: id, ranks: members, reply: reply}); err != nil {
		return nil, err
	}
	if err := <-reply; err != nil {
		return nil, err
	}
	g := f.derive(id, self, members)
	g.plan()
	return g, nil
}

func (f *frontend) Close() error {
	f.mu.Lock()
	f.closed = true
	h := f.hier
	f.hier = nil
	f.mu.Unlock()
	if h != nil {
		h.close()
	}
	if f.group == WorldGroup {
		if f.closeFn != nil {
			return f.closeFn()
		}
		return nil
	}
	reply := make(chan error, 1)
	if err := f.post(&Request{typ: reqCloseGroup, group: f.group, reply: reply}); err != nil {
		return nil // the shell is gone, and the group with it
	}
	return <-reply
}
