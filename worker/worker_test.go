package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
)

// protoactor starts a timer goroutine per burst of dead letters (messages to
// actors that stopped, routine when a test's actors shut down); it ends
// after the throttle interval on its own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

type setup struct {
	model nn.Spec
	train data.Dataset
	test  data.Dataset
	batch int
}

func mlpSetup(t testing.TB) setup {
	tr, te, err := data.Open("synthetic-mlp:features=10,classes=4,n=96,test=16", data.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	return setup{model: models.MLP{Sizes: []int{10, 12, 9, 8, 4}}, train: tr, test: te, batch: 12}
}

func gptSetup(t testing.TB) setup {
	o := data.DefaultOptions()
	o.Context = 8
	tr, te, err := data.Open("synthetic-tokens:vocab=11,n=64,test=8", o)
	if err != nil {
		t.Fatal(err)
	}
	return setup{model: models.GPT{Vocab: 11, Context: 8, DModel: 16, Layers: 2, Heads: 2}, train: tr, test: te, batch: 8}
}

func (s setup) globalTargets(batch int) int {
	if g, ok := s.model.(models.GPT); ok {
		return batch * g.Context
	}
	return batch
}

// spec cuts the model into P stages balanced by parameters.
func (s setup) spec(t testing.TB, P, M int, kind pipeline.Kind, recompute bool, clip float64) *Spec {
	t.Helper()
	whole, err := nn.Build(cpu.New(1), s.model, 5, 0, s.model.Units())
	if err != nil {
		t.Fatal(err)
	}
	costs, _ := pipeline.ParamCosts(pipeline.LayerParams(whole))
	cuts, err := pipeline.Partition(costs, P)
	if err != nil {
		t.Fatal(err)
	}
	return &Spec{Model: s.model, Cuts: cuts, Schedule: kind, MicroBatches: M, Recompute: recompute, ClipNorm: clip, BucketBytes: 256,
		Optim: optim.Config{Name: "adamw", Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01},
		Seed:  5, Shuffle: true, Train: s.train, Test: s.test}
}

type world struct {
	gen     uint64
	mesh    mesh.Mesh
	workers []*Worker
	net     *collective.MemNetwork
}

// newWorld forms D replicas of spec's stages (of spec.TP shards each)
// over an in-memory network, every worker from the seed.
func newWorld(t *testing.T, spec *Spec, D int) *world {
	t.Helper()
	return newWrappedWorld(t, spec, D, nil)
}

// newWrappedWorld is newWorld with each rank's communicator wrapped.
func newWrappedWorld(t *testing.T, spec *Spec, D int, wrap func(rank int, c collective.Communicator) collective.Communicator) *world {
	t.Helper()
	m, err := mesh.New(D, spec.PP(), spec.TPSize())
	if err != nil {
		t.Fatal(err)
	}
	wd := &world{gen: 1, mesh: m, workers: make([]*Worker, m.Size())}
	var comms []collective.Communicator
	if m.Size() > 1 {
		wd.net = collective.NewMemNetwork(m.Size())
		if comms, err = wd.net.Start(collective.DefaultConfig()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(wd.net.Close)
	}
	for r := range wd.workers {
		w, err := New(spec, cpu.New(1))
		if err != nil {
			t.Fatal(err)
		}
		var comm collective.Communicator
		if comms != nil {
			comm = comms[r]
			if wrap != nil {
				comm = wrap(r, comm)
			}
		}
		if err := w.Form(context.Background(), Form{Generation: 1, Mesh: m, Rank: r, ZeroGroup: spec.ZeroGroupIn(m)}, comm); err != nil {
			t.Fatal(err)
		}
		wd.workers[r] = w
		t.Cleanup(w.Close)
	}
	return wd
}

// step runs step i of a batch of batch rows on every rank at once.
func (wd *world) step(s setup, i, batch int) ([]StepResult, []error) {
	return wd.stepRound(s, i, batch, false)
}

// stepRound is step, ending a synchronisation round when round.
func (wd *world) stepRound(s setup, i, batch int, round bool) ([]StepResult, []error) {
	n := len(wd.workers)
	res, errs := make([]StepResult, n), make([]error, n)
	var wg sync.WaitGroup
	for r, w := range wd.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[r], errs[r] = w.Step(context.Background(), StepRequest{Generation: wd.gen, Step: i, Cursor: data.Cursor(i * batch),
				Batch: batch, LR: 1e-2, GlobalTargets: s.globalTargets(batch), Checksum: true, Round: round})
		}()
	}
	wg.Wait()
	return res, errs
}

