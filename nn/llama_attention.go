package nn

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/kernels"
)

// LlamaAttention is Llama's causal self-attention (Hugging Face's
// LlamaAttention): bias-free projections q_proj [Heads·HeadDim, D], k_proj
// and v_proj [KVHeads·HeadDim, D], o_proj [D, Heads·HeadDim]; rotary
// embeddings on q and k; grouped-query attention, query head h reading kv
// head h/(Heads/KVHeads) (repeat_kv); scores scaled by 1/sqrt(HeadDim) and
// masked causally. Input and output are [B·T, D], row b·T+t token t of
// sequence b.
//
// Tensor parallelism splits the query heads: a shard holds Heads/TP of
// them (q_proj column-parallel by heads, o_proj row-parallel), so the
// heads meet only in o_proj's all-reduce. The kv heads are split too when
// TP divides KVHeads: every shard's query heads then read only its own kv
// heads. When it does not (fewer kv heads than shards, or a count TP does
// not divide), every shard holds k_proj and v_proj whole but computes only
// the kv heads its query heads use (LocalKV of them, a contiguous range;
// one when KVHeads < TP and TP is a multiple of it); those weights are
// replicated, and each shard's gradient of them is the part its own query
// heads give, zero on the rows of the heads it does not use
// (Param.PartialGrad: the trainer sums it over the group).
type LlamaAttention struct {
	D, HeadDim, T int
	// Heads and KVHeads are the model's; QHeads and LocalKV the query and
	// kv heads this shard computes.
	Heads, KVHeads  int
	QHeads, LocalKV int
	Q, K, V, O      *Linear
	Rope            *RoPE
	TP              TP
	// ReplicatedKV reports that every shard holds k_proj and v_proj whole.
	ReplicatedKV bool
	in           projections
	o            Layer
	// kvOf[j] is the local kv head of the shard's query head j.
	kvOf []int
}

// LlamaAttentionConfig is the shape of a LlamaAttention.
type LlamaAttentionConfig struct {
	// D is the model width, T the context (tokens per sequence).
	D, T int
	// Heads query heads and KVHeads key/value heads (KVHeads divides
	// Heads; equal for multi-head attention, 1 for multi-query).
	Heads, KVHeads int
	// HeadDim is each head's width; 0 means D/Heads.
	HeadDim int
	// RopeTheta is the rotary base; 0 means DefaultRopeTheta.
	RopeTheta float64
}

// NewLlamaAttention registers prefix.{q,k,v,o}_proj.weight drawn from
// init, cut for the tensor-parallel place tp.
func NewLlamaAttention(s *ParamSet, prefix string, cfg LlamaAttentionConfig, init Init, tp TP) (*LlamaAttention, error) {
	if err := tp.Validate(); err != nil {
		return nil, err
	}
	hd := cfg.HeadDim
	if hd == 0 && cfg.Heads > 0 {
		if cfg.D%cfg.Heads != 0 {
			return nil, fmt.Errorf("%w: d_model %d is not divisible by %d heads", ErrConfig, cfg.D, cfg.Heads)
		}
		hd = cfg.D / cfg.Heads
	}
	switch {
	case cfg.D <= 0 || cfg.T <= 0 || cfg.Heads <= 0 || cfg.KVHeads <= 0 || hd <= 0:
		return nil, fmt.Errorf("%w: attention d_model %d, context %d, %d heads, %d kv heads, head dim %d", ErrConfig, cfg.D, cfg.T, cfg.Heads, cfg.KVHeads, hd)
	case cfg.Heads%cfg.KVHeads != 0:
		return nil, fmt.Errorf("%w: %d heads cannot share %d kv heads evenly", ErrConfig, cfg.Heads, cfg.KVHeads)
	case cfg.Heads%tp.Size != 0:
		return nil, fmt.Errorf("%w: %d heads cannot be split among %d tensor-parallel shards", ErrConfig, cfg.Heads, tp.Size)
	}
	rope, err := NewRoPE(hd, cfg.T, cfg.RopeTheta)
	if err != nil {
		return nil, err
	}
	a := &LlamaAttention{D: cfg.D, HeadDim: hd, T: cfg.T, Heads: cfg.Heads, KVHeads: cfg.KVHeads, QHeads: cfg.Heads / tp.Size, Rope: rope, TP: tp}
	a.ReplicatedKV = cfg.KVHeads%tp.Size != 0
	a.Q = newColumnNoBias(s, prefix+".q_proj", cfg.D, cfg.Heads*hd, tp, init)
	a.in = projections{tp: tp}
	group := cfg.Heads / cfg.KVHeads
	kvFirst := 0
	if a.ReplicatedKV {
		// The kv heads of the shard's query heads, a contiguous range.
		kvFirst = tp.Rank * a.QHeads / group
		a.LocalKV = ((tp.Rank+1)*a.QHeads-1)/group + 1 - kvFirst
		a.K = newReplicatedNoBias(s, prefix+".k_proj", cfg.D, cfg.KVHeads*hd, tp, init)
		a.V = newReplicatedNoBias(s, prefix+".v_proj", cfg.D, cfg.KVHeads*hd, tp, init)
		win := [2]int{kvFirst * hd, a.LocalKV * hd}
		a.in.win = map[int][2]int{1: win, 2: win}
	} else {
		a.LocalKV = cfg.KVHeads / tp.Size
		kvFirst = tp.Rank * a.LocalKV
		a.K = newColumnNoBias(s, prefix+".k_proj", cfg.D, cfg.KVHeads*hd, tp, init)
		a.V = newColumnNoBias(s, prefix+".v_proj", cfg.D, cfg.KVHeads*hd, tp, init)
	}
	a.O = newRowNoBias(s, prefix+".o_proj", cfg.Heads*hd, cfg.D, tp, init)
	a.kvOf = make([]int, a.QHeads)
	for j := range a.kvOf {
		a.kvOf[j] = (tp.Rank*a.QHeads+j)/group - kvFirst
	}
	a.in.ls = []*Linear{a.Q, a.K, a.V}
	a.o = rowLayer(a.O, tp)
	return a, nil
}

