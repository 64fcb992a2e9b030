package nn_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/gradcheck"
)

// Residual and Parallel (summed and concatenated) need no backward code of
// their own: built from Linear, ReLU and GELU, their gradients agree with
// finite differences (the checker's stated tolerances), and a Parallel
// holding a Residual holding a Parallel nests.
func TestCompositionGradients(t *testing.T) {
	be := cpu.New(1)
	cases := map[string]func(s *nn.ParamSet) nn.Layer{
		"residual": func(s *nn.ParamSet) nn.Layer {
			return nn.Residual{Body: nn.Seq{nn.NewLinear(s, "a", 6, 6, true), &nn.ActLayer{Fn: nn.GELU}}}
		},
		"parallel-sum": func(s *nn.ParamSet) nn.Layer {
			return &nn.Parallel{Branches: []nn.Layer{nn.NewLinear(s, "a", 6, 4, true), nn.Seq{nn.NewLinear(s, "b", 6, 4, false), &nn.ActLayer{Fn: nn.GELU}}}}
		},
		"parallel-concat": func(s *nn.ParamSet) nn.Layer {
			return &nn.Parallel{Concat: true, Branches: []nn.Layer{nn.NewLinear(s, "a", 6, 3, true), nn.NewLinear(s, "b", 6, 5, true), &nn.ActLayer{Fn: nn.GELU}}}
		},
		"nested": func(s *nn.ParamSet) nn.Layer {
			inner := &nn.Parallel{Concat: true, Branches: []nn.Layer{nn.NewLinear(s, "a", 6, 2, true), nn.NewLinear(s, "b", 6, 4, true)}}
			return &nn.Parallel{Branches: []nn.Layer{nn.Residual{Body: inner}, nn.NewLinear(s, "c", 6, 6, true)}}
		},
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			s := nn.NewParamSet(be, 3)
			l := build(s)
			s.Finalize()
			if err := gradcheck.Layer(be, l, 5, 6, gradcheck.Options{MaxPerTensor: -1}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A concatenating Parallel puts its branches' outputs side by side, and a
// summing one adds them: checked against the branches run alone.
func TestParallelOutputs(t *testing.T) {
	be := cpu.New(1)
	s := nn.NewParamSet(be, 9)
	a, b := nn.NewLinear(s, "a", 4, 3, true), nn.NewLinear(s, "b", 4, 2, true)
	s.Finalize()
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 5*4)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	run := func(l nn.Layer) []float32 {
		c := nn.NewCtx(be, nn.NewPool(be))
		c.Train = false
		xb := c.Pool.Get(len(x))
		be.Upload(xb, x)
		y := l.Forward(c, nn.Act{X: xb, Rows: 5, Cols: 4})
		out := make([]float32, y.Rows*y.Cols)
		be.Download(out, y.X)
		return out
	}
	ya, yb := run(a), run(b)
	cat := run(&nn.Parallel{Concat: true, Branches: []nn.Layer{a, b}})
	for r := range 5 {
		for j := range 5 {
			want := ya[r*3+min(j, 2)]
			if j >= 3 {
				want = yb[r*2+j-3]
			}
			if cat[r*5+j] != want {
				t.Fatalf("concat row %d column %d: %v, want %v", r, j, cat[r*5+j], want)
			}
		}
	}
	s2 := nn.NewParamSet(be, 9)
	c1, c2 := nn.NewLinear(s2, "a", 4, 3, true), nn.NewLinear(s2, "b", 4, 3, true)
	s2.Finalize()
	y1, y2, sum := run(c1), run(c2), run(&nn.Parallel{Branches: []nn.Layer{c1, c2}})
	for i := range sum {
		if sum[i] != y1[i]+y2[i] {
			t.Fatalf("sum element %d: %v, want %v", i, sum[i], y1[i]+y2[i])
		}
	}
}

// MSELoss is PyTorch's mean squared error once the trainer divides by the
// element count: the sum of squares and its gradient 2·scale·(out − y),
// against a float64 computation (rounding of a few float32 operations:
// 1e-6 relative).
func TestMSELoss(t *testing.T) {
	be := cpu.New(1)
	c := nn.NewCtx(be, nn.NewPool(be))
	out, tgt := []float32{1, -2, 0.5, 3, 0, 4}, []float32{0.5, -1, 0.5, 2, 1, 1}
	ob, tb := c.Pool.Get(6), be.Alloc(6)
	be.Upload(ob, out)
	be.Upload(tb, tgt)
	const scale = 1.0 / 6
	sum, d := nn.MSELoss{}.Loss(c, nn.Act{X: ob, Rows: 3, Cols: 2}, nn.Targets{Values: tb, Cols: 2}, scale)
	grad := make([]float32, 6)
	be.Download(grad, d.X)
	var want float64
	for i := range out {
		e := float64(out[i]) - float64(tgt[i])
		want += e * e
		if g := 2 * scale * e; math.Abs(float64(grad[i])-g) > 1e-6*math.Max(1, math.Abs(g)) {
			t.Errorf("gradient %d: %v, want %v", i, grad[i], g)
		}
	}
	if math.Abs(sum-want) > 1e-6*want {
		t.Errorf("sum %v, want %v", sum, want)
	}
}
