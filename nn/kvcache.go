package nn

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// KVCache holds one attention layer's keys and values for the positions of
// one sequence seen so far, so that a decode step computes only its new
// rows: K and V are [Cap, Width] (a row per position, the layer's kv heads
// side by side, keys after their rotary embedding), of which the first Len
// rows are filled. Make one per layer with the layer's NewKVCache; Reset
// starts a new sequence; Free gives the buffers back.
//
// Decode (LlamaBlock, LlamaAttention, Block, CausalSelfAttention) runs a
// layer forward on n new rows of the sequence, at positions [Len, Len+n),
// against the cached ones, appends their keys and values and advances Len:
// the rows' outputs equal those of a full forward pass over the sequence
// up to Len+n (float32 rounding aside). Decode saves nothing for a
// backward pass, whatever Ctx.Train says; a tensor-parallel shard decodes
// with its group as it trains (each shard caches its own kv heads), but
// not with sequence parallelism, whose row split a decode step has no use
// for.
type KVCache struct {
	K, V            kernels.Buffer
	Len, Cap, Width int
	be              kernels.Backend
}

// NewKVCache allocates a cache of capacity positions of width values.
func NewKVCache(be kernels.Backend, capacity, width int) *KVCache {
	return &KVCache{K: be.Alloc(capacity * width), V: be.Alloc(capacity * width), Cap: capacity, Width: width, be: be}
}

// Reset empties the cache for a new sequence.
func (k *KVCache) Reset() { k.Len = 0 }

// Free releases the buffers; the cache is unusable afterwards.
func (k *KVCache) Free() {
	k.be.Free(k.K)
	k.be.Free(k.V)
	k.K, k.V = nil, nil
}

// KVCaches are a decoder's caches, one per block.
type KVCaches []*KVCache

// Reset empties every cache for a new sequence.
func (ks KVCaches) Reset() {
	for _, k := range ks {
		k.Reset()
	}
}

// Free releases every cache's buffers.
func (ks KVCaches) Free() {
	for _, k := range ks {
		k.Free()
	}
}

// decodeCtx is c for a forward pass that keeps nothing for backward.
func decodeCtx(c *Ctx, sp bool) *Ctx {
	if sp {
		panic("nn: decode with sequence parallelism")
	}
	d := *c
	d.Train = false
	return &d
}

// attend appends the n new rows k and v ([n, Width]) and returns the
// attention output [n, qHeads·hd] of the new queries: query head j, at
// columns j·hd of q's rows of ldq values, attends causally to kv head
// kvOf[j] (j itself when kvOf is nil) over positions 0…Len+n−1, row i being
// at position Len+i.
func (k *KVCache) attend(c *Ctx, q kernels.Buffer, ldq, n, qHeads, hd int, kvOf []int, kb, vb kernels.Buffer, scale float32) kernels.Buffer {
	be := c.Be
	if k.Len+n > k.Cap {
		panic(fmt.Sprintf("nn: a KV cache of %d positions holds %d and is handed %d more", k.Cap, k.Len, n))
	}
	w := k.Width
	be.Copy(be.View(k.K, k.Len*w, n*w), kb)
	be.Copy(be.View(k.V, k.Len*w, n*w), vb)
	L := k.Len + n
	kv := func(j int) int {
		if kvOf == nil {
			return j
		}
		return kvOf[j]
	}
	tail := func(b kernels.Buffer, off int) kernels.Buffer { return be.View(b, off, b.Len()-off) }
	// scores of head j: [n, L] = q_j·K_kvᵀ, the heads one after another.
	scores := c.Pool.Get(qHeads * n * L)
	for j := range qHeads {
		be.Gemm(kernels.GemmArgs{TransB: true, M: n, N: L, K: hd, Alpha: 1, LDA: ldq, LDB: w, LDC: L},
			tail(q, j*hd), tail(k.K, kv(j)*hd), be.View(scores, j*n*L, n*L))
	}
	p := c.Pool.Get(scores.Len())
	be.CausalSoftmaxFrom(p, scores, n, L, k.Len, scale)
	c.Pool.Put(scores)
	y := c.Pool.Get(n * qHeads * hd)
	for j := range qHeads {
		be.Gemm(kernels.GemmArgs{M: n, N: hd, K: L, Alpha: 1, LDA: L, LDB: w, LDC: qHeads * hd},
			be.View(p, j*n*L, n*L), tail(k.V, kv(j)*hd), tail(y, j*hd))
	}
	c.Pool.Put(p)
	k.Len = L
	return y
}