// Params implements Layer.
func (a *LlamaAttention) Params() []*Param {
	return []*Param{a.Q.Weight, a.K.Weight, a.V.Weight, a.O.Weight}
}

func (a *LlamaAttention) scale() float32 { return float32(1 / math.Sqrt(float64(a.HeadDim))) }

// seqs returns the sequences in rows.
func (a *LlamaAttention) seqs(rows int) int {
	if rows%a.T != 0 {
		panic(fmt.Sprintf("nn: attention input has %d rows, not a multiple of the context %d", rows, a.T))
	}
	return rows / a.T
}

// heads returns x ([B·T, n·hd]) as [B, n, T, hd] in a new buffer in the
// compute type; x goes back to the pool.
func (a *LlamaAttention) heads(c *Ctx, x kernels.Buffer, B, n int) kernels.Buffer {
	h := c.Pool.Get(x.Len())
	c.Be.Transpose(h, x, []int{B, a.T, n, a.HeadDim}, []int{0, 2, 1, 3})
	c.Pool.Put(x)
	return c.lower(h)
}

// rows returns h ([B, n, T, hd]) as [B·T, n·hd] in a new buffer; h goes
// back to the pool.
func (a *LlamaAttention) rows(c *Ctx, h kernels.Buffer, B, n int) kernels.Buffer {
	x := c.Pool.Get(h.Len())
	c.Be.Transpose(x, h, []int{B, n, a.T, a.HeadDim}, []int{0, 2, 1, 3})
	c.Pool.Put(h)
	return x
}

// headGemm runs one product per query head j of the shard, batched over
// the B sequences: operands of query heads ([B, QHeads, …] blocks of
// qSize) and of kv heads ([B, LocalKV, …] blocks of kvSize), as each
// operand's kind says. Each query head pairs with its kv head, kvOf[j].
func (a *LlamaAttention) headGemm(be kernels.Backend, g kernels.GemmArgs, B int, x, y, z kernels.Buffer, kinds [3]bool, sizes [3]int) {
	g.Batch = B
	bufs := [3]kernels.Buffer{x, y, z}
	for j, kv := range a.kvOf {
		var ops [3]kernels.Buffer
		var strides [3]int
		for i, isKV := range kinds {
			n, idx := a.QHeads, j
			if isKV {
				n, idx = a.LocalKV, kv
			}
			strides[i] = n * sizes[i]
			ops[i] = be.View(bufs[i], idx*sizes[i], bufs[i].Len()-idx*sizes[i])
		}
		g.StrideA, g.StrideB, g.StrideC = strides[0], strides[1], strides[2]
		be.Gemm(g, ops[0], ops[1], ops[2])
	}
}

