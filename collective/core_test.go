package collective

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/failure"
)

// simNet drives P cores in one goroutine with messages passed by pointer,
// the way local actors pass them: payloads alias the senders' buffers. It
// delivers in random order and can duplicate or drop messages, so the
// property tests below also check that no rank reads a peer's buffer after
// the peer has moved on.
type simNet struct {
	t     *testing.T
	rng   *rand.Rand
	cores []*Core
	queue []Message
	done  map[int][]Completion
	now   time.Time
	// dupProb duplicates a message with this probability.
	dupProb float64
	// drop, if set, drops the messages it returns true for.
	drop func(Message) bool
}

func newSimNet(t *testing.T, P int, cfg Config, seed uint64) *simNet {
	t.Helper()
	s := &simNet{t: t, rng: rand.New(rand.NewPCG(seed, 7)), done: map[int][]Completion{}, now: time.Unix(1000, 0)}
	for r := 0; r < P; r++ {
		c, err := NewCore(cfg, 0, r, P, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.SetSharedPayloads(true)
		s.cores = append(s.cores, c)
	}
	return s
}

func (s *simNet) collect(r int) {
	rd := s.cores[r].Ready()
	for _, m := range rd.Messages {
		if m.To == m.From || m.To < 0 || m.To >= len(s.cores) {
			s.t.Fatalf("rank %d sent %v", r, m)
		}
		if s.drop != nil && s.drop(m) {
			continue
		}
		s.queue = append(s.queue, m)
		if s.dupProb > 0 && s.rng.Float64() < s.dupProb {
			s.queue = append(s.queue, m)
		}
	}
	s.done[r] = append(s.done[r], rd.Completions...)
}

func (s *simNet) start(r int, spec Spec) OpID {
	s.t.Helper()
	id, err := s.cores[r].Start(s.now, spec)
	if err != nil {
		s.t.Fatal(err)
	}
	s.collect(r)
	return id
}

// run delivers queued messages in random order until none is left.
func (s *simNet) run() {
	for len(s.queue) > 0 {
		i := s.rng.IntN(len(s.queue))
		m := s.queue[i]
		s.queue[i] = s.queue[len(s.queue)-1]
		s.queue = s.queue[:len(s.queue)-1]
		s.cores[m.To].Step(s.now, m)
		s.collect(m.To)
	}
}

func (s *simNet) tick(d time.Duration) {
	s.now = s.now.Add(d)
	for r, c := range s.cores {
		c.Tick(s.now)
		s.collect(r)
	}
}

func (s *simNet) last(r int) Completion {
	s.t.Helper()
	d := s.done[r]
	if len(d) == 0 {
		s.t.Fatalf("rank %d: no completion", r)
	}
	return d[len(d)-1]
}

func randBufs(rng *rand.Rand, P, n int) [][]float32 {
	bufs := make([][]float32, P)
	for r := range bufs {
		bufs[r] = make([]float32, n)
		for i := range bufs[r] {
			bufs[r][i] = float32(rng.NormFloat64())
		}
	}
	return bufs
}

// refSum is the float64 sum over ranks and the sum of magnitudes, which
// bounds the float32 rounding error of any summation order.
func refSum(bufs [][]float32) (sum, mag []float64) {
	n := len(bufs[0])
	sum, mag = make([]float64, n), make([]float64, n)
	for _, b := range bufs {
		for i, v := range b {
			sum[i] += float64(v)
			mag[i] += math.Abs(float64(v))
		}
	}
	return sum, mag
}

// checkReduced checks that every rank holds the same bits and that they
// equal the reference within float32 summation error: a sum of P terms in
// any order is off by at most (P−1)·2⁻²⁴·Σ|x| (plus one rounding of the
// division for the average); we allow P·2⁻²³·Σ|x|.
func checkReduced(t *testing.T, got [][]float32, sum, mag []float64, P int, op ReduceOp, lo, hi int) {
	t.Helper()
	for i := lo; i < hi; i++ {
		want := sum[i]
		tol := float64(P) * math.Ldexp(mag[i], -23)
		if op == Avg {
			want /= float64(P)
			tol /= float64(P)
		}
		for r := range got {
			if math.Float32bits(got[r][i]) != math.Float32bits(got[0][i]) {
				t.Fatalf("element %d: rank %d has %v, rank 0 has %v: not the same bits", i, r, got[r][i], got[0][i])
			}
		}
		if d := math.Abs(float64(got[0][i]) - want); d > tol+1e-30 {
			t.Fatalf("element %d: got %v, want %v (±%g)", i, got[0][i], want, tol)
		}
	}
}

func TestChunkRangeCoversInOrder(t *testing.T) {
	for P := 1; P <= 9; P++ {
		for n := 0; n <= 30; n++ {
			next := 0
			for c := 0; c < P; c++ {
				lo, hi := ChunkRange(n, P, c)
				if lo != next || hi < lo || hi-lo > n/P+1 || hi-lo < n/P {
					t.Fatalf("n=%d P=%d chunk %d = [%d,%d)", n, P, c, lo, hi)
				}
				next = hi
			}
			if next != n {
				t.Fatalf("n=%d P=%d: chunks end at %d", n, P, next)
			}
		}
	}
}

// TestTraceHandWorked checks the ring order of DESIGN.md against a case
// worked by hand: P = 3, one value per chunk.
func TestTraceHandWorked(t *testing.T) {
	bufs := [][]float32{{1, 2, 3}, {10, 20, 30}, {100, 200, 300}}
	steps, err := Trace(KindAllReduce, AlgoRing, bufs, Sum, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		phase string
		step  int
		bufs  [][]float32
	}{
		{"start", 0, [][]float32{{1, 2, 3}, {10, 20, 30}, {100, 200, 300}}},
		// step 1: rank r sends chunk r, adds chunk r−1.
		{"reduce-scatter", 1, [][]float32{{1, 2, 303}, {11, 20, 30}, {100, 220, 300}}},
		// step 2: rank r sends chunk r−1, adds chunk r−2; rank r owns r+1.
		{"reduce-scatter", 2, [][]float32{{1, 222, 303}, {11, 20, 333}, {111, 220, 300}}},
		{"all-gather", 1, [][]float32{{111, 222, 303}, {11, 222, 333}, {111, 220, 333}}},
		{"all-gather", 2, [][]float32{{111, 222, 333}, {111, 222, 333}, {111, 222, 333}}},
	}
	if len(steps) != len(want) {
		t.Fatalf("%d steps, want %d", len(steps), len(want))
	}
	for i, w := range want {
		s := steps[i]
		if s.Phase != w.phase || s.Step != w.step {
			t.Fatalf("step %d is %s %d, want %s %d", i, s.Phase, s.Step, w.phase, w.step)
		}
		for r := range w.bufs {
			if !slices.Equal(s.Buffers[r], w.bufs[r]) {
				t.Fatalf("%s %d rank %d: %v, want %v", s.Phase, s.Step, r, s.Buffers[r], w.bufs[r])
			}
		}
	}
}

// TestRingSchedule checks the index formulas against DESIGN.md's statement:
// what rank r sends at step s+1 is what it summed at step s, and after P−1
// steps it owns chunk (r+1) mod P.
func TestRingSchedule(t *testing.T) {
	for P := 2; P <= 8; P++ {
		for r := 0; r < P; r++ {
			for s := 1; s < P-1; s++ {
				if ReduceScatterSendChunk(r, s+1, P) != ReduceScatterRecvChunk(r, s, P) {
					t.Fatalf("P=%d r=%d s=%d: sends a chunk it did not just sum", P, r, s)
				}
			}
			if ReduceScatterRecvChunk(r, P-1, P) != OwnedChunk(r, P) || AllGatherSendChunk(r, 1, P) != OwnedChunk(r, P) {
				t.Fatalf("P=%d r=%d: owned chunk", P, r)
			}
			// what arrives from r−1 is what r−1 sent
			for s := 1; s < P; s++ {
				if ReduceScatterRecvChunk(r, s, P) != ReduceScatterSendChunk(mod(r-1, P), s, P) ||
					AllGatherRecvChunk(r, s, P) != AllGatherSendChunk(mod(r-1, P), s, P) {
					t.Fatalf("P=%d r=%d step %d: receive and send disagree", P, r, s)
				}
			}
		}
	}
}

type propCase struct {
	P, n, subElems int
	op             ReduceOp
	dup            float64
}

func (pc propCase) String() string {
	return fmt.Sprintf("P=%d n=%d sub=%d %v dup=%.1f", pc.P, pc.n, pc.subElems, pc.op, pc.dup)
}

func propCases(rng *rand.Rand) []propCase {
	var cases []propCase
	for P := 1; P <= 8; P++ {
		for _, n := range []int{0, 1, P - 1, P, P + 1, 3*P + 2, 1 + rng.IntN(200), 1000 + rng.IntN(3000)} {
			if n < 0 {
				continue
			}
			sub := []int{1, 3, 7, 64, 1 << 20}[rng.IntN(5)]
			op := ReduceOp(rng.IntN(2))
			cases = append(cases, propCase{P: P, n: n, subElems: sub, op: op, dup: []float64{0, 0.3}[rng.IntN(2)]})
		}
	}
	return cases
}

// TestAllReduceMatchesPlainSum is the property test of the ring: for P = 1…8
// and random sizes (smaller than P, not divisible by P), random sub-chunk
// sizes, random delivery order and duplicated messages, every rank ends with
// the same bits, equal to a float64 sum within float32 summation error.
func TestAllReduceMatchesPlainSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kind := range []Kind{KindAllReduce, KindNaiveAllReduce} {
		for i, pc := range propCases(rng) {
			cfg := DefaultConfig()
			cfg.SubChunkBytes = 4 * pc.subElems
			s := newSimNet(t, pc.P, cfg, uint64(i))
			s.dupProb = pc.dup
			bufs := randBufs(rng, pc.P, pc.n)
			sum, mag := refSum(bufs)
			for r := range bufs {
				s.start(r, Spec{Kind: kind, Buf: bufs[r], Reduce: pc.op})
			}
			s.run()
			for r := range bufs {
				if c := s.last(r); c.Err != nil || c.Kind != kind {
					t.Fatalf("%v %v rank %d: %+v", kind, pc, r, c)
				}
			}
			checkReduced(t, bufs, sum, mag, pc.P, pc.op, 0, pc.n)
		}
	}
}

