package replica

import (
	"testing"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
)

// benchStep times one optimizer step (forward, backward, update) of m on a
// batch of rows from ds, as a single worker runs it.
func benchStep(b *testing.B, m *nn.Model, ds data.Dataset, rows int, oc optim.Config) {
	opt, err := optim.New(m.Set, oc)
	if err != nil {
		b.Fatal(err)
	}
	r := New(m, opt)
	var batch data.Batch
	idx := make([]int, rows)
	for i := range idx {
		idx[i] = i % ds.Len()
	}
	ds.Fill(idx, &batch)
	targets := Targets(&batch, 0, rows, m)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.ZeroGrads()
		if _, err := r.ForwardBackward(&batch, 0, rows, float32(1/float64(targets)), nil); err != nil {
			b.Fatal(err)
		}
		if _, err := r.Update(1e-3, 0); err != nil {
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
	m, err := nn.NewMLP(cpu.New(0), nn.MLPConfig{Sizes: []int{784, 1024, 1024, 10}}, 1)
	if err != nil {
		b.Fatal(err)
	}
	benchStep(b, m, ds, 256, optim.Config{Name: "sgd", Momentum: 0.9})
}

// BenchmarkGPTStep is the default GPT (../shared/anchors/torch_gpt_tiny.py)
// at batch 32 with AdamW.
func BenchmarkGPTStep(b *testing.B) {
	ds, _, err := data.Open("synthetic-tokens:n=64,test=8", data.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	m, err := nn.NewGPT(cpu.New(0), nn.DefaultGPTConfig(65), 1)
	if err != nil {
		b.Fatal(err)
	}
	benchStep(b, m, ds, 32, optim.DefaultConfig("adamw"))
}
