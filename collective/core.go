package collective

import (
	"fmt"
	"time"

	"github.com/troupe-ml/troupe/kernels"
)

// Core is one rank's collective protocol for one group: a state machine with
// no goroutines, clock or I/O (etcd raft's shape). Its inputs are Start,
// Step (a message arrived), PeerLost, Cancel, Close and Tick (the time is
// now); after each input, Ready returns the messages to send and the
// operations that completed.
//
// Every operation is identified by (generation, op id): op ids count the
// operations this rank started in the current generation. A message of an
// older generation is dropped, a duplicate is ignored, a message for an
// operation not started yet is held until it starts. Any failure (a silent
// or lost peer, a mismatch, a cancel) aborts the whole generation on this
// rank, tells every other rank, and moves on to the next generation; the
// operations the callers issue afterwards succeed if the peers are alive.
//
// An operation completes on a rank only when every rank of the group has
// received all its data (a completion count goes around the ring behind the
// data), so a dropped message anywhere fails the operation everywhere, and a
// completed operation leaves no peer reading this rank's buffer.
//
// Core is not safe for concurrent use: one goroutine (or actor) owns it.
type Core struct {
	cfg      Config
	group    uint32
	rank     int
	size     int
	members  []int
	subElems int

	gen    uint64
	nextOp uint64
	ops    map[uint64]*opState
	// aborting holds the failed operations that wait for the peers that may
	// still read their buffer to acknowledge the abort.
	aborting []*opState

	early      map[OpID][]Message
	earlyBytes int64

	// owed: a peer skipped an operation of generation owedGen (Skip) after
	// starting owedUntil of them, the skipped one counted, this rank
	// having started owedNext: this rank's next operations up to that
	// count belong to the aborted generation and fail at once, with
	// owedErr (see Start).
	owedGen             uint64
	owedNext, owedUntil uint64
	owedErr             error
	owedCulprit         int

	lastHeard []time.Time
	dead      []error
	closed    error
	// sharedPayloads: receivers read this rank's buffers in place, so an
	// aborted operation waits for them (see SetSharedPayloads).
	sharedPayloads bool

	ready Ready
}

// Ready is what a Core asks its shell to do after an input.
type Ready struct {
	// Messages to send, in order. Their Payload aliases operation buffers
	// (see Message.Payload).
	Messages []Message
	// Completions of operations, successful or failed.
	Completions []Completion
	// AbortedGens lists the generations this input aborted: before resolving
	// the failed operations, the shell drops what it still queues for them
	// and stops reading their buffers (Outbox.Cancel).
	AbortedGens []uint64
}

type opPhase uint8

const (
	phaseRunning opPhase = iota
	phaseAborting
)

type opState struct {
	id      OpID
	spec    Spec
	n       int
	numSub  int
	steps   int // data steps of a ring operation
	started time.Time
	phase   opPhase

	recvNeed int
	recvGot  int
	seen     []uint64
	// fromGot counts data per sender (naive root), to name a silent one.
	fromGot []int
	// subGot counts contributions per sub-chunk at the naive root.
	subGot []int

	left uint32 // largest completion count heard from the left neighbour
	k    uint32 // completion count this rank sent

	sentTo []bool
	// rd is the state of a recursive-doubling all-reduce (nil: the ring
	// or another kind).
	rd *rdState
	// wire is where a 16-bit wire type's payloads are packed (see pack):
	// each sent message's own piece, read by the transport until the
	// operation completes; next is the first free word.
	wire   []float32
	next   int
	err    error
	acks   []bool
	nAcks  int
	abortT time.Time
}

// NewCore returns the state machine of group rank rank in a group of size
// ranks. members, if not nil, gives the world rank of each group rank (for
// error messages); group is carried in every message.
func NewCore(cfg Config, group uint32, rank, size int, members []int) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: rank %d of %d", ErrBadArgument, rank, size)
	}
	if members != nil && len(members) != size {
		return nil, fmt.Errorf("%w: %d members for a group of %d", ErrBadArgument, len(members), size)
	}
	return &Core{
		cfg:       cfg,
		group:     group,
		rank:      rank,
		size:      size,
		members:   members,
		subElems:  cfg.SubChunkBytes / 4,
		gen:       cfg.Generation,
		ops:       make(map[uint64]*opState),
		early:     make(map[OpID][]Message),
		lastHeard: make([]time.Time, size),
		dead:      make([]error, size),
	}, nil
}