// losses trains up to step steps and returns the global mean loss of each,
// checking that the replicas of every stage stay bit-identical and that no
// activation outlives a step.
func (wd *world) losses(t *testing.T, s setup, steps, batch int) []float64 {
	t.Helper()
	var out []float64
	for i := wd.workers[0].Holding().Applied; i < steps; i++ {
		res, errs := wd.step(s, i, batch)
		var sum float64
		var n int
		for r := range res {
			if errs[r] != nil {
				t.Fatalf("step %d rank %d: %v", i+1, r, errs[r])
			}
			sum += res[r].LossSum
			n += res[r].Targets
		}
		out = append(out, sum/float64(n))
		for r, w := range wd.workers {
			if live := w.pool.LiveBytes(); live != 0 {
				t.Fatalf("step %d: rank %d holds %d activation bytes after the step", i+1, r, live)
			}
			peer := wd.mesh.Group(mesh.DP, r)[0]
			if z := wd.workers[r].st.zero; z != nil && z.g3 != nil {
				// ZeRO-3 ranks hold their own shard: compare with the
				// replica of the same shard in the first shard group.
				peer = wd.mesh.Group(mesh.DP, r)[wd.mesh.Coord(r).DP%z.S]
			}
			if res[r].Checksum != res[peer].Checksum {
				t.Fatalf("step %d: rank %d's parameters differ from rank %d's, the same model part", i+1, r, peer)
			}
		}
	}
	return out
}

// Every world must give one worker's losses on the whole batch: data
// parallelism (the gradient of each replica's rows, summed by the ring in
// buckets), gradient accumulation (micro-batches summed one after the
// other), pipelines (GPipe, 1F1B, recompute), tensor parallelism (with
// and without sequence parallelism) and their combinations sum the same
// terms in another order, so float32 results differ by ~1e-7 relative per
// step; over 10 AdamW steps 1e-4 relative bounds them. Replicas of a
// model part must agree bit for bit every step.
func TestEveryWorldMatchesOneWorker(t *testing.T) {
	const steps = 10
	for name, s := range map[string]setup{"mlp": mlpSetup(t), "gpt": gptSetup(t)} {
		for _, clip := range []float64{0, 0.5} {
			ref := newWorld(t, s.spec(t, 1, 1, pipeline.Kind1F1B, false, clip), 1).losses(t, s, steps, s.batch)
			for _, tc := range []struct {
				D, P, M   int
				kind      pipeline.Kind
				recompute bool
				T         int  // tensor-parallel shards (0: 1)
				sp        bool // sequence parallelism
				Z, ZG     int  // ZeRO stage and shard group
			}{
				{2, 1, 1, pipeline.Kind1F1B, false, 0, false, 0, 0}, {3, 1, 1, pipeline.Kind1F1B, false, 0, false, 0, 0}, {4, 1, 1, pipeline.Kind1F1B, false, 0, false, 0, 0},
				{1, 1, 3, pipeline.Kind1F1B, false, 0, false, 0, 0}, {2, 1, 2, pipeline.Kind1F1B, false, 0, false, 0, 0}, {4, 1, 3, pipeline.Kind1F1B, false, 0, false, 0, 0},
				{1, 2, 4, pipeline.KindGPipe, false, 0, false, 0, 0}, {1, 2, 4, pipeline.Kind1F1B, false, 0, false, 0, 0}, {1, 4, 4, pipeline.Kind1F1B, false, 0, false, 0, 0},
				{1, 4, 4, pipeline.KindGPipe, true, 0, false, 0, 0}, {1, 2, 2, pipeline.Kind1F1B, true, 0, false, 0, 0}, {2, 2, 2, pipeline.Kind1F1B, false, 0, false, 0, 0},
				{1, 1, 1, pipeline.Kind1F1B, false, 2, false, 0, 0}, {2, 1, 2, pipeline.Kind1F1B, false, 2, false, 0, 0}, {1, 2, 2, pipeline.Kind1F1B, false, 2, false, 0, 0},
				{1, 1, 1, pipeline.Kind1F1B, false, 2, true, 0, 0}, {2, 2, 2, pipeline.Kind1F1B, true, 2, true, 0, 0},
				{2, 1, 1, pipeline.Kind1F1B, false, 0, false, 1, 0}, {4, 1, 1, pipeline.Kind1F1B, false, 0, false, 1, 0},
				{4, 1, 1, pipeline.Kind1F1B, false, 0, false, 1, 2}, {2, 1, 2, pipeline.Kind1F1B, false, 0, false, 1, 0},
				{2, 2, 2, pipeline.Kind1F1B, false, 0, false, 1, 0}, {2, 1, 1, pipeline.Kind1F1B, false, 2, true, 1, 0},
				{2, 1, 1, pipeline.Kind1F1B, false, 0, false, 2, 0}, {4, 1, 1, pipeline.Kind1F1B, false, 0, false, 2, 2},
				{2, 1, 3, pipeline.Kind1F1B, false, 0, false, 2, 0}, {2, 2, 2, pipeline.Kind1F1B, false, 0, false, 2, 0},
				{2, 1, 1, pipeline.Kind1F1B, false, 2, true, 2, 0},
				{2, 1, 1, pipeline.Kind1F1B, false, 0, false, 3, 0}, {4, 1, 1, pipeline.Kind1F1B, false, 0, false, 3, 0},
				{4, 1, 1, pipeline.Kind1F1B, false, 0, false, 3, 2}, {2, 1, 3, pipeline.Kind1F1B, false, 0, false, 3, 0},
				{2, 2, 2, pipeline.Kind1F1B, false, 0, false, 3, 0}, {2, 2, 2, pipeline.KindGPipe, true, 0, false, 3, 0},
				{2, 1, 1, pipeline.Kind1F1B, false, 2, true, 3, 0},
			} {
				t.Run(fmt.Sprintf("%s/clip%v/dp%d/pp%d/tp%d/m%d/%s/recompute=%v/sp=%v/zero%d-%d", name, clip, tc.D, tc.P, max(1, tc.T), tc.M, tc.kind, tc.recompute, tc.sp, tc.Z, tc.ZG), func(t *testing.T) {
					if tc.P > s.model.Units() {
						t.Skip("more stages than units")
					}
					if _, gpt := s.model.(models.GPT); tc.sp && !gpt {
						t.Skip("sequence parallelism needs the GPT")
					}
					spec := s.spec(t, tc.P, tc.M, tc.kind, tc.recompute, clip)
					spec.TP, spec.SP, spec.Zero, spec.ZeroGroup = tc.T, tc.sp, tc.Z, tc.ZG
					got := newWorld(t, spec, tc.D).losses(t, s, steps, s.batch)
					for i := range ref {
						if math.Abs(got[i]-ref[i]) > 1e-4*math.Abs(ref[i]) {
							t.Errorf("step %d: loss %v, one worker %v", i+1, got[i], ref[i])
						}
					}
				})
			}
		}
	}
}

