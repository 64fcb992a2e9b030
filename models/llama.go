package models

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/nn"
)

// Llama shapes a Llama-family language model with Hugging Face
// LlamaForCausalLM's semantics: a token embedding (no positions), blocks
// of RMSNorm → grouped-query attention with rotary embeddings
// (rotate_half, RopeTheta) → residual, RMSNorm → SwiGLU MLP → residual,
// a final RMSNorm and an LM head, no biases anywhere. The head is a
// weight of its own unless Tie shares the token embedding's.
//
// Parameter names are Hugging Face's: model.embed_tokens.weight,
// model.layers.{i}.self_attn.{q,k,v,o}_proj.weight,
// model.layers.{i}.mlp.{gate,up,down}_proj.weight,
// model.layers.{i}.{input,post_attention}_layernorm.weight,
// model.norm.weight and lm_head.weight (absent when tied, as in a tied
// Hugging Face checkpoint), so that --init reads and --save writes what
// LlamaForCausalLM loads. Init is Hugging Face's _init_weights with
// initializer_range 0.02: every projection and the embedding from
// N(0, 0.02²), the norms ones.
//
// Pipeline units: the embedding, each block, then the final norm with the
// head.
//
// Tensor parallelism (Megatron-LM): q_proj column-parallel by query heads
// and o_proj row-parallel; gate_proj and up_proj column-parallel (cut
// alike) and down_proj row-parallel; the embedding and the head split by
// vocabulary rows, padded when the shard count T does not divide the
// vocabulary, with a vocabulary-parallel loss; the norms whole on every
// shard. k_proj and v_proj are split by kv heads when T divides KVHeads.
// When it does not (fewer kv heads than shards, or a count T does not
// divide), a kv head cannot be cut without cutting a head's dimensions,
// which attention sums over: every shard then holds k_proj and v_proj
// whole (KVHeads·HeadDim rows each, replicated), computes only the kv
// heads its own query heads read, and its gradient of them is partial
// (nothing on the rows of the heads it does not read); the trainer sums
// those gradients over the tensor-parallel group before the update, so
// every shard keeps identical copies. The cost is the replicated
// weights' memory and one small all-reduce per step. Sequence parallelism
// splits the tokens between the tensor-parallel regions, as the GPT's.
type Llama struct {
	Vocab   int
	Context int
	DModel  int
	Layers  int
	Heads   int
	// KVHeads is the number of key/value heads (grouped-query attention:
	// Heads/KVHeads query heads share one); it divides Heads.
	KVHeads int
	// FFN is the SwiGLU MLP's hidden width (intermediate_size).
	FFN int
	// RopeTheta is the rotary base (rope_theta); NormEps the RMSNorms'
	// epsilon (rms_norm_eps).
	RopeTheta float64
	NormEps   float64
	// Tie shares the token embedding with the LM head
	// (tie_word_embeddings).
	Tie bool
}

// DefaultLlama is the shape of ../shared/anchors/torch_llama_tiny.py
// (context 64 there).
func DefaultLlama(vocab, context int) Llama {
	return Llama{Vocab: vocab, Context: context, DModel: 128, Layers: 4, Heads: 4, KVHeads: 2, FFN: 344,
		RopeTheta: 10000, NormEps: 1e-5}
}

func init() {
	nn.Register(nn.ModelDef{
		Name:    "llama",
		Summary: "Llama family (Hugging Face LlamaForCausalLM: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention, untied head)",
		Data:    "gospec",
		Options: []nn.Option{
			{Name: "d-model", Kind: nn.IntOption, Default: "128", Usage: "hidden size"},
			{Name: "n-layers", Kind: nn.IntOption, Default: "4", Usage: "decoder layers"},
			{Name: "n-heads", Kind: nn.IntOption, Default: "4", Usage: "attention (query) heads"},
			{Name: "n-kv-heads", Kind: nn.IntOption, Default: "2", Usage: "key/value heads (grouped-query attention; divides --n-heads; 0: --n-heads)"},
			{Name: "ffn-hidden", Kind: nn.IntOption, Default: "344", Usage: "SwiGLU MLP hidden size (intermediate_size)"},
			{Name: "vocab-size", Kind: nn.IntOption, Default: "0", Usage: "vocabulary of the embedding and LM head (0: the data's; at least the data's)"},
			{Name: "rope-theta", Kind: nn.FloatOption, Default: "10000", Usage: "rotary embedding base (rope_theta)"},
			{Name: "norm-eps", Kind: nn.FloatOption, Default: "1e-5", Usage: "RMSNorm epsilon (rms_norm_eps)"},
			{Name: "tie", Kind: nn.BoolOption, Default: "false", Usage: "tie the LM head to the token embedding (no lm_head.weight)"},
		},
		New: newLlama,
	})
}

