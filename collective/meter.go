package collective

import (
	"context"
	"sync"

	"github.com/troupe-ml/troupe/kernels"
)

// SentValues is how many values rank sends in one operation of kind over
// a buffer of n values in a group of size ranks, by the schedules of this
// package: a ring reduce-scatter sends every chunk but the one the rank
// ends up owning, an all-gather every chunk but the one it receives last,
// a ring all-reduce both, and a broadcast the whole buffer from every rank
// but the last on the ring from root. A recursive-doubling all-reduce
// (algo) sends the whole buffer once per message of its plan: log₂P'
// rounds, one more for a rank with a folded partner, one in all for a
// folded rank. A barrier and a group of one send nothing; the naive
// all-reduce sends (size − 1)·n from its root and n from every other rank.
// algo applies to KindAllReduce only (AlgoAuto counts as the ring; so does
// AlgoHierarchical, whose traffic depends on the hosts: AllReduceSentOf).
func SentValues(kind Kind, algo Algorithm, n, rank, size, root int) int64 {
	if size <= 1 {
		return 0
	}
	if kind == KindAllReduce && algo == AlgoRecursiveDoubling {
		return rdSentValues(n, rank, size)
	}
	chunk := func(c int) int {
		lo, hi := ChunkRange(n, size, c)
		return hi - lo
	}
	rs := int64(n - chunk(OwnedChunk(rank, size)))
	ag := int64(n - chunk(mod(rank+2, size)))
	switch kind {
	case KindReduceScatter:
		return rs
	case KindAllGather:
		return ag
	case KindAllReduce:
		return rs + ag
	case KindBroadcast:
		if mod(rank-root, size) == size-1 {
			return 0
		}
		return int64(n)
	case KindNaiveAllReduce:
		if rank == 0 {
			return int64(size-1) * int64(n)
		}
		return int64(n)
	}
	return 0
}

// Meter counts the bytes the communicators it wraps send, by operation
// kind: what a step's metrics report as the bytes each collective moved.
// It is safe for concurrent use.
type Meter struct {
	mu   sync.Mutex
	sent map[Kind]int64
}

// NewMeter returns an empty meter.
func NewMeter() *Meter { return &Meter{sent: map[Kind]int64{}} }

// Wrap returns c with every operation it starts counted (its groups too).
func (m *Meter) Wrap(c Communicator) Communicator { return &metered{Communicator: c, m: m} }

// Take returns the payload bytes sent by kind since the last Take and
// resets: SentValues times the bytes of the wire type (a packed 16-bit
// frame of an odd number of values carries two more bytes of padding,
// not counted).
func (m *Meter) Take() map[Kind]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.sent
	m.sent = map[Kind]int64{}
	return out
}

func (m *Meter) add(kind Kind, n int64) {
	m.mu.Lock()
	m.sent[kind] += n
	m.mu.Unlock()
}

type metered struct {
	Communicator
	m *Meter
}

// ReadsRegisteredMemory is the wrapped communicator's.
func (c *metered) ReadsRegisteredMemory() bool { return ReadsRegisteredMemory(c.Communicator) }

// Flight is the wrapped communicator's recorder.
func (c *metered) Flight() *FlightRecorder { return FlightOf(c.Communicator) }

func (c *metered) count(kind Kind, n, root int, wire kernels.DType) {
	c.countBy(kind, AlgoAuto, n, root, wire)
}

func (c *metered) countBy(kind Kind, algo Algorithm, n, root int, wire kernels.DType) {
	c.m.add(kind, SentValues(kind, algo, n, c.Rank(), c.Size(), root)*int64(wire.Size()))
}

// AllReduceAlgorithm passes on the wrapped communicator's answer.
func (c *metered) AllReduceAlgorithm(n int, op ReduceOp) Algorithm {
	return AlgorithmOf(c.Communicator, n, op)
}

func (c *metered) AllReduce(ctx context.Context, buf []float32, op ReduceOp) *Handle {
	c.m.add(KindAllReduce, c.AllReduceSent(len(buf), op)*int64(op.Wire().Size()))
	return c.Communicator.AllReduce(ctx, buf, op)
}

// AllReduceSent passes on the wrapped communicator's answer.
func (c *metered) AllReduceSent(n int, op ReduceOp) int64 {
	return AllReduceSentOf(c.Communicator, n, op)
}

// AllReduceSentOf is how many values c's rank sends in its AllReduce of n
// values with op: what c says (a frontend of this package knows its
// algorithm and, hierarchical, its hosts), else SentValues by the
// algorithm AlgorithmOf names.
func AllReduceSentOf(c Communicator, n int, op ReduceOp) int64 {
	if s, ok := c.(interface{ AllReduceSent(int, ReduceOp) int64 }); ok {
		return s.AllReduceSent(n, op)
	}
	return SentValues(KindAllReduce, AlgorithmOf(c, n, op), n, c.Rank(), c.Size(), 0)
}

func (c *metered) ReduceScatter(ctx context.Context, buf []float32, op ReduceOp) *Handle {
	c.count(KindReduceScatter, len(buf), 0, op.Wire())
	return c.Communicator.ReduceScatter(ctx, buf, op)
}

func (c *metered) AllGather(ctx context.Context, buf []float32) *Handle {
	c.count(KindAllGather, len(buf), 0, kernels.F32)
	return c.Communicator.AllGather(ctx, buf)
}

func (c *metered) Broadcast(ctx context.Context, buf []float32, root int) *Handle {
	c.count(KindBroadcast, len(buf), root, kernels.F32)
	return c.Communicator.Broadcast(ctx, buf, root)
}

func (c *metered) NaiveAllReduce(ctx context.Context, buf []float32, op ReduceOp) *Handle {
	c.count(KindNaiveAllReduce, len(buf), 0, op.Wire())
	return c.Communicator.NaiveAllReduce(ctx, buf, op)
}

func (c *metered) Group(ranks []int) (Communicator, error) {
	g, err := c.Communicator.Group(ranks)
	if err != nil {
		return nil, err
	}
	return c.m.Wrap(g), nil
}
