package collective

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/troupe-ml/troupe/kernels"
)

// hostsOf spreads P = H·L ranks over H hosts, shuffled by rng (nil: host
// by host, ranks 0…L−1 on the first).
func hostsOf(rng *rand.Rand, H, L int) []string {
	hosts := make([]string, 0, H*L)
	for h := range H {
		for range L {
			hosts = append(hosts, fmt.Sprintf("h%d", h))
		}
	}
	if rng != nil {
		rng.Shuffle(len(hosts), func(i, j int) { hosts[i], hosts[j] = hosts[j], hosts[i] })
	}
	return hosts
}

func TestPlanHierarchical(t *testing.T) {
	for _, c := range []struct {
		hosts []string
		ok    bool
		why   string
	}{
		{[]string{"a", "a", "b", "b"}, true, ""},
		{[]string{"a", "b", "a", "b"}, true, ""},
		{[]string{"a", "a", "a", "a"}, false, "one host"},
		{[]string{"a", "b", "c", "d"}, false, "one rank per host"},
		{[]string{"a", "a", "b", "b", "b"}, false, "unequal hosts"},
		{[]string{"a", "a", "", ""}, false, "a host unknown"},
		{nil, false, "no hosts"},
	} {
		_, ok := PlanHierarchical(c.hosts, 0)
		if ok != c.ok {
			t.Errorf("%v (%s): ok %v, want %v", c.hosts, c.why, ok, c.ok)
		}
	}
	l, _ := PlanHierarchical([]string{"a", "b", "a", "b", "c", "c"}, 3)
	if !slices.Equal(l.Local, []int{1, 3}) || !slices.Equal(l.Cross, []int{2, 3, 5}) || l.Hosts != 3 || l.PerHost != 2 {
		t.Fatalf("rank 3 of a,b,a,b,c,c: %+v", l)
	}
	// Every rank is in one cross group, whose members hold the same local
	// index on distinct hosts, and the cross groups of a host's ranks
	// cover every rank once.
	rng := rand.New(rand.NewPCG(4, 2))
	for range 50 {
		H, L := 2+rng.IntN(3), 2+rng.IntN(3)
		hosts := hostsOf(rng, H, L)
		seen := make([]int, H*L)
		l0, _ := PlanHierarchical(hosts, 0)
		for _, x := range l0.Local {
			lx, _ := PlanHierarchical(hosts, x)
			for _, y := range lx.Cross {
				seen[y]++
			}
		}
		for r := range hosts {
			l, ok := PlanHierarchical(hosts, r)
			if !ok || len(l.Local) != L || len(l.Cross) != H {
				t.Fatalf("%v rank %d: %+v %v", hosts, r, l, ok)
			}
			i := l.LocalIndex(r)
			on := map[string]bool{}
			for _, x := range l.Cross {
				lx, _ := PlanHierarchical(hosts, x)
				if lx.LocalIndex(x) != i || on[hosts[x]] || !slices.Equal(lx.Cross, l.Cross) {
					t.Fatalf("%v rank %d: cross group %v: rank %d at local index %d (want %d)", hosts, r, l.Cross, x, lx.LocalIndex(x), i)
				}
				on[hosts[x]] = true
			}
		}
		for r, k := range seen {
			if k != 1 {
				t.Fatalf("%v: rank %d in %d cross groups of rank 0's host", hosts, r, k)
			}
		}
	}
}

// startHier starts a memory network of ranks on hosts.
func startHier(t *testing.T, hosts []string, cfg Config) (*MemNetwork, []Communicator) {
	t.Helper()
	net := NewMemNetwork(len(hosts))
	if err := net.SetHosts(hosts); err != nil {
		t.Fatal(err)
	}
	comms, err := net.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(net.Close)
	return net, comms
}

