package kerneltest

import (
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
)

// Bench times the kernels of one training step of a small GPT (16 sequences
// of 256 tokens, width 256, 8 heads, byte vocabulary) plus a 1M-parameter
// optimizer step, one sub-benchmark each. Inputs are uploaded once; each
// timed call is followed by Sync, so asynchronous backends are timed to
// completion. b.SetBytes counts the bytes each call reads and writes, so
// -bench output shows memory throughput for the bandwidth-bound kernels.
func Bench(b *testing.B, be kernels.Backend) {
	const (
		tokens = 16 * 256
		width  = 256
		heads  = 8
		seq    = 256
		vocab  = 256
		params = 1 << 20
	)
	rng := rand.New(rand.NewPCG(1, 1))
	buf := func(n int) kernels.Buffer {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		x := be.Alloc(n)
		be.Upload(x, v)
		return x
	}
	idx := func(n, below int) kernels.Index {
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(rng.IntN(below))
		}
		x := be.AllocIndex(n)
		be.UploadIndex(x, v)
		return x
	}
	run := func(name string, bytes int, f func()) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(bytes))
			for b.Loop() {
				f()
				if err := be.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	act, act2, act3 := buf(tokens*width), buf(tokens*width), buf(tokens*width)
	wide, wide2, wide3 := buf(tokens*4*width), buf(tokens*4*width), buf(tokens*4*width)
	gamma, beta, mean, rstd := buf(width), buf(width), buf(tokens), buf(tokens)
	qkvW, qkv := buf(width*3*width), buf(tokens*3*width)
	att, att2, att3 := buf(16*heads*seq*seq), buf(16*heads*seq*seq), buf(16*heads*seq*seq)
	logits, dlogits, losses, targets := buf(tokens*vocab), buf(tokens*vocab), buf(tokens), idx(tokens, vocab)
	table, ids := buf(vocab*width), idx(tokens, vocab)
	p, g, m, v := buf(params), buf(params), buf(params), buf(params)
	be.Fill(v, 1)

	run("Gemm/qkv-4096x768x256", 4*(tokens*width+width*3*width+tokens*3*width), func() {
		be.Gemm(kernels.GemmArgs{M: tokens, N: 3 * width, K: width, Alpha: 1}, act, qkvW, qkv)
	})
	run("GELU/4096x1024", 8*tokens*4*width, func() { be.GELU(wide2, wide) })
	run("GELUBackward/4096x1024", 12*tokens*4*width, func() { be.GELUBackward(wide3, wide2, wide) })
	run("LayerNorm/4096x256", 8*tokens*width, func() { be.LayerNorm(act2, mean, rstd, act, gamma, beta, 1e-5) })
	run("LayerNormBackward/4096x256", 12*tokens*width, func() {
		be.LayerNormBackward(act3, gamma, beta, act2, act, mean, rstd, gamma)
	})
	run("SoftmaxCrossEntropy/4096x256", 8*tokens*vocab, func() {
		be.SoftmaxCrossEntropy(losses, dlogits, logits, targets, 1.0/tokens)
	})
	run("CausalSoftmax/128x256x256", 8*16*heads*seq*seq, func() { be.CausalSoftmax(att2, att, seq, 0.125) })
	run("SoftmaxBackward/128x256x256", 12*16*heads*seq*seq, func() { be.SoftmaxBackward(att3, att, att2, seq, 0.125) })
	run("Transpose/16x256x8x32-0213", 8*tokens*width, func() {
		be.Transpose(act2, act, []int{16, seq, heads, width / heads}, []int{0, 2, 1, 3})
	})
	run("Transpose/4096x256-10", 8*tokens*width, func() { be.Transpose(act2, act, []int{tokens, width}, []int{1, 0}) })
	run("Embedding/4096x256", 8*tokens*width, func() { be.Embedding(act2, table, ids) })
	run("EmbeddingBackward/4096x256", 8*tokens*width, func() { be.EmbeddingBackward(table, act, ids) })
	run("Add/1M", 12*tokens*width, func() { be.Add(act3, act, act2) })
	run("SumRows/4096x256", 4*tokens*width, func() { be.SumRows(gamma, act) })
	run("SumSquares/1M", 4*params, func() { be.SumSquares(g) })
	run("AdamWStep/1M", 20*params, func() {
		be.AdamWStep(p, g, m, v, kernels.AdamWHyper{LR: 1e-9, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, 10)
	})
}
