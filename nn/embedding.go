package nn

// Embedding maps token ids to rows of weight [num, dim] (nn.Embedding).
type Embedding struct {
	Num, Dim int
	Weight   *Param
}

// NewEmbedding registers prefix.weight [num, dim] drawn from N(0, std²)
// (PyTorch's default is std 1; GPTs use 0.02).
func NewEmbedding(s *ParamSet, prefix string, num, dim int, std float32) *Embedding {
	return &Embedding{Num: num, Dim: dim, Weight: s.Add(prefix+".weight", []int{num, dim}, Normal(0, std))}
}

// Params implements Layer.
func (e *Embedding) Params() []*Param { return []*Param{e.Weight} }

// Forward implements Layer: x carries Rows ids.
func (e *Embedding) Forward(c *Ctx, x Act) Act {
	y := c.Pool.Get(x.Rows * e.Dim)
	c.Be.Embedding(y, e.Weight.W, x.Ids)
	c.saveIndex(x.Ids)
	return Act{X: y, Rows: x.Rows, Cols: e.Dim}
}

// Backward implements Layer; there is no input gradient.
func (e *Embedding) Backward(c *Ctx, dy Act) Act {
	ids := c.Tape.PopIndex()
	c.Be.EmbeddingBackward(e.Weight.G, dy.X, ids)
	c.GradDone(e.Weight)
	c.Pool.Put(dy.X)
	return Act{Rows: dy.Rows}
}
