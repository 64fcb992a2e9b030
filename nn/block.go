package nn

// Block is a pre-LayerNorm transformer block:
// x = x + proj(attn(ln1(x))); x = x + out(gelu(fc(ln2(x)))).
// Names follow ../shared/anchors/torch_gpt_tiny.py: ln1, qkv, proj, ln2, fc, out.
// A tensor-parallel shard holds its heads of attn, fc column-parallel and
// out row-parallel (see TP); the LayerNorms are whole on every shard.
type Block struct {
	LN1  *LayerNorm
	Attn *CausalSelfAttention
	LN2  *LayerNorm
	FC   *Linear
	Act  *ActLayer
	Out  *Linear
	fc   Layer
	out  Layer
}

// NewBlock registers a block's parameters under prefix, cut for the
// tensor-parallel place tp.
func NewBlock(s *ParamSet, prefix string, c, heads, t int, std, projStd float32, tp TP) (*Block, error) {
	b := &Block{LN1: newReplicatedLayerNorm(s, prefix+".ln1", c, tp)}
	attn, err := NewCausalSelfAttention(s, prefix, c, heads, t, std, projStd, tp)
	if err != nil {
		return nil, err
	}
	b.Attn = attn
	b.LN2 = newReplicatedLayerNorm(s, prefix+".ln2", c, tp)
	b.FC = newColumn(s, prefix+".fc", c, 4*c, 1, tp, Normal(0, std), Const(0))
	b.FC.LowOutput = true // the GELU reads it in the compute type
	b.Act = &ActLayer{Fn: GELU}
	b.Out = newRow(s, prefix+".out", 4*c, c, tp, Normal(0, projStd), Const(0))
	b.Out.LowInputGrad = true // its dx goes to the GELU, whose dx to fc's GEMMs
	b.fc, b.out = columnLayer(b.FC, tp), rowLayer(b.Out, tp)
	return b, nil
}

// newReplicatedLayerNorm is a LayerNorm every shard holds whole; with
// sequence parallelism it normalises a shard's rows only, so its
// gradients are partial.
func newReplicatedLayerNorm(s *ParamSet, prefix string, dim int, tp TP) *LayerNorm {
	l := NewLayerNorm(s, prefix, dim)
	l.Weight.PartialGrad, l.Bias.PartialGrad = tp.SP, tp.SP
	return l
}

// Params implements Layer.
func (b *Block) Params() []*Param {
	var ps []*Param
	for _, l := range []Layer{b.LN1, b.Attn, b.LN2, b.FC, b.Out} {
		ps = append(ps, l.Params()...)
	}
	return ps
}

// Forward implements Layer.
func (b *Block) Forward(c *Ctx, x Act) Act {
	n := x.Rows * x.Cols
	// The residual stream x is needed after each branch; the branch takes a
	// copy because layers own (and may recycle) their inputs.
	h := c.Pool.Get(n)
	c.Be.Copy(h, x.X)
	a := b.Attn.Forward(c, b.LN1.Forward(c, Act{X: h, Rows: x.Rows, Cols: x.Cols}))
	c.Be.Add(x.X, x.X, a.X)
	c.Pool.Put(a.X)
	h2 := c.Pool.Get(n)
	c.Be.Copy(h2, x.X)
	m := b.out.Forward(c, b.Act.Forward(c, b.fc.Forward(c, b.LN2.Forward(c, Act{X: h2, Rows: x.Rows, Cols: x.Cols}))))
	c.Be.Add(x.X, x.X, m.X)
	c.Pool.Put(m.X)
	return x
}

// Backward implements Layer.
func (b *Block) Backward(c *Ctx, dy Act) Act {
	n := dy.Rows * dy.Cols
	// dy flows unchanged along the residual and into each branch.
	g := c.Pool.Get(n)
	c.Be.Copy(g, dy.X)
	dm := b.LN2.Backward(c, b.fc.Backward(c, b.Act.Backward(c, b.out.Backward(c, Act{X: g, Rows: dy.Rows, Cols: dy.Cols}))))
	c.Be.Add(dy.X, dy.X, dm.X)
	c.Pool.Put(dm.X)
	g2 := c.Pool.Get(n)
	c.Be.Copy(g2, dy.X)
	da := b.LN1.Backward(c, b.Attn.Backward(c, Act{X: g2, Rows: dy.Rows, Cols: dy.Cols}))
	c.Be.Add(dy.X, dy.X, da.X)
	c.Pool.Put(da.X)
	return dy
}
