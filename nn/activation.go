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
func (a *ActLayer) Forward(c *Ctx, x Act) Act {
	y := c.Pool.Get(x.Rows * x.Cols)
	a.fwd(c.Be, y, x.X)
	c.save(x.X)
	return Act{X: y, Rows: x.Rows, Cols: x.Cols}
}

// Backward implements Layer; dx is written over the saved input.
func (a *ActLayer) Backward(c *Ctx, dy Act) Act {
	x := c.pop()
	switch a.Fn {
	case ReLU:
		c.Be.ReLUBackward(x, dy.X, x)
	case GELU:
		c.Be.GELUBackward(x, dy.X, x)
	}
	c.Pool.Put(dy.X)
	return Act{X: x, Rows: dy.Rows, Cols: dy.Cols}
}

func (a *ActLayer) fwd(be kernels.Backend, y, x kernels.Buffer) {
	switch a.Fn {
	case ReLU:
		be.ReLU(y, x)
	case GELU:
		be.GELU(y, x)
	}
}