// TestHierAllReduceProperty: over hosts of 2–4 ranks (ranks shuffled over
// the hosts), the hierarchical all-reduce gives every rank the same bits,
// equal to a plain sum within float32 summation error (checkReduced: P
// terms in any order, P·2⁻²³·Σ|x|), the exact maximum, for sizes that
// neither the hosts nor their ranks divide; the steps inside a host never
// send to another host; and the meter counts what went on the wire.
func TestHierAllReduceProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, hl := range [][2]int{{2, 2}, {2, 3}, {3, 2}, {2, 4}, {4, 2}} {
		H, L := hl[0], hl[1]
		P := H * L
		hosts := hostsOf(rng, H, L)
		t.Run(strings.Join(hosts, ","), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.SubChunkBytes = 4 * (1 + rng.IntN(50))
			cfg.SmallAllReduceBytes = -1
			net, comms := startHier(t, hosts, cfg)
			var mu sync.Mutex
			wire := make([]int64, P)
			var crossed []string
			local := map[uint32]bool{}
			for r := range hosts {
				l, _ := PlanHierarchical(hosts, r)
				local[groupIDTagged(l.Local, "hier-rs/0")] = true
				local[groupIDTagged(l.Local, "hier-ag/0")] = true
			}
			net.Inject(Fault{Action: FaultDrop, Match: func(m Message) bool {
				mu.Lock()
				defer mu.Unlock()
				wire[m.From] += int64(len(m.Payload))
				if local[m.Group] && hosts[m.From] != hosts[m.To] {
					crossed = append(crossed, fmt.Sprintf("%s from rank %d on %s to rank %d on %s", m.Type, m.From, hosts[m.From], m.To, hosts[m.To]))
				}
				return false
			}})
			meter := NewMeter()
			metered := make([]Communicator, P)
			for r, c := range comms {
				metered[r] = meter.Wrap(c)
			}
			var want int64
			for _, n := range []int{0, 1, P - 1, P + 1, 1 + rng.IntN(500), 2000 + rng.IntN(3000)} {
				for _, op := range []ReduceOp{Sum, Avg, Max} {
					if got := AlgorithmOf(metered[0], n, op); got != AlgoHierarchical {
						t.Fatalf("n=%d: the communicator runs %s, want hier", n, got)
					}
					for r := range metered {
						want += 4 * AllReduceSentOf(metered[r], n, op)
					}
					bufs := randBufs(rng, P, n)
					sum, mag := refSum(bufs)
					top := refMax(bufs)
					noErrors(t, allReduceEverywhere(metered, bufs, op))
					if op == Max {
						checkMax(t, bufs, top)
						continue
					}
					checkReduced(t, bufs, sum, mag, P, op, 0, n)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(crossed) > 0 {
				t.Fatalf("a step inside a host sent to another host: %s", crossed[0])
			}
			var got int64
			for _, v := range wire {
				got += 4 * v
			}
			if m := meter.Take()[KindAllReduce]; m != want || got != want {
				t.Fatalf("meter %d bytes, AllReduceSentOf %d, wire %d", m, want, got)
			}
		})
	}
}

// TestHierChoice: on two hosts of two ranks a float32 all-reduce above the
// recursive doubling threshold runs hierarchically; a small buffer, a
// 16-bit wire, Config.NoHierarchical and a group of one rank per host do
// not; a Core refuses the algorithm.
func TestHierChoice(t *testing.T) {
	cfg := DefaultConfig()
	_, comms := startHier(t, []string{"a", "a", "b", "b"}, cfg)
	small := cfg.SmallAllReduceBytes / 4
	for _, c := range []struct {
		n    int
		op   ReduceOp
		want Algorithm
	}{
		{small, Sum, AlgoRecursiveDoubling},
		{small + 1, Sum, AlgoHierarchical},
		{small + 1, Avg.In(kernels.BF16), AlgoRing},
	} {
		if got := AlgorithmOf(comms[0], c.n, c.op); got != c.want {
			t.Errorf("%d values %s: %s, want %s", c.n, c.op, got, c.want)
		}
	}
	cfg.NoHierarchical = true
	_, flat := startHier(t, []string{"a", "a", "b", "b"}, cfg)
	if got := AlgorithmOf(flat[0], small+1, Sum); got != AlgoRing {
		t.Errorf("NoHierarchical: %s", got)
	}
	// A group of one rank per host, or of one host, is flat.
	g, err := comms[0].Group([]int{0, 2})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := AlgorithmOf(g, small+1, Sum); got != AlgoRing {
		t.Errorf("group of one rank per host: %s", got)
	}
	core, _ := NewCore(DefaultConfig(), 0, 0, 2, nil)
	if _, err := core.Start(time.Now(), Spec{Kind: KindAllReduce, Buf: make([]float32, 4), Algo: AlgoHierarchical}); !errors.Is(err, ErrBadArgument) {
		t.Errorf("a core started a hierarchical all-reduce: %v", err)
	}
}

