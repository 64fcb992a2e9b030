package nn

import (
	"fmt"
	"math"
	"strings"

	"github.com/troupe-ml/troupe/kernels"
)

// InputKind says what a model reads.
type InputKind int

const (
	// DenseInput is a [rows, features] float matrix (the MLP).
	DenseInput InputKind = iota
	// TokenInput is [batch, context] token ids (the GPT).
	TokenInput
)

// Model is a sequential model: its parameters and its layers in order. The
// last layer produces logits for CrossEntropy.
type Model struct {
	// Name is "mlp" or "gpt".
	Name   string
	Input  InputKind
	Set    *ParamSet
	Layers []Layer
	// Classes is the number of logits per row (classes, or vocabulary).
	Classes int
	// Features is the MLP's input width.
	Features int
	// Context is the GPT's sequence length.
	Context int
	// Describe is a one-line summary of the shape.
	Describe string
}

// MLPConfig shapes an MLP classifier: Sizes d0, d1, …, dn make layers fc1…fcn
// with fc{i}.weight [d_i, d_{i−1}] and ReLU between them.
type MLPConfig struct {
	Sizes []int
}

// NewMLP builds an MLP classifier with PyTorch's default Linear init.
func NewMLP(be kernels.Backend, cfg MLPConfig, seed uint64) (*Model, error) {
	if len(cfg.Sizes) < 2 {
		return nil, fmt.Errorf("%w: an MLP needs at least two sizes (input, output), got %v", ErrConfig, cfg.Sizes)
	}
	for _, d := range cfg.Sizes {
		if d <= 0 {
			return nil, fmt.Errorf("%w: MLP layer sizes must be positive, got %v", ErrConfig, cfg.Sizes)
		}
	}
	s := NewParamSet(be)
	rng := NewRNG(seed)
	m := &Model{Name: "mlp", Input: DenseInput, Set: s, Features: cfg.Sizes[0], Classes: cfg.Sizes[len(cfg.Sizes)-1]}
	for i := 1; i < len(cfg.Sizes); i++ {
		l := NewLinear(s, fmt.Sprintf("fc%d", i), cfg.Sizes[i-1], cfg.Sizes[i], true, rng)
		if i == 1 {
			l.SkipInputGrad = true
		}
		m.Layers = append(m.Layers, l)
		if i < len(cfg.Sizes)-1 {
			m.Layers = append(m.Layers, &ActLayer{Fn: ReLU})
		}
	}
	s.Finalize()
	parts := make([]string, len(cfg.Sizes))
	for i, d := range cfg.Sizes {
		parts[i] = fmt.Sprint(d)
	}
	m.Describe = fmt.Sprintf("MLP %s, %d parameters", strings.Join(parts, "-"), s.Len())
	return m, nil
}

// GPTConfig shapes a GPT (nanoGPT style: learned positions, pre-LN blocks,
// GELU MLP 4×, final LayerNorm, LM head tied to the token embedding).
type GPTConfig struct {
	Vocab   int
	Context int
	DModel  int
	Layers  int
	Heads   int
	// Untied gives the LM head its own weight head.weight [vocab, d_model].
	Untied bool
}

// DefaultGPTConfig is the shape of ../shared/anchors/torch_gpt_tiny.py.
func DefaultGPTConfig(vocab int) GPTConfig {
	return GPTConfig{Vocab: vocab, Context: 64, DModel: 128, Layers: 4, Heads: 4}
}

// Validate checks the shape.
func (c GPTConfig) Validate() error {
	switch {
	case c.Vocab <= 0, c.Context <= 0, c.DModel <= 0, c.Layers <= 0, c.Heads <= 0:
		return fmt.Errorf("%w: GPT sizes must be positive: %+v", ErrConfig, c)
	case c.DModel%c.Heads != 0:
		return fmt.Errorf("%w: d_model %d is not divisible by %d heads", ErrConfig, c.DModel, c.Heads)
	}
	return nil
}