// SetSharedPayloads tells the core whether its transport passes payloads by
// pointer, so that peers read this rank's buffers in place. Then an aborted
// operation resolves only once every peer it sent data to has acknowledged
// the abort (or is lost, or Config.AbortAckTimeout passed): after that no
// peer reads the buffer, and the caller may reuse it. Transports that copy
// (a socket, MemNetwork) need no such wait.
func (c *Core) SetSharedPayloads(shared bool) { c.sharedPayloads = shared }

// Rank is this core's rank in its group.
func (c *Core) Rank() int { return c.rank }

// Size is the number of ranks in the group.
func (c *Core) Size() int { return c.size }

// Gen is the current generation: the one the next Start uses.
func (c *Core) Gen() uint64 { return c.gen }

// Busy reports whether an operation is running or waiting for abort
// acknowledgements.
func (c *Core) Busy() bool { return len(c.ops) > 0 || len(c.aborting) > 0 }

// Ready returns what the last inputs asked for and forgets it. The slices
// are valid until the next input.
func (c *Core) Ready() Ready {
	r := c.ready
	c.ready.Messages = c.ready.Messages[:0]
	c.ready.Completions = c.ready.Completions[:0]
	c.ready.AbortedGens = c.ready.AbortedGens[:0]
	return r
}

func (c *Core) peerName(p int) string {
	if c.members != nil && c.members[p] != p {
		return fmt.Sprintf("rank %d (world rank %d)", p, c.members[p])
	}
	return fmt.Sprintf("rank %d", p)
}

func (c *Core) left() int  { return mod(c.rank-1, c.size) }
func (c *Core) right() int { return mod(c.rank+1, c.size) }

// CheckSpec reports whether spec can run in a group of size ranks.
func CheckSpec(spec Spec, size int) error {
	if !spec.Kind.Valid() {
		return fmt.Errorf("%w: operation kind %d", ErrBadArgument, spec.Kind)
	}
	if !spec.Reduce.valid() {
		return fmt.Errorf("%w: reduce op %d", ErrBadArgument, spec.Reduce)
	}
	if spec.Reduce.Wire() != kernels.F32 && spec.Kind != KindAllReduce && spec.Kind != KindReduceScatter {
		return fmt.Errorf("%w: %s in %s: only the ring's AllReduce and ReduceScatter send a 16-bit wire type", ErrBadArgument, spec.Kind, spec.Reduce)
	}
	if spec.Kind == KindBroadcast && (spec.Root < 0 || spec.Root >= size) {
		return fmt.Errorf("%w: broadcast root %d not in [0, %d)", ErrBadArgument, spec.Root, size)
	}
	if uint64(len(spec.Buf)) >= 1<<31 {
		// sequence numbers are uint32: 2(P−1) steps of at most n/P+1 values
		return fmt.Errorf("%w: a buffer of %d values; split it below 2³¹", ErrBadArgument, len(spec.Buf))
	}
	if !spec.Algo.Valid() || spec.Algo != AlgoAuto && spec.Kind != KindAllReduce {
		return fmt.Errorf("%w: algorithm %s for %s: only AllReduce chooses one", ErrBadArgument, spec.Algo, spec.Kind)
	}
	if spec.Kind == KindBarrier && len(spec.Buf) != 0 {
		return fmt.Errorf("%w: a barrier takes no buffer", ErrBadArgument)
	}
	return nil
}

