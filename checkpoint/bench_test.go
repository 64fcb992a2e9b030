package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/safetensors"
)

// benchDir is where the write benchmarks write: $TROUPE_BENCH_DIR (to put
// it on the disk a run checkpoints to) or a temporary directory.
func benchDir(b *testing.B) string {
	if d := os.Getenv("TROUPE_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "ckptbench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

// benchBytes is the checkpoint size: $TROUPE_BENCH_BYTES or 128 MiB.
func benchBytes(b *testing.B) int {
	if s := os.Getenv("TROUPE_BENCH_BYTES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1<<20 {
			b.Fatalf("TROUPE_BENCH_BYTES=%q: want a byte count ≥ 1 MiB", s)
		}
		return n
	}
	return 128 << 20
}

// benchSnapshot is a GPT-shaped state of about size bytes: a parameter
// set of square [d, d] matrices and [d] vectors, with AdamW's two moments,
// so a third of the bytes are weights.
func benchSnapshot(size, dp int) *Snapshot {
	const d = 1024
	s := &Snapshot{Meta: Meta{World: World{DP: dp, PP: 1},
		Optimizer: &OptimizerState{Name: "adamw", Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, States: []string{"exp_avg", "exp_avg_sq"}}}}
	var params []TensorSpec
	for i := 0; (len(params)/2+1)*(d*d+d)*4*3 <= size; i++ {
		params = append(params,
			TensorSpec{Name: fmt.Sprintf("blocks.%d.w", i), DType: safetensors.F32, Shape: []int{d, d}},
			TensorSpec{Name: fmt.Sprintf("blocks.%d.b", i), DType: safetensors.F32, Shape: []int{d}})
	}
	for _, prefix := range []string{"", "optim.exp_avg.", "optim.exp_avg_sq."} {
		for _, p := range params {
			n, _ := p.Bytes()
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(i * 7)
			}
			q := p
			q.Name = prefix + p.Name
			s.Add(Tensor{TensorSpec: q, Data: data})
		}
	}
	return s
}

// BenchmarkSave measures a checkpoint write (every shard file written and
// fsynced, manifest, directory fsyncs, renames, and the prune of the
// previous checkpoint, keep 1) against a plain sequential write of the
// same bytes to the same directory (the snapshot's tensor buffers written
// in order to one file, one fsync, then removed, as the prune removes the
// old checkpoint). Each iteration does both, one
// after the other, so that the drift of a shared disk hits both alike; it
// reports the median speed of each in GB/s (10⁹ bytes of tensor data per
// second) and the median ratio.
func BenchmarkSave(b *testing.B) {
	for _, dp := range []int{1, 4} {
		b.Run(fmt.Sprintf("dp=%d", dp), func(b *testing.B) {
			snap := benchSnapshot(benchBytes(b), dp)
			size := snap.Bytes()
			root := benchDir(b)
			dir := filepath.Join(root, "ckpt")
			var ckpt, plain, ratio []float64
			b.SetBytes(size)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				snap.Meta.Step = int64(i)
				t0 := time.Now()
				if _, err := Save(OSFS{}, dir, snap, 1); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := plainWrite(filepath.Join(root, "plain"), snap); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				c, p := float64(size)/t1.Sub(t0).Seconds()/1e9, float64(size)/t2.Sub(t1).Seconds()/1e9
				ckpt, plain, ratio = append(ckpt, c), append(plain, p), append(ratio, c/p)
			}
			b.ReportMetric(median(ckpt), "ckpt-GB/s")
			b.ReportMetric(median(plain), "plain-GB/s")
			b.ReportMetric(median(ratio), "ckpt/plain")
		})
	}
}

// plainWrite writes the snapshot's tensor bytes to path one buffer after
// the other, fsyncs and removes it.
func plainWrite(path string, snap *Snapshot) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	for _, t := range snap.Tensors {
		if _, err := f.Write(t.Data); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Remove(path)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkGPTCheckpoint measures, for `troupe train`'s default GPT
// (d_model 128, 4 layers, 4 heads, context 64, a 96-symbol vocabulary)
// with AdamW: "pause", what an async checkpoint costs the training loop
// (downloading the weights and both moments into the snapshot's reused
// host buffers), and "write", what the background write takes (and what a
// synchronous checkpoint would add to the loop instead).
func BenchmarkGPTCheckpoint(b *testing.B) {
	be := cpu(b)
	m, err := models.NewGPT(be, models.DefaultGPT(96), 1)
	if err != nil {
		b.Fatal(err)
	}
	opt, _ := optim.New(m.Set, optim.DefaultConfig("adamw"))
	snap := &Snapshot{}
	capture := func(step int64) {
		snap.Reset()
		snap.Meta = Meta{Step: step, World: World{DP: 1, PP: 1}}
		if err := snap.AddModel(0, m.Set, opt); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("pause", func(b *testing.B) {
		b.SetBytes(int64(3 * 4 * m.Set.Len()))
		for i := 0; i < b.N; i++ {
			capture(int64(i))
		}
	})
	b.Run("write", func(b *testing.B) {
		dir := filepath.Join(benchDir(b), "ckpt")
		b.SetBytes(int64(3 * 4 * m.Set.Len()))
		for i := 0; i < b.N; i++ {
			capture(int64(i))
			if _, err := Save(OSFS{}, dir, snap, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}
