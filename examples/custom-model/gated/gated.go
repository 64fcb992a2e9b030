// Package gated is a model written outside troupe's packages, as a user
// writes one: a layer of its own (Gate, with its own forward and backward
// passes) and a model built from it and troupe's layers (GatedMLP), which
// registers itself as "gated-mlp". Importing the package is all it takes
// for troupe train's machinery — data parallelism, ZeRO, pipelines,
// checkpoints, elastic agents — to train it.
package gated

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
)

// Gate scales each column of its input by a learned gate in (0, 1):
// y[r, c] = x[r, c]·σ(a[c]). Its parameter is prefix.gate [cols].
type Gate struct {
	Cols int
	A    *nn.Param
}

// NewGate registers a gate of cols columns, each opening at σ(2) ≈ 0.88.
func NewGate(s *nn.ParamSet, prefix string, cols int) *Gate {
	return &Gate{Cols: cols, A: s.Add(prefix+".gate", []int{cols}, nn.Const(2))}
}

// Params implements nn.Layer.
func (g *Gate) Params() []*nn.Param { return []*nn.Param{g.A} }

// sigmoids is σ(a) on the host (the gate is small).
func (g *Gate) sigmoids(c *nn.Ctx) []float32 {
	a := make([]float32, g.Cols)
	c.Be.Download(a, g.A.W)
	for i, v := range a {
		a[i] = float32(1 / (1 + math.Exp(-float64(v))))
	}
	return a
}

// Forward implements nn.Layer.
func (g *Gate) Forward(c *nn.Ctx, x nn.Act) nn.Act {
	if x.Cols != g.Cols {
		panic(fmt.Sprintf("gated: a gate of %d columns got %d", g.Cols, x.Cols))
	}
	n := x.Rows * x.Cols
	col := c.Pool.Get(g.Cols)
	c.Be.Upload(col, g.sigmoids(c))
	s := c.Pool.Get(n) // σ(a) on every row
	c.Be.Fill(s, 0)
	c.Be.AddBias(s, col)
	c.Pool.Put(col)
	y := c.Pool.Get(n)
	c.Be.Mul(y, x.X, s)
	if c.Train {
		c.Tape.Push(x.X, s) // what the backward pass needs
	} else {
		c.Pool.Put(x.X)
		c.Pool.Put(s)
	}
	return nn.Act{X: y, Rows: x.Rows, Cols: x.Cols}
}

// Backward implements nn.Layer: dx = dy·σ(a), and
// da[c] += σ'(a[c])·Σ_r dy[r, c]·x[r, c].
func (g *Gate) Backward(c *nn.Ctx, dy nn.Act) nn.Act {
	s := c.Tape.Pop()
	x := c.Tape.Pop()
	n := dy.Rows * dy.Cols
	dx := c.Pool.Get(n)
	c.Be.Mul(dx, dy.X, s)
	c.Be.Mul(x, dy.X, x) // dy·x, in x's buffer (not needed any more)
	sums := c.Pool.Get(g.Cols)
	c.Be.Fill(sums, 0)
	c.Be.SumRows(sums, x)
	host := make([]float32, g.Cols)
	c.Be.Download(host, sums)
	for i, sg := range g.sigmoids(c) {
		host[i] *= sg * (1 - sg)
	}
	c.Be.Upload(sums, host)
	c.Be.Axpy(1, sums, g.A.G) // gradients accumulate
	c.GradDone(g.A)
	for _, b := range []kernels.Buffer{sums, s, x, dy.X} {
		c.Pool.Put(b)
	}
	return nn.Act{X: dx, Rows: dy.Rows, Cols: dy.Cols}
}

// GatedMLP is Depth blocks of Linear → Gate → ReLU, then a Linear head:
// a classifier (cross-entropy, accuracy) on class targets, a regression
// (mean squared error) on real-valued ones. Its parameters are
// body.{i}.fc.{weight,bias}, body.{i}.gate, head.{weight,bias}. A pipeline
// may cut it between any two units (each block, then the head); it has no
// tensor-parallel layers.
type GatedMLP struct {
	In, Hidden, Depth, Out int
	Regression             bool
}

func init() {
	nn.Register(nn.ModelDef{
		Name:    "gated-mlp",
		Summary: "an example of a user's model: Linear → learned Gate → ReLU blocks (examples/custom-model)",
		Options: []nn.Option{
			{Name: "hidden", Kind: nn.IntOption, Default: "32", Usage: "width of the gated blocks"},
			{Name: "depth", Kind: nn.IntOption, Default: "2", Usage: "gated blocks before the head"},
		},
		New: func(v nn.Values, d nn.DataShape) (nn.Spec, error) {
			if d.Tokens {
				return nil, fmt.Errorf("%w: gated-mlp reads feature rows, not %v", nn.ErrConfig, d)
			}
			m := GatedMLP{In: d.Features, Hidden: v.Int("hidden"), Depth: v.Int("depth"), Out: d.Classes}
			if d.Outputs > 0 {
				m.Out, m.Regression = d.Outputs, true
			}
			return m, nil
		},
	})
}

// Name implements nn.Spec.
func (GatedMLP) Name() string { return "gated-mlp" }

// Units implements nn.Spec.
func (m GatedMLP) Units() int { return m.Depth + 1 }

// Validate implements nn.Spec.
func (m GatedMLP) Validate() error {
	if m.In <= 0 || m.Hidden <= 0 || m.Depth < 1 || m.Out <= 0 {
		return fmt.Errorf("%w: gated-mlp sizes must be positive (depth at least 1): %+v", nn.ErrConfig, m)
	}
	return nil
}

// CheckTP implements nn.Spec: no tensor-parallel layers.
func (GatedMLP) CheckTP(t nn.TP) error {
	return fmt.Errorf("%w: gated-mlp has no tensor-parallel layers (use --tp 1)", nn.ErrConfig)
}

// Build implements nn.Spec.
func (m GatedMLP) Build(b *nn.Model) error {
	b.Input, b.Features = nn.DenseInput, m.In
	b.InCols, b.OutCols = m.Hidden, m.Hidden
	if b.First() {
		b.InCols = m.In
	}
	if b.Last() {
		b.OutCols = m.Out
	}
	if m.Regression {
		b.Objective = nn.MSELoss{}
	} else {
		b.Classes, b.Accuracy = m.Out, true
	}
	for u := b.Lo; u < b.Hi; u++ {
		if u == m.Depth {
			b.Layers = append(b.Layers, nn.NewLinear(b.Set, "head", m.Hidden, m.Out, true))
			continue
		}
		in := m.Hidden
		if u == 0 {
			in = m.In
		}
		prefix := fmt.Sprintf("body.%d", u)
		b.Layers = append(b.Layers, nn.Seq{nn.NewLinear(b.Set, prefix+".fc", in, m.Hidden, true), NewGate(b.Set, prefix, m.Hidden), &nn.ActLayer{Fn: nn.ReLU}})
	}
	b.Describe = fmt.Sprintf("gated-mlp %d-%d×%d-%d", m.In, m.Hidden, m.Depth, m.Out)
	return nil
}