// Start begins an operation and returns its id. An argument error starts
// nothing. If a peer is already known lost, or the core is closed, the
// operation gets an id and fails at once (see Ready).
func (c *Core) Start(now time.Time, spec Spec) (OpID, error) {
	if err := CheckSpec(spec, c.size); err != nil {
		return OpID{}, err
	}
	if spec.Kind == KindAllReduce {
		if spec.Algo == AlgoAuto {
			spec.Algo = c.cfg.AllReduceAlgorithm(len(spec.Buf), spec.Reduce, c.size)
		}
		if c.size == 1 {
			spec.Algo = AlgoRing // nothing to send either way
		}
		if spec.Algo == AlgoHierarchical {
			return OpID{}, fmt.Errorf("%w: a hierarchical all-reduce is three operations in three groups, composed by a Communicator that knows its ranks' hosts (OnHosts), not one operation of a Core", ErrBadArgument)
		}
		if spec.Algo == AlgoRecursiveDoubling {
			if err := rdCheck(c.cfg, spec); err != nil {
				return OpID{}, err
			}
		}
	}
	if c.owedNext < c.owedUntil {
		// A peer skipped this operation, or one after it, in a
		// generation it aborted before this rank started it (Skip): it
		// fails here too, and the next operations of the two ranks meet
		// in the new generation.
		op := c.newOp(OpID{Gen: c.owedGen, Op: c.owedNext}, spec, now)
		c.owedNext++
		c.complete(op, c.opErr(op, c.owedErr, c.owedCulprit))
		return op.id, nil
	}
	id := OpID{Gen: c.gen, Op: c.nextOp}
	c.nextOp++
	op := c.newOp(id, spec, now)
	if c.closed != nil {
		c.complete(op, c.opErr(op, c.closed, -1))
		return id, nil
	}
	for p, err := range c.dead {
		if err != nil && p != c.rank {
			c.complete(op, c.opErr(op, err, p))
			return id, nil
		}
	}
	c.ops[id.Op] = op
	c.begin(op)
	if early, ok := c.early[id]; ok {
		delete(c.early, id)
		for i := range early {
			c.earlyBytes -= heldSize(&early[i])
		}
		for i := range early {
			if c.ops[id.Op] != op {
				early[i].release()
				continue
			}
			c.onOpMessage(now, op, &early[i])
		}
	}
	return id, nil
}

func (c *Core) newOp(id OpID, spec Spec, now time.Time) *opState {
	P := c.size
	n := len(spec.Buf)
	op := &opState{id: id, spec: spec, n: n, started: now, sentTo: make([]bool, P)}
	if spec.Algo == AlgoRecursiveDoubling {
		c.newRD(op)
		return op
	}
	switch spec.Kind {
	case KindAllReduce, KindReduceScatter, KindAllGather:
		_, hi := ChunkRange(n, P, 0)
		op.numSub = subCount(hi, c.subElems)
		op.steps = P - 1
		if spec.Kind == KindAllReduce {
			op.steps = 2 * (P - 1)
		}
		op.recvNeed = op.steps * op.numSub
	case KindBroadcast:
		op.numSub = subCount(n, c.subElems)
		if c.rank != spec.Root {
			op.recvNeed = op.numSub
		}
	case KindNaiveAllReduce:
		op.numSub = subCount(n, c.subElems)
		if c.rank == 0 {
			op.recvNeed = (P - 1) * op.numSub
			op.fromGot = make([]int, P)
			op.subGot = make([]int, op.numSub)
		} else if P > 1 {
			op.recvNeed = op.numSub
		}
	case KindBarrier:
	}
	if P == 1 {
		op.recvNeed = 0
	}
	keys := op.recvNeed
	if spec.Kind == KindNaiveAllReduce && c.rank == 0 {
		keys = P * op.numSub
	}
	op.seen = make([]uint64, (keys+63)/64)
	return op
}

// begin sends an operation's first messages.
func (c *Core) begin(op *opState) {
	if op.rd != nil {
		c.rdBegin(op)
		return
	}
	P, r := c.size, c.rank
	if P > 1 {
		switch op.spec.Kind {
		case KindAllReduce, KindReduceScatter:
			ch := ReduceScatterSendChunk(r, 1, P)
			for k := 0; k < op.numSub; k++ {
				c.sendData(op, c.right(), uint32(k), c.chunkSub(op, ch, k))
			}
		case KindAllGather:
			ch := OwnedChunk(r, P)
			for k := 0; k < op.numSub; k++ {
				c.sendData(op, c.right(), uint32(k), c.chunkSub(op, ch, k))
			}
		case KindBroadcast:
			if r == op.spec.Root {
				for k := 0; k < op.numSub; k++ {
					c.sendData(op, c.right(), uint32(k), c.wholeSub(op, k))
				}
			}
		case KindNaiveAllReduce:
			if r != 0 {
				for k := 0; k < op.numSub; k++ {
					c.sendData(op, 0, uint32(k), c.wholeSub(op, k))
				}
			}
		}
	}
	c.advanceDone(op)
}

