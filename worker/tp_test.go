package worker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/pipeline"
)

// counted is one kind of collective on one group: how many ran, and their
// buffers' values in all.
type counted struct {
	Ops    int
	Values int
}

// opLog counts the collectives each rank issues, by group (its member
// ranks) and kind.
type opLog struct {
	mu   sync.Mutex
	seen map[string]counted // "rank|members|kind"
}

func (l *opLog) add(rank int, members []int, kind string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := fmt.Sprintf("%d|%v|%s", rank, members, kind)
	c := l.seen[k]
	c.Ops++
	c.Values += n
	l.seen[k] = c
}

func (l *opLog) get(rank int, members []int, kind string) counted {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[fmt.Sprintf("%d|%v|%s", rank, members, kind)]
}

// countingComm is a Communicator that logs every operation it starts.
type countingComm struct {
	collective.Communicator
	log     *opLog
	rank    int   // world rank
	members []int // world ranks of the group
}

func (c *countingComm) AllReduce(ctx context.Context, buf []float32, op collective.ReduceOp) *collective.Handle {
	c.log.add(c.rank, c.members, "all-reduce/"+op.String(), len(buf))
	return c.Communicator.AllReduce(ctx, buf, op)
}

func (c *countingComm) ReduceScatter(ctx context.Context, buf []float32, op collective.ReduceOp) *collective.Handle {
	c.log.add(c.rank, c.members, "reduce-scatter", len(buf))
	return c.Communicator.ReduceScatter(ctx, buf, op)
}

func (c *countingComm) AllGather(ctx context.Context, buf []float32) *collective.Handle {
	c.log.add(c.rank, c.members, "all-gather", len(buf))
	return c.Communicator.AllGather(ctx, buf)
}

func (c *countingComm) Broadcast(ctx context.Context, buf []float32, root int) *collective.Handle {
	c.log.add(c.rank, c.members, "broadcast", len(buf))
	return c.Communicator.Broadcast(ctx, buf, root)
}

func (c *countingComm) Group(ranks []int) (collective.Communicator, error) {
	g, err := c.Communicator.Group(ranks)
	if err != nil {
		return nil, err
	}
	world := make([]int, len(ranks))
	for i, r := range ranks {
		world[i] = c.members[r]
	}
	return &countingComm{Communicator: g, log: c.log, rank: c.rank, members: world}, nil
}

// TestTensorParallelCollectives counts the collectives of one training
// step of a 2-block GPT on rank 0 of each mode and asserts the exact
// numbers, so that an extra (or a missing) collective fails:
//   - without sequence parallelism, per micro-batch: the embedding's sum
//     (one all-reduce forward), per block one all-reduce forward and one
//     backward for attention and for the MLP, the head's input gradient
//     (one backward), and the vocabulary-parallel loss's three all-reduces
//     of one value per row (max, target logit, sum of exponentials);
//   - with it, per block two all-gathers and two reduce-scatters forward,
//     and backward two reduce-scatters and four all-gathers (the
//     row-parallel layers' gradients and the column-parallel layers'
//     inputs gathered again, Megatron-LM's trade of memory for one
//     all-gather); the embedding reduce-scatters forward and all-gathers
//     backward, the head all-gathers forward and all-gathers and
//     reduce-scatters backward; per step one all-reduce of the partial
//     gradients (LayerNorms, row-parallel biases, positions);
//   - with data parallelism the data-parallel group sees only its
//     gradient buckets, and with pipeline stages each stage sees its own
//     units' share.
//
// Values count the elements of each operation's buffer (the whole
// activation, [tokens, d_model], for every all-gather and reduce-scatter).
func TestTensorParallelCollectives(t *testing.T) {
	s := gptSetup(t)
	g := s.model.(models.GPT)
	const micro = 2
	for _, tc := range []struct {
		name    string
		D, P, T int
		sp      bool
	}{
		{"tp2", 1, 1, 2, false}, {"tp2-sp", 1, 1, 2, true}, {"dp2-tp2", 2, 1, 2, false}, {"pp2-tp2", 1, 2, 2, false}, {"pp2-tp2-sp", 1, 2, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tokens := s.batch / tc.D / micro * g.Context // a replica's micro-batch
			act := tokens * g.DModel
			spec := s.spec(t, tc.P, micro, pipeline.Kind1F1B, false, 0)
			spec.TP, spec.SP = tc.T, tc.sp
			if tc.P == 1 {
				spec.MicroBatches = micro // gradient accumulation
			}
			log := &opLog{seen: map[string]counted{}}
			wd := newWrappedWorld(t, spec, tc.D, func(r int, c collective.Communicator) collective.Communicator {
				return &countingComm{Communicator: c, log: log, rank: r, members: identityRanks(c.Size())}
			})
			if _, errs := wd.step(s, 0, s.batch); slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
				t.Fatal(errs)
			}
			for _, stage := range wd.mesh.Slice(mesh.DP, 0) {
				c := wd.mesh.Coord(stage)
				if c.TP != 0 {
					continue
				}
				cut := spec.Cuts[c.PP]
				want := map[string]counted{}
				add := func(kind string, ops, values int) {
					w := want[kind]
					w.Ops += ops * micro
					w.Values += ops * values * micro
					want[kind] = w
				}
				for u := cut.Lo; u < cut.Hi; u++ {
					switch {
					case u == 0 && !tc.sp:
						add("all-reduce/sum", 1, act)
					case u == 0:
						add("reduce-scatter", 1, act)
						add("all-gather", 1, act)
					case u == g.Layers+1 && !tc.sp:
						add("all-reduce/sum", 1, act)
						add("all-reduce/sum", 2, tokens)
						add("all-reduce/max", 1, tokens)
					case u == g.Layers+1:
						add("all-gather", 2, act)
						add("reduce-scatter", 1, act)
						add("all-reduce/sum", 2, tokens)
						add("all-reduce/max", 1, tokens)
					case !tc.sp:
						add("all-reduce/sum", 4, act)
					default:
						add("all-gather", 6, act)
						add("reduce-scatter", 4, act)
					}
				}
				if tc.sp {
					partial := 0
					for _, p := range wd.workers[stage].model.Set.Params() {
						if p.PartialGrad {
							partial += p.Size()
						}
					}
					w := want["all-reduce/sum"]
					w.Ops++
					w.Values += partial
					want["all-reduce/sum"] = w
				}
				tpGroup := wd.mesh.Group(mesh.TP, stage)
				for _, kind := range []string{"all-reduce/sum", "all-reduce/max", "reduce-scatter", "all-gather", "broadcast"} {
					if got := log.get(stage, tpGroup, kind); got != want[kind] {
						t.Errorf("stage %d's tensor-parallel group %v: %s %+v, want %+v", c.PP, tpGroup, kind, got, want[kind])
					}
				}
				if tc.D > 1 {
					dp := wd.mesh.Group(mesh.DP, stage)
					buckets := len(wd.workers[stage].st.reducer.plan.Buckets)
					if got := log.get(stage, dp, "all-reduce/sum"); got.Ops != buckets || got.Values != wd.workers[stage].model.Set.Len() {
						t.Errorf("data-parallel group %v: %+v, want %d buckets of the %d gradients", dp, got, buckets, wd.workers[stage].model.Set.Len())
					}
				}
			}
		})
	}
}

func identityRanks(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