func newLlama(v nn.Values, d nn.DataShape) (nn.Spec, error) {
	if !d.Tokens {
		return nil, fmt.Errorf("%w: llama needs token data, got %v", nn.ErrConfig, d)
	}
	vocab, err := vocabFor(v, d)
	if err != nil {
		return nil, err
	}
	kv := v.Int("n-kv-heads")
	if kv == 0 {
		kv = v.Int("n-heads")
	}
	return Llama{Vocab: vocab, Context: d.Context, DModel: v.Int("d-model"), Layers: v.Int("n-layers"),
		Heads: v.Int("n-heads"), KVHeads: kv, FFN: v.Int("ffn-hidden"), RopeTheta: v.Float("rope-theta"),
		NormEps: v.Float("norm-eps"), Tie: v.Bool("tie")}, nil
}

// Name implements nn.Spec.
func (Llama) Name() string { return "llama" }

// Units implements nn.Spec.
func (c Llama) Units() int { return c.Layers + 2 }

// Validate implements nn.Spec.
func (c Llama) Validate() error {
	switch {
	case c.Vocab <= 0, c.Context <= 0, c.DModel <= 0, c.Layers <= 0, c.Heads <= 0, c.KVHeads <= 0, c.FFN <= 0:
		return fmt.Errorf("%w: llama sizes must be positive: vocab %d, context %d, --d-model %d, --n-layers %d, --n-heads %d, --n-kv-heads %d, --ffn-hidden %d",
			nn.ErrConfig, c.Vocab, c.Context, c.DModel, c.Layers, c.Heads, c.KVHeads, c.FFN)
	case c.DModel%c.Heads != 0:
		return fmt.Errorf("%w: --d-model %d is not divisible by --n-heads %d", nn.ErrConfig, c.DModel, c.Heads)
	case (c.DModel/c.Heads)%2 != 0:
		return fmt.Errorf("%w: rotary embeddings need an even head dimension; --d-model %d / --n-heads %d is %d", nn.ErrConfig, c.DModel, c.Heads, c.DModel/c.Heads)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("%w: --n-heads %d cannot share --n-kv-heads %d evenly (grouped-query attention needs a divisor)", nn.ErrConfig, c.Heads, c.KVHeads)
	case !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0):
		return fmt.Errorf("%w: --rope-theta %v must be a positive number", nn.ErrConfig, c.RopeTheta)
	case !(c.NormEps > 0) || math.IsInf(c.NormEps, 0):
		return fmt.Errorf("%w: --norm-eps %v must be a positive number", nn.ErrConfig, c.NormEps)
	}
	return nil
}

// CheckTP implements nn.Spec: each shard holds whole query heads and an
// equal slice of the MLP; sequence parallelism needs the shard count to
// divide the context. Any kv head count fits (see Llama).
func (c Llama) CheckTP(t nn.TP) error {
	switch {
	case c.Heads%t.Size != 0:
		return fmt.Errorf("%w: --n-heads %d cannot be split among %d tensor-parallel shards", nn.ErrConfig, c.Heads, t.Size)
	case c.FFN%t.Size != 0:
		return fmt.Errorf("%w: --ffn-hidden %d cannot be split among %d tensor-parallel shards", nn.ErrConfig, c.FFN, t.Size)
	case t.SP && c.Context%t.Size != 0:
		return fmt.Errorf("%w: sequence parallelism splits the context %d among %d shards, which must divide it", nn.ErrConfig, c.Context, t.Size)
	}
	return nil
}

// block is the shape of one decoder layer.
func (c Llama) block() nn.LlamaBlockConfig {
	return nn.LlamaBlockConfig{DModel: c.DModel, Heads: c.Heads, KVHeads: c.KVHeads, FFN: c.FFN, Context: c.Context,
		RopeTheta: c.RopeTheta, NormEps: c.NormEps, Std: nn.DefaultLlamaStd}
}

// Build implements nn.Spec.
func (c Llama) Build(m *nn.Model) error {
	const std = nn.DefaultLlamaStd
	s, t := m.Set, m.TP
	m.Classes, m.Context = c.Vocab, c.Context
	m.Input, m.InCols, m.OutCols = nn.TokenInput, c.DModel, c.DModel
	if m.Last() {
		split, _, _ := nn.VocabShard(c.Vocab, c.DModel, t)
		m.OutCols = split.Piece()
		m.Objective = nn.LMObjective(c.Vocab, c.DModel, t)
	}
	var tok *nn.Param
	for u := m.Lo; u < m.Hi; u++ {
		switch {
		case u == 0:
			emb := nn.NewTokenEmbedding(s, "model.embed_tokens", c.Vocab, c.DModel, c.Context, t, nn.Normal(0, std), "", nn.Init{})
			tok = emb.Tok.Weight
			m.Layers = append(m.Layers, emb)
		case u == c.Layers+1:
			norm := nn.ReplicatedRMSNorm(s, "model.norm", c.DModel, float32(c.NormEps), t)
			var w *nn.Param
			switch {
			case !c.Tie:
				w = nn.AddVocab(s, "lm_head.weight", c.Vocab, c.DModel, t, nn.Normal(0, std))
			case tok != nil:
				w, tok.Uses = tok, 2
			default:
				// The embedding lives on another stage: a copy of the same
				// tensor, kept equal by summing the two stages' gradients.
				w = nn.AddVocab(s, "model.embed_tokens.weight", c.Vocab, c.DModel, t, nn.Normal(0, std))
				m.Tied = w
			}
			m.Layers = append(m.Layers, nn.NewLMHead(norm, w, c.DModel, t))
		default:
			b, err := nn.NewLlamaBlock(s, fmt.Sprintf("model.layers.%d", u-1), c.block(), t)
			if err != nil {
				return err
			}
			m.Layers = append(m.Layers, b)
		}
	}
	if tok != nil && !m.Last() && c.Tie {
		m.Tied = tok
	}
	head := "untied"
	if c.Tie {
		head = "tied"
	}
	m.Describe = fmt.Sprintf("Llama vocab %d, context %d, d_model %d, %d layers, %d heads, %d kv heads, ffn %d, rope theta %g, %s head",
		c.Vocab, c.Context, c.DModel, c.Layers, c.Heads, c.KVHeads, c.FFN, c.RopeTheta, head)
	return nil
}