func (c *Core) chunkSub(op *opState, ch, k int) []float32 {
	lo, hi := ChunkRange(op.n, c.size, ch)
	a, b := subRange(lo, hi, op.numSub, k)
	return op.spec.Buf[a:b:b]
}

func (c *Core) wholeSub(op *opState, k int) []float32 {
	a, b := subRange(0, op.n, op.numSub, k)
	return op.spec.Buf[a:b:b]
}

func (c *Core) header(t MsgType, op *opState, to int) Message {
	return Message{
		Type: t, Group: c.group, From: c.rank, To: to,
		Gen: op.id.Gen, Op: op.id.Op,
		Kind: op.spec.Kind, Algo: op.spec.Algo, Len: uint64(op.n), Root: op.spec.Root, Wire: op.spec.Reduce.Wire(), Culprit: -1,
	}
}

// sendData sends values of the operation's buffer: the slice itself, or
// with a 16-bit wire type a packed copy of it.
func (c *Core) sendData(op *opState, to int, seq uint32, payload []float32) {
	m := c.header(MsgData, op, to)
	m.Seq = seq
	if w := op.spec.Reduce.Wire(); w != kernels.F32 {
		k := wireWords(w, len(payload))
		if op.wire == nil {
			// a ring reduction sends at most a chunk's sub-chunk, numSub
			// of them per data step
			_, hi := ChunkRange(op.n, c.size, 0)
			_, sub := subRange(0, hi, op.numSub, 0)
			op.wire = getWire(op.steps * op.numSub * wireWords(w, sub))
		}
		p := op.wire[op.next : op.next+k : op.next+k]
		op.next += k
		pack(w, p, payload)
		payload = p
	}
	m.Payload = payload
	op.sentTo[to] = true
	c.ready.Messages = append(c.ready.Messages, m)
}

// advanceDone moves the completion count: once this rank has all its data,
// its count is one more than its left neighbour's (capped at P). The count
// goes to the right neighbour whenever it grows, and the operation completes
// when it reaches P: every rank of the ring has all its data.
func (c *Core) advanceDone(op *opState) {
	if op.recvGot < op.recvNeed {
		return
	}
	k := min(op.left+1, uint32(c.size))
	if k <= op.k {
		return
	}
	op.k = k
	if c.size > 1 {
		m := c.header(MsgDone, op, c.right())
		m.Seq = k
		c.ready.Messages = append(c.ready.Messages, m)
	}
	if k == uint32(c.size) {
		delete(c.ops, op.id.Op)
		c.complete(op, nil)
	}
}

func (c *Core) complete(op *opState, err error) {
	if err == nil && op.wire != nil {
		// every receiver consumed the packed payloads (see
		// Message.Payload); after a failure a transport may still read
		// them until Outbox.Cancel, so they are left to the collector
		putWire(op.wire)
		op.wire = nil
	}
	c.ready.Completions = append(c.ready.Completions, Completion{ID: op.id, Kind: op.spec.Kind, Err: err})
}

// Step feeds a message that arrived from another rank of the group.
func (c *Core) Step(now time.Time, m Message) {
	if m.From < 0 || m.From >= c.size || m.From == c.rank || m.Group != c.group {
		m.release()
		return
	}
	c.lastHeard[m.From] = now
	switch m.Type {
	case MsgAbort:
		m.release()
		c.onAbort(now, &m)
		return
	case MsgAbortAck:
		m.release()
		c.onAbortAck(m.From, m.Gen)
		return
	case MsgData, MsgDone:
	default:
		m.release()
		return
	}
	if m.Gen < c.gen {
		m.release()
		return
	}
	if m.Gen > c.gen {
		// The sender has moved past our generation: it aborted it and its
		// abort notice was lost or is still on its way.
		c.abortGen(now, fmt.Errorf("%w: %s is at generation %d, this rank at %d", ErrAborted, c.peerName(m.From), m.Gen, c.gen), -1, m.Gen-1)
	}
	if m.Op >= c.nextOp {
		c.hold(now, m)
		return
	}
	op := c.ops[m.Op]
	if op == nil {
		m.release() // finished or failed: a late duplicate
		return
	}
	c.onOpMessage(now, op, &m)
}