func TestReduceScatterAllGatherBroadcast(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i, pc := range propCases(rng) {
		cfg := DefaultConfig()
		cfg.SubChunkBytes = 4 * pc.subElems
		P, n := pc.P, pc.n

		// reduce-scatter: rank r owns chunk (r+1) mod P, fully reduced.
		s := newSimNet(t, P, cfg, uint64(i))
		s.dupProb = pc.dup
		bufs := randBufs(rng, P, n)
		sum, mag := refSum(bufs)
		for r := range bufs {
			s.start(r, Spec{Kind: KindReduceScatter, Buf: bufs[r], Reduce: pc.op})
		}
		s.run()
		for r := range bufs {
			if c := s.last(r); c.Err != nil {
				t.Fatalf("reduce-scatter %v rank %d: %v", pc, r, c.Err)
			}
			lo, hi := ChunkRange(n, P, OwnedChunk(r, P))
			checkReduced(t, [][]float32{bufs[r]}, sum, mag, P, pc.op, lo, hi)
		}

		// all-gather: each rank contributes its owned chunk.
		s = newSimNet(t, P, cfg, uint64(i)+100)
		s.dupProb = pc.dup
		want := randBufs(rng, 1, n)[0]
		for r := range bufs {
			bufs[r] = make([]float32, n)
			lo, hi := ChunkRange(n, P, OwnedChunk(r, P))
			copy(bufs[r][lo:hi], want[lo:hi])
			s.start(r, Spec{Kind: KindAllGather, Buf: bufs[r]})
		}
		s.run()
		for r := range bufs {
			if c := s.last(r); c.Err != nil || !slices.Equal(bufs[r], want) {
				t.Fatalf("all-gather %v rank %d: %v %v, want %v", pc, r, c.Err, bufs[r], want)
			}
		}

		// broadcast from a random root.
		root := rng.IntN(P)
		s = newSimNet(t, P, cfg, uint64(i)+200)
		s.dupProb = pc.dup
		for r := range bufs {
			bufs[r] = make([]float32, n)
			if r == root {
				copy(bufs[r], want)
			}
			s.start(r, Spec{Kind: KindBroadcast, Buf: bufs[r], Root: root})
		}
		s.run()
		for r := range bufs {
			if c := s.last(r); c.Err != nil || !slices.Equal(bufs[r], want) {
				t.Fatalf("broadcast %v root %d rank %d: %v", pc, root, r, c.Err)
			}
		}
	}
}

