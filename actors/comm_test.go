package actors

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-ml/troupe/collective"
)

func newLocalSystem(t *testing.T) *System {
	t.Helper()
	sys, err := NewSystem(DefaultSystemConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Close() })
	return sys
}

func closeAll(t *testing.T, comms []collective.Communicator) {
	t.Helper()
	for _, c := range comms {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
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

// checkSum checks that every rank holds the same bits, equal to the float64
// sum within float32 summation error: P terms summed in any order are off
// by at most (P−1)·2⁻²⁴·Σ|x|; we allow P·2⁻²³·Σ|x|.
func checkSum(t *testing.T, in, got [][]float32, avg bool) {
	t.Helper()
	P := len(in)
	for i := range in[0] {
		var sum, mag float64
		for r := range in {
			sum += float64(in[r][i])
			mag += math.Abs(float64(in[r][i]))
		}
		tol := float64(P) * math.Ldexp(mag, -23)
		if avg {
			sum /= float64(P)
			tol /= float64(P)
		}
		for r := range got {
			if math.Float32bits(got[r][i]) != math.Float32bits(got[0][i]) {
				t.Fatalf("element %d: rank %d has %v, rank 0 %v", i, r, got[r][i], got[0][i])
			}
		}
		if math.Abs(float64(got[0][i])-sum) > tol+1e-30 {
			t.Fatalf("element %d: %v, want %v ± %g", i, got[0][i], sum, tol)
		}
	}
}

func clone(b [][]float32) [][]float32 {
	out := make([][]float32, len(b))
	for i := range b {
		out[i] = append([]float32(nil), b[i]...)
	}
	return out
}

// runAll issues one operation per rank, each from its own goroutine.
func runAll(comms []collective.Communicator, op func(r int, c collective.Communicator) *collective.Handle) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = op(r, c).Wait()
		}()
	}
	wg.Wait()
	return errs
}

// waitEarlier waits for every handle but the last (which runAll waits for):
// operations in flight together complete in any order (a small one by
// recursive doubling can finish on a rank after a large ring that started
// later: the ring's completion does not wait for the other's messages).
func waitEarlier(t *testing.T, r int, hs []*collective.Handle) {
	for k, h := range hs[:len(hs)-1] {
		if err := h.Wait(); err != nil {
			t.Errorf("rank %d, operation %d: %v", r, k, err)
		}
	}
}

