package collective

import (
	"fmt"
	"math/bits"

	"github.com/troupe-ml/troupe/kernels"
)

// Algorithm is how an AllReduce moves its data between ranks.
type Algorithm uint8

const (
	// AlgoAuto chooses: recursive doubling for a buffer of at most
	// Config.SmallAllReduceBytes travelling as float32, the ring otherwise
	// (Config.AllReduceAlgorithm).
	AlgoAuto Algorithm = iota
	// AlgoRing: reduce-scatter then all-gather around the ring, 2(P−1)
	// steps each moving 1/P of the buffer: bandwidth-optimal, latency
	// linear in P.
	AlgoRing
	// AlgoRecursiveDoubling: ⌈log₂P⌉ exchanges of the whole buffer (two
	// more when P is not a power of two): latency logarithmic in P, each
	// rank sending log₂P times the buffer. The choice below a size
	// threshold, as in MPICH and NCCL's tree/ring split.
	AlgoRecursiveDoubling
	// AlgoHierarchical: reduce-scatter inside each host, all-reduce across
	// hosts, all-gather inside each host (hier.go): what a group spanning
	// several hosts with several ranks on each runs above the recursive
	// doubling threshold. A Communicator composes it from three groups;
	// one Core never runs it.
	AlgoHierarchical
	algoEnd
)

var algoNames = [...]string{"auto", "ring", "rd", "hier"}

func (a Algorithm) String() string {
	if a < algoEnd {
		return algoNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Valid reports whether a names an algorithm.
func (a Algorithm) Valid() bool { return a < algoEnd }

// ParseAlgorithm reads "auto", "ring", "rd" (also "recursive-doubling")
// or "hier" (also "hierarchical").
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "auto":
		return AlgoAuto, nil
	case "ring":
		return AlgoRing, nil
	case "rd", "recursive-doubling":
		return AlgoRecursiveDoubling, nil
	case "hier", "hierarchical":
		return AlgoHierarchical, nil
	}
	return 0, fmt.Errorf("%w: algorithm %q: want auto, ring, rd or hier", ErrBadArgument, s)
}

// AllReduceAlgorithm is the algorithm an AllReduce of n values with op in a
// group of size ranks runs under c: recursive doubling when the buffer is
// at most c.SmallAllReduceBytes (capped at c.SubChunkBytes: recursive
// doubling sends the whole buffer as one message) and travels as float32,
// else the ring. Every rank decides alike (messages carry the algorithm,
// and a rank configured otherwise fails the operation with ErrMismatch).
func (c Config) AllReduceAlgorithm(n int, op ReduceOp, size int) Algorithm {
	if size > 1 && op.Wire() == kernels.F32 && c.SmallAllReduceBytes > 0 && 4*int64(n) <= int64(min(c.SmallAllReduceBytes, c.SubChunkBytes)) {
		return AlgoRecursiveDoubling
	}
	return AlgoRing
}

// Recursive doubling (Thakur, Rabenseifner and Gropp 2005, as in MPICH's
// MPIR_Allreduce_intra_recursive_doubling), on P ranks with P' the largest
// power of two ≤ P and e = P − P' ranks to fold:
//
//   - fold (seq 0): each odd rank r < 2e sends its buffer to r − 1, which
//     adds it, and waits; the P' ranks left ("kept") are renumbered
//     v = r/2 for r < 2e and v = r − e above;
//   - rounds k = 1…log₂P' (seq k): kept rank v sends its whole buffer to
//     v xor 2^(k−1) and adds what it receives; after the last round every
//     kept rank holds the full reduction (Avg divides it by P there);
//   - unfold (seq log₂P'+1): each kept rank with a folded partner sends it
//     the result.
//
// Each exchange adds the same two partial sums on both ends, and float
// addition (like max) commutes, so every rank ends with the same bits (NaNs
// with different payloads aside).
//
// Completion: as the ring's completion count proves that every rank has
// all its data, recursive doubling sends "done" messages along the same
// butterfly: a folded rank sends done 0 to its partner once it has the
// result; a kept rank sends done k to its round-k partner once it has the
// result, and done 0 (if it has a folded partner) or done k−1 from its
// round-(k−1) partner; done log₂P'+1 goes to the folded partner at the end.
// A rank completes when it has heard done from its last partner: then every
// rank has its result and no rank still reads this one's messages.
//
// Every message is a copy of the buffer at the time of sending (the
// operation's own area, returned on success), so peers that read payloads
// in place never see the buffer change under them.
type rdPlan struct {
	rounds int // log₂P'
	folds  int // e
	// pair is the folded partner of a kept rank r < 2e, or the kept
	// partner of a folded rank; −1 if none.
	pair int
	// vrank is the rank among the P' kept ones, −1 for a folded rank.
	vrank int
}

