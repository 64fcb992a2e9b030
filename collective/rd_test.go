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
)

// TestRDPlan checks the plan for P = 1…33 against its definition: P' is
// the largest power of two ≤ P; the first 2(P − P') ranks pair up, odd
// into even; every round pairs kept ranks symmetrically, each kept rank
// meets log₂P' distinct partners that are all kept ranks, and the rounds'
// partners of a kept rank with its own index cover the P' kept ranks
// exactly once (the butterfly reaches everyone).
func TestRDPlan(t *testing.T) {
	for P := 1; P <= 33; P++ {
		pow := 1
		for pow*2 <= P {
			pow *= 2
		}
		folds := P - pow
		var kept []int
		for r := 0; r < P; r++ {
			p := newRDPlan(r, P)
			if 1<<p.rounds != pow || p.folds != folds {
				t.Fatalf("P=%d rank %d: %d rounds, %d folds; want 2^rounds = %d, folds %d", P, r, p.rounds, p.folds, pow, folds)
			}
			switch {
			case r < 2*folds && r%2 == 1:
				if !p.folded() || p.pair != r-1 || p.sends() != 1 {
					t.Fatalf("P=%d rank %d: %+v, want folded into %d", P, r, p, r-1)
				}
				continue
			case r < 2*folds:
				if p.folded() || p.pair != r+1 || p.sends() != p.rounds+1 {
					t.Fatalf("P=%d rank %d: %+v, want kept with folded partner %d", P, r, p, r+1)
				}
			default:
				if p.folded() || p.pair != -1 || p.sends() != p.rounds {
					t.Fatalf("P=%d rank %d: %+v, want kept alone", P, r, p)
				}
			}
			if p.real(p.vrank) != r {
				t.Fatalf("P=%d rank %d: kept index %d maps back to %d", P, r, p.vrank, p.real(p.vrank))
			}
			kept = append(kept, r)
		}
		if len(kept) != pow {
			t.Fatalf("P=%d: %d kept ranks, want %d", P, len(kept), pow)
		}
		for _, r := range kept {
			p := newRDPlan(r, P)
			reached := map[int]bool{r: true}
			for k := 1; k <= p.rounds; k++ {
				q := p.partner(k)
				if !slices.Contains(kept, q) || newRDPlan(q, P).partner(k) != r {
					t.Fatalf("P=%d rank %d round %d: partner %d is not kept or does not pair back", P, r, k, q)
				}
				// after round k, r's sum covers its 2^k-block
				for x := range reached {
					reached[newRDPlan(x, P).partner(k)] = true
				}
			}
			if len(reached) != pow {
				t.Fatalf("P=%d rank %d: the rounds reach %d kept ranks, want %d", P, r, len(reached), pow)
			}
		}
	}
}

// TestTraceRecursiveDoublingHandWorked: P = 3 (one fold), worked by hand.
// Step 1: rank 1 folds into rank 0 (0 holds 1+10), rank 2 sends its round
// 1 to rank 0, which adds it after the fold. Step 2: rank 0 sends its
// round 1 (1+10) to rank 2 and the result to rank 1.
func TestTraceRecursiveDoublingHandWorked(t *testing.T) {
	bufs := [][]float32{{1, 2}, {10, 20}, {100, 200}}
	steps, err := Trace(KindAllReduce, AlgoRecursiveDoubling, bufs, Sum, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		bufs [][]float32
		data []TraceMsg
	}{
		{[][]float32{{1, 2}, {10, 20}, {100, 200}}, nil},
		{[][]float32{{111, 222}, {10, 20}, {100, 200}}, []TraceMsg{{From: 1, To: 0, Seq: 0}, {From: 2, To: 0, Seq: 1}}},
		{[][]float32{{111, 222}, {111, 222}, {111, 222}}, []TraceMsg{{From: 0, To: 2, Seq: 1}, {From: 0, To: 1, Seq: 2}}},
	}
	if len(steps) != len(want) {
		t.Fatalf("%d steps, want %d", len(steps), len(want))
	}
	for i, w := range want {
		s := steps[i]
		for r := range w.bufs {
			if !slices.Equal(s.Buffers[r], w.bufs[r]) {
				t.Fatalf("step %d rank %d: %v, want %v", i, r, s.Buffers[r], w.bufs[r])
			}
		}
		got := slices.Clone(s.Data)
		slices.SortFunc(got, func(a, b TraceMsg) int { return a.Seq - b.Seq })
		if !slices.Equal(got, w.data) {
			t.Fatalf("step %d: data %v, want %v", i, got, w.data)
		}
	}
	if steps[1].Phase != "recursive-doubling" || RDStage(0, 3) != "fold" || RDStage(1, 3) != "round 1" || RDStage(2, 3) != "unfold" {
		t.Fatalf("phase %q, stages %q %q %q", steps[1].Phase, RDStage(0, 3), RDStage(1, 3), RDStage(2, 3))
	}
}

