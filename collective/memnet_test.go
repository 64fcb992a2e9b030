package collective

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startMem(t *testing.T, P int, cfg Config) (*MemNetwork, []Communicator) {
	t.Helper()
	net := NewMemNetwork(P)
	comms, err := net.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(net.Close)
	return net, comms
}

// allReduceEverywhere runs one AllReduce per rank, each from its own
// goroutine as a trainer would, and returns the errors.
func allReduceEverywhere(comms []Communicator, bufs [][]float32, op ReduceOp) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = c.AllReduce(context.Background(), bufs[r], op).Wait()
		}()
	}
	wg.Wait()
	return errs
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func cloneBufs(b [][]float32) [][]float32 {
	out := make([][]float32, len(b))
	for i := range b {
		out[i] = append([]float32(nil), b[i]...)
	}
	return out
}

// TestMemAllReduceProperty: the communicator over the in-memory transport
// gives every rank the same bits, equal to a plain sum within float32
// summation error, for P = 1…8 and sizes that P does not divide, by the
// ring (small sub-chunks) and by recursive doubling (a threshold above
// every size).
func TestMemAllReduceProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, algo := range []Algorithm{AlgoRing, AlgoRecursiveDoubling} {
		for P := 1; P <= 8; P++ {
			memAllReduceProperty(t, rng, P, algo)
		}
	}
}

func memAllReduceProperty(t *testing.T, rng *rand.Rand, P int, algo Algorithm) {
	cfg := DefaultConfig()
	cfg.SubChunkBytes = 4 * (1 + rng.IntN(50))
	cfg.SmallAllReduceBytes = -1
	if algo == AlgoRecursiveDoubling {
		cfg.SubChunkBytes, cfg.SmallAllReduceBytes = 1<<20, 1<<20
	}
	net, comms := startMem(t, P, cfg)
	defer net.Close()
	for _, n := range []int{0, 1, P - 1, P + 1, 1 + rng.IntN(500), 2000 + rng.IntN(5000)} {
		for _, op := range []ReduceOp{Sum, Avg, Max} {
			if got := AlgorithmOf(comms[0], n, op); P > 1 && got != algo {
				t.Fatalf("P=%d n=%d: the communicator runs %s, want %s", P, n, got, algo)
			}
			bufs := randBufs(rng, P, max(n, 0))
			sum, mag := refSum(bufs)
			top := refMax(bufs)
			noErrors(t, allReduceEverywhere(comms, bufs, op))
			if op == Max {
				checkMax(t, bufs, top)
				continue
			}
			checkReduced(t, bufs, sum, mag, P, op, 0, len(sum))
		}
	}
}

// refMax is the elementwise maximum over ranks.
func refMax(bufs [][]float32) []float32 {
	out := append([]float32(nil), bufs[0]...)
	for _, b := range bufs[1:] {
		for i, v := range b {
			out[i] = max(out[i], v)
		}
	}
	return out
}

// checkMax checks that every rank holds exactly the elementwise maximum: a
// maximum rounds nothing, so any order gives the same bits.
func checkMax(t *testing.T, got [][]float32, want []float32) {
	t.Helper()
	for r := range got {
		for i, v := range got[r] {
			if math.Float32bits(v) != math.Float32bits(want[i]) {
				t.Fatalf("rank %d element %d: max %v, want %v", r, i, v, want[i])
			}
		}
	}
}

// TestMemDuplicateReorderDelayChangeNothing: duplicated, reordered and
// delayed messages leave exactly the bits of a clean run.
func TestMemDuplicateReorderDelayChangeNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, algo := range []Algorithm{AlgoRing, AlgoRecursiveDoubling} {
			memFaultsChangeNothing(t, algo)
		}
	})
}

func memFaultsChangeNothing(t *testing.T, algo Algorithm) {
	const P, n = 5, 997
	bufs := randBufs(rand.New(rand.NewPCG(1, 3)), P, n)
	cfg := DefaultConfig()
	cfg.SubChunkBytes, cfg.SmallAllReduceBytes = 4*37, -1
	if algo == AlgoRecursiveDoubling {
		cfg.SubChunkBytes, cfg.SmallAllReduceBytes = 4*n, 4*n
	}
	faultsChangeNothing(t, algo.String(), bufs, 50*time.Millisecond, func() (*MemNetwork, []Communicator) { return startMem(t, P, cfg) })
}