// NewKVCache returns a cache for capacity positions of this shard's kv
// heads.
func (a *LlamaAttention) NewKVCache(be kernels.Backend, capacity int) *KVCache {
	return NewKVCache(be, capacity, a.LocalKV*a.HeadDim)
}

// Decode runs the attention on x, n new rows of one sequence at positions
// [cache.Len, cache.Len+n), against the cached earlier ones (see KVCache).
func (a *LlamaAttention) Decode(c *Ctx, x Act, cache *KVCache) Act {
	dc := decodeCtx(c, a.TP.SP)
	qkv := a.in.forward(dc, x)
	n := x.Rows
	a.Rope.rotate(dc, qkv[0].X, n, n, cache.Len, false)
	a.Rope.rotate(dc, qkv[1].X, n, n, cache.Len, false)
	width := a.QHeads * a.HeadDim
	y := cache.attend(dc, qkv[0].X, width, n, a.QHeads, a.HeadDim, a.kvOf, qkv[1].X, qkv[2].X, a.scale())
	for _, b := range qkv {
		dc.Pool.Put(b.X)
	}
	return a.o.Forward(dc, Act{X: y, Rows: n, Cols: width})
}

// NewKVCache returns a cache for the block's attention.
func (b *LlamaBlock) NewKVCache(be kernels.Backend, capacity int) *KVCache {
	return b.Attn.NewKVCache(be, capacity)
}

// Decode runs the block on x, n new rows of one sequence, against the
// cached keys and values of its earlier rows (see KVCache). It takes
// ownership of x.X and returns the new rows' output.
func (b *LlamaBlock) Decode(c *Ctx, x Act, cache *KVCache) Act {
	dc := decodeCtx(c, b.Attn.TP.SP)
	return residualDecode(dc, x,
		func(h Act) Act { return b.Attn.Decode(dc, b.InNorm.Forward(dc, h), cache) },
		func(h Act) Act { return b.MLP.Forward(dc, b.PostNorm.Forward(dc, h)) })
}

// residualDecode is x + attn(x), then + mlp(x), each branch on a copy.
func residualDecode(c *Ctx, x Act, branches ...func(Act) Act) Act {
	x.X = c.widen(x.X)
	for _, br := range branches {
		h := c.Pool.Get(x.Rows * x.Cols)
		c.Be.Copy(h, x.X)
		y := br(Act{X: h, Rows: x.Rows, Cols: x.Cols})
		y.X = c.widen(y.X)
		c.Be.Add(x.X, x.X, y.X)
		c.Pool.Put(y.X)
	}
	return x
}

// NewKVCache returns a cache for capacity positions of this shard's heads.
func (a *CausalSelfAttention) NewKVCache(be kernels.Backend, capacity int) *KVCache {
	return NewKVCache(be, capacity, a.Heads*a.HeadDim)
}

// Decode runs the attention on x, n new rows of one sequence, against the
// cached keys and values of its earlier rows (see KVCache).
func (a *CausalSelfAttention) Decode(c *Ctx, x Act, cache *KVCache) Act {
	dc := decodeCtx(c, a.TP.SP)
	qkv := a.qkv.Forward(dc, x) // [n, 3, Heads, hd]
	n, width := qkv.Rows, a.Heads*a.HeadDim
	parts := dc.Pool.Get(qkv.Rows * qkv.Cols) // [3, n, width]: q, k, v
	dc.Be.Transpose(parts, qkv.X, []int{n, 3, width}, []int{1, 0, 2})
	dc.Pool.Put(qkv.X)
	m := n * width
	y := cache.attend(dc, parts, width, n, a.Heads, a.HeadDim, nil, dc.Be.View(parts, m, m), dc.Be.View(parts, 2*m, m), a.scale())
	dc.Pool.Put(parts)
	return a.proj.Forward(dc, Act{X: y, Rows: n, Cols: width})
}

// NewKVCache returns a cache for the block's attention.
func (b *Block) NewKVCache(be kernels.Backend, capacity int) *KVCache {
	return b.Attn.NewKVCache(be, capacity)
}

// Decode runs the block on x, n new rows of one sequence, against the
// cached keys and values of its earlier rows (see KVCache).
func (b *Block) Decode(c *Ctx, x Act, cache *KVCache) Act {
	dc := decodeCtx(c, b.Attn.TP.SP)
	return residualDecode(dc, x,
		func(h Act) Act { return b.Attn.Decode(dc, b.LN1.Forward(dc, h), cache) },
		func(h Act) Act {
			return b.out.Forward(dc, b.Act.Forward(dc, b.fc.Forward(dc, b.LN2.Forward(dc, h))))
		})
}