// TestRDMatchesPlainSum is the property test of recursive doubling, as
// TestAllReduceMatchesPlainSum is the ring's: P = 1…8, sizes from empty
// up, Sum, Avg and Max, random delivery order and duplicated messages;
// every rank ends with the same bits, equal to a float64 sum within
// float32 summation error (checkReduced's bound), the maximum exactly.
func TestRDMatchesPlainSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i, pc := range propCases(rng) {
		for _, op := range []ReduceOp{Sum, Avg, Max} {
			cfg := DefaultConfig()
			cfg.SubChunkBytes = max(4, 4*pc.n)
			s := newSimNet(t, pc.P, cfg, uint64(i))
			s.dupProb = pc.dup
			bufs := randBufs(rng, pc.P, pc.n)
			sum, mag := refSum(bufs)
			top := refMax(bufs)
			for r := range bufs {
				s.start(r, Spec{Kind: KindAllReduce, Buf: bufs[r], Reduce: op, Algo: AlgoRecursiveDoubling})
			}
			s.run()
			for r := range bufs {
				if c := s.last(r); c.Err != nil {
					t.Fatalf("%v %v rank %d: %v", pc, op, r, c.Err)
				}
			}
			if op == Max {
				checkMax(t, bufs, top)
				continue
			}
			checkReduced(t, bufs, sum, mag, pc.P, op, 0, pc.n)
		}
	}
}

// TestRDDroppedMessageFailsEveryRank: a lost data message of any stage
// (fold, a round, unfold) leaves no rank completing; the rank waiting for
// it times out naming the sender, the others get the abort, and the next
// operation succeeds. A lost done message may let the ranks before it
// finish (with the right values), never the rank waiting for it.
func TestRDDroppedMessageFailsEveryRank(t *testing.T) {
	const P = 6 // P' = 4, two folded ranks
	for _, c := range []struct {
		name     string
		typ      MsgType
		from, to int
		seq      uint32
	}{
		{"fold", MsgData, 1, 0, 0},
		{"round 1", MsgData, 2, 0, 1},
		{"round 2", MsgData, 5, 2, 2},
		{"unfold", MsgData, 2, 3, 3},
		{"done 1", MsgDone, 4, 5, 1},
		{"done unfold", MsgDone, 0, 1, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Timeout = 5 * time.Second
			s := newSimNet(t, P, cfg, 3)
			dropped := false
			s.drop = func(m Message) bool {
				if m.Type == c.typ && m.From == c.from && m.To == c.to && m.Seq == c.seq {
					dropped = true
					return true
				}
				return false
			}
			const n = 33
			bufs := randBufs(rand.New(rand.NewPCG(1, 1)), P, n)
			sum, mag := refSum(bufs)
			for r := range bufs {
				s.start(r, Spec{Kind: KindAllReduce, Buf: bufs[r], Algo: AlgoRecursiveDoubling})
			}
			s.run()
			if !dropped {
				t.Fatal("nothing dropped")
			}
			succeeded := map[int]bool{}
			for r := 0; r < P; r++ {
				if len(s.done[r]) == 0 {
					continue
				}
				if c.typ == MsgData || s.last(r).Err != nil || r == c.to {
					t.Fatalf("rank %d completed %+v despite the lost %s", r, s.done[r], c.name)
				}
				succeeded[r] = true
				for i, v := range bufs[r] {
					if math.Abs(float64(v)-sum[i]) > 1e-5*mag[i] {
						t.Fatalf("rank %d finished with element %d = %v, want %v", r, i, v, sum[i])
					}
				}
			}
			s.tick(cfg.Timeout / 2)
			s.run()
			s.tick(cfg.Timeout)
			s.run()
			for r := 0; r < P; r++ {
				if succeeded[r] {
					continue
				}
				err := s.last(r).Err
				if !errors.Is(err, ErrTimeout) {
					t.Fatalf("rank %d: %v, want a timeout", r, err)
				}
				if r == c.to && !strings.Contains(err.Error(), fmt.Sprintf("nothing from rank %d", c.from)) {
					t.Fatalf("rank %d, waiting for the lost message: %v, want it to name rank %d", r, err, c.from)
				}
			}
			s.drop = nil
			bufs = randBufs(rand.New(rand.NewPCG(2, 2)), P, n)
			sum, mag = refSum(bufs)
			for r := range bufs {
				if id := s.start(r, Spec{Kind: KindAllReduce, Buf: bufs[r], Algo: AlgoRecursiveDoubling}); id != (OpID{Gen: 1}) {
					t.Fatalf("next op %v, want gen 1 op 0", id)
				}
			}
			s.run()
			for r := 0; r < P; r++ {
				if err := s.last(r).Err; err != nil {
					t.Fatal(err)
				}
			}
			checkReduced(t, bufs, sum, mag, P, Sum, 0, n)
		})
	}
}

