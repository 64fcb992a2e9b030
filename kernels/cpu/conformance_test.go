package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/kerneltest"
)

// TestConformance runs the shared backend suite with one thread and with
// two, so that both the serial and the split path of every kernel are held
// to the float64 reference (the suite's largest shapes exceed the split
// thresholds).
func TestConformance(t *testing.T) {
	t.Run("threads=1", func(t *testing.T) { kerneltest.Run(t, New(1)) })
	t.Run("threads=2", func(t *testing.T) { kerneltest.Run(t, New(2)) })
}

// TestThreadCountInvariance requires every kernel but Gemm (which has its
// own TestGemmThreads) to give bit-identical results with 1, 2 and 3
// threads. Data-parallel replicas rely on this: workers with different core
// counts must compute the same model. It holds by construction: splits are
// over independent rows, elements or column blocks, and the reductions
// (Sum, SumSquares, SumRows, dγ/dβ, EmbeddingBackward) fix their summation
// order by the input size alone. The sizes are large enough that every
// kernel really splits (checked below), so this is not 1 thread vs 1.
func TestThreadCountInvariance(t *testing.T) {
	const rows, cols = 300, 1000
	const batch, tt = 8, 128
	const ids, vocab, d = 2048, 300, 129
	for _, sz := range []struct {
		what        string
		n, grain    int
		extraSplits bool
	}{
		{"elementwise", rows * cols, grainSimple, true},
		{"exp rows", rows * cols, grainExp, true},
		{"causal", batch * tt * tt / 2, grainExp, true},
		{"embedding", ids * d, grainSimple, (d+15)/16 >= 2},
		{"column blocks", rows * cols, grainSimple, (cols+colBlock-1)/colBlock >= 2},
		{"sum chunks", (rows*cols + sumChunkMin - 1) / sumChunkMin, 1, true},
	} {
		if New(2).serial(sz.n, sz.grain) || !sz.extraSplits {
			t.Fatalf("%s: size %d does not split with 2 threads; enlarge the test", sz.what, sz.n)
		}
	}

	rng := rand.New(rand.NewPCG(1, 2))
	randn := func(n int, sd float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(sd * rng.NormFloat64())
		}
		return v
	}
	randIds := func(n, below int) []int32 {
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(rng.IntN(below))
		}
		return v
	}
	x, x2, dy := randn(rows*cols, 2), randn(rows*cols, 1), randn(rows*cols, 1)
	gamma, beta := randn(cols, 1), randn(cols, 1)
	att := randn(batch*tt*tt, 3)
	table, edy, eids := randn(vocab*d, 1), randn(ids*d, 1), randIds(ids, vocab)
	targets := randIds(rows, cols)
	for r := 0; r < rows; r += 5 {
		targets[r] = -1
	}

	// run applies every kernel on be to copies of the inputs and returns
	// all outputs, named.
	run := func(be *Backend) map[string]Buf {
		out := map[string]Buf{}
		cp := func(v []float32) Buf { return append(Buf(nil), v...) }
		y := cp(x)
		be.Axpy(0.3, Buf(x2), y)
		out["Axpy"] = y
		y = cp(x)
		be.Scale(y, -1.7)
		out["Scale"] = y
		y = make(Buf, len(x))
		be.Add(y, Buf(x), Buf(x2))
		out["Add"] = y
		y = cp(x)
		be.AddBias(y, Buf(gamma))
		out["AddBias"] = y
		y = cp(gamma)
		be.SumRows(y, Buf(x))
		out["SumRows"] = y
		out["Sum"] = float64Bits(be.Sum(Buf(x)))
		out["SumSquares"] = float64Bits(be.SumSquares(Buf(x)))
		y = make(Buf, len(x))
		be.ReLU(y, Buf(x))
		out["ReLU"] = y
		y = make(Buf, len(x))
		be.ReLUBackward(y, Buf(dy), Buf(x))
		out["ReLUBackward"] = y
		y = make(Buf, len(x))
		be.GELU(y, Buf(x))
		out["GELU"] = y
		y = make(Buf, len(x))
		be.GELUBackward(y, Buf(dy), Buf(x))
		out["GELUBackward"] = y
		y, mean, rstd := make(Buf, len(x)), make(Buf, rows), make(Buf, rows)
		be.LayerNorm(y, mean, rstd, Buf(x), Buf(gamma), Buf(beta), 1e-5)
		out["LayerNorm.y"], out["LayerNorm.mean"], out["LayerNorm.rstd"] = y, mean, rstd
		dx, dg, db := make(Buf, len(x)), cp(gamma), cp(beta)
		be.LayerNormBackward(dx, dg, db, Buf(dy), Buf(x), mean, rstd, Buf(gamma))
		out["LayerNormBackward.dx"], out["LayerNormBackward.dgamma"], out["LayerNormBackward.dbeta"] = dx, dg, db
		y = make(Buf, ids*d)
		be.Embedding(y, Buf(table), Ids(eids))
		out["Embedding"] = y
		y = cp(table)
		be.EmbeddingBackward(y, Buf(edy), Ids(eids))
		out["EmbeddingBackward"] = y
		losses, dl := make(Buf, rows), make(Buf, len(x))
		be.SoftmaxCrossEntropy(losses, dl, Buf(x), Ids(targets), 1.0/rows)
		out["SoftmaxCrossEntropy.losses"], out["SoftmaxCrossEntropy.dlogits"] = losses, dl
		out["ArgmaxCorrect"] = Buf{float32(be.ArgmaxCorrect(Buf(x), Ids(targets)))}
		y = make(Buf, len(att))
		be.CausalSoftmax(y, Buf(att), tt, 0.125)
		out["CausalSoftmax"] = y
		dx = make(Buf, len(att))
		be.SoftmaxBackward(dx, Buf(x[:len(att)]), y, tt, 0.125)
		out["SoftmaxBackward"] = dx
		y = make(Buf, len(x))
		be.Transpose(y, Buf(x), []int{6, 50, 10, 100}, []int{0, 2, 1, 3})
		out["Transpose"] = y
		p, buf := cp(x), make(Buf, len(x))
		for step := 0; step < 2; step++ {
			be.SGDStep(p, Buf(dy), buf, kernels.SGDHyper{LR: 0.1, Momentum: 0.9, WeightDecay: 0.01, Nesterov: true}, step == 0)
		}
		out["SGDStep.p"], out["SGDStep.buf"] = p, buf
		p, m, v := cp(x), make(Buf, len(x)), make(Buf, len(x))
		for step := 1; step <= 2; step++ {
			be.AdamWStep(p, Buf(dy), m, v, kernels.AdamWHyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}, step)
		}
		out["AdamWStep.p"], out["AdamWStep.m"], out["AdamWStep.v"] = p, m, v
		return out
	}

	ref := run(New(1))
	for _, threads := range []int{2, 3} {
		got := run(New(threads))
		for name, want := range ref {
			if i := firstBitDiff(got[name], want); i >= 0 {
				t.Errorf("%s with %d threads differs from 1 thread at [%d]: %v vs %v", name, threads, i, got[name][i], want[i])
			}
		}
	}
}

// firstBitDiff returns the first index where a and b differ in their bits,
// or -1.
func firstBitDiff(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// float64Bits carries a float64's exact bits in two float32 slots, so that
// firstBitDiff compares it bit for bit.
func float64Bits(x float64) Buf {
	b := math.Float64bits(x)
	return Buf{math.Float32frombits(uint32(b >> 32)), math.Float32frombits(uint32(b))}
}

// BenchmarkKernels times the shared kernel benchmarks on all cores:
// go test -run XXX -bench Kernels ./kernels/cpu
func BenchmarkKernels(b *testing.B) { kerneltest.Bench(b, New(0)) }