// NewGPT builds a GPT with nanoGPT's init: N(0, 0.02) weights, residual
// projections N(0, 0.02/sqrt(2·layers)), zero biases, unit LayerNorms. Names
// follow ../shared/anchors/torch_gpt_tiny.py (tok, pos, blocks.i.{ln1, qkv,
// proj, ln2, fc, out}, lnf, head). With a tied head the state dict holds
// tok.weight only (PyTorch's head.weight is the same tensor).
func NewGPT(be kernels.Backend, cfg GPTConfig, seed uint64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := NewParamSet(be)
	rng := NewRNG(seed)
	const std = 0.02
	projStd := float32(std / math.Sqrt(2*float64(cfg.Layers)))
	emb := &GPTEmbed{
		Context: cfg.Context,
		Tok:     NewEmbedding(s, "tok", cfg.Vocab, cfg.DModel, std, rng),
		Pos:     NewEmbedding(s, "pos", cfg.Context, cfg.DModel, std, rng),
	}
	m := &Model{Name: "gpt", Input: TokenInput, Set: s, Classes: cfg.Vocab, Context: cfg.Context}
	m.Layers = append(m.Layers, emb)
	for i := 0; i < cfg.Layers; i++ {
		b, err := NewBlock(s, fmt.Sprintf("blocks.%d", i), cfg.DModel, cfg.Heads, cfg.Context, std, projStd, rng)
		if err != nil {
			return nil, err
		}
		m.Layers = append(m.Layers, b)
	}
	head := &GPTHead{LN: NewLayerNorm(s, "lnf", cfg.DModel), Vocab: cfg.Vocab, DModel: cfg.DModel}
	if cfg.Untied {
		head.Weight = s.Add("head.weight", []int{cfg.Vocab, cfg.DModel}, rng.Normal(0, std))
	} else {
		head.Weight = emb.Tok.Weight
		head.Weight.Uses = 2
	}
	m.Layers = append(m.Layers, head)
	s.Finalize()
	tied := "tied"
	if cfg.Untied {
		tied = "untied"
	}
	m.Describe = fmt.Sprintf("GPT vocab %d, context %d, d_model %d, %d layers, %d heads, %s head, %d parameters",
		cfg.Vocab, cfg.Context, cfg.DModel, cfg.Layers, cfg.Heads, tied, s.Len())
	return m, nil
}

// GPTEmbed is token plus learned position embedding: the GPT's first layer.
type GPTEmbed struct {
	Context  int
	Tok, Pos *Embedding
	posIDs   kernels.Index
}

// Params implements Layer.
func (e *GPTEmbed) Params() []*Param { return []*Param{e.Tok.Weight, e.Pos.Weight} }

func (e *GPTEmbed) positions(be kernels.Backend, rows int) kernels.Index {
	if e.posIDs == nil || e.posIDs.Len() != rows {
		if e.posIDs != nil {
			be.FreeIndex(e.posIDs)
		}
		ids := make([]int32, rows)
		for i := range ids {
			ids[i] = int32(i % e.Context)
		}
		e.posIDs = be.AllocIndex(rows)
		be.UploadIndex(e.posIDs, ids)
	}
	return e.posIDs
}

// Forward implements Layer: x carries [batch·context] token ids.
func (e *GPTEmbed) Forward(c *Ctx, x Act) Act {
	if x.Rows%e.Context != 0 {
		panic(fmt.Sprintf("nn: %d tokens is not a multiple of the context %d", x.Rows, e.Context))
	}
	d := e.Tok.Dim
	y := c.Pool.Get(x.Rows * d)
	c.Be.Embedding(y, e.Tok.Weight.W, x.Ids)
	p := c.Pool.Get(x.Rows * d)
	c.Be.Embedding(p, e.Pos.Weight.W, e.positions(c.Be, x.Rows))
	c.Be.Add(y, y, p)
	c.Pool.Put(p)
	c.saveIndex(x.Ids)
	return Act{X: y, Rows: x.Rows, Cols: d}
}

// Backward implements Layer.
func (e *GPTEmbed) Backward(c *Ctx, dy Act) Act {
	ids := c.Tape.PopIndex()
	c.Be.EmbeddingBackward(e.Tok.Weight.G, dy.X, ids)
	c.Be.EmbeddingBackward(e.Pos.Weight.G, dy.X, e.positions(c.Be, dy.Rows))
	c.GradDone(e.Tok.Weight, e.Pos.Weight)
	c.Pool.Put(dy.X)
	return Act{Rows: dy.Rows}
}

// GPTHead is the final LayerNorm and the LM head (logits = x·Wᵀ, no bias).
type GPTHead struct {
	LN            *LayerNorm
	Weight        *Param
	Vocab, DModel int
}

// Params implements Layer.
func (h *GPTHead) Params() []*Param { return append(h.LN.Params(), h.Weight) }

// Forward implements Layer.
func (h *GPTHead) Forward(c *Ctx, x Act) Act {
	n := h.LN.Forward(c, x)
	logits := c.Pool.Get(x.Rows * h.Vocab)
	c.Be.Gemm(kernels.GemmArgs{TransB: true, M: x.Rows, N: h.Vocab, K: h.DModel, Alpha: 1}, n.X, h.Weight.W, logits)
	c.save(n.X)
	return Act{X: logits, Rows: x.Rows, Cols: h.Vocab}
}

// Backward implements Layer.
func (h *GPTHead) Backward(c *Ctx, dy Act) Act {
	n := c.Tape.Pop()
	c.Be.Gemm(kernels.GemmArgs{TransA: true, M: h.Vocab, N: h.DModel, K: dy.Rows, Alpha: 1, Beta: 1}, dy.X, n, h.Weight.G)
	c.GradDone(h.Weight)
	c.Be.Gemm(kernels.GemmArgs{M: dy.Rows, N: h.DModel, K: h.Vocab, Alpha: 1}, dy.X, h.Weight.W, n)
	c.Pool.Put(dy.X)
	return h.LN.Backward(c, Act{X: n, Rows: dy.Rows, Cols: h.DModel})
}