// TestRDMismatchAborts: ranks that disagree on the algorithm (configured
// with different thresholds) fail the operation with ErrMismatch naming
// both, instead of mixing a ring chunk into a recursive-doubling sum.
func TestRDMismatchAborts(t *testing.T) {
	const P = 4
	s := newSimNet(t, P, DefaultConfig(), 1)
	bufs := randBufs(rand.New(rand.NewPCG(1, 1)), P, 8)
	for r := range bufs {
		algo := AlgoRecursiveDoubling
		if r == 2 {
			algo = AlgoRing
		}
		s.start(r, Spec{Kind: KindAllReduce, Buf: bufs[r], Algo: algo})
	}
	s.run()
	mismatched := 0
	for r := 0; r < P; r++ {
		err := s.last(r).Err
		if err == nil {
			t.Fatalf("rank %d completed", r)
		}
		if errors.Is(err, ErrMismatch) && strings.Contains(err.Error(), "algorithm ring") && strings.Contains(err.Error(), "algorithm rd") {
			mismatched++
		}
	}
	if mismatched == 0 {
		t.Fatal("no rank reports the algorithm mismatch")
	}
}

// TestRDStartRejects: recursive doubling runs a float32 AllReduce that fits
// one message; anything else is an argument error naming why.
func TestRDStartRejects(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SubChunkBytes = 64
	c, err := NewCore(cfg, 0, 0, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	for _, c2 := range []struct {
		spec Spec
		want string
	}{
		{Spec{Kind: KindAllReduce, Buf: make([]float32, 17), Algo: AlgoRecursiveDoubling}, "exceed the sub-chunk size"},
		{Spec{Kind: KindAllReduce, Buf: make([]float32, 4), Reduce: Sum.In(2), Algo: AlgoRecursiveDoubling}, "float32 only"},
		{Spec{Kind: KindBroadcast, Buf: make([]float32, 4), Algo: AlgoRecursiveDoubling}, "only AllReduce"},
		{Spec{Kind: KindAllReduce, Buf: make([]float32, 4), Algo: algoEnd}, "only AllReduce chooses"},
	} {
		if _, err := c.Start(now, c2.spec); !errors.Is(err, ErrBadArgument) || !strings.Contains(err.Error(), c2.want) {
			t.Errorf("%+v: %v, want ErrBadArgument saying %q", c2.spec.Kind, err, c2.want)
		}
	}
	if _, err := c.Start(now, Spec{Kind: KindAllReduce, Buf: make([]float32, 16), Algo: AlgoRecursiveDoubling}); err != nil {
		t.Errorf("16 values in a 64-byte sub-chunk: %v", err)
	}
}

// TestAllReduceAlgorithmChoice: auto picks recursive doubling up to the
// threshold (capped by the sub-chunk), float32 only, never for one rank,
// and never when the threshold is negative.
func TestAllReduceAlgorithmChoice(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	small := DefaultSmallAllReduceBytes / 4
	for _, c := range []struct {
		n    int
		op   ReduceOp
		size int
		want Algorithm
	}{
		{0, Sum, 2, AlgoRecursiveDoubling},
		{small, Avg, 8, AlgoRecursiveDoubling},
		{small + 1, Sum, 8, AlgoRing},
		{16, Sum.In(2), 4, AlgoRing},
		{16, Sum, 1, AlgoRing},
	} {
		if got := cfg.AllReduceAlgorithm(c.n, c.op, c.size); got != c.want {
			t.Errorf("%d values %v on %d ranks: %s, want %s", c.n, c.op, c.size, got, c.want)
		}
	}
	capped := cfg
	capped.SubChunkBytes = 64
	if got := capped.AllReduceAlgorithm(17, Sum, 4); got != AlgoRing {
		t.Errorf("17 values with a 64-byte sub-chunk: %s, want the ring", got)
	}
	never := DefaultConfig()
	never.SmallAllReduceBytes = -1
	if err := never.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := never.AllReduceAlgorithm(1, Sum, 4); got != AlgoRing {
		t.Errorf("threshold −1: %s, want the ring", got)
	}
	for _, s := range []string{"auto", "ring", "rd"} {
		if a, err := ParseAlgorithm(s); err != nil || a.String() != s {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", s, a, err)
		}
	}
	if _, err := ParseAlgorithm("tree"); !errors.Is(err, ErrBadArgument) {
		t.Errorf("ParseAlgorithm(tree): %v", err)
	}
}
