package nn

// RMSNorm is Llama's root-mean-square normalisation of the last dimension
// (Hugging Face's LlamaRMSNorm): y = w·x/sqrt(mean(x²) + eps), a weight and
// no bias, no mean subtracted. It computes in fp32 under mixed precision,
// as LayerNorm does; the input it keeps for backward is in the compute type.
type RMSNorm struct {
	Dim    int
	Eps    float32
	Weight *Param
}

// NewRMSNorm registers prefix.weight [dim], initialised to ones.
func NewRMSNorm(s *ParamSet, prefix string, dim int, eps float32) *RMSNorm {
	return &RMSNorm{Dim: dim, Eps: eps, Weight: s.Add(prefix+".weight", []int{dim}, Const(1))}
}

// Params implements Layer.
func (l *RMSNorm) Params() []*Param { return []*Param{l.Weight} }

// Forward implements Layer.
func (l *RMSNorm) Forward(c *Ctx, x Act) Act {
	x.X = c.widen(x.X)
	y := c.Pool.Get(x.Rows * l.Dim)
	rstd := c.Pool.Get(x.Rows)
	c.Be.RMSNorm(y, rstd, x.X, l.Weight.W, l.Eps)
	c.save(x.X)
	c.keep(rstd)
	return Act{X: y, Rows: x.Rows, Cols: l.Dim}
}

// Backward implements Layer.
func (l *RMSNorm) Backward(c *Ctx, dy Act) Act {
	rstd, x := c.Tape.Pop(), c.pop()
	dy.X = c.widen(dy.X)
	dx := c.Pool.Get(dy.Rows * l.Dim)
	c.Be.RMSNormBackward(dx, l.Weight.G, dy.X, x, rstd, l.Weight.W)
	c.GradDone(l.Weight)
	c.Pool.Put(x)
	c.Pool.Put(rstd)
	c.Pool.Put(dy.X)
	return Act{X: dx, Rows: dy.Rows, Cols: l.Dim}
}

// newReplicatedRMSNorm is an RMSNorm every tensor-parallel shard holds
// whole; with sequence parallelism it sees a shard's rows only, so its
// gradient is partial.
func newReplicatedRMSNorm(s *ParamSet, prefix string, dim int, eps float32, tp TP) *RMSNorm {
	l := NewRMSNorm(s, prefix, dim, eps)
	l.Weight.PartialGrad = tp.SP
	return l
}
