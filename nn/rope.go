package nn

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/kernels"
)

// DefaultRopeTheta is the base of Llama's rotary frequencies (Llama 1 and 2;
// Llama 3 uses 500000).
const DefaultRopeTheta = 10000

// RoPE applies rotary position embeddings (Su et al. 2021) with Hugging
// Face's rotate_half convention: each head's dimension i < HeadDim/2 is
// paired with i + HeadDim/2 (the first half against the second, not
// interleaved pairs) and the pair is rotated by the angle
// pos·Theta^(−2i/HeadDim). Input and output are [rows, heads·HeadDim],
// heads contiguous in a row, as a q or k projection writes them.
//
// Row r is at position Pos0 + r mod Context: the rows are whole sequences
// of Context tokens (as GPTEmbed numbers them), or, for a decode step
// against a KV cache, one sequence's new rows starting at Pos0.
//
// The angles are computed in float64 and their cosines and sines rounded
// to float32 once (Hugging Face computes them in float32, whose error in
// the angle grows with the position); the tables for a shape are built on
// the host and kept on the device for the next pass of that shape.
//
// RoPE is itself a Layer (its backward pass rotates the gradient back), so
// that it can be checked alone; LlamaAttention applies it to q and k.
type RoPE struct {
	HeadDim, Context int
	Theta            float64
	Pos0             int
	tab              ropeTables
}

// ropeTables are the cos and sin tables ([rows, HeadDim/2]) of one shape,
// and −sin for the backward pass.
type ropeTables struct {
	be                  kernels.Backend
	rows, context, pos0 int
	cos, sin, nsin      kernels.Buffer
}

// NewRoPE returns the rotary embedding of heads of headDim (even) in
// sequences of context tokens; theta 0 means DefaultRopeTheta.
func NewRoPE(headDim, context int, theta float64) (*RoPE, error) {
	if headDim <= 0 || headDim%2 != 0 {
		return nil, fmt.Errorf("%w: rotary embeddings need an even head dimension, not %d", ErrConfig, headDim)
	}
	if context <= 0 {
		return nil, fmt.Errorf("%w: context %d", ErrConfig, context)
	}
	if theta == 0 {
		theta = DefaultRopeTheta
	}
	if theta <= 0 || math.IsNaN(theta) || math.IsInf(theta, 0) {
		return nil, fmt.Errorf("%w: rope theta %v", ErrConfig, theta)
	}
	return &RoPE{HeadDim: headDim, Context: context, Theta: theta}, nil
}

// Params implements Layer.
func (r *RoPE) Params() []*Param { return nil }

// Forward implements Layer: y is written over x.
func (r *RoPE) Forward(c *Ctx, x Act) Act {
	x.X = c.widen(x.X)
	r.rotate(c, x.X, x.Rows, r.Context, r.Pos0, false)
	return x
}

// Backward implements Layer: the rotation's transpose (by −angle) is
// written over dy.
func (r *RoPE) Backward(c *Ctx, dy Act) Act {
	dy.X = c.widen(dy.X)
	r.rotate(c, dy.X, dy.Rows, r.Context, r.Pos0, true)
	return dy
}

// rotate rotates x ([rows, k·HeadDim], fp32) in place, row i at position
// pos0 + i mod context, backward by the negative angles.
func (r *RoPE) rotate(c *Ctx, x kernels.Buffer, rows, context, pos0 int, back bool) {
	t := r.tables(c.Be, rows, context, pos0)
	sin := t.sin
	if back {
		sin = t.nsin
	}
	c.Be.Rotary(x, x, t.cos, sin, r.HeadDim)
}

// tables returns the tables of a shape, made on first use.
func (r *RoPE) tables(be kernels.Backend, rows, context, pos0 int) *ropeTables {
	t := &r.tab
	if t.be == be && t.rows == rows && t.context == context && t.pos0 == pos0 {
		return t
	}
	if t.be != nil {
		t.be.Free(t.cos)
		t.be.Free(t.sin)
		t.be.Free(t.nsin)
	}
	half := r.HeadDim / 2
	cos, sin, nsin := make([]float32, rows*half), make([]float32, rows*half), make([]float32, rows*half)
	for i := range rows {
		pos := float64(pos0 + i%context)
		for j := range half {
			a := pos * math.Pow(r.Theta, -float64(2*j)/float64(r.HeadDim))
			s, co := math.Sincos(a)
			cos[i*half+j], sin[i*half+j], nsin[i*half+j] = float32(co), float32(s), -float32(s)
		}
	}
	*t = ropeTables{be: be, rows: rows, context: context, pos0: pos0, cos: be.Alloc(len(cos)), sin: be.Alloc(len(sin)), nsin: be.Alloc(len(nsin))}
	be.Upload(t.cos, cos)
	be.Upload(t.sin, sin)
	be.Upload(t.nsin, nsin)
	return t
}