func newRDPlan(rank, size int) rdPlan {
	pow := 1 << (bits.Len(uint(size)) - 1)
	p := rdPlan{rounds: bits.Len(uint(pow)) - 1, folds: size - pow, pair: -1, vrank: rank - (size - pow)}
	if rank < 2*p.folds {
		if rank%2 == 1 {
			p.pair, p.vrank = rank-1, -1
		} else {
			p.pair, p.vrank = rank+1, rank/2
		}
	}
	return p
}

func (p rdPlan) folded() bool { return p.vrank < 0 }

// real is the group rank of kept rank v.
func (p rdPlan) real(v int) int {
	if v < p.folds {
		return 2 * v
	}
	return v + p.folds
}

// partner is the kept rank's peer in round k (1…rounds).
func (p rdPlan) partner(k int) int { return p.real(p.vrank ^ 1<<(k-1)) }

// unfoldSeq is the sequence number of the result sent to a folded rank.
func (p rdPlan) unfoldSeq() int { return p.rounds + 1 }

// from is the rank this rank receives seq s from, data or done alike
// (−1: none).
func (p rdPlan) from(s int) int {
	switch {
	case p.folded():
		if s == p.unfoldSeq() {
			return p.pair
		}
	case s == 0:
		return p.pair
	case s >= 1 && s <= p.rounds:
		return p.partner(s)
	}
	return -1
}

// sends is how many data messages the rank sends.
func (p rdPlan) sends() int {
	if p.folded() {
		return 1
	}
	if p.pair >= 0 {
		return p.rounds + 1
	}
	return p.rounds
}

// rdState is a recursive-doubling operation's progress.
type rdState struct {
	plan rdPlan
	// next is the next data seq to apply; all once the rank holds the
	// result.
	next int
	all  bool
	// held keeps copies of data that came before its turn, by seq;
	// bit s of isHeld says seq s is there (an empty buffer's copy is nil).
	held   [][]float32
	isHeld uint64
	// doneGot has bit s set once done seq s arrived.
	doneGot uint64
	// doneSent is the last done round sent (0: none yet).
	doneSent int
	sentFold bool
}

// rdSentValues is how many values rank sends in a recursive-doubling
// all-reduce of n values among size ranks.
func rdSentValues(n, rank, size int) int64 {
	if size <= 1 {
		return 0
	}
	return int64(newRDPlan(rank, size).sends()) * int64(n)
}

func (c *Core) newRD(op *opState) {
	p := newRDPlan(c.rank, c.size)
	op.rd = &rdState{plan: p, held: make([][]float32, p.rounds+2)}
	op.numSub = 1
	op.seen = make([]uint64, 1)
	op.wire = getWire(max(1, p.sends()*op.n))[:p.sends()*op.n]
	switch {
	case p.folded():
		op.rd.next = p.unfoldSeq()
	case p.pair >= 0:
		op.rd.next = 0
	default:
		op.rd.next = 1
	}
}

// rdSend sends a copy of the buffer as data seq to a group rank.
func (c *Core) rdSend(op *opState, to, seq int) {
	p := op.wire[op.next : op.next+op.n : op.next+op.n]
	op.next += op.n
	copy(p, op.spec.Buf)
	c.sendData(op, to, uint32(seq), p)
}

func (c *Core) rdBegin(op *opState) {
	rd := op.rd
	if rd.plan.folded() {
		c.rdSend(op, rd.plan.pair, 0)
		return
	}
	if rd.next == 1 {
		c.rdSend(op, rd.plan.partner(1), 1)
	}
}