// TestBarrierWaitsForEveryRank: no rank leaves the barrier before the last
// one entered it.
func TestBarrierWaitsForEveryRank(t *testing.T) {
	for P := 1; P <= 6; P++ {
		s := newSimNet(t, P, DefaultConfig(), 1)
		for r := 0; r < P-1; r++ {
			s.start(r, Spec{Kind: KindBarrier})
		}
		s.run()
		for r := 0; r < P-1; r++ {
			if len(s.done[r]) != 0 {
				t.Fatalf("P=%d: rank %d left the barrier before rank %d entered", P, r, P-1)
			}
		}
		s.start(P-1, Spec{Kind: KindBarrier})
		s.run()
		for r := 0; r < P; r++ {
			if c := s.last(r); c.Err != nil {
				t.Fatal(c.Err)
			}
		}
	}
}

// TestManyOpsInFlight issues several operations before any completes, with
// one rank running behind, so messages for operations not started yet are
// held and replayed.
func TestManyOpsInFlight(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const P, ops = 4, 5
	cfg := DefaultConfig()
	cfg.SubChunkBytes = 4 * 5
	s := newSimNet(t, P, cfg, 9)
	s.dupProb = 0.2
	bufs := make([][][]float32, ops)
	sums := make([][]float64, ops)
	mags := make([][]float64, ops)
	for k := range bufs {
		bufs[k] = randBufs(rng, P, 10+rng.IntN(90))
		sums[k], mags[k] = refSum(bufs[k])
		for r := 0; r < P-1; r++ {
			id := s.start(r, Spec{Kind: KindAllReduce, Buf: bufs[k][r]})
			if id != (OpID{Gen: 0, Op: uint64(k)}) {
				t.Fatalf("op id %v, want op %d", id, k)
			}
		}
	}
	s.run() // every rank but the last has run as far as it can
	for k := range bufs {
		s.start(P-1, Spec{Kind: KindAllReduce, Buf: bufs[k][P-1]})
	}
	s.run()
	for r := 0; r < P; r++ {
		if len(s.done[r]) != ops {
			t.Fatalf("rank %d: %d completions", r, len(s.done[r]))
		}
		for _, c := range s.done[r] {
			if c.Err != nil {
				t.Fatal(c.Err)
			}
		}
	}
	for k := range bufs {
		checkReduced(t, bufs[k], sums[k], mags[k], P, Sum, 0, len(sums[k]))
	}
}

