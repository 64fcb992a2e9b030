package nn

import (
	"fmt"
	"math"
	"strings"

	"github.com/troupe-ml/troupe/kernels"
)

// InputKind says what a model (or a pipeline stage of one) reads.
type InputKind int

const (
	// DenseInput is a [rows, features] float matrix (the MLP).
	DenseInput InputKind = iota
	// TokenInput is [batch, context] token ids (the GPT).
	TokenInput
	// ActInput is the previous pipeline stage's [rows, cols] activations.
	ActInput
)

// Spec is a model's architecture: exactly one of MLP and GPT is set.
type Spec struct {
	MLP *MLPConfig
	GPT *GPTConfig
}

// Name is "mlp" or "gpt".
func (s Spec) Name() string {
	if s.GPT != nil {
		return "gpt"
	}
	return "mlp"
}

// Units is the number of pipeline units: one per Linear (with its ReLU) for
// the MLP; the embeddings, each block, and the final LayerNorm with the LM
// head for the GPT.
func (s Spec) Units() int {
	if s.GPT != nil {
		return s.GPT.Layers + 2
	}
	return len(s.MLP.Sizes) - 1
}

// Validate checks the architecture.
func (s Spec) Validate() error {
	switch {
	case (s.MLP == nil) == (s.GPT == nil):
		return fmt.Errorf("%w: a spec needs exactly one of MLP and GPT", ErrConfig)
	case s.GPT != nil:
		return s.GPT.Validate()
	}
	return s.MLP.Validate()
}

// Model is a sequential model, or the contiguous range of units [Lo, Hi)
// of one that a pipeline stage holds: its parameters and its layers in
// order. When Hi is the last unit, the last layer produces logits for
// CrossEntropy.
type Model struct {
	// Name is "mlp" or "gpt".
	Name string
	Spec Spec
	// Input is what the first layer reads.
	Input  InputKind
	Set    *ParamSet
	Layers []Layer
	// Lo and Hi are the units held, of Units.
	Lo, Hi, Units int
	// InCols is the width of an ActInput; OutCols the width of the output
	// (Classes for the last stage).
	InCols, OutCols int
	// Classes is the number of logits per row (classes, or vocabulary).
	Classes int
	// Features is the MLP's input width.
	Features int
	// Context is the GPT's sequence length.
	Context int
	// Tied is the token embedding when this stage holds only one of its two
	// uses (the embeddings or the LM head): its gradient must be summed with
	// the stage holding the other use before the update (Megatron-LM's
	// embedding group).
	Tied *Param
	// Describe is a one-line summary of the shape.
	Describe string
}

// First reports whether the model reads the data (holds unit 0).
func (m *Model) First() bool { return m.Lo == 0 }

// Last reports whether the model produces the logits.
func (m *Model) Last() bool { return m.Hi == m.Units }

// MLPConfig shapes an MLP classifier: Sizes d0, d1, …, dn make layers fc1…fcn
// with fc{i}.weight [d_i, d_{i−1}] and ReLU between them.
type MLPConfig struct {
	Sizes []int
}

// Validate checks the sizes.
func (c MLPConfig) Validate() error {
	if len(c.Sizes) < 2 {
		return fmt.Errorf("%w: an MLP needs at least two sizes (input, output), got %v", ErrConfig, c.Sizes)
	}
	for _, d := range c.Sizes {
		if d <= 0 {
			return fmt.Errorf("%w: MLP layer sizes must be positive, got %v", ErrConfig, c.Sizes)
		}
	}
	return nil
}

// NewMLP builds an MLP classifier with PyTorch's default Linear init.
func NewMLP(be kernels.Backend, cfg MLPConfig, seed uint64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return Build(be, Spec{MLP: &cfg}, seed, 0, len(cfg.Sizes)-1)
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
	return Build(be, Spec{GPT: &cfg}, seed, 0, cfg.Layers+2)
}

