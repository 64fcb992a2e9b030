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

// headOp is an operand of headGemm: buf holds, for each of the B
// sequences, a matrix per query head (kv false) or per kv head (kv true),
// either as the rows of the projections ([B·T, n·hd], head h in columns
// h·hd to (h+1)·hd: rows true) or as blocks of size values ([B, n, …]).
// Reading and writing heads in the rows layout, with the row stride as the
// leading dimension, spares the copies to and from [B, n, T, hd].
type headOp struct {
	buf      kernels.Buffer
	kv, rows bool
	size     int
}

// headGemm runs one product per query head j of the shard, batched over
// the B sequences; each query head pairs with its kv head, kvOf[j].
func (a *LlamaAttention) headGemm(be kernels.Backend, g kernels.GemmArgs, B int, ops [3]headOp) {
	g.Batch = B
	hd := a.HeadDim
	for j, kv := range a.kvOf {
		var bufs [3]kernels.Buffer
		var lds, strides [3]int
		for i, op := range ops {
			n, idx := a.QHeads, j
			if op.kv {
				n, idx = a.LocalKV, kv
			}
			off := idx * op.size
			strides[i] = n * op.size
			if op.rows {
				off, lds[i], strides[i] = idx*hd, n*hd, a.T*n*hd
			}
			bufs[i] = be.View(op.buf, off, op.buf.Len()-off)
		}
		g.LDA, g.LDB, g.LDC = lds[0], lds[1], lds[2]
		g.StrideA, g.StrideB, g.StrideC = strides[0], strides[1], strides[2]
		be.Gemm(g, bufs[0], bufs[1], bufs[2])
	}
}

// Forward implements Layer.
func (a *LlamaAttention) Forward(c *Ctx, x Act) Act {
	qkv := a.in.forward(c, x)
	rows := qkv[0].Rows
	B, T, hd := a.seqs(rows), a.T, a.HeadDim
	a.Rope.rotate(c, qkv[0].X, rows, T, 0, false)
	a.Rope.rotate(c, qkv[1].X, rows, T, 0, false)
	q, k, v := c.lower(qkv[0].X), c.lower(qkv[1].X), c.lower(qkv[2].X)
	qr, kr, vr := headOp{buf: q, rows: true}, headOp{buf: k, kv: true, rows: true}, headOp{buf: v, kv: true, rows: true}
	// att = q·kᵀ per (sequence, query head): [B, QHeads, T, T].
	att := c.Pool.Get(B * a.QHeads * T * T)
	a.headGemm(c.Be, kernels.GemmArgs{TransB: true, M: T, N: T, K: hd, Alpha: 1}, B, [3]headOp{qr, kr, {buf: att, size: T * T}})
	p := c.Pool.Get(att.Len())
	c.Be.CausalSoftmax(p, att, T, a.scale())
	c.Pool.Put(att)
	p = c.lower(p)
	y := c.Pool.Get(rows * a.QHeads * hd)
	a.headGemm(c.Be, kernels.GemmArgs{M: T, N: hd, K: T, Alpha: 1}, B, [3]headOp{{buf: p, size: T * T}, vr, {buf: y, rows: true}})
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
	dyl := c.lower(dyc.X)
	pb := headOp{buf: p, size: T * T}
	qr, kr, vr := headOp{buf: q, rows: true}, headOp{buf: k, kv: true, rows: true}, headOp{buf: v, kv: true, rows: true}
	dyr := headOp{buf: dyl, rows: true}
	// dv = Σ over the kv head's query heads of pᵀ·dy; dp = dy·vᵀ.
	dv := c.Pool.GetZero(rows * a.LocalKV * hd)
	a.headGemm(be, kernels.GemmArgs{TransA: true, M: T, N: hd, K: T, Alpha: 1, Beta: 1}, B, [3]headOp{pb, dyr, {buf: dv, kv: true, rows: true}})
	dp := c.Pool.Get(p.Len())
	a.headGemm(be, kernels.GemmArgs{TransB: true, M: T, N: T, K: hd, Alpha: 1}, B, [3]headOp{dyr, vr, {buf: dp, size: T * T}})
	c.Pool.Put(dyl)
	c.Pool.Put(v)
	datt := c.Pool.Get(p.Len())
	be.SoftmaxBackward(datt, dp, p, T, a.scale())
	c.Pool.Put(dp)
	c.Pool.Put(p)
	datt = c.lower(datt)
	db := headOp{buf: datt, size: T * T}
	// dq = datt·k; dk = Σ over the kv head's query heads of dattᵀ·q.
	dq := c.Pool.Get(q.Len())
	a.headGemm(be, kernels.GemmArgs{M: T, N: hd, K: T, Alpha: 1}, B, [3]headOp{db, kr, {buf: dq, rows: true}})
	dk := c.Pool.GetZero(k.Len())
	a.headGemm(be, kernels.GemmArgs{TransA: true, M: T, N: hd, K: T, Alpha: 1, Beta: 1}, B, [3]headOp{db, qr, {buf: dk, kv: true, rows: true}})
	c.Pool.Put(datt)
	c.Pool.Put(q)
	c.Pool.Put(k)
	a.Rope.rotate(c, dq, rows, T, 0, true)
	a.Rope.rotate(c, dk, rows, T, 0, true)
	return a.in.backward(c, []Act{
		{X: dq, Rows: rows, Cols: a.QHeads * hd},
		{X: dk, Rows: rows, Cols: a.LocalKV * hd},
		{X: dv, Rows: rows, Cols: a.LocalKV * hd},
	})
}
