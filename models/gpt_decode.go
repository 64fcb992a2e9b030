package models

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
)

var _ nn.CausalLM = GPT{}

// NewDecoder implements nn.CausalLM: a decoder over m, the whole GPT built
// from c, with a KV cache per block for sequences of up to capacity tokens.
// The learned positions end at the context the GPT was built with, so
// capacity may not pass it.
func (c GPT) NewDecoder(m *nn.Model, capacity int) (nn.Decoder, error) {
	switch {
	case m == nil || !m.First() || !m.Last() || m.TP.On():
		return nil, fmt.Errorf("%w: a GPT decoder needs the whole model, not tensor-parallel shards or pipeline stages", nn.ErrConfig)
	case capacity <= 0 || capacity > c.Context:
		return nil, fmt.Errorf("%w: a GPT decoder of %d positions: the model's learned positions hold 1 to %d", nn.ErrConfig, capacity, c.Context)
	case len(m.Layers) != c.Units():
		return nil, fmt.Errorf("%w: a GPT of %d units has %d layers", nn.ErrConfig, c.Units(), len(m.Layers))
	}
	d := &gptDecoder{be: m.Set.Backend(), vocab: c.Vocab, dim: c.DModel, capacity: capacity}
	var ok bool
	if d.emb, ok = m.Layers[0].(*nn.TokenEmbedding); !ok || d.emb.Pos == nil {
		return nil, fmt.Errorf("%w: a GPT's first layer is %T, not its embeddings", nn.ErrConfig, m.Layers[0])
	}
	if d.head, ok = m.Layers[len(m.Layers)-1].(*nn.LMHead); !ok {
		return nil, fmt.Errorf("%w: a GPT's last layer is %T, not its LM head", nn.ErrConfig, m.Layers[len(m.Layers)-1])
	}
	for _, l := range m.Layers[1 : len(m.Layers)-1] {
		b, ok := l.(*nn.Block)
		if !ok {
			d.Close()
			return nil, fmt.Errorf("%w: a GPT block is %T", nn.ErrConfig, l)
		}
		d.blocks = append(d.blocks, b)
		d.caches = append(d.caches, b.NewKVCache(d.be, capacity))
	}
	return d, nil
}

// gptDecoder runs a GPT a few tokens at a time: the embeddings of the new
// tokens at their positions, each block against its KV cache, and the LM
// head on the last new row only (the logits that follow it).
type gptDecoder struct {
	be            kernels.Backend
	emb           *nn.TokenEmbedding
	blocks        []*nn.Block
	caches        nn.KVCaches
	head          *nn.LMHead
	vocab, dim    int
	capacity, fed int
	posHost       []int32
}

// Feed implements nn.Decoder.
func (d *gptDecoder) Feed(c *nn.Ctx, ids []int32) ([]float32, error) {
	n := len(ids)
	switch {
	case n == 0:
		return nil, fmt.Errorf("%w: no tokens to feed", nn.ErrConfig)
	case d.fed+n > d.capacity:
		return nil, fmt.Errorf("%w: a decoder of %d positions holds %d and is fed %d more", nn.ErrConfig, d.capacity, d.fed, n)
	}
	for i, id := range ids {
		if id < 0 || int(id) >= d.vocab {
			return nil, fmt.Errorf("%w: token %d (the %d-th fed) is outside the vocabulary of %d", nn.ErrConfig, id, i+1, d.vocab)
		}
	}
	be, dim := d.be, d.dim
	dc := *c
	dc.Train = false
	d.posHost = d.posHost[:0]
	for i := range n {
		d.posHost = append(d.posHost, int32(d.fed+i))
	}
	tok, pos := be.AllocIndex(n), be.AllocIndex(n)
	defer be.FreeIndex(tok)
	defer be.FreeIndex(pos)
	be.UploadIndex(tok, ids)
	be.UploadIndex(pos, d.posHost)
	x := dc.Pool.Get(n * dim)
	be.Embedding(x, d.emb.Tok.Weight.W, tok)
	p := dc.Pool.Get(n * dim)
	be.Embedding(p, d.emb.Pos.Weight.W, pos)
	be.Add(x, x, p)
	dc.Pool.Put(p)
	h := nn.Act{X: x, Rows: n, Cols: dim}
	for i, b := range d.blocks {
		h = b.Decode(&dc, h, d.caches[i])
	}
	last := dc.Pool.Get(dim)
	be.Copy(last, be.View(h.X, (n-1)*dim, dim))
	dc.Pool.Put(h.X)
	y := d.head.Forward(&dc, nn.Act{X: last, Rows: 1, Cols: dim})
	out := make([]float32, d.vocab)
	be.Download(out, be.View(y.X, 0, d.vocab))
	dc.Pool.Put(y.X)
	d.fed += n
	return out, be.Sync()
}

// Len implements nn.Decoder.
func (d *gptDecoder) Len() int { return d.fed }

// Reset implements nn.Decoder.
func (d *gptDecoder) Reset() {
	d.fed = 0
	d.caches.Reset()
}

// Close implements nn.Decoder.
func (d *gptDecoder) Close() {
	d.caches.Free()
	d.caches = nil
}