func TestOldGenerationAndDuplicateDropped(t *testing.T) {
	cfg := DefaultConfig()
	c, err := NewCore(cfg, 0, 1, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	buf := []float32{1, 1}
	if _, err := c.Start(now, Spec{Kind: KindAllReduce, Buf: buf, Algo: AlgoRing}); err != nil {
		t.Fatal(err)
	}
	c.Ready()
	data := Message{Type: MsgData, From: 0, To: 1, Gen: 0, Op: 0, Seq: 0, Kind: KindAllReduce, Algo: AlgoRing, Len: 2, Payload: []float32{5}}
	// rank 1 receives chunk 0 at reduce-scatter step 1 and owns it.
	c.Step(now, data)
	c.Step(now, data) // duplicate: ignored
	if buf[0] != 6 {
		t.Fatalf("after a duplicate: %v, want 6", buf[0])
	}
	old := data
	old.Gen = 0
	old.Op = 0
	rd := c.Ready()
	if len(rd.Messages) != 1 || rd.Messages[0].Seq != 1 {
		t.Fatalf("messages %v, want one all-gather send", rd.Messages)
	}
	// an abort moves the core to generation 1; gen-0 data is then dropped.
	c.Step(now, Message{Type: MsgAbort, From: 0, To: 1, Gen: 0, Code: codeTimeout, Reason: "test", Culprit: -1})
	rd = c.Ready()
	if len(rd.Completions) != 1 || !errors.Is(rd.Completions[0].Err, ErrAborted) || !errors.Is(rd.Completions[0].Err, ErrTimeout) {
		t.Fatalf("completions %+v, want one aborted by a timeout", rd.Completions)
	}
	if c.Gen() != 1 {
		t.Fatalf("generation %d, want 1", c.Gen())
	}
	released := 0
	old.Seq = 1
	old.Release = func() { released++ }
	c.Step(now, old)
	if buf[1] != 1 || released != 1 {
		t.Fatalf("old generation applied: %v (released %d)", buf, released)
	}
	if rd := c.Ready(); len(rd.Messages) != 0 || len(rd.Completions) != 0 {
		t.Fatalf("old generation answered: %+v", rd)
	}
}

// TestDroppedMessageFailsEveryRank: a lost message stalls the ring; the rank
// waiting for it times out naming its left neighbour, every other rank gets
// the abort, and the next operation (new generation) succeeds.
func TestDroppedMessageFailsEveryRank(t *testing.T) {
	for _, phase := range []string{"reduce-scatter", "all-gather", "done"} {
		t.Run(phase, func(t *testing.T) {
			const P = 4
			cfg := DefaultConfig()
			cfg.Timeout = 5 * time.Second
			s := newSimNet(t, P, cfg, 11)
			dropped := false
			s.drop = func(m Message) bool {
				var hit bool
				switch phase {
				case "reduce-scatter":
					hit = m.Type == MsgData && m.From == 1 && m.Seq == 1
				case "all-gather":
					hit = m.Type == MsgData && m.From == 2 && m.Seq == P
				case "done":
					hit = m.Type == MsgDone && m.From == 3
				}
				if hit && (!dropped || phase == "done") { // every count rank 3 sends
					dropped = true
					return true
				}
				return false
			}
			bufs := randBufs(rand.New(rand.NewPCG(1, 1)), P, 40)
			for r := range bufs {
				s.start(r, Spec{Kind: KindAllReduce, Buf: bufs[r], Algo: AlgoRing})
			}
			s.run()
			if !dropped {
				t.Fatal("nothing dropped")
			}
			// A lost data message leaves every rank without the completion
			// count. A lost completion count can only hold back the ranks
			// after it: the others may finish (with correct values).
			succeeded := map[int]bool{}
			for r := 0; r < P; r++ {
				if len(s.done[r]) != 0 {
					if phase != "done" || s.last(r).Err != nil {
						t.Fatalf("rank %d completed %+v despite the lost message", r, s.done[r])
					}
					succeeded[r] = true
				}
			}
			if len(succeeded) == P {
				t.Fatal("every rank completed")
			}
			s.tick(cfg.Timeout / 2)
			s.run()
			s.tick(cfg.Timeout)
			s.run()
			named := 0
			for r := 0; r < P; r++ {
				if succeeded[r] {
					if len(s.done[r]) != 1 {
						t.Fatalf("rank %d: %+v", r, s.done[r])
					}
					continue
				}
				err := s.last(r).Err
				if !errors.Is(err, ErrTimeout) {
					t.Fatalf("rank %d: %v, want a timeout", r, err)
				}
				if strings.Contains(err.Error(), "nothing from rank") {
					named++
				}
				if s.cores[r].Gen() != 1 {
					t.Fatalf("rank %d at generation %d", r, s.cores[r].Gen())
				}
			}
			if named == 0 {
				t.Fatal("no error names the silent peer")
			}
			s.drop = nil
			bufs = randBufs(rand.New(rand.NewPCG(2, 2)), P, 40)
			sum, mag := refSum(bufs)
			for r := range bufs {
				if id := s.start(r, Spec{Kind: KindAllReduce, Buf: bufs[r]}); id != (OpID{Gen: 1}) {
					t.Fatalf("next op %v, want gen 1 op 0", id)
				}
			}
			s.run()
			for r := 0; r < P; r++ {
				if err := s.last(r).Err; err != nil {
					t.Fatal(err)
				}
			}
			checkReduced(t, bufs, sum, mag, P, Sum, 0, 40)
		})
	}
}

func TestPeerLostAbortsAndLaterOpsFail(t *testing.T) {
	const P = 3
	s := newSimNet(t, P, DefaultConfig(), 1)
	bufs := randBufs(rand.New(rand.NewPCG(1, 1)), P, 9)
	for r := 0; r < 2; r++ {
		s.start(r, Spec{Kind: KindAllReduce, Buf: bufs[r]})
	}
	s.run()
	s.cores[0].PeerLost(s.now, 2, errors.New("connection reset"))
	s.collect(0)
	s.run()
	for r := 0; r < 2; r++ {
		err := s.last(r).Err
		if !errors.Is(err, ErrPeerLost) || !strings.Contains(err.Error(), "rank 2") {
			t.Fatalf("rank %d: %v, want peer lost naming rank 2", r, err)
		}
	}
	s.start(0, Spec{Kind: KindBarrier})
	if err := s.last(0).Err; !errors.Is(err, ErrPeerLost) {
		t.Fatalf("op after a lost peer: %v", err)
	}
}

// TestAbortWaitsForAcks: with shared payloads an aborted operation resolves
// only once the peer it sent data to acknowledged the abort.
func TestAbortWaitsForAcks(t *testing.T) {
	s := newSimNet(t, 2, DefaultConfig(), 1)
	buf := []float32{1, 2, 3, 4}
	id := s.start(0, Spec{Kind: KindAllReduce, Buf: buf})
	s.cores[0].Cancel(s.now, id, errors.New("caller gave up"))
	s.collect(0)
	if len(s.done[0]) != 0 {
		t.Fatal("resolved before rank 1 acknowledged")
	}
	s.run()
	if err := s.last(0).Err; !errors.Is(err, ErrCanceled) {
		t.Fatalf("%v, want canceled", err)
	}
	// without acknowledgements the wait is bounded.
	id = s.start(0, Spec{Kind: KindAllReduce, Buf: buf})
	s.cores[0].Cancel(s.now, id, errors.New("again"))
	s.queue = nil
	s.tick(DefaultConfig().AbortAckTimeout * 2)
	if err := s.last(0).Err; !errors.Is(err, ErrCanceled) || s.last(0).ID != id {
		t.Fatalf("%v, want canceled", err)
	}
}

func TestMismatchAborts(t *testing.T) {
	s := newSimNet(t, 2, DefaultConfig(), 1)
	s.start(0, Spec{Kind: KindAllReduce, Buf: make([]float32, 4)})
	s.start(1, Spec{Kind: KindAllReduce, Buf: make([]float32, 5)})
	s.run()
	for r := 0; r < 2; r++ {
		if err := s.last(r).Err; !errors.Is(err, ErrMismatch) || failure.CodeOf(err) != failure.Internal {
			t.Fatalf("rank %d: %v (%v), want a mismatch, permanent on every rank", r, err, failure.CodeOf(err))
		}
	}
}

// TestGenerationJump: a rank that missed an abort notice moves to the
// sender's generation when its data arrives.
func TestGenerationJump(t *testing.T) {
	s := newSimNet(t, 2, DefaultConfig(), 1)
	b0, b1 := []float32{1}, []float32{2}
	s.start(1, Spec{Kind: KindAllReduce, Buf: b1}) // gen 0 op 0, never answered
	s.queue = nil
	s.cores[0].Step(s.now, Message{Type: MsgAbort, From: 1, Gen: 0, Code: codeCanceled, Reason: "x", Culprit: -1})
	s.collect(0)
	s.queue = nil // rank 1 never hears of it
	s.start(0, Spec{Kind: KindAllReduce, Buf: b0})
	s.run()
	if err := s.last(1).Err; !errors.Is(err, ErrAborted) {
		t.Fatalf("rank 1: %v, want aborted by the generation jump", err)
	}
	s.start(1, Spec{Kind: KindAllReduce, Buf: b1})
	s.run()
	if s.last(0).Err != nil || s.last(1).Err != nil || b0[0] != 3 || b1[0] != 3 {
		t.Fatalf("%v %v %v %v", s.last(0).Err, s.last(1).Err, b0, b1)
	}
}

func TestStartRejectsBadSpecs(t *testing.T) {
	c, _ := NewCore(DefaultConfig(), 0, 0, 3, nil)
	for _, spec := range []Spec{
		{Kind: 0},
		{Kind: KindBroadcast, Root: 3},
		{Kind: KindBroadcast, Root: -1},
		{Kind: KindAllReduce, Reduce: 9},
		{Kind: KindBarrier, Buf: []float32{1}},
	} {
		if _, err := c.Start(time.Now(), spec); !errors.Is(err, ErrBadArgument) {
			t.Fatalf("%+v: %v", spec, err)
		}
	}
	if _, err := NewCore(DefaultConfig(), 0, 3, 3, nil); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
	bad := DefaultConfig()
	bad.SubChunkBytes = 2
	if _, err := NewCore(bad, 0, 0, 1, nil); !errors.Is(err, ErrBadConfig) {
		t.Fatal(err)
	}
}

// FuzzCoreStep feeds arbitrary messages (as a decoder of outside bytes
// would produce them) to a core running an operation: it must never panic,
// and never write outside the buffer.
func FuzzCoreStep(f *testing.F) {
	f.Add(uint8(1), 0, uint64(0), uint64(0), uint32(0), uint8(1), uint64(8), 2, 0)
	f.Add(uint8(2), 2, uint64(0), uint64(0), uint32(4), uint8(1), uint64(8), 0, 0)
	f.Add(uint8(1), 0, uint64(0), uint64(0), uint32(9), uint8(6), uint64(8), 3, 0)
	f.Add(uint8(3), 1, uint64(0), uint64(0), uint32(0), uint8(0), uint64(0), 0, 5)
	// recursive doubling: rank 1's fold (data seq 0) reaching rank 0, rank
	// 0's result (seq 2) reaching rank 1, a done of round 1 from rank 2
	f.Add(uint8(1), 1, uint64(0), uint64(0), uint32(0), uint8(1|2<<6), uint64(8), 8, 0)
	f.Add(uint8(1), 0, uint64(0), uint64(0), uint32(2), uint8(1|2<<6), uint64(8), 8, 0)
	f.Add(uint8(2), 2, uint64(0), uint64(0), uint32(1), uint8(1|2<<6), uint64(8), 0, 0)
	// an abort notice of generation 0 from a rank that started 3 operations
	f.Add(uint8(MsgAbort), 2, uint64(0), uint64(3), uint32(0), uint8(0), uint64(0), 0, 2)
	f.Fuzz(func(t *testing.T, typ uint8, from int, gen, op uint64, seq uint32, kind uint8, n uint64, plen int, code int) {
		type run struct {
			kind Kind
			algo Algorithm
			rank int
		}
		// recursive doubling on 3 ranks: rank 0 kept with a folded
		// partner, rank 1 folded, rank 2 kept alone
		for _, k := range []run{{KindAllReduce, AlgoRing, 1}, {KindNaiveAllReduce, AlgoAuto, 1}, {KindBroadcast, AlgoAuto, 1},
			{KindAllReduce, AlgoRecursiveDoubling, 0}, {KindAllReduce, AlgoRecursiveDoubling, 1}, {KindAllReduce, AlgoRecursiveDoubling, 2}} {
			cfg := DefaultConfig()
			cfg.SubChunkBytes = 8
			if k.algo == AlgoRecursiveDoubling {
				cfg.SubChunkBytes = 32
			}
			c, err := NewCore(cfg, 0, k.rank, 3, nil)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]float32, 8)
			now := time.Unix(0, 0)
			if _, err := c.Start(now, Spec{Kind: k.kind, Buf: buf[:8:8], Root: 1, Algo: k.algo}); err != nil {
				t.Fatal(err)
			}
			if plen < 0 || plen > 64 {
				plen = 3
			}
			// kind's top two bits pick the message's algorithm
			c.Step(now, Message{Type: MsgType(typ), From: from, To: k.rank, Gen: gen, Op: op, Seq: seq, Kind: Kind(kind & 63), Algo: Algorithm(kind >> 6), Len: n,
				Payload: make([]float32, plen), Code: uint32(code), Culprit: -1})
			c.Ready()
			// an abort notice may leave operations owed: the next start
			// and a skip take them
			if _, err := c.Start(now, Spec{Kind: KindBarrier}); err != nil {
				t.Fatal(err)
			}
			c.Skip(now, ErrCanceled)
			c.Ready()
			c.Tick(now.Add(time.Hour))
			c.Ready()
		}
	})
}