// TestHierPipelinedBuckets: a rank issues several all-reduces before
// waiting for any (a backward pass's buckets), every rank in the same
// order; each ends with its own sum.
func TestHierPipelinedBuckets(t *testing.T) {
	const B = 12
	hosts := []string{"a", "b", "a", "b", "a", "b"}
	cfg := DefaultConfig()
	cfg.SubChunkBytes, cfg.SmallAllReduceBytes = 64, -1
	_, comms := startHier(t, hosts, cfg)
	rng := rand.New(rand.NewPCG(5, 6))
	bufs := make([][][]float32, B)
	sums, mags := make([][]float64, B), make([][]float64, B)
	for b := range bufs {
		bufs[b] = randBufs(rng, len(hosts), 1+rng.IntN(300))
		sums[b], mags[b] = refSum(bufs[b])
	}
	var wg sync.WaitGroup
	errs := make([]error, len(hosts))
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hs := make([]*Handle, B)
			for b := range hs {
				hs[b] = c.AllReduce(context.Background(), bufs[b][r], Avg)
			}
			errs[r] = WaitAll(hs...)
		}()
	}
	wg.Wait()
	noErrors(t, errs)
	for b := range bufs {
		checkReduced(t, bufs[b], sums[b], mags[b], len(hosts), Avg, 0, len(sums[b]))
	}
}

// TestHierFaultsChangeNothing: duplicated, reordered and delayed messages
// leave exactly the bits of a clean run.
func TestHierFaultsChangeNothing(t *testing.T) {
	hosts := []string{"a", "a", "b", "b", "c", "c"}
	cfg := DefaultConfig()
	cfg.SubChunkBytes, cfg.SmallAllReduceBytes = 4*37, -1
	bufs := randBufs(rand.New(rand.NewPCG(1, 3)), len(hosts), 997)
	faultsChangeNothing(t, "hier", bufs, 20*time.Millisecond, func() (*MemNetwork, []Communicator) { return startHier(t, hosts, cfg) })
}

// TestHierDroppedMessageFailsEveryRank: a message lost in any of the
// steps fails the all-reduce on every rank within the timeout (the ranks
// that never reach the lost step, or run it on another host, fail too:
// skipped steps abort the later steps' groups, and the closing barrier spans the
// hosts); later all-reduces on that communicator fail, and a new group of
// the same ranks reduces correctly.
func TestHierDroppedMessageFailsEveryRank(t *testing.T) {
	hosts := []string{"a", "a", "b", "b"}
	for _, step := range []string{"hier-rs", "hier-ar", "hier-ag", "hier-done"} {
		t.Run(step, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.Timeout = 3 * time.Second
				cfg.SubChunkBytes, cfg.SmallAllReduceBytes = 40, -1
				net, comms := startHier(t, hosts, cfg)
				ids := map[uint32]bool{}
				for r := range hosts {
					l, _ := PlanHierarchical(hosts, r)
					members := l.Local
					if step == "hier-ar" || step == "hier-done" {
						members = l.Cross
					}
					ids[groupIDTagged(members, step+"/0")] = true
				}
				count := 1
				if step == "hier-done" {
					// A two-rank barrier survives one lost count (the next
					// one carries it): cut rank 1's counts to 3 off.
					count = 0
				}
				f := net.Inject(Fault{Action: FaultDrop, Count: count, Match: func(m Message) bool {
					if step == "hier-done" {
						return m.Type == MsgDone && ids[m.Group] && m.From == 1
					}
					return m.Type == MsgData && ids[m.Group] && m.From == 1
				}})
				const n = 101
				start := time.Now()
				errs := allReduceEverywhere(comms, randBufs(rand.New(rand.NewPCG(1, 1)), len(hosts), n), Sum)
				if f.Hits(net) == 0 || count == 1 && f.Hits(net) != 1 {
					t.Fatalf("the fault dropped %d messages", f.Hits(net))
				}
				for r, err := range errs {
					// The closing barrier's counts are the last messages: as
					// with the ring's, losing them fails the rank waiting
					// for them (3), while the others may have completed.
					if err == nil && (step != "hier-done" || r == 3) {
						t.Fatalf("rank %d succeeded with a message of %s lost", r, step)
					}
				}
				if d := time.Since(start); d > 2*cfg.Timeout {
					t.Fatalf("errors after %v, timeout %v", d, cfg.Timeout)
				}
				for r, err := range allReduceEverywhere(comms, randBufs(rand.New(rand.NewPCG(2, 2)), len(hosts), n), Sum) {
					if !errors.Is(err, ErrAborted) {
						t.Fatalf("rank %d: after a failure: %v, want ErrAborted", r, err)
					}
				}
				groups := make([]Communicator, len(comms))
				var wg sync.WaitGroup
				for r := range comms {
					wg.Add(1)
					go func() {
						defer wg.Done()
						g, err := comms[r].Group([]int{0, 1, 2, 3})
						if err != nil {
							t.Error(err)
						}
						groups[r] = g
					}()
				}
				wg.Wait()
				for range 2 {
					bufs := randBufs(rand.New(rand.NewPCG(2, 2)), len(hosts), n)
					sum, mag := refSum(bufs)
					noErrors(t, allReduceEverywhere(groups, bufs, Sum))
					checkReduced(t, bufs, sum, mag, len(hosts), Sum, 0, n)
				}
			})
		})
	}
}

