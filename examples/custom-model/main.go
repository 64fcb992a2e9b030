// Command custom-model trains a model defined outside troupe's packages
// (package gated: a layer of its own and a model registered as
// "gated-mlp") on rows this program holds in memory, in three worlds —
// two data-parallel replicas, the same with ZeRO-2, a pipeline of two
// stages — each stopped halfway, resumed from its checkpoint, and
// predicting from the weights the run returns. No data or weights go
// through files, except the checkpoints a resume needs (and -save, when
// asked).
//
//	go run ./examples/custom-model
//	go run ./examples/custom-model -steps 400 -save /tmp/gated
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/troupe-ml/troupe/data"
	_ "github.com/troupe-ml/troupe/examples/custom-model/gated" // registers "gated-mlp"
	"github.com/troupe-ml/troupe/kernels/cpu"
	_ "github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/train"
)

func main() {
	steps := flag.Int("steps", 200, "optimizer steps of each world")
	save := flag.String("save", "", "also write each world's weights (safetensors) into this directory")
	flag.Parse()
	dir, err := os.MkdirTemp("", "custom-model-ckpt")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if _, err := run(context.Background(), os.Stdout, dir, *save, *steps); err != nil {
		log.Fatal(err)
	}
}

// result is one world's outcome.
type result struct {
	World              string
	FirstMSE, FinalMSE float64 // held-out mean squared error before and after
	Predictions        []float32
	Trained            *nn.Model
}

// target is the function the model learns from four features.
func target(x []float32) float32 {
	return float32(math.Sin(2*float64(x[0])) + float64(x[1]*x[2]) - 0.5*float64(x[3]))
}

// rows are n samples of target with features drawn from seed.
func rows(name string, n int, seed uint64) data.Rows {
	r := rand.New(rand.NewPCG(seed, 17))
	rs := data.Rows{Name: name, Features: 4, Outputs: 1, X: make([]float32, 4*n), Targets: make([]float32, n)}
	for i := range n {
		x := rs.X[4*i : 4*i+4]
		for j := range x {
			x[j] = float32(r.NormFloat64())
		}
		rs.Targets[i] = target(x)
	}
	return rs
}

// worlds are the layouts the model trains in.
var worlds = []struct {
	name string
	set  func(*train.Config)
}{
	{"dp 2", func(c *train.Config) { c.DP = 2 }},
	{"dp 2, ZeRO-2", func(c *train.Config) { c.DP, c.Zero = 2, 2 }},
	{"pp 2", func(c *train.Config) { c.PP, c.MicroBatches = 2, 2 }},
}

// config is the run of steps steps in the world set makes.
func config(set func(*train.Config), steps int) train.Config {
	cfg := train.DefaultConfig()
	cfg.Model = "gated-mlp"
	cfg.SetModelArg("hidden", 32)
	cfg.Batch, cfg.Steps, cfg.LR, cfg.Warmup, cfg.LogEvery = 64, steps, 3e-3, 0, steps
	set(&cfg)
	return cfg
}

// run trains the three worlds with checkpoints in ckptDir, writes each
// world's weights into saveDir when set, and reports to out.
func run(ctx context.Context, out io.Writer, ckptDir, saveDir string, steps int) ([]result, error) {
	trainRows, testRows := rows("memory/train", 2048, 1), rows("memory/test", 256, 2)
	trainSet, err := data.InMemory(trainRows)
	if err != nil {
		return nil, err
	}
	testSet, err := data.InMemory(testRows)
	if err != nil {
		return nil, err
	}
	var results []result
	for i, w := range worlds {
		cfg := config(w.set, steps)
		cfg.CkptDir, cfg.CkptEvery = filepath.Join(ckptDir, fmt.Sprint(i)), steps/2
		o := train.Options{Train: trainSet, Test: testSet, KeepModel: true}

		// Half the steps, as a job that is stopped (or crashes) does...
		first, err := train.Run(ctx, cfg, train.Options{Train: trainSet, Test: testSet, StopAfter: steps / 2, KeepModel: true})
		if err != nil {
			return nil, fmt.Errorf("%s, first half: %w", w.name, err)
		}
		before, _, err := train.Evaluate(first.Trained, testSet, 256)
		if err != nil {
			return nil, err
		}
		// ...then the rest, resumed from its checkpoint.
		cfg.Resume = true
		sum, err := train.Run(ctx, cfg, o)
		if err != nil {
			return nil, fmt.Errorf("%s, resumed: %w", w.name, err)
		}
		after, _, err := train.Evaluate(sum.Trained, testSet, 256)
		if err != nil {
			return nil, err
		}
		pred, err := train.Predict(sum.Trained, testRows.X, len(testRows.Targets))
		if err != nil {
			return nil, err
		}
		if saveDir != "" {
			path := filepath.Join(saveDir, fmt.Sprintf("gated-%d.safetensors", i))
			if err := sum.Trained.Set.SaveWeights(path, nil); err != nil {
				return nil, err
			}
			// Loaded back into a model built from the same spec.
			back, err := nn.BuildWhole(cpu.New(1), sum.Trained.Spec, 0)
			if err != nil {
				return nil, err
			}
			if err := back.Set.LoadWeights(path); err != nil {
				return nil, err
			}
			again, err := train.Predict(back, testRows.X, len(testRows.Targets))
			if err != nil {
				return nil, err
			}
			for j := range again {
				if again[j] != pred[j] {
					return nil, fmt.Errorf("%s: the weights loaded from %s predict %v for test row %d, the trained model %v", w.name, path, again[j], j, pred[j])
				}
			}
			fmt.Fprintf(out, "%s: weights in %s\n", w.name, path)
		}
		fmt.Fprintf(out, "%s: %s, held-out MSE %.4f at step %d → %.4f at step %d (resumed at %d); f(x) of the first test row %.3f, predicted %.3f\n",
			w.name, sum.Model, before, first.Steps, after, sum.Steps, sum.StartStep, testRows.Targets[0], pred[0])
		results = append(results, result{World: w.name, FirstMSE: before, FinalMSE: after, Predictions: pred, Trained: sum.Trained})
	}
	return results, nil
}