// TestEarlyMessagesBounded: a peer running far ahead cannot make a rank
// hold unbounded data; past Config.MaxEarlyBytes the generation aborts.
func TestEarlyMessagesBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxEarlyBytes = 1000
	c, err := NewCore(cfg, 0, 1, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	released := 0
	for op := uint64(0); op < 10; op++ {
		c.Step(now, Message{Type: MsgData, From: 0, To: 1, Op: op, Kind: KindAllReduce, Len: 200,
			Payload: make([]float32, 100), Release: func() { released++ }})
	}
	if released != 10 {
		t.Fatalf("%d of 10 receive buffers released", released)
	}
	if c.Gen() != 1 {
		t.Fatalf("generation %d: the overflow did not abort generation 0", c.Gen())
	}
	// the op this rank starts now is in generation 1 and completes normally
	if id, err := c.Start(now, Spec{Kind: KindBarrier}); err != nil || id.Gen != 1 {
		t.Fatal(id, err)
	}
}

// TestEarlyBorrowedKeptInPlace: a message whose payload is borrowed (the
// sender's registered memory) is held for an operation not started yet
// as it is, not copied, counts as an empty message against
// MaxEarlyBytes, and is released once consumed.
func TestEarlyBorrowedKeptInPlace(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxEarlyBytes = 1000 // ten copies of 100 values would overflow it
	c, err := NewCore(cfg, 0, 1, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	released := 0
	srcs := make([][]float32, 10)
	for op := range srcs {
		srcs[op] = make([]float32, 100)
		c.Step(now, Message{Type: MsgData, From: 0, To: 1, Op: uint64(op), Kind: KindAllReduce, Algo: AlgoRing, Len: 200,
			Payload: srcs[op], Release: func() { released++ }, Borrowed: true})
	}
	if c.Gen() != 0 || released != 0 {
		t.Fatalf("generation %d, %d released: the borrowed payloads were not held as they are", c.Gen(), released)
	}
	// what the sender's memory holds when this rank reduces, counts
	for i := range srcs[0] {
		srcs[0][i] = 5
	}
	buf := make([]float32, 200)
	for i := range buf {
		buf[i] = 2
	}
	if _, err := c.Start(now, Spec{Kind: KindAllReduce, Algo: AlgoRing, Buf: buf, Reduce: Sum}); err != nil {
		t.Fatal(err)
	}
	c.Ready()
	if c.Gen() != 0 || released != 1 {
		t.Fatalf("generation %d, %d released after the operation consumed one", c.Gen(), released)
	}
	lo, hi := ChunkRange(200, 2, ReduceScatterRecvChunk(1, 1, 2))
	for i := lo; i < hi; i++ {
		if buf[i] != 7 {
			t.Fatalf("value %d is %v, want 7: the held payload was a copy", i, buf[i])
		}
	}
}

// TestPeerAbortKeepsTheClass: an abort notice from a peer fails this
// rank's operation with an error of the class the detecting rank's has
// (transient or permanent), matching ErrAborted and the cause's sentinel.
func TestPeerAbortKeepsTheClass(t *testing.T) {
	for _, sentinel := range []error{ErrTimeout, ErrPeerLost, ErrMismatch, ErrCanceled, ErrClosed, ErrOverflow} {
		code := codeOf(fmt.Errorf("%w: detected", sentinel))
		err := peerAbort("rank 1", code, "detected")
		if !errors.Is(err, ErrAborted) || !errors.Is(err, sentinel) || !strings.Contains(err.Error(), "by rank 1: detected") {
			t.Errorf("%v: %v, want ErrAborted by rank 1 wrapping it", sentinel, err)
		}
		if failure.Transient(err) != failure.Transient(sentinel) {
			t.Errorf("%v (%v): a peer's abort is %v, want %v", sentinel, failure.CodeOf(sentinel), failure.CodeOf(err), failure.Transient(sentinel))
		}
	}
	if got := failure.CodeOf(peerAbort("rank 1", codeMismatch, "x")); got != failure.Internal {
		t.Errorf("a peer's mismatch is %v, want internal", got)
	}
	for _, code := range []uint32{codeOther, 99} {
		if err := peerAbort("rank 1", code, "why"); failure.CodeOf(err) != failure.Aborted || !errors.Is(err, ErrAborted) {
			t.Errorf("code %d: %v (%v), want a transient abort", code, err, failure.CodeOf(err))
		}
	}
}