// faultsChangeNothing sums bufs on a network that start makes, then on
// another that duplicates every third message, reorders every fourth and
// delays every fifth by delay, and checks that both give the same bits.
func faultsChangeNothing(t *testing.T, what string, bufs [][]float32, delay time.Duration, start func() (*MemNetwork, []Communicator)) {
	t.Helper()
	clean := cloneBufs(bufs)
	net, comms := start()
	noErrors(t, allReduceEverywhere(comms, clean, Sum))
	net.Close()

	net, comms = start()
	defer net.Close()
	var k int // Match runs under the network's lock
	every := func(mod int) func(Message) bool {
		return func(Message) bool { k++; return k%mod == 0 }
	}
	dup := net.Inject(Fault{Action: FaultDuplicate, Match: every(3)})
	reo := net.Inject(Fault{Action: FaultReorder, Match: every(4)})
	del := net.Inject(Fault{Action: FaultDelay, Delay: delay, Match: every(5)})
	faulty := cloneBufs(bufs)
	noErrors(t, allReduceEverywhere(comms, faulty, Sum))
	if dup.Hits(net) == 0 || reo.Hits(net) == 0 || del.Hits(net) == 0 {
		t.Fatalf("%s: faults acted %d/%d/%d times", what, dup.Hits(net), reo.Hits(net), del.Hits(net))
	}
	for r := range faulty {
		for i := range faulty[r] {
			if math.Float32bits(faulty[r][i]) != math.Float32bits(clean[r][i]) {
				t.Fatalf("%s: rank %d element %d: %v with faults, %v without", what, r, i, faulty[r][i], clean[r][i])
			}
		}
	}
}

// TestMemDroppedMessage: a lost message fails the operation on every rank
// within the timeout, with an error naming a silent peer, and the next
// operation (a new generation) succeeds.
func TestMemDroppedMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const P, n = 4, 100
		cfg := DefaultConfig()
		cfg.Timeout = 3 * time.Second
		cfg.SubChunkBytes = 40
		net, comms := startMem(t, P, cfg)
		net.Inject(Fault{Action: FaultDrop, Count: 1, Match: func(m Message) bool {
			return m.Type == MsgData && m.From == 2 && m.Seq == 5
		}})
		start := time.Now()
		errs := allReduceEverywhere(comms, randBufs(rand.New(rand.NewPCG(1, 1)), P, n), Sum)
		elapsed := time.Since(start)
		named := false
		for r, err := range errs {
			var oe *OpError
			if !errors.Is(err, ErrTimeout) || !errors.As(err, &oe) || oe.ID != (OpID{Gen: 0, Op: 0}) {
				t.Fatalf("rank %d: %v, want a timeout of gen 0 op 0", r, err)
			}
			named = named || strings.Contains(err.Error(), "nothing from rank 2")
		}
		if !named {
			t.Fatalf("no error names rank 2: %v", errs)
		}
		// Timeouts are checked on ticks of Timeout/10.
		if elapsed > cfg.Timeout+cfg.Timeout/5 {
			t.Fatalf("errors after %v, timeout %v", elapsed, cfg.Timeout)
		}
		bufs := randBufs(rand.New(rand.NewPCG(2, 2)), P, n)
		sum, mag := refSum(bufs)
		noErrors(t, allReduceEverywhere(comms, bufs, Sum))
		checkReduced(t, bufs, sum, mag, P, Sum, 0, n)
		hs := make([]*Handle, P)
		for r := range comms {
			hs[r] = comms[r].Barrier(context.Background())
		}
		if err := WaitAll(hs...); err != nil || hs[0].ID() != (OpID{Gen: 1, Op: 1}) {
			t.Fatalf("barrier after recovery: %v %v", err, hs[0].ID())
		}
	})
}

// TestMemKilledRank: a rank that dies with a failure signal fails the
// operation on every survivor at once (no timeout), naming it; the
// survivors then form a group without it and reduce again.
func TestMemKilledRank(t *testing.T) {
	for _, notify := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			const P, n = 4, 64
			cfg := DefaultConfig()
			cfg.Timeout = 10 * time.Second
			net, comms := startMem(t, P, cfg)
			net.Inject(Fault{Action: FaultDelay, Delay: time.Second}) // keep the op in flight
			bufs := randBufs(rand.New(rand.NewPCG(3, 3)), P, n)
			hs := make([]*Handle, P)
			for r := range comms {
				hs[r] = comms[r].AllReduce(context.Background(), bufs[r], Sum)
			}
			time.Sleep(100 * time.Millisecond)
			start := time.Now()
			net.Kill(2, notify)
			net.ClearFaults()
			want := ErrPeerLost
			if !notify {
				want = ErrTimeout
			}
			for r, h := range hs {
				err := h.Wait()
				if r == 2 {
					if !errors.Is(err, ErrClosed) {
						t.Fatalf("killed rank: %v", err)
					}
					continue
				}
				if !errors.Is(err, want) || !strings.Contains(err.Error(), "rank") {
					t.Fatalf("notify=%v rank %d: %v, want %v", notify, r, err, want)
				}
				if notify && !strings.Contains(err.Error(), "rank 2") {
					t.Fatalf("rank %d: %v does not name rank 2", r, err)
				}
			}
			if d := time.Since(start); notify && d > 2*time.Second || d > cfg.Timeout+2*time.Second {
				t.Fatalf("notify=%v: errors after %v", notify, d)
			}
			survivors := []int{0, 1, 3}
			groups := make([]Communicator, 0, 3)
			for _, r := range survivors {
				g, err := comms[r].Group(survivors)
				if err != nil {
					t.Fatal(err)
				}
				groups = append(groups, g)
			}
			gb := randBufs(rand.New(rand.NewPCG(4, 4)), 3, n)
			sum, mag := refSum(gb)
			noErrors(t, allReduceEverywhere(groups, gb, Avg))
			checkReduced(t, gb, sum, mag, 3, Avg, 0, n)
			if groups[2].Rank() != 2 || groups[2].Size() != 3 {
				t.Fatal("group ranks")
			}
		})
	}
}

