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
	// LowInputGrad: under mixed precision dx is written in the compute
	// type, over x (kept in it), for a layer behind that reads gradients
	// so (an activation function, whose own dx goes on to a Linear's GEMM
	// in the compute type anyway): no fp32 gradient as large as x is made,
	// as fp32 training makes none (dx is written over x there too).
	LowInputGrad bool
	// LowOutput: under mixed precision y is written in the compute type,
	// for a layer after that rounds its input to it anyway (an activation
	// function): computed in fp32 a block of rows at a time, the bias
	// added, and rounded once — the values of the fp32 output rounded, with
	// no fp32 buffer as large as it.
	LowOutput bool
}

// lowOutputBlock bounds the fp32 scratch of a LowOutput product, in
// values.
const lowOutputBlock = 1 << 16

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

// Forward implements Layer. Under mixed precision the input is rounded to
// the compute type once: the product's operand and what backward keeps.
func (l *Linear) Forward(c *Ctx, x Act) Act {
	x.X = c.lower(x.X)
	y := l.product(c, x, true)
	c.keep(x.X)
	return y
}

// Backward implements Layer. dy may be in the compute type (from a layer
// behind a LowInputGrad one).
func (l *Linear) Backward(c *Ctx, dy Act) Act {
	x := c.Tape.Pop()
	rows := dy.Rows
	d := c.operand(dy.X)
	l.weightGrads(c, dy.X, d, rows, x, true)
	if l.SkipInputGrad {
		c.release(dy.X, d)
		c.Pool.Put(x)
		c.Pool.Put(dy.X)
		return Act{Rows: rows, Cols: l.In}
	}
	// dx = dy·W, written over x when backward no longer needs it (fp32).
	// Under mixed precision d is dy's rounded copy and dy itself is done
	// with (the bias took its gradient): it goes back first.
	copied := kernels.DTypeOf(d) != kernels.DTypeOf(dy.X)
	if copied {
		c.Pool.Put(dy.X)
	}
	dx := l.inputGrad(c, d, rows, x)
	c.Pool.Put(d) // dy itself, or its copy
	return Act{X: dx, Rows: rows, Cols: l.In}
}

// product returns x·Wᵀ, plus the bias when withBias, in a new buffer:
// fp32, or in the compute type with LowOutput under mixed precision.
func (l *Linear) product(c *Ctx, x Act, withBias bool) Act {
	a := c.operand(x.X)
	if l.LowOutput && c.low != kernels.F32 {
		y := l.lowProduct(c, a, x.Rows, withBias)
		c.release(x.X, a)
		return Act{X: y, Rows: x.Rows, Cols: l.Out}
	}
	y := c.Pool.Get(x.Rows * l.Out)
	c.Be.Gemm(kernels.GemmArgs{TransB: true, M: x.Rows, N: l.Out, K: l.In, Alpha: 1}, a, c.weight(l.Weight), y)
	c.release(x.X, a)
	if withBias && l.Bias != nil {
		c.Be.AddBias(y, l.Bias.W)
	}
	return Act{X: y, Rows: x.Rows, Cols: l.Out}
}

// lowProduct is product into the compute type, a block of rows at a
// time through an fp32 scratch of at most lowOutputBlock values (a is x
// as a GEMM operand).
func (l *Linear) lowProduct(c *Ctx, a kernels.Buffer, rows int, withBias bool) kernels.Buffer {
	y := c.Pool.GetAs(rows*l.Out, c.low)
	step := max(1, min(rows, lowOutputBlock/max(1, l.Out)))
	scratch := c.Pool.Get(step * l.Out)
	for r := 0; r < rows; r += step {
		n := min(step, rows-r)
		s := c.Be.View(scratch, 0, n*l.Out)
		c.Be.Gemm(kernels.GemmArgs{TransB: true, M: n, N: l.Out, K: l.In, Alpha: 1}, c.Be.View(a, r*l.In, n*l.In), c.weight(l.Weight), s)
		if withBias && l.Bias != nil {
			c.Be.AddBias(s, l.Bias.W)
		}
		c.lp.Convert(c.Be.View(y, r*l.Out, n*l.Out), s)
	}
	c.Pool.Put(scratch)
	return y
}

// weightGrads accumulates dW += dyᵀ·x (and, when withBias, the bias's
// gradient from dy: fp32, or in the compute type behind a LowInputGrad
// layer) and reports them done; d is dy as a GEMM operand (Ctx.operand),
// rows its rows.
func (l *Linear) weightGrads(c *Ctx, dy, d kernels.Buffer, rows int, x kernels.Buffer, withBias bool) {
	xo := c.operand(x)
	c.Be.Gemm(kernels.GemmArgs{TransA: true, M: l.Out, N: l.In, K: rows, Alpha: 1, Beta: 1}, d, xo, l.Weight.G)
	c.release(x, xo)
	if withBias && l.Bias != nil {
		c.Be.SumRows(l.Bias.G, dy)
		c.GradDone(l.Weight, l.Bias)
		return
	}
	c.GradDone(l.Weight)
}

// inputGrad returns dx = dy·W (d is dy as a GEMM operand) written over x,
// which the caller gives up, when x is fp32 or LowInputGrad is set, else
// in a new fp32 buffer (x goes back to the pool).
func (l *Linear) inputGrad(c *Ctx, d kernels.Buffer, rows int, x kernels.Buffer) kernels.Buffer {
	dx := x
	if kernels.DTypeOf(x) != kernels.F32 && !l.LowInputGrad {
		c.Pool.Put(x)
		dx = c.Pool.Get(rows * l.In)
	}
	c.Be.Gemm(kernels.GemmArgs{M: rows, N: l.In, K: l.Out, Alpha: 1}, d, c.weight(l.Weight), dx)
	return dx
}