// A global batch of 3 over 4 replicas leaves one empty; with 2
// micro-batches, another has an empty last micro-batch. Both still take
// part in every all-reduce, and the result is one worker's.
func TestReplicasWithoutRows(t *testing.T) {
	s := mlpSetup(t)
	ref := newWorld(t, s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0), 1).losses(t, s, 5, 3)
	for _, M := range []int{1, 2} {
		got := newWorld(t, s.spec(t, 1, M, pipeline.Kind1F1B, false, 0), 4).losses(t, s, 5, 3)
		for i := range ref {
			if math.Abs(got[i]-ref[i]) > 1e-4*math.Abs(ref[i]) {
				t.Errorf("M=%d step %d: loss %v with 4 ranks, %v with one", M, i+1, got[i], ref[i])
			}
		}
	}
}

// The peak number of micro-batches alive on stage 0, measured from the
// tapes that really hold activations: GPipe keeps all M, 1F1B at most P,
// and with recompute only the one being backpropagated.
func TestPeakMicroBatchesAlive(t *testing.T) {
	s := mlpSetup(t)
	for _, tc := range []struct {
		kind      pipeline.Kind
		recompute bool
		want      int
	}{{pipeline.KindGPipe, false, 8}, {pipeline.Kind1F1B, false, 4}, {pipeline.Kind1F1B, true, 1}} {
		wd := newWorld(t, s.spec(t, 4, 8, tc.kind, tc.recompute, 0), 1)
		res, errs := wd.step(s, 0, 16)
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := res[0].PeakMicro; got != tc.want {
			t.Errorf("%s recompute=%v: %d micro-batches alive at the peak on stage 0, want %d", tc.kind, tc.recompute, got, tc.want)
		}
	}
}

// A step whose peer is dead fails naming it, and changes nothing: the
// update runs only after every gradient sum. A tensor-parallel peer's
// death fails a collective inside the forward pass.
func TestDeadPeerFailsTheStepAndAppliesNothing(t *testing.T) {
	s := gptSetup(t)
	for name, tc := range map[string]struct{ D, P, T int }{"dp": {2, 1, 1}, "pp": {1, 2, 1}, "tp": {1, 1, 2}, "tp-sp": {1, 1, -2}} {
		t.Run(name, func(t *testing.T) {
			spec := s.spec(t, tc.P, 2, pipeline.Kind1F1B, false, 0)
			spec.TP, spec.SP = max(tc.T, -tc.T), tc.T < 0
			wd := newWorld(t, spec, tc.D)
			w := wd.workers[0]
			before := w.Checksum()
			wd.net.Kill(1, true)
			_, err := w.Step(context.Background(), StepRequest{Generation: 1, Batch: s.batch, LR: 1e-2, GlobalTargets: s.globalTargets(s.batch)})
			if !errors.Is(err, collective.ErrPeerLost) && !errors.Is(err, collective.ErrAborted) {
				t.Fatalf("step with a dead peer: %v", err)
			}
			if !strings.Contains(err.Error(), "rank 1") {
				t.Errorf("error %q does not name rank 1", err)
			}
			if w.Checksum() != before || w.Holding().Applied != 0 {
				t.Fatal("a failed step changed the parameters or the step count")
			}
			t.Logf("error: %v", err)
		})
	}
}

// A request for another generation, or a step other than the next one,
// is stale: refused, nothing run.
func TestStaleRequestsAreRefused(t *testing.T) {
	s := mlpSetup(t)
	wd := newWorld(t, s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0), 1)
	w := wd.workers[0]
	for _, req := range []StepRequest{{Generation: 2, Batch: 4}, {Generation: 1, Step: 3, Batch: 4}} {
		if _, err := w.Step(context.Background(), req); !errors.Is(err, ErrStale) {
			t.Errorf("%+v: %v, want ErrStale", req, err)
		}
	}
}
