package nn

import "github.com/troupe-ml/troupe/kernels"

// Activation is an element-wise non-linearity.
type Activation int

const (
	// ReLU is max(x, 0).
	ReLU Activation = iota
	// GELU is the exact (erf) GELU, PyTorch's default.
	GELU
)

func (a Activation) String() string {
	switch a {
	case ReLU:
		return "relu"
	case GELU:
		return "gelu"
	}
	return "activation(?)"
}

// Act layer applying an Activation; it has no parameters.
type ActLayer struct{ Fn Activation }

// Params implements Layer.
func (a *ActLayer) Params() []*Param { return nil }

// Forward implements Layer.
// Under mixed precision x is rounded to the compute type first (as
// autocast's linear layers hand their output on in it), its fp32 copy
// freed, the function reads the rounded values that backward reads too,
// and y is written in the compute type (rounded once): the next layer is
// a linear one, whose GEMM takes it so (as autocast's GELU of a bf16
// tensor is bf16). No fp32 copy of either is alive.
func (a *ActLayer) Forward(c *Ctx, x Act) Act {
	xs := c.lower(x.X)
	y := c.Pool.GetAs(x.Rows*x.Cols, c.low)
	a.fwd(c.Be, y, xs)
	c.keep(xs)
	return Act{X: y, Rows: x.Rows, Cols: x.Cols}
}

// Backward implements Layer; dx is written over dy, in dy's type (fp32, or
// the compute type when the Linear after this layer has LowInputGrad), and
// the saved input (fp32, or in the compute type under mixed precision: the
// kernels widen it as they read it) goes back to the pool.
func (a *ActLayer) Backward(c *Ctx, dy Act) Act {
	x := c.Tape.Pop()
	switch a.Fn {
	case ReLU:
		c.Be.ReLUBackward(dy.X, dy.X, x)
	case GELU:
		c.Be.GELUBackward(dy.X, dy.X, x)
	}
	c.Pool.Put(x)
	return dy
}

func (a *ActLayer) fwd(be kernels.Backend, y, x kernels.Buffer) {
	switch a.Fn {
	case ReLU:
		be.ReLU(y, x)
	case GELU:
		be.GELU(y, x)
	}
}
