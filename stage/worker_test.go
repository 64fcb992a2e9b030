package stage

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/ddp"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/replica"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type setup struct {
	spec  nn.Spec
	train data.Dataset
	test  data.Dataset
	batch int
}

func mlpSetup(t *testing.T) setup {
	tr, te, err := data.Open("synthetic-mlp:features=10,classes=4,n=96,test=16", data.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	return setup{spec: nn.Spec{MLP: &nn.MLPConfig{Sizes: []int{10, 12, 9, 8, 4}}}, train: tr, test: te, batch: 16}
}

func gptSetup(t *testing.T) setup {
	o := data.DefaultOptions()
	o.Context = 8
	tr, te, err := data.Open("synthetic-tokens:vocab=11,n=64,test=8", o)
	if err != nil {
		t.Fatal(err)
	}
	return setup{spec: nn.Spec{GPT: &nn.GPTConfig{Vocab: 11, Context: 8, DModel: 16, Layers: 2, Heads: 2}}, train: tr, test: te, batch: 8}
}

func adamw(t *testing.T, m *nn.Model) optim.Optimizer {
	o, err := optim.New(m.Set, optim.Config{Name: "adamw", Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func globalTargets(s setup) int {
	if s.spec.GPT != nil {
		return s.batch * s.spec.GPT.Context
	}
	return s.batch
}

// reference trains one worker on the whole batch.
func reference(t *testing.T, s setup, steps int, clip float64) []float64 {
	m, err := nn.Build(cpu.New(1), s.spec, 5, 0, s.spec.Units())
	if err != nil {
		t.Fatal(err)
	}
	w, err := ddp.NewWorker(ddp.WorkerConfig{World: 1, Replica: replica.New(m, adamw(t, m)), Train: s.train, Seed: 3, Shuffle: true, ClipNorm: clip})
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for i := 0; i < steps; i++ {
		r, err := w.Step(context.Background(), ddp.StepRequest{Cursor: data.Cursor(i * s.batch), Batch: s.batch, LR: 1e-2, GlobalTargets: globalTargets(s)})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.LossSum/float64(r.Targets))
	}
	return out
}

type world struct {
	workers []*Worker
	net     *collective.MemNetwork
}

func newWorld(t *testing.T, s setup, D, P, M int, kind pipeline.Kind, recompute bool, clip float64) *world {
	t.Helper()
	g, err := pipeline.NewGrid(D, P)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := pipeline.Build(pipeline.Config{Kind: kind, Stages: P, MicroBatches: M, Recompute: recompute})
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := nn.Build(cpu.New(1), s.spec, 5, 0, s.spec.Units())
	costs, _ := pipeline.ParamCosts(pipeline.LayerParams(whole))
	cuts, err := pipeline.Partition(costs, P)
	if err != nil {
		t.Fatal(err)
	}
	net := collective.NewMemNetwork(g.Size())
	comms, err := net.Start(collective.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	wd := &world{net: net, workers: make([]*Worker, g.Size())}
	for r := range wd.workers {
		_, st := g.Coords(r)
		m, err := nn.Build(cpu.New(1), s.spec, 5, cuts[st].Lo, cuts[st].Hi)
		if err != nil {
			t.Fatal(err)
		}
		wd.workers[r], err = NewWorker(Config{Grid: g, Rank: r, Schedule: sched, Model: m, Opt: adamw(t, m), Comm: comms[r],
			Train: s.train, Test: s.test, Shuffle: true, Seed: 3, ClipNorm: clip})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(net.Close)
	return wd
}

func (wd *world) step(t *testing.T, s setup, i int) ([]ddp.StepResult, []error) {
	n := len(wd.workers)
	res, errs := make([]ddp.StepResult, n), make([]error, n)
	var wg sync.WaitGroup
	for r, w := range wd.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[r], errs[r] = w.Step(context.Background(), ddp.StepRequest{Cursor: data.Cursor(i * s.batch), Batch: s.batch, LR: 1e-2,
				GlobalTargets: globalTargets(s), Checksum: true})
		}()
	}
	wg.Wait()
	return res, errs
}

// Pipeline (and DP × PP) training must give one worker's losses: the
// micro-batches' gradients are summed in a different order, so float32
// results differ by ~1e-7 relative per step; over 8 AdamW steps 1e-4
// relative bounds them. Replicas of a stage must agree bit for bit.
func TestPipelineMatchesOneWorker(t *testing.T) {
	const steps = 8
	for name, s := range map[string]setup{"mlp": mlpSetup(t), "gpt": gptSetup(t)} {
		for _, clip := range []float64{0, 0.5} {
			ref := reference(t, s, steps, clip)
			for _, tc := range []struct {
				D, P, M   int
				kind      pipeline.Kind
				recompute bool
			}{
				{1, 2, 4, pipeline.KindGPipe, false}, {1, 2, 4, pipeline.Kind1F1B, false},
				{1, 4, 4, pipeline.Kind1F1B, false}, {1, 4, 8, pipeline.KindGPipe, true},
				{1, 2, 2, pipeline.Kind1F1B, true}, {2, 2, 2, pipeline.Kind1F1B, false},
			} {
				t.Run(fmt.Sprintf("%s/clip%v/dp%d/pp%d/m%d/%s/recompute=%v", name, clip, tc.D, tc.P, tc.M, tc.kind, tc.recompute), func(t *testing.T) {
					if tc.P > s.spec.Units() {
						t.Skip("more stages than units")
					}
					wd := newWorld(t, s, tc.D, tc.P, tc.M, tc.kind, tc.recompute, clip)
					for i := 0; i < steps; i++ {
						res, errs := wd.step(t, s, i)
						var sum float64
						var n int
						for r := range res {
							if errs[r] != nil {
								t.Fatalf("step %d rank %d: %v", i, r, errs[r])
							}
							sum += res[r].LossSum
							n += res[r].Targets
						}
						got := sum / float64(n)
						if math.Abs(got-ref[i]) > 1e-4*math.Abs(ref[i]) {
							t.Errorf("step %d: loss %v, one worker %v", i+1, got, ref[i])
						}
						for r, w := range wd.workers {
							if live := w.pool.LiveBytes(); live != 0 {
								t.Fatalf("step %d: rank %d holds %d activation bytes after the step", i+1, r, live)
							}
						}
						for r := range res {
							if peer := r - r%tc.D; peer != r && res[r].Checksum != res[peer].Checksum {
								t.Fatalf("step %d: rank %d differs from rank %d of the same stage", i+1, r, peer)
							}
						}
					}
				})
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
		wd := newWorld(t, s, 1, 4, 8, tc.kind, tc.recompute, 0)
		res, errs := wd.step(t, s, 0)
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

func TestLostStageFailsTheStep(t *testing.T) {
	s := gptSetup(t)
	wd := newWorld(t, s, 1, 2, 2, pipeline.Kind1F1B, false, 0)
	wd.net.Kill(1, true)
	_, err := wd.workers[0].Step(context.Background(), ddp.StepRequest{Batch: s.batch, LR: 1e-2, GlobalTargets: globalTargets(s)})
	if err == nil {
		t.Fatal("a step with a dead stage succeeded")
	}
	t.Logf("error: %v", err)
}