var _ nn.CausalLM = Llama{}

// NewDecoder implements nn.CausalLM: a decoder over m, the whole model
// (not tensor-parallel), with a KV cache of capacity positions per layer.
// Rotary embeddings place any position, so capacity may pass the context
// the model was trained on (positions past it are extrapolation, as in
// Hugging Face's generate).
func (c Llama) NewDecoder(m *nn.Model, capacity int) (nn.Decoder, error) {
	if m.Lo != 0 || m.Hi != m.Units || m.TP.On() {
		return nil, fmt.Errorf("%w: a decoder needs the whole model, not units %d-%d of %d or a tensor-parallel shard", nn.ErrConfig, m.Lo, m.Hi-1, m.Units)
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("%w: a decoder of capacity %d", nn.ErrConfig, capacity)
	}
	if len(m.Layers) != c.Layers+2 {
		return nil, fmt.Errorf("%w: a model of %d layers is not this Llama's %d units", nn.ErrConfig, len(m.Layers), c.Layers+2)
	}
	emb, ok := m.Layers[0].(*nn.TokenEmbedding)
	head, ok2 := m.Layers[len(m.Layers)-1].(*nn.LMHead)
	if !ok || !ok2 {
		return nil, fmt.Errorf("%w: the model's layers are not a Llama's", nn.ErrConfig)
	}
	d := &llamaDecoder{emb: emb, head: head, dim: c.DModel, capacity: capacity}
	for _, l := range m.Layers[1 : len(m.Layers)-1] {
		b, ok := l.(*nn.LlamaBlock)
		if !ok {
			d.Close()
			return nil, fmt.Errorf("%w: layer %T is not a LlamaBlock", nn.ErrConfig, l)
		}
		d.blocks = append(d.blocks, b)
		d.caches = append(d.caches, b.NewKVCache(m.Set.Backend(), capacity))
	}
	return d, nil
}

// llamaDecoder runs a Llama over one sequence with a KV cache per block.
type llamaDecoder struct {
	emb      *nn.TokenEmbedding
	blocks   []*nn.LlamaBlock
	caches   nn.KVCaches
	head     *nn.LMHead
	dim      int
	capacity int
	n        int
}

// Feed implements nn.Decoder.
func (d *llamaDecoder) Feed(c *nn.Ctx, ids []int32) ([]float32, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: no tokens to feed", nn.ErrConfig)
	}
	if d.n+len(ids) > d.capacity {
		return nil, fmt.Errorf("%w: %d tokens after %d pass the decoder's capacity of %d", nn.ErrConfig, len(ids), d.n, d.capacity)
	}
	vocab := d.emb.Tok.Num
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			return nil, fmt.Errorf("%w: token %d (at %d) is outside the vocabulary [0, %d)", nn.ErrConfig, id, d.n+i, vocab)
		}
	}
	ec := *c
	ec.Train = false
	be, n := c.Be, len(ids)
	idx := be.AllocIndex(n)
	defer be.FreeIndex(idx)
	be.UploadIndex(idx, ids)
	x := nn.Act{X: c.Pool.Get(n * d.dim), Rows: n, Cols: d.dim}
	be.Embedding(x.X, d.emb.Tok.Weight.W, idx)
	for i, b := range d.blocks {
		x = b.Decode(&ec, x, d.caches[i])
	}
	// Only the last row's logits are asked for: the head runs on it alone.
	last := c.Pool.Get(d.dim)
	be.Copy(last, be.View(x.X, (n-1)*d.dim, d.dim))
	c.Pool.Put(x.X)
	y := d.head.Forward(&ec, nn.Act{X: last, Rows: 1, Cols: d.dim})
	logits := make([]float32, y.X.Len())
	be.Download(logits, y.X)
	c.Pool.Put(y.X)
	d.n += n
	return logits[:d.head.Vocab], nil
}

// Len implements nn.Decoder.
func (d *llamaDecoder) Len() int { return d.n }

// Reset implements nn.Decoder.
func (d *llamaDecoder) Reset() {
	d.n = 0
	d.caches.Reset()
}

// Close implements nn.Decoder.
func (d *llamaDecoder) Close() {
	d.caches.Free()
	d.caches = nil
}
