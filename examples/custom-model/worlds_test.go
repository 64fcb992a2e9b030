package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/train"
)

// The user's model in the rest of the worlds, with no change to it or to
// troupe: those that train the same model on the same batches predict
// what two data-parallel replicas predict (float32 sums in other orders,
// 1e-4 relative); those that train another way (bf16 compute, DiLoCo's
// rounds, asynchronous updates) bring the held-out error down; a
// checkpoint of two replicas resumes as a pipeline of two stages
// (resharded) with the weights an uninterrupted run reaches.
func TestCustomModelInMoreWorlds(t *testing.T) {
	const steps = 40
	trainSet, err := data.InMemory(rows("memory/train", 2048, 1))
	if err != nil {
		t.Fatal(err)
	}
	testRows := rows("memory/test", 256, 2)
	testSet, err := data.InMemory(testRows)
	if err != nil {
		t.Fatal(err)
	}
	runWorld := func(t *testing.T, set func(*train.Config)) (*train.Summary, []float32) {
		t.Helper()
		sum, err := train.Run(context.Background(), config(set, steps), train.Options{Train: trainSet, Test: testSet, KeepModel: true})
		if err != nil {
			t.Fatal(err)
		}
		pred, err := train.Predict(sum.Trained, testRows.X, len(testRows.Targets))
		if err != nil {
			t.Fatal(err)
		}
		return sum, pred
	}
	_, want := runWorld(t, worlds[0].set)
	same := map[string]func(*train.Config){
		"accumulation 2":      func(c *train.Config) { c.Accum = 2 },
		"dp 2, ZeRO-3":        func(c *train.Config) { c.DP, c.Zero = 2, 3 },
		"dp 4, hybrid ZeRO-2": func(c *train.Config) { c.DP, c.Zero, c.ZeroGroup = 4, 2, 2 },
		"pp 3, recompute": func(c *train.Config) {
			c.PP, c.MicroBatches, c.Recompute, c.PipelineSchedule = 3, 4, true, pipeline.KindGPipe
		},
		"dp 2 × pp 2, ZeRO-1": func(c *train.Config) { c.DP, c.PP, c.MicroBatches, c.Zero = 2, 2, 2, 1 },
	}
	for name, set := range same {
		t.Run(name, func(t *testing.T) {
			_, got := runWorld(t, set)
			for i := range got {
				if math.Abs(float64(got[i]-want[i])) > 1e-4*math.Max(1, math.Abs(float64(want[i]))) {
					t.Fatalf("test row %d: %v, dp 2 predicts %v", i, got[i], want[i])
				}
			}
		})
	}
	other := map[string]func(*train.Config){
		"bf16":      func(c *train.Config) { c.DP, c.Precision = 2, "bf16" },
		"local SGD": func(c *train.Config) { c.DP, c.Sync, c.SyncEvery = 2, "local-sgd", 4 },
		// Ten rounds: the paper's outer momentum 0.9 overshoots in so few
		// (docs/SYNC.md); 0.5 with Nesterov's look-ahead does not.
		"DiLoCo": func(c *train.Config) {
			c.DP, c.Sync, c.SyncEvery, c.OuterMomentum, c.OuterNesterov = 2, "diloco", 4, 0.5, true
		},
		"async, 2 replicas": func(c *train.Config) { c.DP, c.Sync = 2, "async" },
	}
	for name, set := range other {
		t.Run(name, func(t *testing.T) {
			sum, _ := runWorld(t, set)
			if !(sum.EvalLoss > 0 && sum.EvalLoss < 0.9*variance(testRows.Targets)) {
				t.Fatalf("held-out MSE %v after %d steps; predicting the mean scores %v", sum.EvalLoss, steps, variance(testRows.Targets))
			}
		})
	}
	t.Run("dp 2 checkpoint resumed as pp 2", func(t *testing.T) {
		dir := t.TempDir()
		cfg := config(worlds[0].set, steps)
		cfg.CkptDir, cfg.CkptEvery = dir, steps/2
		if _, err := train.Run(context.Background(), cfg, train.Options{Train: trainSet, StopAfter: steps / 2}); err != nil {
			t.Fatal(err)
		}
		cfg = config(worlds[2].set, steps)
		cfg.CkptDir, cfg.CkptEvery, cfg.Resume = dir, steps/2, true
		sum, err := train.Run(context.Background(), cfg, train.Options{Train: trainSet, KeepModel: true})
		if err != nil {
			t.Fatal(err)
		}
		if sum.StartStep != steps/2 {
			t.Fatalf("resumed at step %d, want %d", sum.StartStep, steps/2)
		}
		got, err := train.Predict(sum.Trained, testRows.X, len(testRows.Targets))
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if math.Abs(float64(got[i]-want[i])) > 1e-4*math.Max(1, math.Abs(float64(want[i]))) {
				t.Fatalf("test row %d: %v, dp 2 without a stop predicts %v", i, got[i], want[i])
			}
		}
	})
}

// variance is the mean squared error of predicting the mean.
func variance(v []float32) float64 {
	var m, s float64
	for _, x := range v {
		m += float64(x)
	}
	m /= float64(len(v))
	for _, x := range v {
		s += (float64(x) - m) * (float64(x) - m)
	}
	return s / float64(len(v))
}

// Two elastic agents embedded in this process train the user's model on
// the data it holds: both reach the last step with identical replicas.
func TestCustomModelOnElasticAgents(t *testing.T) {
	if raceDetector {
		// As train's in-process agent tests: one actor system a process, as
		// troupe runs agents, has no such race, and this test runs without
		// the detector in the README's test command.
		t.Skip("two agents in one process: protoactor's remote.Start sets gRPC's global logger (grpclog.SetLoggerV2) at every start, unsynchronised with the gRPC server of the agent already serving, which the race detector reports")
	}
	trainSet, err := data.InMemory(rows("memory/train", 2048, 1))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config(func(*train.Config) {}, 30)
	addrs := []string{freeAddr(t), freeAddr(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sums, errs := make([]*train.AgentSummary, 2), make([]error, 2)
	var wg sync.WaitGroup
	for i := range addrs {
		ac := train.AgentConfig{Train: cfg, Name: fmt.Sprintf("n%d", i+1), Listen: addrs[i], Join: addrs, MinNodes: 2,
			Quorum: elastic.QuorumMajority, Key: "passphrase:custom-model-test", JoinTimeout: 30 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sums[i], errs[i] = train.RunAgent(ctx, ac, train.Options{Train: trainSet})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("n%d: %v", i+1, err)
		}
		if sums[i].Step != cfg.Steps {
			t.Fatalf("n%d stopped at step %d of %d", i+1, sums[i].Step, cfg.Steps)
		}
	}
	if sums[0].Checksum != sums[1].Checksum {
		t.Fatalf("the replicas differ at the end: %s and %s", sums[0].Checksum, sums[1].Checksum)
	}
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
