package nn

import (
	"math"

	"github.com/troupe-ml/troupe/kernels"
)

// Linear is y = x·Wᵀ + b with W [out, in] (PyTorch's nn.Linear).
type Linear struct {
	In, Out int
	Weight  *Param
	Bias    *Param // nil without bias
	// SkipInputGrad drops dx in Backward (a model's first layer, whose
	// input is data): it saves a GEMM as large as the forward one.
	SkipInputGrad bool
}

// NewLinear registers prefix.weight [out, in] and prefix.bias [out] with
// PyTorch's default initialisation (uniform ±1/sqrt(in) for both).
func NewLinear(s *ParamSet, prefix string, in, out int, bias bool) *Linear {
	bound := float32(1 / math.Sqrt(float64(in)))
	l := &Linear{In: in, Out: out}
	l.Weight = s.Add(prefix+".weight", []int{out, in}, Uniform(-bound, bound))
	if bias {
		l.Bias = s.Add(prefix+".bias", []int{out}, Uniform(-bound, bound))
	}
	return l
}

// Params implements Layer.
func (l *Linear) Params() []*Param {
	if l.Bias == nil {
		return []*Param{l.Weight}
	}
	return []*Param{l.Weight, l.Bias}
}

// Forward implements Layer.
func (l *Linear) Forward(c *Ctx, x Act) Act {
	y := l.product(c, x, true)
	c.save(x.X)
	return y
}

// Backward implements Layer.
func (l *Linear) Backward(c *Ctx, dy Act) Act {
	x := c.Tape.Pop()
	rows := dy.Rows
	l.weightGrads(c, dy, x, true)
	if l.SkipInputGrad {
		c.Pool.Put(x)
		c.Pool.Put(dy.X)
		return Act{Rows: rows, Cols: l.In}
	}
	// dx = dy·W, written over x, which backward no longer needs.
	l.inputGrad(c, dy, x)
	c.Pool.Put(dy.X)
	return Act{X: x, Rows: rows, Cols: l.In}
}

// product returns x·Wᵀ, plus the bias when withBias, in a new buffer.
func (l *Linear) product(c *Ctx, x Act, withBias bool) Act {
	y := c.Pool.Get(x.Rows * l.Out)
	c.Be.Gemm(kernels.GemmArgs{TransB: true, M: x.Rows, N: l.Out, K: l.In, Alpha: 1}, x.X, l.Weight.W, y)
	if withBias && l.Bias != nil {
		c.Be.AddBias(y, l.Bias.W)
	}
	return Act{X: y, Rows: x.Rows, Cols: l.Out}
}

// weightGrads accumulates dW += dyᵀ·x (and the bias's gradient when
// withBias) and reports them done.
func (l *Linear) weightGrads(c *Ctx, dy Act, x kernels.Buffer, withBias bool) {
	c.Be.Gemm(kernels.GemmArgs{TransA: true, M: l.Out, N: l.In, K: dy.Rows, Alpha: 1, Beta: 1}, dy.X, x, l.Weight.G)
	if withBias && l.Bias != nil {
		c.Be.SumRows(l.Bias.G, dy.X)
		c.GradDone(l.Weight, l.Bias)
		return
	}
	c.GradDone(l.Weight)
}

// inputGrad writes dx = dy·W.
func (l *Linear) inputGrad(c *Ctx, dy Act, dx kernels.Buffer) {
	c.Be.Gemm(kernels.GemmArgs{M: dy.Rows, N: l.In, K: l.Out, Alpha: 1}, dy.X, l.Weight.W, dx)
}