func noErr(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestLocalAllReduce: Comm actors in one process, chunks passed by pointer,
// against a plain sum; P = 1…8, sizes that P does not divide, and several
// operations in flight at once (buckets).
func TestLocalAllReduce(t *testing.T) {
	sys := newLocalSystem(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for P := 1; P <= 8; P++ {
		cfg := DefaultCommConfig()
		cfg.Collective.SubChunkBytes = 4 * (1 + rng.IntN(64))
		comms, err := StartLocal(sys, P, cfg)
		if err != nil {
			t.Fatal(err)
		}
		sizes := []int{0, 1, P + 1, 1 + rng.IntN(300), 3000 + rng.IntN(3000)}
		ins := make([][][]float32, len(sizes))
		outs := make([][][]float32, len(sizes))
		for k, n := range sizes {
			ins[k] = randBufs(rng, P, n)
			outs[k] = clone(ins[k])
		}
		noErr(t, runAll(comms, func(r int, c collective.Communicator) *collective.Handle {
			hs := make([]*collective.Handle, len(sizes))
			for k := range sizes {
				hs[k] = c.AllReduce(context.Background(), outs[k][r], collective.Avg)
			}
			waitEarlier(t, r, hs)
			return hs[len(hs)-1]
		}))
		for k := range sizes {
			checkSum(t, ins[k], outs[k], true)
		}
		closeAll(t, comms)
	}
}

func TestLocalOtherCollectivesAndGroups(t *testing.T) {
	sys := newLocalSystem(t)
	const P, n = 4, 1001
	comms, err := StartLocal(sys, P, DefaultCommConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(t, comms)
	rng := rand.New(rand.NewPCG(3, 4))
	in := randBufs(rng, P, n)
	out := clone(in)
	noErr(t, runAll(comms, func(r int, c collective.Communicator) *collective.Handle {
		return c.NaiveAllReduce(context.Background(), out[r], collective.Sum)
	}))
	checkSum(t, in, out, false)
	noErr(t, runAll(comms, func(r int, c collective.Communicator) *collective.Handle {
		return c.Barrier(context.Background())
	}))
	noErr(t, runAll(comms, func(r int, c collective.Communicator) *collective.Handle {
		return c.Broadcast(context.Background(), out[r], 2)
	}))

	// two disjoint groups, as data parallel groups of two pipeline stages.
	groups := make([]collective.Communicator, P)
	for r, c := range comms {
		g, err := c.Group([]int{r % 2, r%2 + 2})
		if err != nil {
			t.Fatal(err)
		}
		groups[r] = g
	}
	in = randBufs(rng, P, n)
	out = clone(in)
	noErr(t, runAll(groups, func(r int, g collective.Communicator) *collective.Handle {
		return g.AllReduce(context.Background(), out[r], collective.Sum)
	}))
	checkSum(t, [][]float32{in[0], in[2]}, [][]float32{out[0], out[2]}, false)
	checkSum(t, [][]float32{in[1], in[3]}, [][]float32{out[1], out[3]}, false)
}

// TestLocalKilledRank: a Comm actor that stops (as on a crash) fails the
// operation on every other rank at once through protoactor's watch, with
// an error naming it; the survivors then reduce in a group without it.
func TestLocalKilledRank(t *testing.T) {
	sys := newLocalSystem(t)
	const P, n = 4, 1 << 16
	cfg := DefaultCommConfig()
	cfg.Collective.Timeout = time.Minute // the watch must act, not the timeout
	comms, err := StartLocal(sys, P, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(t, comms)
	bufs := randBufs(rand.New(rand.NewPCG(5, 6)), P, n)
	hs := make([]*collective.Handle, P)
	for r := 0; r < P; r++ {
		if r != 2 { // rank 2 never joins: the others wait on it
			hs[r] = comms[r].AllReduce(context.Background(), bufs[r], collective.Sum)
		}
	}
	sys.Root().Stop(actor.NewPID(sys.Address(), localCommName("troupe", 1, 2)))
	for r, h := range hs {
		if h == nil {
			continue
		}
		err := h.Wait()
		if !errors.Is(err, collective.ErrPeerLost) || !strings.Contains(err.Error(), "rank 2") {
			t.Fatalf("rank %d: %v, want peer lost naming rank 2", r, err)
		}
	}
	if err := comms[2].Barrier(context.Background()).Wait(); !errors.Is(err, collective.ErrClosed) {
		t.Fatalf("the stopped rank: %v", err)
	}
	survivors := []int{0, 1, 3}
	groups := make([]collective.Communicator, 0, 3)
	for _, r := range survivors {
		g, err := comms[r].Group(survivors)
		if err != nil {
			t.Fatal(err)
		}
		groups = append(groups, g)
	}
	in := randBufs(rand.New(rand.NewPCG(7, 8)), 3, 999)
	out := clone(in)
	noErr(t, runAll(groups, func(r int, g collective.Communicator) *collective.Handle {
		return g.AllReduce(context.Background(), out[r], collective.Sum)
	}))
	checkSum(t, in, out, false)
}

// TestLocalTimeoutThenRecover: a rank that does not issue the operation
// leaves the others waiting until the timeout, on every rank; the next
// operation (new generation) succeeds.
func TestLocalTimeoutThenRecover(t *testing.T) {
	sys := newLocalSystem(t)
	const P = 3
	cfg := DefaultCommConfig()
	cfg.Collective.Timeout = 200 * time.Millisecond
	comms, err := StartLocal(sys, P, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(t, comms)
	bufs := randBufs(rand.New(rand.NewPCG(9, 9)), P, 100)
	h0 := comms[0].AllReduce(context.Background(), bufs[0], collective.Sum)
	h1 := comms[1].AllReduce(context.Background(), bufs[1], collective.Sum)
	for r, h := range []*collective.Handle{h0, h1} {
		if err := h.Wait(); !errors.Is(err, collective.ErrTimeout) {
			t.Fatalf("rank %d: %v, want a timeout", r, err)
		}
	}
	// rank 2 learned of the abort and is at the next generation too.
	in := randBufs(rand.New(rand.NewPCG(1, 9)), P, 100)
	out := clone(in)
	noErr(t, runAll(comms, func(r int, c collective.Communicator) *collective.Handle {
		return c.AllReduce(context.Background(), out[r], collective.Sum)
	}))
	checkSum(t, in, out, false)
}