// hold keeps a message for an operation this rank has not started yet. A
// payload in a transport's receive buffer is copied out so that the
// transport can reuse the buffer: holding it could starve the transport's
// window while the message that would let us progress waits behind it.
func (c *Core) hold(now time.Time, m Message) {
	size := heldSize(&m)
	if c.earlyBytes+size > c.cfg.MaxEarlyBytes {
		m.release()
		c.abortGen(now, fmt.Errorf("%w: %d bytes held for operations not started, %s sent more", ErrOverflow, c.earlyBytes, c.peerName(m.From)), m.From, c.gen)
		return
	}
	if m.Release != nil && !m.Borrowed {
		p := make([]float32, len(m.Payload))
		copy(p, m.Payload)
		m.release()
		m.Payload = p
	}
	id := OpID{Gen: m.Gen, Op: m.Op}
	c.early[id] = append(c.early[id], m)
	c.earlyBytes += size
}

// heldSize is what a held message counts against Config.MaxEarlyBytes: its
// payload, and at least 64 bytes, so that empty messages count too (a
// borrowed payload is the sender's memory, not held here).
func heldSize(m *Message) int64 {
	if m.Borrowed {
		return 64
	}
	return max(64, int64(4*len(m.Payload)))
}

func (c *Core) onOpMessage(now time.Time, op *opState, m *Message) {
	if m.Kind != op.spec.Kind || m.Len != uint64(op.n) || (op.spec.Kind == KindBroadcast && m.Root != op.spec.Root) || m.Wire != op.spec.Reduce.Wire() || m.Algo != op.spec.Algo {
		m.release()
		c.abortGen(now, fmt.Errorf("%w: %s issued %s of %d %v values (root %d, algorithm %s) as %s, this rank %s of %d %v values (root %d, algorithm %s)",
			ErrMismatch, c.peerName(m.From), m.Kind, m.Len, m.Wire, m.Root, m.Algo, op.id, op.spec.Kind, op.n, op.spec.Reduce.Wire(), op.spec.Root, op.spec.Algo), m.From, c.gen)
		return
	}
	if op.rd != nil {
		if err := c.onRD(op, m); err != nil {
			c.abortGen(now, err, m.From, c.gen)
		}
		return
	}
	if m.Type == MsgDone {
		if m.From != c.left() || m.Seq > uint32(c.size) {
			c.abortGen(now, fmt.Errorf("%w: completion count %d from %s", ErrMismatch, m.Seq, c.peerName(m.From)), m.From, c.gen)
			return
		}
		if m.Seq > op.left {
			op.left = m.Seq
			c.advanceDone(op)
		}
		return
	}
	if err := c.onData(op, m); err != nil {
		c.abortGen(now, err, m.From, c.gen)
		return
	}
	c.advanceDone(op)
}

