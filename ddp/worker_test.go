package ddp

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/replica"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type modelFn func() (*nn.Model, data.Dataset)

func mlpSetup(t *testing.T) modelFn {
	train, _, err := data.Open("synthetic-mlp:features=10,classes=4,n=96,test=8", data.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	return func() (*nn.Model, data.Dataset) {
		m, err := nn.NewMLP(cpu.New(1), nn.MLPConfig{Sizes: []int{10, 12, 4}}, 7)
		if err != nil {
			t.Fatal(err)
		}
		return m, train
	}
}

func gptSetup(t *testing.T) modelFn {
	o := data.DefaultOptions()
	o.Context = 8
	train, _, err := data.Open("synthetic-tokens:vocab=11,n=64,test=8", o)
	if err != nil {
		t.Fatal(err)
	}
	return func() (*nn.Model, data.Dataset) {
		m, err := nn.NewGPT(cpu.New(1), nn.GPTConfig{Vocab: 11, Context: 8, DModel: 16, Layers: 1, Heads: 2}, 7)
		if err != nil {
			t.Fatal(err)
		}
		return m, train
	}
}

// runWorld trains steps steps on world ranks (over an in-memory network)
// and returns the global per-step losses and every rank's final checksum.
func runWorld(t *testing.T, setup modelFn, world, batch, accum, steps int, bucketBytes int64) ([]float64, []uint64) {
	t.Helper()
	var comms []collective.Communicator
	var net *collective.MemNetwork
	if world > 1 {
		net = collective.NewMemNetwork(world)
		var err error
		if comms, err = net.Start(collective.DefaultConfig()); err != nil {
			t.Fatal(err)
		}
		defer net.Close()
	}
	workers := make([]*Worker, world)
	var total int
	for r := range workers {
		m, train := setup()
		opt, err := optim.New(m.Set, optim.Config{Name: "adamw", Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
		if err != nil {
			t.Fatal(err)
		}
		cfg := WorkerConfig{Rank: r, World: world, Replica: replica.New(m, opt), Train: train, Seed: 3, Shuffle: true, BucketBytes: bucketBytes}
		if world > 1 {
			cfg.Comm = comms[r]
		}
		if workers[r], err = NewWorker(cfg); err != nil {
			t.Fatal(err)
		}
		total = batch
		if m.Input == nn.TokenInput {
			total = batch * m.Context
		}
	}
	var losses []float64
	sums := make([]uint64, world)
	for step := 0; step < steps; step++ {
		req := StepRequest{Step: uint64(step), Cursor: data.Cursor(step * batch), Batch: batch, Accum: accum, LR: 1e-2, GlobalTargets: total, Checksum: true}
		res := make([]StepResult, world)
		errs := make([]error, world)
		var wg sync.WaitGroup
		for r, w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[r], errs[r] = w.Step(context.Background(), req)
			}()
		}
		wg.Wait()
		var sum float64
		var n int
		for r := range res {
			if errs[r] != nil {
				t.Fatalf("step %d rank %d: %v", step, r, errs[r])
			}
			sum += res[r].LossSum
			n += res[r].Targets
			sums[r] = res[r].Checksum
		}
		losses = append(losses, sum/float64(n))
		for r := 1; r < world; r++ {
			if sums[r] != sums[0] {
				t.Fatalf("step %d: rank %d's parameters differ from rank 0's (checksum %x vs %x)", step, r, sums[r], sums[0])
			}
		}
	}
	return losses, sums
}

// Data parallelism must give what one worker gives on the whole batch: the
// same gradient, summed in another order. float32 sums of a few hundred
// terms in a different order differ by ~1e-7 relative per step; after 20
// AdamW steps the losses agree to ~1e-5, so 1e-4 relative is the bound.
// Replicas among themselves must agree bit for bit (checked every step).
func TestDataParallelMatchesOneWorker(t *testing.T) {
	for name, setup := range map[string]modelFn{"mlp": mlpSetup(t), "gpt": gptSetup(t)} {
		ref, _ := runWorld(t, setup, 1, 12, 1, 20, 0)
		for _, tc := range []struct{ world, accum int }{{2, 1}, {4, 1}, {3, 1}, {2, 2}, {4, 3}} {
			t.Run(fmt.Sprintf("%s/dp%d/accum%d", name, tc.world, tc.accum), func(t *testing.T) {
				// A small bucket cap makes several buckets, so overlap and
				// ordering are exercised.
				got, _ := runWorld(t, setup, tc.world, 12, tc.accum, 20, 256)
				for i := range ref {
					if math.Abs(got[i]-ref[i]) > 1e-4*math.Abs(ref[i]) {
						t.Errorf("step %d: loss %v with %d ranks, %v with one", i+1, got[i], tc.world, ref[i])
					}
				}
			})
		}
	}
}

func TestRanksWithoutRows(t *testing.T) {
	// A global batch of 3 over 4 ranks leaves rank 3 empty; it must still
	// take part in every all-reduce, and the result must equal one worker's.
	setup := mlpSetup(t)
	ref, _ := runWorld(t, setup, 1, 3, 1, 5, 0)
	got, _ := runWorld(t, setup, 4, 3, 1, 5, 256)
	for i := range ref {
		if math.Abs(got[i]-ref[i]) > 1e-4*math.Abs(ref[i]) {
			t.Errorf("step %d: loss %v with 4 ranks, %v with one", i+1, got[i], ref[i])
		}
	}
}

func TestDeadPeerFailsTheStep(t *testing.T) {
	setup := mlpSetup(t)
	net := collective.NewMemNetwork(2)
	cfg := collective.DefaultConfig()
	comms, err := net.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	m, train := setup()
	opt, _ := optim.New(m.Set, optim.DefaultConfig("sgd"))
	before := m.Set.HostWeights()
	w, err := NewWorker(WorkerConfig{Rank: 0, World: 2, Replica: replica.New(m, opt), Comm: comms[0], Train: train, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	net.Kill(1, true)
	_, err = w.Step(context.Background(), StepRequest{Batch: 8, LR: 0.1, GlobalTargets: 8})
	if err == nil {
		t.Fatal("a step with a dead peer succeeded")
	}
	t.Logf("error: %v", err)
	if !containsRank(err.Error(), 1) {
		t.Errorf("error %q does not name rank 1", err)
	}
	after := m.Set.HostWeights()
	for i := range before {
		if before[i] != after[i] {
			t.Fatalf("parameter %d changed by a failed step", i)
		}
	}
}

func containsRank(s string, r int) bool {
	return strings.Contains(s, fmt.Sprintf("rank %d", r)) || strings.Contains(s, fmt.Sprintf("peer %d", r))
}
