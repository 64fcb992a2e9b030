package nn

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/kernels"
)

// CausalSelfAttention is multi-head causal self-attention over sequences of
// length T, with a fused qkv projection [3C, C] (q, k, v in that order along
// the output, heads contiguous inside each) and an output projection [C, C],
// as in nanoGPT and ../shared/anchors/torch_gpt_tiny.py.
//
// Input and output are [B·T, C] (row b·T+t is token t of sequence b). A
// tensor-parallel shard holds Heads = all heads / TP.Size of them: qkv
// column-parallel by heads (each of q, k and v cut alike) and proj
// row-parallel, so the heads never meet until proj's all-reduce.
type CausalSelfAttention struct {
	// C is the model width; Heads the heads this shard holds, HeadDim
	// their width.
	C, Heads, HeadDim, T int
	QKV, Proj            *Linear
	TP                   TP
	qkv, proj            Layer
}

// NewCausalSelfAttention registers prefix.qkv and prefix.proj: weights
// drawn from N(0, std²) and N(0, projStd²), zero biases (nanoGPT's init),
// cut for the tensor-parallel place tp.
func NewCausalSelfAttention(s *ParamSet, prefix string, c, heads, t int, std, projStd float32, tp TP) (*CausalSelfAttention, error) {
	if c%heads != 0 {
		return nil, fmt.Errorf("%w: d_model %d is not divisible by %d heads", ErrConfig, c, heads)
	}
	if heads%tp.Size != 0 {
		return nil, fmt.Errorf("%w: %d heads cannot be split among %d tensor-parallel shards", ErrConfig, heads, tp.Size)
	}
	a := &CausalSelfAttention{C: c, Heads: heads / tp.Size, HeadDim: c / heads, T: t, TP: tp}
	a.QKV = newColumn(s, prefix+".qkv", c, 3*c, 3, tp, Normal(0, std), Const(0))
	a.Proj = newRow(s, prefix+".proj", c, c, tp, Normal(0, projStd), Const(0))
	a.qkv, a.proj = columnLayer(a.QKV, tp), rowLayer(a.Proj, tp)
	return a, nil
}

// Params implements Layer.
func (a *CausalSelfAttention) Params() []*Param {
	return append(a.QKV.Params(), a.Proj.Params()...)
}

// dims returns the sequences in rows and the shard's attention width.
func (a *CausalSelfAttention) dims(rows int) (b, width int) {
	if rows%a.T != 0 {
		panic(fmt.Sprintf("nn: attention input has %d rows, not a multiple of the context %d", rows, a.T))
	}
	return rows / a.T, a.Heads * a.HeadDim
}

// Forward implements Layer.
func (a *CausalSelfAttention) Forward(c *Ctx, x Act) Act {
	be := c.Be
	qkv := a.qkv.Forward(c, x) // [B, T, 3, H, hd]
	B, C := a.dims(qkv.Rows)
	H, T, hd := a.Heads, a.T, a.HeadDim
	// heads: [3, B, H, T, hd]; q, k, v are its three thirds.
	heads := c.Pool.Get(3 * B * T * C)
	be.Transpose(heads, qkv.X, []int{B, T, 3, H, hd}, []int{2, 0, 3, 1, 4})
	c.Pool.Put(qkv.X)
	// Under mixed precision the heads are rounded once: the products'
	// operands and what backward keeps.
	heads = c.lower(heads)
	n := B * T * C
	q, k, v := be.View(heads, 0, n), be.View(heads, n, n), be.View(heads, 2*n, n)
	// att = q·kᵀ per (b, h): [B·H, T, T]; p = causal softmax of att/sqrt(hd).
	att := c.Pool.Get(B * H * T * T)
	be.Gemm(kernels.GemmArgs{TransB: true, M: T, N: T, K: hd, Alpha: 1, Batch: B * H}, q, k, att)
	p := c.Pool.Get(B * H * T * T)
	be.CausalSoftmax(p, att, T, a.scale())
	c.Pool.Put(att)
	p = c.lower(p)
	// y = p·v: [B, H, T, hd] → [B, T, H, hd] = [B·T, C]
	yh := c.Pool.Get(n)
	be.Gemm(kernels.GemmArgs{M: T, N: hd, K: T, Alpha: 1, Batch: B * H}, p, v, yh)
	y := c.Pool.Get(n)
	be.Transpose(y, yh, []int{B, H, T, hd}, []int{0, 2, 1, 3})
	c.Pool.Put(yh)
	c.keep(heads)
	c.keep(p)
	return a.proj.Forward(c, Act{X: y, Rows: qkv.Rows, Cols: C})
}

func (a *CausalSelfAttention) scale() float32 {
	return float32(1 / math.Sqrt(float64(a.HeadDim)))
}

// Backward implements Layer.
func (a *CausalSelfAttention) Backward(c *Ctx, dy Act) Act {
	be := c.Be
	dyc := a.proj.Backward(c, dy) // [B·T, C]
	p, heads := c.Tape.Pop(), c.Tape.Pop()
	B, C := a.dims(dyc.Rows)
	H, T, hd := a.Heads, a.T, a.HeadDim
	n := B * T * C
	q, k, v := be.View(heads, 0, n), be.View(heads, n, n), be.View(heads, 2*n, n)
	dyh := c.Pool.Get(n) // [B, H, T, hd]
	be.Transpose(dyh, dyc.X, []int{B, T, H, hd}, []int{0, 2, 1, 3})
	c.Pool.Put(dyc.X)
	dyh = c.lower(dyh)
	dheads := c.Pool.Get(3 * n)
	dq, dk, dv := be.View(dheads, 0, n), be.View(dheads, n, n), be.View(dheads, 2*n, n)
	// dv = pᵀ·dyh; dp = dyh·vᵀ
	be.Gemm(kernels.GemmArgs{TransA: true, M: T, N: hd, K: T, Alpha: 1, Batch: B * H}, p, dyh, dv)
	dp := c.Pool.Get(B * H * T * T)
	be.Gemm(kernels.GemmArgs{TransB: true, M: T, N: T, K: hd, Alpha: 1, Batch: B * H}, dyh, v, dp)
	c.Pool.Put(dyh)
	// datt = softmax backward, the 1/sqrt(hd) scale included.
	datt := c.Pool.Get(B * H * T * T)
	be.SoftmaxBackward(datt, dp, p, T, a.scale()) // p as saved: the kernel widens it
	c.Pool.Put(dp)
	c.Pool.Put(p)
	datt = c.lower(datt)
	// dq = datt·k; dk = dattᵀ·q
	be.Gemm(kernels.GemmArgs{M: T, N: hd, K: T, Alpha: 1, Batch: B * H}, datt, k, dq)
	be.Gemm(kernels.GemmArgs{TransA: true, M: T, N: hd, K: T, Alpha: 1, Batch: B * H}, datt, q, dk)
	c.Pool.Put(datt)
	c.Pool.Put(heads)
	dqkv := c.Pool.Get(3 * n) // [B, T, 3, H, hd]
	be.Transpose(dqkv, dheads, []int{3, B, H, T, hd}, []int{1, 3, 0, 2, 4})
	c.Pool.Put(dheads)
	return a.qkv.Backward(c, Act{X: dqkv, Rows: dyc.Rows, Cols: 3 * C})
}