// onData checks, deduplicates and applies one data message.
func (c *Core) onData(op *opState, m *Message) error {
	defer m.release()
	P, r := c.size, c.rank
	bad := func(why string) error {
		return fmt.Errorf("%w: %s message seq %d from %s of %s %s: %s", ErrMismatch, m.Type, m.Seq, c.peerName(m.From), op.spec.Kind, op.id, why)
	}
	seq := int(m.Seq)
	var key int
	switch op.spec.Kind {
	case KindAllReduce, KindReduceScatter, KindAllGather, KindBroadcast:
		if m.From != c.left() {
			return bad("not from the left neighbour")
		}
		key = seq
	case KindNaiveAllReduce:
		if r == 0 {
			if seq >= op.numSub {
				return bad("sequence out of range")
			}
			key = m.From*op.numSub + seq
		} else {
			if m.From != 0 || seq < op.numSub || seq >= 2*op.numSub {
				return bad("not a result from rank 0")
			}
			key = seq - op.numSub
		}
	default:
		return bad("the operation carries no data")
	}
	if key < 0 || key >= 64*len(op.seen) || (op.spec.Kind != KindNaiveAllReduce && seq >= op.recvNeed) {
		return bad("sequence out of range")
	}
	if op.seen[key/64]&(1<<(key%64)) != 0 {
		return nil // duplicate
	}
	var dst []float32
	var step, k int
	switch op.spec.Kind {
	case KindAllReduce, KindReduceScatter, KindAllGather:
		step, k = seq/op.numSub+1, seq%op.numSub
		gather := op.spec.Kind == KindAllGather || (op.spec.Kind == KindAllReduce && step > P-1)
		t := step
		if op.spec.Kind == KindAllReduce && gather {
			t = step - (P - 1)
		}
		if gather {
			dst = c.chunkSub(op, AllGatherRecvChunk(r, t, P), k)
		} else {
			dst = c.chunkSub(op, ReduceScatterRecvChunk(r, t, P), k)
		}
		w := op.spec.Reduce.Wire()
		if want := wireWords(w, len(dst)); len(m.Payload) != want {
			return bad(fmt.Sprintf("%d words, want %d (%d %v values)", len(m.Payload), want, len(dst), w))
		}
		if gather {
			if w == kernels.F32 {
				if !sameSlice(dst, m.Payload) { // else read in place (Landing)
					copy(dst, m.Payload)
				}
			} else {
				unpack(w, dst, m.Payload)
			}
			if t < P-1 {
				c.sendData(op, c.right(), m.Seq+uint32(op.numSub), dst)
			}
			break
		}
		if w == kernels.F32 {
			combine(op.spec.Reduce, dst, m.Payload)
		} else {
			combinePacked(op.spec.Reduce, dst, m.Payload)
		}
		if t < P-1 {
			c.sendData(op, c.right(), m.Seq+uint32(op.numSub), dst)
			break
		}
		// dst is now the owned chunk, fully reduced: divide once, here,
		// and round to the wire type, so every rank copies the same bits.
		if op.spec.Reduce.Base() == Avg {
			divide(dst, float32(P))
		}
		if w != kernels.F32 {
			roundTo(w, dst)
		}
		if op.spec.Kind == KindAllReduce {
			c.sendData(op, c.right(), m.Seq+uint32(op.numSub), dst)
		}
	case KindBroadcast:
		dst = c.wholeSub(op, seq)
		if len(m.Payload) != len(dst) {
			return bad(fmt.Sprintf("%d values, want %d", len(m.Payload), len(dst)))
		}
		if !sameSlice(dst, m.Payload) { // else read in place (Landing)
			copy(dst, m.Payload)
		}
		if c.right() != op.spec.Root {
			c.sendData(op, c.right(), m.Seq, dst)
		}
	case KindNaiveAllReduce:
		if r == 0 {
			dst = c.wholeSub(op, seq)
			if len(m.Payload) != len(dst) {
				return bad(fmt.Sprintf("%d values, want %d", len(m.Payload), len(dst)))
			}
			combine(op.spec.Reduce, dst, m.Payload)
			op.fromGot[m.From]++
			op.subGot[seq]++
			if op.subGot[seq] == P-1 {
				if op.spec.Reduce.Base() == Avg {
					divide(dst, float32(P))
				}
				for p := 1; p < P; p++ {
					c.sendData(op, p, uint32(op.numSub+seq), dst)
				}
			}
		} else {
			dst = c.wholeSub(op, key)
			if len(m.Payload) != len(dst) {
				return bad(fmt.Sprintf("%d values, want %d", len(m.Payload), len(dst)))
			}
			copy(dst, m.Payload)
		}
	}
	op.seen[key/64] |= 1 << (key % 64)
	op.recvGot++
	return nil
}

// awaited returns the peers an operation waits on.
func (c *Core) awaited(op *opState, yield func(int) bool) {
	if op.rd != nil {
		if p := c.rdAwaited(op); p >= 0 {
			yield(p)
		}
		return
	}
	if op.spec.Kind == KindNaiveAllReduce && op.recvGot < op.recvNeed {
		if c.rank != 0 {
			yield(0)
			return
		}
		for p := 1; p < c.size; p++ {
			if op.fromGot[p] < op.numSub && !yield(p) {
				return
			}
		}
		return
	}
	yield(c.left())
}