// TestMemPartitionThenHeal: a partition gives timeouts on both sides; once
// healed, the next operation succeeds.
func TestMemPartitionThenHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const P = 4
		cfg := DefaultConfig()
		cfg.Timeout = 2 * time.Second
		net, comms := startMem(t, P, cfg)
		net.Partition([]int{0, 1})
		for r, err := range allReduceEverywhere(comms, randBufs(rand.New(rand.NewPCG(5, 5)), P, 33), Sum) {
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		net.Heal()
		// The two sides aborted separately: each is at generation 1.
		bufs := randBufs(rand.New(rand.NewPCG(6, 6)), P, 33)
		sum, mag := refSum(bufs)
		noErrors(t, allReduceEverywhere(comms, bufs, Sum))
		checkReduced(t, bufs, sum, mag, P, Sum, 0, 33)
	})
}

// TestMemCancelFailsEveryRank: a canceled context on one rank aborts the
// operation everywhere.
func TestMemCancelFailsEveryRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const P = 3
		net, comms := startMem(t, P, DefaultConfig())
		net.Inject(Fault{Action: FaultDelay, Delay: time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		hs := []*Handle{
			comms[0].AllReduce(ctx, make([]float32, 10), Sum),
			comms[1].AllReduce(context.Background(), make([]float32, 10), Sum),
			comms[2].AllReduce(context.Background(), make([]float32, 10), Sum),
		}
		time.Sleep(10 * time.Millisecond)
		cancel()
		for r, h := range hs {
			if err := h.Wait(); !errors.Is(err, ErrCanceled) {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		if err := comms[1].AllReduce(ctx, nil, Sum).Wait(); !errors.Is(err, ErrCanceled) {
			t.Fatalf("already canceled: %v", err)
		}
	})
}

func TestMemCloseFailsPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, comms := startMem(t, 2, DefaultConfig())
		h := comms[0].AllReduce(context.Background(), make([]float32, 8), Sum)
		if err := comms[0].Close(); err != nil {
			t.Fatal(err)
		}
		if err := h.Wait(); !errors.Is(err, ErrClosed) {
			t.Fatalf("%v, want closed", err)
		}
		if err := comms[0].Barrier(context.Background()).Wait(); !errors.Is(err, ErrClosed) {
			t.Fatalf("after close: %v", err)
		}
		if _, err := comms[0].Group([]int{0, 1}); !errors.Is(err, ErrClosed) {
			t.Fatalf("group after close: %v", err)
		}
		// rank 1 issued nothing: its first operation finds rank 0 gone.
		h = comms[1].AllReduce(context.Background(), make([]float32, 8), Sum)
		if err := h.Wait(); !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrClosed) {
			t.Fatalf("rank 1: %v", err)
		}
	})
}

func TestMemOtherCollectives(t *testing.T) {
	const P, n = 3, 50
	_, comms := startMem(t, P, DefaultConfig())
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(9, 9))
	want := randBufs(rng, 1, n)[0]
	bufs := make([][]float32, P)
	hs := make([]*Handle, P)
	for r := range comms {
		bufs[r] = make([]float32, n)
		if r == 1 {
			copy(bufs[r], want)
		}
		hs[r] = comms[r].Broadcast(ctx, bufs[r], 1)
	}
	if err := WaitAll(hs...); err != nil {
		t.Fatal(err)
	}
	for r := range bufs {
		for i := range want {
			if bufs[r][i] != want[i] {
				t.Fatalf("broadcast rank %d", r)
			}
		}
	}
	in := randBufs(rng, P, n)
	sum, mag := refSum(in)
	for r := range comms {
		hs[r] = comms[r].NaiveAllReduce(ctx, in[r], Sum)
	}
	if err := WaitAll(hs...); err != nil {
		t.Fatal(err)
	}
	checkReduced(t, in, sum, mag, P, Sum, 0, n)
	if err := comms[0].Broadcast(ctx, nil, 5).Wait(); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
	if _, err := comms[0].Group([]int{1, 2}); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
}