// Build makes units [lo, hi) of the model spec on be. Every parameter gets
// the weights it has in the whole model built with the same seed.
func Build(be kernels.Backend, spec Spec, seed uint64, lo, hi int) (*Model, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	units := spec.Units()
	if lo < 0 || hi > units || lo >= hi {
		return nil, fmt.Errorf("%w: units [%d, %d) of a %s with %d", ErrConfig, lo, hi, spec.Name(), units)
	}
	m := &Model{Name: spec.Name(), Spec: spec, Set: NewParamSet(be, seed), Lo: lo, Hi: hi, Units: units}
	if spec.GPT != nil {
		buildGPT(m, *spec.GPT)
	} else {
		buildMLP(m, *spec.MLP)
	}
	m.Set.Finalize()
	span := ""
	if lo != 0 || hi != units {
		span = fmt.Sprintf(", units %d-%d of %d", lo, hi-1, units)
	}
	m.Describe += fmt.Sprintf("%s, %d parameters", span, m.Set.Len())
	return m, nil
}

func buildMLP(m *Model, cfg MLPConfig) {
	n := len(cfg.Sizes) - 1
	m.Features, m.Classes = cfg.Sizes[0], cfg.Sizes[n]
	m.Input, m.InCols, m.OutCols = DenseInput, cfg.Sizes[m.Lo], cfg.Sizes[m.Hi]
	if m.Lo > 0 {
		m.Input = ActInput
	}
	for u := m.Lo; u < m.Hi; u++ {
		l := NewLinear(m.Set, fmt.Sprintf("fc%d", u+1), cfg.Sizes[u], cfg.Sizes[u+1], true)
		l.SkipInputGrad = u == 0
		if u < n-1 {
			m.Layers = append(m.Layers, Seq{l, &ActLayer{Fn: ReLU}})
		} else {
			m.Layers = append(m.Layers, l)
		}
	}
	parts := make([]string, len(cfg.Sizes))
	for i, d := range cfg.Sizes {
		parts[i] = fmt.Sprint(d)
	}
	m.Describe = "MLP " + strings.Join(parts, "-")
}

func buildGPT(m *Model, cfg GPTConfig) {
	const std = 0.02
	projStd := float32(std / math.Sqrt(2*float64(cfg.Layers)))
	s := m.Set
	m.Classes, m.Context = cfg.Vocab, cfg.Context
	m.Input, m.InCols, m.OutCols = TokenInput, cfg.DModel, cfg.DModel
	if m.Lo > 0 {
		m.Input = ActInput
	}
	if m.Last() {
		m.OutCols = cfg.Vocab
	}
	var tok *Param
	for u := m.Lo; u < m.Hi; u++ {
		switch {
		case u == 0:
			emb := &GPTEmbed{
				Context: cfg.Context,
				Tok:     NewEmbedding(s, "tok", cfg.Vocab, cfg.DModel, std),
				Pos:     NewEmbedding(s, "pos", cfg.Context, cfg.DModel, std),
			}
			tok = emb.Tok.Weight
			m.Layers = append(m.Layers, emb)
		case u == cfg.Layers+1:
			head := &GPTHead{LN: NewLayerNorm(s, "lnf", cfg.DModel), Vocab: cfg.Vocab, DModel: cfg.DModel}
			switch {
			case cfg.Untied:
				head.Weight = s.Add("head.weight", []int{cfg.Vocab, cfg.DModel}, Normal(0, std))
			case tok != nil:
				head.Weight, tok.Uses = tok, 2
			default:
				// The embeddings live on another stage: a copy of the same
				// tensor, kept equal by summing the two stages' gradients.
				head.Weight = s.Add("tok.weight", []int{cfg.Vocab, cfg.DModel}, Normal(0, std))
				m.Tied = head.Weight
			}
			m.Layers = append(m.Layers, head)
		default:
			b, err := NewBlock(s, fmt.Sprintf("blocks.%d", u-1), cfg.DModel, cfg.Heads, cfg.Context, std, projStd)
			if err != nil {
				panic(err) // Validate checked the head count
			}
			m.Layers = append(m.Layers, b)
		}
	}
	if tok != nil && !m.Last() && !cfg.Untied {
		m.Tied = tok
	}
	tied := "tied"
	if cfg.Untied {
		tied = "untied"
	}
	m.Describe = fmt.Sprintf("GPT vocab %d, context %d, d_model %d, %d layers, %d heads, %s head",
		cfg.Vocab, cfg.Context, cfg.DModel, cfg.Layers, cfg.Heads, tied)
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
