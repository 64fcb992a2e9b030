package nn

import "fmt"

// SwiGLUMLP is Llama's feed-forward network (Shazeer 2020; Hugging Face's
// LlamaMLP): down(silu(gate(x))·up(x)), no biases, with gate and up
// [FFN, D] and down [D, FFN] in PyTorch's layout.
//
// Tensor parallelism is Megatron-LM's: gate and up are column-parallel
// (each shard holds FFN/TP of their output rows, cut alike, so a shard's
// silu(gate)·up pairs up its own rows) and down row-parallel, so the MLP
// communicates once forward and once backward, as Block's does.
type SwiGLUMLP struct {
	D, FFN         int
	Gate, Up, Down *Linear
	TP             TP
	in             projections
	down           Layer
}

// NewSwiGLUMLP registers prefix.gate_proj, prefix.up_proj and
// prefix.down_proj weights drawn from init, cut for the tensor-parallel
// place tp.
func NewSwiGLUMLP(s *ParamSet, prefix string, d, ffn int, init Init, tp TP) (*SwiGLUMLP, error) {
	if err := tp.Validate(); err != nil {
		return nil, err
	}
	if d <= 0 || ffn <= 0 || ffn%tp.Size != 0 {
		return nil, fmt.Errorf("%w: an MLP %d → %d cannot be split among %d tensor-parallel shards", ErrConfig, d, ffn, tp.Size)
	}
	m := &SwiGLUMLP{D: d, FFN: ffn, TP: tp}
	m.Gate = newColumnNoBias(s, prefix+".gate_proj", d, ffn, tp, init)
	m.Up = newColumnNoBias(s, prefix+".up_proj", d, ffn, tp, init)
	m.Down = newRowNoBias(s, prefix+".down_proj", ffn, d, tp, init)
	m.in = projections{ls: []*Linear{m.Gate, m.Up}, tp: tp}
	m.down = rowLayer(m.Down, tp)
	return m, nil
}

// Params implements Layer.
func (m *SwiGLUMLP) Params() []*Param { return []*Param{m.Gate.Weight, m.Up.Weight, m.Down.Weight} }

// Forward implements Layer.
func (m *SwiGLUMLP) Forward(c *Ctx, x Act) Act {
	gu := m.in.forward(c, x)
	g, u := gu[0], gu[1]
	h := c.Pool.Get(g.Rows * g.Cols)
	c.Be.SwiGLU(h, g.X, u.X)
	c.save(g.X, u.X)
	return m.down.Forward(c, Act{X: h, Rows: g.Rows, Cols: g.Cols})
}

// Backward implements Layer.
func (m *SwiGLUMLP) Backward(c *Ctx, dy Act) Act {
	dh := m.down.Backward(c, dy)
	dh.X = c.widen(dh.X)
	u, g := c.pop(), c.pop()
	// The gradients are written over the saved values.
	c.Be.SwiGLUBackward(g, u, dh.X, g, u)
	c.Pool.Put(dh.X)
	return m.in.backward(c, []Act{{X: g, Rows: dh.Rows, Cols: dh.Cols}, {X: u, Rows: dh.Rows, Cols: dh.Cols}})
}