// Tick tells the core the time: an operation whose awaited peer has been
// silent for Config.Timeout aborts its generation, and an aborted operation
// stops waiting for acknowledgements after Config.AbortAckTimeout.
func (c *Core) Tick(now time.Time) {
	for _, op := range c.ops {
		var silent = -1
		var since time.Duration
		c.awaited(op, func(p int) bool {
			heard := c.lastHeard[p]
			if heard.Before(op.started) {
				heard = op.started
			}
			if d := now.Sub(heard); d > c.cfg.Timeout {
				silent, since = p, d
				return false
			}
			return true
		})
		if silent >= 0 {
			c.abortGen(now, fmt.Errorf("%w: nothing from %s for %v", ErrTimeout, c.peerName(silent), since.Round(time.Millisecond)), silent, c.gen)
			break
		}
	}
	kept := c.aborting[:0]
	for _, op := range c.aborting {
		if now.Sub(op.abortT) > c.cfg.AbortAckTimeout {
			c.complete(op, op.err)
			continue
		}
		kept = append(kept, op)
	}
	clear(c.aborting[len(kept):])
	c.aborting = kept
}

// PeerLost tells the core that a peer died (its actor terminated, its
// connection reset). Running operations abort at once; later ones fail at
// Start: a group with a lost peer is rebuilt by the elastic layer.
func (c *Core) PeerLost(now time.Time, peer int, cause error) {
	if peer < 0 || peer >= c.size || peer == c.rank || c.dead[peer] != nil {
		return
	}
	err := fmt.Errorf("%w: %s", ErrPeerLost, c.peerName(peer))
	if cause != nil {
		err = fmt.Errorf("%w: %s: %v", ErrPeerLost, c.peerName(peer), cause)
	}
	c.dead[peer] = err
	for _, op := range c.aborting {
		c.ack(op, peer)
	}
	c.dropAcked()
	if len(c.ops) > 0 {
		c.abortGen(now, err, peer, c.gen)
	}
}

// Cancel aborts the generation of a running operation (its caller's
// context ended). Other ranks cannot finish it without this rank.
func (c *Core) Cancel(now time.Time, id OpID, cause error) {
	if id.Gen != c.gen || c.ops[id.Op] == nil {
		return
	}
	c.abortGen(now, fmt.Errorf("%w: %v", ErrCanceled, cause), -1, c.gen)
}

// Close fails every running operation with ErrClosed and every later Start.
func (c *Core) Close(now time.Time) {
	if c.closed != nil {
		return
	}
	c.closed = ErrClosed
	if len(c.ops) > 0 {
		c.abortGen(now, ErrClosed, -1, c.gen)
	}
}

// abortGen fails every running operation with cause, tells every other
// rank, and moves past generation at: to max(gen, at)+1.
func (c *Core) abortGen(now time.Time, cause error, culprit int, at uint64) {
	c.abort(now, cause, culprit, at, len(c.ops) > 0, false)
}

// Skip stands for an operation this rank will not start, its caller having
// failed before it (cause): the generation aborts on this rank and every
// other, the peers that started that operation fail it, and those that
// start it later fail it at once (owed operations), so that the ranks'
// next operations meet in the new generation.
func (c *Core) Skip(now time.Time, cause error) {
	if c.owedNext < c.owedUntil {
		c.owedNext++ // the operation belongs to a generation already aborted
		return
	}
	c.nextOp++
	c.abort(now, fmt.Errorf("%w: %w", ErrAborted, cause), -1, c.gen, true, true)
}

// abort moves to the generation after max(c.gen, at), failing the running
// operations with cause; tell: send every live peer the abort notice (a
// rank with nothing running that aborts only because a peer did tells
// nobody); skipped: the abort stands for an operation this rank skipped,
// and the notice says how many operations it started in the generation,
// that one counted, so that a peer that had not started them yet fails
// them when it does (owed operations). Other aborts leave the peers' later
// operations to the next generation, where a caller that abandoned what
// failed (as a trainer abandons its step) meets the others again.
func (c *Core) abort(now time.Time, cause error, culprit int, at uint64, tell, skipped bool) {
	old := c.gen
	if tell {
		c.ready.AbortedGens = append(c.ready.AbortedGens, old)
		for _, op := range c.ops {
			op.phase = phaseAborting
			op.err = c.opErr(op, cause, culprit)
			op.abortT = now
			op.acks = op.sentTo
			op.nAcks = 0
			for p, sent := range op.sentTo {
				if sent && c.dead[p] == nil && c.sharedPayloads {
					op.nAcks++
				} else {
					op.acks[p] = false
				}
			}
			if op.nAcks == 0 {
				c.complete(op, op.err)
			} else {
				c.aborting = append(c.aborting, op)
			}
		}
		clear(c.ops)
		reason := cause.Error()
		for p := 0; p < c.size; p++ {
			if p == c.rank || c.dead[p] != nil {
				continue
			}
			var started uint64 // Op: see skipped
			if skipped {
				started = c.nextOp
			}
			c.ready.Messages = append(c.ready.Messages, Message{
				Type: MsgAbort, Group: c.group, From: c.rank, To: p, Gen: old, Op: started,
				Code: codeOf(cause), Culprit: culprit, Reason: reason,
			})
		}
	}
	c.owedGen, c.owedNext, c.owedUntil = old, c.nextOp, c.nextOp
	c.gen = max(old, at) + 1
	c.nextOp = 0
	for id, ms := range c.early {
		if id.Gen < c.gen {
			for i := range ms {
				c.earlyBytes -= heldSize(&ms[i])
				ms[i].release()
			}
			delete(c.early, id)
		}
	}
}