// Forward implements Layer.
func (a *LlamaAttention) Forward(c *Ctx, x Act) Act {
	qkv := a.in.forward(c, x)
	rows := qkv[0].Rows
	B, T, hd := a.seqs(rows), a.T, a.HeadDim
	a.Rope.rotate(c, qkv[0].X, rows, T, 0, false)
	a.Rope.rotate(c, qkv[1].X, rows, T, 0, false)
	q := a.heads(c, qkv[0].X, B, a.QHeads)
	k := a.heads(c, qkv[1].X, B, a.LocalKV)
	v := a.heads(c, qkv[2].X, B, a.LocalKV)
	const Q, KV = false, true
	// att = q·kᵀ per (sequence, query head): [B, QHeads, T, T].
	att := c.Pool.Get(B * a.QHeads * T * T)
	a.headGemm(c.Be, kernels.GemmArgs{TransB: true, M: T, N: T, K: hd, Alpha: 1}, B, q, k, att, [3]bool{Q, KV, Q}, [3]int{T * hd, T * hd, T * T})
	p := c.Pool.Get(att.Len())
	c.Be.CausalSoftmax(p, att, T, a.scale())
	c.Pool.Put(att)
	p = c.lower(p)
	yh := c.Pool.Get(B * a.QHeads * T * hd)
	a.headGemm(c.Be, kernels.GemmArgs{M: T, N: hd, K: T, Alpha: 1}, B, p, v, yh, [3]bool{Q, KV, Q}, [3]int{T * T, T * hd, T * hd})
	y := a.rows(c, yh, B, a.QHeads)
	c.keep(q)
	c.keep(k)
	c.keep(v)
	c.keep(p)
	return a.o.Forward(c, Act{X: y, Rows: rows, Cols: a.QHeads * hd})
}

// Backward implements Layer.
func (a *LlamaAttention) Backward(c *Ctx, dy Act) Act {
	be := c.Be
	dyc := a.o.Backward(c, dy)
	dyc.X = c.widen(dyc.X)
	p, v, k, q := c.Tape.Pop(), c.Tape.Pop(), c.Tape.Pop(), c.Tape.Pop()
	rows := dyc.Rows
	B, T, hd := a.seqs(rows), a.T, a.HeadDim
	const Q, KV = false, true
	dyh := c.Pool.Get(dyc.X.Len())
	be.Transpose(dyh, dyc.X, []int{B, T, a.QHeads, hd}, []int{0, 2, 1, 3})
	c.Pool.Put(dyc.X)
	dyh = c.lower(dyh)
	// dv = Σ over the kv head's query heads of pᵀ·dy; dp = dy·vᵀ.
	dv := c.Pool.GetZero(v.Len())
	a.headGemm(be, kernels.GemmArgs{TransA: true, M: T, N: hd, K: T, Alpha: 1, Beta: 1}, B, p, dyh, dv, [3]bool{Q, Q, KV}, [3]int{T * T, T * hd, T * hd})
	dp := c.Pool.Get(p.Len())
	a.headGemm(be, kernels.GemmArgs{TransB: true, M: T, N: T, K: hd, Alpha: 1}, B, dyh, v, dp, [3]bool{Q, KV, Q}, [3]int{T * hd, T * hd, T * T})
	c.Pool.Put(dyh)
	c.Pool.Put(v)
	datt := c.Pool.Get(p.Len())
	be.SoftmaxBackward(datt, dp, p, T, a.scale())
	c.Pool.Put(dp)
	c.Pool.Put(p)
	datt = c.lower(datt)
	// dq = datt·k; dk = Σ over the kv head's query heads of dattᵀ·q.
	dq := c.Pool.Get(q.Len())
	a.headGemm(be, kernels.GemmArgs{M: T, N: hd, K: T, Alpha: 1}, B, datt, k, dq, [3]bool{Q, KV, Q}, [3]int{T * T, T * hd, T * hd})
	dk := c.Pool.GetZero(k.Len())
	a.headGemm(be, kernels.GemmArgs{TransA: true, M: T, N: hd, K: T, Alpha: 1, Beta: 1}, B, datt, q, dk, [3]bool{Q, Q, KV}, [3]int{T * T, T * hd, T * hd})
	c.Pool.Put(datt)
	c.Pool.Put(q)
	c.Pool.Put(k)
	dqr, dkr, dvr := a.rows(c, dq, B, a.QHeads), a.rows(c, dk, B, a.LocalKV), a.rows(c, dv, B, a.LocalKV)
	a.Rope.rotate(c, dqr, rows, T, 0, true)
	a.Rope.rotate(c, dkr, rows, T, 0, true)
	return a.in.backward(c, []Act{
		{X: dqr, Rows: rows, Cols: a.QHeads * hd},
		{X: dkr, Rows: rows, Cols: a.LocalKV * hd},
		{X: dvr, Rows: rows, Cols: a.LocalKV * hd},
	})
}
