package nn

import "fmt"

// LlamaBlockConfig is the shape of a LlamaBlock (Hugging Face's
// LlamaConfig, the fields a decoder layer reads).
type LlamaBlockConfig struct {
	// DModel is the hidden size.
	DModel int
	// Heads is the number of query heads, KVHeads of key/value heads
	// (num_key_value_heads; 0 means Heads).
	Heads, KVHeads int
	// FFN is the MLP's intermediate size.
	FFN int
	// Context is the number of tokens per sequence.
	Context int
	// RopeTheta is the rotary base (rope_theta; 0 means DefaultRopeTheta).
	RopeTheta float64
	// NormEps is the RMSNorm epsilon (rms_norm_eps; 0 means 1e-6).
	NormEps float64
	// Std is the standard deviation of the projections' initial weights
	// (initializer_range; 0 means 0.02).
	Std float32
}

// DefaultNormEps is the RMSNorm epsilon of a LlamaBlockConfig without one.
const DefaultNormEps = 1e-6

// DefaultLlamaStd is the initializer_range of a LlamaBlockConfig without
// one.
const DefaultLlamaStd = 0.02

// Validate fills the defaults and checks the shape.
func (c *LlamaBlockConfig) Validate() error {
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = DefaultRopeTheta
	}
	if c.NormEps == 0 {
		c.NormEps = DefaultNormEps
	}
	if c.Std == 0 {
		c.Std = DefaultLlamaStd
	}
	if c.DModel <= 0 || c.Heads <= 0 || c.FFN <= 0 || c.Context <= 0 || c.NormEps < 0 || c.Std < 0 {
		return fmt.Errorf("%w: llama block %+v", ErrConfig, *c)
	}
	return nil
}

// LlamaBlock is a Llama decoder layer (Hugging Face's LlamaDecoderLayer):
// x = x + self_attn(input_layernorm(x)); x = x + mlp(post_attention_layernorm(x)),
// both norms RMSNorms. Parameter names are Hugging Face's under prefix
// (e.g. "model.layers.0"): prefix.self_attn.{q,k,v,o}_proj.weight,
// prefix.mlp.{gate,up,down}_proj.weight, prefix.input_layernorm.weight and
// prefix.post_attention_layernorm.weight. A tensor-parallel shard holds its
// part of the attention and of the MLP (see LlamaAttention, SwiGLUMLP); the
// norms are whole on every shard.
type LlamaBlock struct {
	Cfg      LlamaBlockConfig
	InNorm   *RMSNorm
	Attn     *LlamaAttention
	PostNorm *RMSNorm
	MLP      *SwiGLUMLP
}

// NewLlamaBlock registers a block's parameters under prefix, projections
// drawn from N(0, cfg.Std²) and norms ones (Hugging Face's _init_weights),
// cut for the tensor-parallel place tp.
func NewLlamaBlock(s *ParamSet, prefix string, cfg LlamaBlockConfig, tp TP) (*LlamaBlock, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	init := Normal(0, cfg.Std)
	b := &LlamaBlock{Cfg: cfg}
	b.InNorm = newReplicatedRMSNorm(s, prefix+".input_layernorm", cfg.DModel, float32(cfg.NormEps), tp)
	attn, err := NewLlamaAttention(s, prefix+".self_attn", LlamaAttentionConfig{
		D: cfg.DModel, T: cfg.Context, Heads: cfg.Heads, KVHeads: cfg.KVHeads, RopeTheta: cfg.RopeTheta,
	}, init, tp)
	if err != nil {
		return nil, err
	}
	b.Attn = attn
	b.PostNorm = newReplicatedRMSNorm(s, prefix+".post_attention_layernorm", cfg.DModel, float32(cfg.NormEps), tp)
	mlp, err := NewSwiGLUMLP(s, prefix+".mlp", cfg.DModel, cfg.FFN, init, tp)
	if err != nil {
		return nil, err
	}
	b.MLP = mlp
	return b, nil
}

// Params implements Layer.
func (b *LlamaBlock) Params() []*Param {
	var ps []*Param
	for _, l := range []Layer{b.InNorm, b.Attn, b.PostNorm, b.MLP} {
		ps = append(ps, l.Params()...)
	}
	return ps
}

// Forward implements Layer.
func (b *LlamaBlock) Forward(c *Ctx, x Act) Act {
	x.X = c.widen(x.X)
	for _, br := range [2][2]Layer{{b.InNorm, b.Attn}, {b.PostNorm, b.MLP}} {
		// The residual stream is needed after the branch, which takes a
		// copy because layers own their inputs.
		h := c.Pool.Get(x.Rows * x.Cols)
		c.Be.Copy(h, x.X)
		y := br[1].Forward(c, br[0].Forward(c, Act{X: h, Rows: x.Rows, Cols: x.Cols}))
		y.X = c.widen(y.X)
		c.Be.Add(x.X, x.X, y.X)
		c.Pool.Put(y.X)
	}
	return x
}

// Backward implements Layer.
func (b *LlamaBlock) Backward(c *Ctx, dy Act) Act {
	dy.X = c.widen(dy.X)
	for _, br := range [2][2]Layer{{b.PostNorm, b.MLP}, {b.InNorm, b.Attn}} {
		// dy flows unchanged along the residual and into the branch.
		g := c.Pool.Get(dy.Rows * dy.Cols)
		c.Be.Copy(g, dy.X)
		d := br[0].Backward(c, br[1].Backward(c, Act{X: g, Rows: dy.Rows, Cols: dy.Cols}))
		d.X = c.widen(d.X)
		c.Be.Add(dy.X, dy.X, d.X)
		c.Pool.Put(d.X)
	}
	return dy
}