func (c *Core) onAbort(now time.Time, m *Message) {
	c.ready.Messages = append(c.ready.Messages, Message{Type: MsgAbortAck, Group: c.group, From: c.rank, To: m.From, Gen: m.Gen, Culprit: -1})
	if m.Code == codePeerLost && m.Culprit >= 0 && m.Culprit < c.size && m.Culprit != c.rank && c.dead[m.Culprit] == nil {
		// Take the sender's word that the peer is dead: sending to it would
		// only find out the slow way (a transport retrying to connect).
		c.dead[m.Culprit] = fmt.Errorf("%w: %s (reported by %s)", ErrPeerLost, c.peerName(m.Culprit), c.peerName(m.From))
		for _, op := range c.aborting {
			c.ack(op, m.Culprit)
		}
		c.dropAcked()
	}
	cause := peerAbort(c.peerName(m.From), m.Code, m.Reason)
	if m.Gen < c.gen {
		// A later notice of the generation this rank aborted last: the
		// sender may have skipped further than the first said.
		if m.Gen == c.owedGen && c.gen == m.Gen+1 && c.nextOp == 0 && m.Op > c.owedUntil {
			c.owe(m.Op, cause, m.Culprit)
		}
		return
	}
	c.abortGen(now, cause, m.Culprit, m.Gen)
	if m.Gen == c.owedGen && m.Op > c.owedUntil {
		c.owe(m.Op, cause, m.Culprit)
	}
}

// owe records that the aborted generation c.owedGen had until operations
// on a peer: this rank's operations up to that count fail when started.
func (c *Core) owe(until uint64, cause error, culprit int) {
	c.owedUntil, c.owedErr = until, cause
	c.owedCulprit = -1
	if culprit >= 0 && culprit < c.size {
		c.owedCulprit = culprit
	}
}

func (c *Core) onAbortAck(from int, gen uint64) {
	for _, op := range c.aborting {
		if op.id.Gen <= gen {
			c.ack(op, from)
		}
	}
	c.dropAcked()
}

func (c *Core) ack(op *opState, from int) {
	if op.acks[from] {
		op.acks[from] = false
		op.nAcks--
	}
}

func (c *Core) dropAcked() {
	kept := c.aborting[:0]
	for _, op := range c.aborting {
		if op.nAcks == 0 {
			c.complete(op, op.err)
			continue
		}
		kept = append(kept, op)
	}
	clear(c.aborting[len(kept):])
	c.aborting = kept
}

// OpError is the error of a failed operation: which one, on which rank, and
// why (Err wraps one of the package's sentinel errors).
type OpError struct {
	ID   OpID
	Kind Kind
	Rank int
	Err  error
	// Culprit is the group rank the failure blames: the peer that was
	// silent or lost, as the rank that detected it named it (−1: none, as
	// for a cancel or a close).
	Culprit int
}

func (e *OpError) Error() string {
	return fmt.Sprintf("%s %s on rank %d: %v", e.Kind, e.ID, e.Rank, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

func (c *Core) opErr(op *opState, cause error, culprit int) error {
	if culprit < 0 || culprit >= c.size {
		culprit = -1
	}
	return &OpError{ID: op.id, Kind: op.spec.Kind, Rank: c.rank, Err: cause, Culprit: culprit}
}