// TestHierKilledRank: a rank that dies fails every survivor's all-reduce
// well before the timeout, also the ranks that share no group with it
// (they learn it through the skipped steps of their peers, and a step
// issued after its peer aborted fails at once: Core's owed operations).
func TestHierKilledRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hosts := []string{"a", "a", "b", "b"}
		cfg := DefaultConfig()
		cfg.Timeout = 10 * time.Second
		cfg.SmallAllReduceBytes = -1
		net, comms := startHier(t, hosts, cfg)
		net.Inject(Fault{Action: FaultDelay, Delay: time.Second}) // keep the op in flight
		bufs := randBufs(rand.New(rand.NewPCG(3, 3)), len(hosts), 64)
		hs := make([]*Handle, len(hosts))
		for r := range comms {
			hs[r] = comms[r].AllReduce(context.Background(), bufs[r], Sum)
		}
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		net.Kill(2, true)
		net.ClearFaults()
		for r, h := range hs {
			err := h.Wait()
			if r == 2 {
				continue
			}
			if err == nil {
				t.Fatalf("rank %d succeeded without rank 2", r)
			}
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("errors after %v", d)
		}
	})
}

// TestHierCloseFailsPending: closing a communicator fails its queued
// hierarchical all-reduces, stops its goroutines (goleak checks), and
// later calls fail with ErrClosed.
func TestHierCloseFailsPending(t *testing.T) {
	hosts := []string{"a", "a", "b", "b"}
	cfg := DefaultConfig()
	cfg.SmallAllReduceBytes = -1
	_, comms := startHier(t, hosts, cfg)
	// Only rank 0 issues: its steps wait for peers that never come.
	h := comms[0].AllReduce(context.Background(), make([]float32, 100), Sum)
	comms[0].Close()
	if err := h.Wait(); err == nil {
		t.Fatal("a pending all-reduce succeeded after Close")
	}
	if err := comms[0].AllReduce(context.Background(), make([]float32, 100), Sum).Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestSkippedOperation: a rank that skips an operation (Core.Skip, as a
// hierarchical all-reduce skips its steps after a failure) fails it on the
// peer that runs it and, at once rather than after the timeout, on the
// peer that starts it later; the ranks' next operations meet in the new
// generation. A plain abort (a cancel) leaves a late peer's operation to
// the next generation, as before: it pairs with the others' next one.
func TestSkippedOperation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Timeout = 5 * time.Second
		_, comms := startMem(t, 3, cfg)
		h1 := comms[1].AllReduce(context.Background(), make([]float32, 10), Sum)
		synctest.Wait()
		comms[0].(*frontend).skip(ErrPeerLost)
		if err := h1.Wait(); !errors.Is(err, ErrAborted) {
			t.Fatalf("rank 1: %v", err)
		}
		synctest.Wait() // rank 2 has the abort notices
		start := time.Now()
		h2 := comms[2].AllReduce(context.Background(), make([]float32, 10), Sum)
		if err := h2.Wait(); !errors.Is(err, ErrAborted) || h2.ID() != (OpID{Gen: 0, Op: 0}) {
			t.Fatalf("rank 2's late operation: %v (%v)", err, h2.ID())
		}
		if d := time.Since(start); d >= cfg.Timeout {
			t.Fatalf("the late operation failed after %v", d)
		}
		bufs := randBufs(rand.New(rand.NewPCG(9, 9)), 3, 10)
		sum, mag := refSum(bufs)
		noErrors(t, allReduceEverywhere(comms, bufs, Sum))
		checkReduced(t, bufs, sum, mag, 3, Sum, 0, 10)
	})
}
