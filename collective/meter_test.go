package collective

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// SentValues is what the schedules really send: every rank's payload
// values, counted on the in-memory network's wire, for each kind, group
// sizes 1 to 6 and sizes the group does not divide, the all-reduce by the
// ring and by recursive doubling; a Meter wrapping the communicators
// reports the same totals.
func TestSentValuesMatchTheWire(t *testing.T) {
	type op struct {
		kind Kind
		algo Algorithm
	}
	ops := []op{{KindAllReduce, AlgoRing}, {KindAllReduce, AlgoRecursiveDoubling}, {KindReduceScatter, AlgoAuto},
		{KindAllGather, AlgoAuto}, {KindBroadcast, AlgoAuto}, {KindNaiveAllReduce, AlgoAuto}}
	for P := 1; P <= 6; P++ {
		for _, n := range []int{0, 1, P + 1, 97} {
			for _, o := range ops {
				kind, algo := o.kind, o.algo
				cfg := DefaultConfig()
				cfg.SmallAllReduceBytes = -1 // the ring
				if algo == AlgoRecursiveDoubling {
					cfg.SmallAllReduceBytes = 1 << 20
				}
				t.Run(fmt.Sprintf("P%d/n%d/%s/%s", P, n, kind, algo), func(t *testing.T) {
					net, comms := startMem(t, P, cfg)
					if got := AlgorithmOf(NewMeter().Wrap(comms[0]), n, Sum); kind == KindAllReduce && P > 1 && got != algo {
						t.Fatalf("the communicator says %s, want %s", got, algo)
					}
					var mu sync.Mutex
					wire := make([]int64, P)
					net.Inject(Fault{Action: FaultDrop, Match: func(m Message) bool {
						mu.Lock()
						wire[m.From] += int64(len(m.Payload))
						mu.Unlock()
						return false
					}})
					meter := NewMeter()
					root := P / 2
					var wg sync.WaitGroup
					errs := make([]error, P)
					for r, c := range comms {
						c := meter.Wrap(c)
						wg.Add(1)
						go func() {
							defer wg.Done()
							buf := make([]float32, n)
							ctx := context.Background()
							var h *Handle
							switch kind {
							case KindAllReduce:
								h = c.AllReduce(ctx, buf, Sum)
							case KindReduceScatter:
								h = c.ReduceScatter(ctx, buf, Sum)
							case KindAllGather:
								h = c.AllGather(ctx, buf)
							case KindBroadcast:
								h = c.Broadcast(ctx, buf, root)
							case KindNaiveAllReduce:
								h = c.NaiveAllReduce(ctx, buf, Sum)
							}
							errs[r] = h.Wait()
						}()
					}
					wg.Wait()
					var total int64
					for r := range P {
						if errs[r] != nil {
							t.Fatal(errs[r])
						}
						if want := SentValues(kind, algo, n, r, P, root); wire[r] != want {
							t.Errorf("rank %d sent %d values, SentValues says %d", r, wire[r], want)
						}
						total += wire[r]
					}
					if got := meter.Take()[kind]; got != 4*total {
						t.Errorf("meter counted %d bytes, the wire carried %d values", got, total)
					}
				})
			}
		}
	}
}
