package kerneltest

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
)

// u is the float32 unit roundoff, 2⁻²⁴: one correctly rounded float32
// operation errs by at most u relative. Tolerances below are multiples of it
// times a magnitude the reference computes alongside each result.
const u = 1.0 / (1 << 24)

// tiny is the smallest normal float32, 2⁻¹²⁶. Below it float32 keeps no
// relative precision (and a backend may flush denormals to zero), so results
// that small may be off by tiny absolute.
const tiny = 0x1p-126

// Run runs the whole conformance suite against be, one subtest per kernel
// and shape, named like "LayerNorm/33x1000".
func Run(t *testing.T, be kernels.Backend) {
	t.Helper()
	for _, f := range []struct {
		name string
		run  func(*suite)
	}{
		{"Buffers", testBuffers},
		{"Gemm", testGemm},
		{"Convert", testConvert},
		{"LowGemm", testLowGemm},
		{"LowSaved", testLowSaved},
		{"Axpy", testAxpy},
		{"Scale", testScale},
		{"Add", testAdd},
		{"AddBias", testAddBias},
		{"SumRows", testSumRows},
		{"Sum", testSum},
		{"SumSquares", testSumSquares},
		{"ReLU", testReLU},
		{"ReLUBackward", testReLUBackward},
		{"GELU", testGELU},
		{"GELUBackward", testGELUBackward},
		{"LayerNorm", testLayerNorm},
		{"LayerNormBackward", testLayerNormBackward},
		{"Embedding", testEmbedding},
		{"EmbeddingBackward", testEmbeddingBackward},
		{"SoftmaxCrossEntropy", testSoftmaxCrossEntropy},
		{"ArgmaxCorrect", testArgmaxCorrect},
		{"ShardEmbedding", testShardEmbedding},
		{"ShardEmbeddingBackward", testShardEmbeddingBackward},
		{"RowMax", testRowMax},
		{"ShardCrossEntropy", testShardCrossEntropy},
		{"CausalSoftmax", testCausalSoftmax},
		{"SoftmaxBackward", testSoftmaxBackward},
		{"CausalSoftmaxFrom", testCausalSoftmaxFrom},
		{"RMSNorm", testRMSNorm},
		{"RMSNormBackward", testRMSNormBackward},
		{"SwiGLU", testSwiGLU},
		{"Mul", testMul},
		{"CopyCols", testCopyCols},
		{"Rotary", testRotary},
		{"Transpose", testTranspose},
		{"SGDStep", testSGDStep},
		{"AdamWStep", testAdamWStep},
		{"Panics", testPanics},
	} {
		t.Run(f.name, func(t *testing.T) { f.run(&suite{t: t, be: be}) })
	}
}

// suite is one kernel's test: the backend and the subtest it reports to.
type suite struct {
	t  *testing.T
	be kernels.Backend
}

// run runs body as subtest name with a fresh case whose RNG is seeded from
// the full subtest name, so a failing case replays alone with -run.
func (s *suite) run(name string, body func(c *tcase)) {
	s.t.Run(name, func(t *testing.T) {
		h := fnv.New64a()
		h.Write([]byte(t.Name()))
		body(&tcase{T: t, be: s.be, rng: rand.New(rand.NewPCG(0x7200e, h.Sum64()))})
	})
}

// tcase is one subtest: helpers to move data to and from the backend and to
// compare with a reference.
type tcase struct {
	*testing.T
	be  kernels.Backend
	rng *rand.Rand
}

// up allocates a buffer holding vals.
func (c *tcase) up(vals []float32) kernels.Buffer {
	b := c.be.Alloc(len(vals))
	if b.Len() != len(vals) {
		c.Fatalf("Alloc(%d).Len() = %d", len(vals), b.Len())
	}
	c.be.Upload(b, vals)
	return b
}

// upIdx allocates an index buffer holding ids.
func (c *tcase) upIdx(ids []int32) kernels.Index {
	x := c.be.AllocIndex(len(ids))
	if x.Len() != len(ids) {
		c.Fatalf("AllocIndex(%d).Len() = %d", len(ids), x.Len())
	}
	c.be.UploadIndex(x, ids)
	return x
}

// down returns b's values, after a Sync that must succeed.
func (c *tcase) down(b kernels.Buffer) []float32 {
	if err := c.be.Sync(); err != nil {
		c.Fatalf("Sync: %v", err)
	}
	out := make([]float32, b.Len())
	c.be.Download(out, b)
	return out
}

// randn returns n standard normal values times sd plus mean.
func (c *tcase) randn(n int, mean, sd float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(mean + sd*c.rng.NormFloat64())
	}
	return v
}

// uniform returns n values uniform in [lo, hi).
func (c *tcase) uniform(n int, lo, hi float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(lo + (hi-lo)*c.rng.Float64())
	}
	return v
}

// check fails the test unless |got[i] − want[i]| ≤ tol[i] for every i, NaN
// matching only NaN and infinities only themselves. It reports the count and
// the first few offenders with their index.
func (c *tcase) check(what string, got []float32, want, tol []float64) {
	c.Helper()
	if len(got) != len(want) || len(want) != len(tol) {
		c.Fatalf("%s: %d results, reference has %d values and %d tolerances", what, len(got), len(want), len(tol))
	}
	bad, worst := 0, 0.0
	var msg strings.Builder
	for i, g := range got {
		g64, w := float64(g), want[i]
		var ok bool
		switch {
		case math.IsNaN(w):
			ok = math.IsNaN(g64)
		case math.IsInf(w, 0):
			ok = g64 == w
		default:
			ok = math.Abs(g64-w) <= tol[i]
		}
		if ok {
			continue
		}
		bad++
		if r := math.Abs(g64-w) / math.Max(tol[i], math.SmallestNonzeroFloat64); r > worst || math.IsNaN(r) {
			worst = r
		}
		if bad <= 5 {
			fmt.Fprintf(&msg, "\n\t[%d] got %.9g, want %.9g (|diff| %.3g > tol %.3g)", i, g, w, math.Abs(g64-w), tol[i])
		}
	}
	if bad > 0 {
		c.Errorf("%s: %d of %d values off (worst %.3g× tolerance):%s", what, bad, len(got), worst, msg.String())
	}
}

// exact is a tolerance of zero for n values.
func exact(n int) []float64 { return make([]float64, n) }

// widen converts float32 values to float64.
func widen(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// rel returns k·u·mag[i] for each i.
func rel(k float64, mag []float64) []float64 {
	out := make([]float64, len(mag))
	for i, m := range mag {
		out[i] = k * u * m
	}
	return out
}

// shapes are the rows×cols combinations the row-wise kernels run on: single
// elements, odd sizes that leave remainders in any vector width, one long
// row, many short ones, and one large enough for a backend to split it over
// threads or blocks.
var shapes = [][2]int{{1, 1}, {1, 7}, {7, 1}, {7, 33}, {33, 7}, {1, 1000}, {33, 1000}, {1000, 33}, {257, 1000}}

// lengths are the flat sizes of the element-wise kernels, the last one large
// enough to be split.
var lengths = []int{0, 1, 7, 33, 1000, 1<<17 + 3}

func shapeName(rows, cols int) string { return fmt.Sprintf("%dx%d", rows, cols) }
