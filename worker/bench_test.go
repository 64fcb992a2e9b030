package worker

import (
	"context"
	"testing"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
)

// benchStep times one optimizer step (forward, backward, update) of a
// single worker holding the whole model, on batches of rows from ds.
func benchStep(b *testing.B, model nn.Spec, ds data.Dataset, rows int, oc optim.Config) {
	spec := &Spec{Model: model, Cuts: []pipeline.Range{{Lo: 0, Hi: model.Units()}}, MicroBatches: 1, Optim: oc, Seed: 1, Train: ds}
	w, err := New(spec, cpu.New(0))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	one, _ := mesh.Of(1, 1)
	if err := w.Form(context.Background(), Form{Generation: 1, Mesh: one}, nil); err != nil {
		b.Fatal(err)
	}
	targets := rows * max(1, ds.Context())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := w.Step(context.Background(), StepRequest{Generation: 1, Step: i, Cursor: data.Cursor(i * rows), Batch: rows,
			LR: 1e-3, GlobalTargets: targets}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
}

// BenchmarkMLPStep is the MLP 784-1024-1024-10 of the DDP anchor
// (../shared/anchors/torch_ddp_mlp.py) at batch 256 with SGD momentum.
func BenchmarkMLPStep(b *testing.B) {
	ds, _, err := data.Open("synthetic-mlp:n=256,test=16", data.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	benchStep(b, models.MLP{Sizes: []int{784, 1024, 1024, 10}}, ds, 256, optim.Config{Name: "sgd", Momentum: 0.9})
}

// BenchmarkGPTStep is the default GPT (../shared/anchors/torch_gpt_tiny.py)
// at batch 32 with AdamW.
func BenchmarkGPTStep(b *testing.B) {
	ds, _, err := data.Open("synthetic-tokens:n=64,test=8", data.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	g := models.DefaultGPT(ds.Classes())
	benchStep(b, g, ds, 32, optim.DefaultConfig("adamw"))
}
