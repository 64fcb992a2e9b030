package nn

// LayerNorm normalises the last dimension (nn.LayerNorm with affine
// weight and bias, eps 1e-5).
type LayerNorm struct {
	Dim          int
	Eps          float32
	Weight, Bias *Param
}

// NewLayerNorm registers prefix.weight (ones) and prefix.bias (zeros).
func NewLayerNorm(s *ParamSet, prefix string, dim int) *LayerNorm {
	return &LayerNorm{
		Dim:    dim,
		Eps:    1e-5,
		Weight: s.Add(prefix+".weight", []int{dim}, Const(1)),
		Bias:   s.Add(prefix+".bias", []int{dim}, Const(0)),
	}
}

// Params implements Layer.
func (l *LayerNorm) Params() []*Param { return []*Param{l.Weight, l.Bias} }

// Forward implements Layer.
func (l *LayerNorm) Forward(c *Ctx, x Act) Act {
	y := c.Pool.Get(x.Rows * l.Dim)
	mean, rstd := c.Pool.Get(x.Rows), c.Pool.Get(x.Rows)
	c.Be.LayerNorm(y, mean, rstd, x.X, l.Weight.W, l.Bias.W, l.Eps)
	c.save(x.X)
	c.keep(mean)
	c.keep(rstd)
	return Act{X: y, Rows: x.Rows, Cols: l.Dim}
}

// Backward implements Layer.
func (l *LayerNorm) Backward(c *Ctx, dy Act) Act {
	rstd, mean, x := c.Tape.Pop(), c.Tape.Pop(), c.Tape.Pop() // x as saved: the kernel widens it
	dx := c.Pool.Get(dy.Rows * l.Dim)
	c.Be.LayerNormBackward(dx, l.Weight.G, l.Bias.G, dy.X, x, mean, rstd, l.Weight.W)
	c.GradDone(l.Weight, l.Bias)
	c.Pool.Put(x)
	c.Pool.Put(mean)
	c.Pool.Put(rstd)
	c.Pool.Put(dy.X)
	return Act{X: dx, Rows: dy.Rows, Cols: l.Dim}
}