// onRD handles a data or done message of a recursive-doubling operation.
func (c *Core) onRD(op *opState, m *Message) error {
	defer m.release()
	rd := op.rd
	seq := int(m.Seq)
	bad := func(why string) error {
		return fmt.Errorf("%w: %s message seq %d from %s of %s %s by recursive doubling: %s", ErrMismatch, m.Type, m.Seq, c.peerName(m.From), op.spec.Kind, op.id, why)
	}
	if m.Type == MsgDone {
		if seq > rd.plan.unfoldSeq() || rd.plan.from(seq) != m.From {
			return bad("not expected from that rank")
		}
		rd.doneGot |= 1 << seq
		c.rdAdvance(op)
		return nil
	}
	if seq > rd.plan.unfoldSeq() || rd.plan.from(seq) != m.From {
		return bad("not expected from that rank")
	}
	if len(m.Payload) != op.n {
		return bad(fmt.Sprintf("%d values, want %d", len(m.Payload), op.n))
	}
	if op.seen[0]&(1<<seq) != 0 {
		return nil // duplicate
	}
	op.seen[0] |= 1 << seq
	if seq != rd.next {
		rd.held[seq] = append([]float32(nil), m.Payload...)
		rd.isHeld |= 1 << seq
		return nil
	}
	c.rdApply(op, m.Payload)
	for !rd.all && rd.isHeld&(1<<rd.next) != 0 {
		h := rd.held[rd.next]
		rd.held[rd.next], rd.isHeld = nil, rd.isHeld&^(1<<rd.next)
		c.rdApply(op, h)
	}
	c.rdAdvance(op)
	return nil
}

// rdApply applies data seq rd.next and sends what follows it.
func (c *Core) rdApply(op *opState, payload []float32) {
	rd, p := op.rd, op.rd.plan
	s := rd.next
	if p.folded() {
		copy(op.spec.Buf, payload)
		rd.all = true
		return
	}
	combine(op.spec.Reduce, op.spec.Buf, payload)
	if s < p.rounds {
		rd.next = s + 1
		c.rdSend(op, p.partner(s+1), s+1)
		return
	}
	if op.spec.Reduce.Base() == Avg {
		divide(op.spec.Buf, float32(c.size))
	}
	rd.all = true
	if p.pair >= 0 {
		c.rdSend(op, p.pair, p.unfoldSeq())
	}
}

// rdAdvance sends the done messages the rank may send and completes the
// operation once its last partner's done arrived.
func (c *Core) rdAdvance(op *opState) {
	rd, p := op.rd, op.rd.plan
	if !rd.all {
		return
	}
	got := func(s int) bool { return rd.doneGot&(1<<s) != 0 }
	done := func(to, seq int) {
		m := c.header(MsgDone, op, to)
		m.Seq = uint32(seq)
		c.ready.Messages = append(c.ready.Messages, m)
	}
	if p.folded() {
		if !rd.sentFold {
			rd.sentFold = true
			done(p.pair, 0)
		}
		if got(p.unfoldSeq()) {
			c.rdComplete(op)
		}
		return
	}
	for rd.doneSent < p.rounds {
		k := rd.doneSent + 1
		if k == 1 && p.pair >= 0 && !got(0) || k > 1 && !got(k-1) {
			break
		}
		done(p.partner(k), k)
		rd.doneSent = k
	}
	if rd.doneSent == p.rounds && got(p.rounds) {
		if p.pair >= 0 {
			done(p.pair, p.unfoldSeq())
		}
		c.rdComplete(op)
	}
}

func (c *Core) rdComplete(op *opState) {
	delete(c.ops, op.id.Op)
	c.complete(op, nil)
}

// rdAwaited is the peer a recursive-doubling operation waits on.
func (c *Core) rdAwaited(op *opState) int {
	rd, p := op.rd, op.rd.plan
	if !rd.all {
		return p.from(rd.next)
	}
	if p.folded() {
		return p.pair
	}
	for s := 0; s <= p.rounds; s++ {
		if from := p.from(s); from >= 0 && rd.doneGot&(1<<s) == 0 {
			return from
		}
	}
	return -1
}

// rdCheck reports whether spec may run recursive doubling under cfg.
func rdCheck(cfg Config, spec Spec) error {
	if spec.Kind != KindAllReduce {
		return fmt.Errorf("%w: recursive doubling runs AllReduce only, not %s", ErrBadArgument, spec.Kind)
	}
	if spec.Reduce.Wire() != kernels.F32 {
		return fmt.Errorf("%w: recursive doubling sends float32 only, not %s", ErrBadArgument, spec.Reduce.Wire())
	}
	if 4*int64(len(spec.Buf)) > int64(cfg.SubChunkBytes) {
		return fmt.Errorf("%w: recursive doubling sends the whole buffer in one message: %d bytes exceed the sub-chunk size %d", ErrBadArgument, 4*len(spec.Buf), cfg.SubChunkBytes)
	}
	return nil
}
