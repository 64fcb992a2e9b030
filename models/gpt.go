package models

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
)

// GPT shapes a decoder-only transformer language model as nanoGPT's:
// learned positions, pre-LN blocks, GELU MLP 4×, final LayerNorm, LM head
// tied to the token embedding (Untied: a head of its own, head.weight
// [vocab, d_model]). Names follow ../shared/anchors/torch_gpt_tiny.py
// (tok, pos, blocks.i.{ln1, qkv, proj, ln2, fc, out}, lnf, head); with a
// tied head the state dict holds tok.weight only. Init: N(0, 0.02)
// weights, residual projections N(0, 0.02/sqrt(2·layers)), zero biases,
// unit LayerNorms.
//
// Pipeline units: the embeddings, each block, then the final LayerNorm
// with the LM head. Tensor parallelism (Megatron-LM): qkv column-parallel
// by heads, proj row-parallel, fc column-parallel, out row-parallel, the
// token embedding and the head split by vocabulary rows (padded when the
// shard count does not divide the vocabulary) with a vocabulary-parallel
// loss; sequence parallelism splits the tokens between those regions.
type GPT struct {
	Vocab   int
	Context int
	DModel  int
	Layers  int
	Heads   int
	Untied  bool
}

// DefaultGPT is the shape of ../shared/anchors/torch_gpt_tiny.py.
func DefaultGPT(vocab int) GPT {
	return GPT{Vocab: vocab, Context: 64, DModel: 128, Layers: 4, Heads: 4}
}

func init() {
	nn.Register(nn.ModelDef{
		Name:    "gpt",
		Summary: "decoder-only transformer (nanoGPT: learned positions, pre-LN, GELU, tied head)",
		Default: true, // troupe train with no --model: ../shared/anchors/torch_gpt_tiny.py on the Go specification
		Data:    "gospec",
		Options: []nn.Option{
			{Name: "d-model", Kind: nn.IntOption, Default: "128", Usage: "embedding width"},
			{Name: "n-layers", Kind: nn.IntOption, Default: "4", Usage: "transformer blocks"},
			{Name: "n-heads", Kind: nn.IntOption, Default: "4", Usage: "attention heads"},
			{Name: "vocab-size", Kind: nn.IntOption, Default: "0", Usage: "vocabulary of the embedding and LM head (0: the data's; at least the data's)"},
			{Name: "untied", Kind: nn.BoolOption, Default: "false", Usage: "give the GPT an LM head of its own (head.weight) instead of the token embedding's"},
		},
		New: newGPT,
	})
}

func newGPT(v nn.Values, d nn.DataShape) (nn.Spec, error) {
	if !d.Tokens {
		return nil, fmt.Errorf("%w: gpt needs token data, got %v", nn.ErrConfig, d)
	}
	vocab, err := vocabFor(v, d)
	if err != nil {
		return nil, err
	}
	return GPT{Vocab: vocab, Context: d.Context, DModel: v.Int("d-model"), Layers: v.Int("n-layers"),
		Heads: v.Int("n-heads"), Untied: v.Bool("untied")}, nil
}

// vocabFor is a language model's vocabulary: --vocab-size, or the data's.
func vocabFor(v nn.Values, d nn.DataShape) (int, error) {
	n := v.Int("vocab-size")
	switch {
	case n == 0:
		return d.Classes, nil
	case n < d.Classes:
		return 0, fmt.Errorf("%w: --vocab-size %d is smaller than the data's vocabulary %d", nn.ErrConfig, n, d.Classes)
	}
	return n, nil
}

// NewGPT builds a whole GPT on be.
func NewGPT(be kernels.Backend, cfg GPT, seed uint64) (*nn.Model, error) {
	return nn.BuildWhole(be, cfg, seed)
}

// Name implements nn.Spec.
func (GPT) Name() string { return "gpt" }

// Units implements nn.Spec.
func (c GPT) Units() int { return c.Layers + 2 }

// Validate implements nn.Spec.
func (c GPT) Validate() error {
	switch {
	case c.Vocab <= 0, c.Context <= 0, c.DModel <= 0, c.Layers <= 0, c.Heads <= 0:
		return fmt.Errorf("%w: GPT sizes must be positive: %+v", nn.ErrConfig, c)
	case c.DModel%c.Heads != 0:
		return fmt.Errorf("%w: d_model %d is not divisible by %d heads", nn.ErrConfig, c.DModel, c.Heads)
	}
	return nil
}

// CheckTP implements nn.Spec: each shard holds whole heads; sequence
// parallelism needs the shard count to divide the context.
func (c GPT) CheckTP(t nn.TP) error {
	switch {
	case c.Heads%t.Size != 0:
		return fmt.Errorf("%w: %d heads cannot be split among %d tensor-parallel shards", nn.ErrConfig, c.Heads, t.Size)
	case t.SP && c.Context%t.Size != 0:
		return fmt.Errorf("%w: sequence parallelism splits the context %d among %d shards, which must divide it", nn.ErrConfig, c.Context, t.Size)
	}
	return nil
}

// Build implements nn.Spec.
func (c GPT) Build(m *nn.Model) error {
	const std = 0.02
	projStd := float32(std / math.Sqrt(2*float64(c.Layers)))
	s, t := m.Set, m.TP
	m.Classes, m.Context = c.Vocab, c.Context
	m.Input, m.InCols, m.OutCols = nn.TokenInput, c.DModel, c.DModel
	split, _, _ := nn.VocabShard(c.Vocab, c.DModel, t)
	if m.Last() {
		m.OutCols = split.Piece()
		m.Objective = nn.LMObjective(c.Vocab, c.DModel, t)
	}
	var tok *nn.Param
	for u := m.Lo; u < m.Hi; u++ {
		switch {
		case u == 0:
			emb := nn.NewTokenEmbedding(s, "tok", c.Vocab, c.DModel, c.Context, t, nn.Normal(0, std), "pos", nn.Normal(0, std))
			tok = emb.Tok.Weight
			m.Layers = append(m.Layers, emb)
		case u == c.Layers+1:
			norm := nn.ReplicatedLayerNorm(s, "lnf", c.DModel, t)
			var w *nn.Param
			switch {
			case c.Untied:
				w = nn.AddVocab(s, "head.weight", c.Vocab, c.DModel, t, nn.Normal(0, std))
			case tok != nil:
				w, tok.Uses = tok, 2
			default:
				// The embeddings live on another stage: a copy of the same
				// tensor, kept equal by summing the two stages' gradients.
				w = nn.AddVocab(s, "tok.weight", c.Vocab, c.DModel, t, nn.Normal(0, std))
				m.Tied = w
			}
			m.Layers = append(m.Layers, nn.NewLMHead(norm, w, c.DModel, t))
		default:
			b, err := nn.NewBlock(s, fmt.Sprintf("blocks.%d", u-1), c.DModel, c.Heads, c.Context, std, projStd, t)
			if err != nil {
				return err
			}
			m.Layers = append(m.Layers, b)
		}
	}
	if tok != nil && !m.Last() && !c.Untied {
		m.Tied = tok
	}
	tied := "tied"
	if c.Untied {
		tied = "untied"
	}
	m.Describe = fmt.Sprintf("GPT vocab %d, context %d, d_model %d, %d layers, %d heads, %s head",
		c.Vocab, c.Context, c.DModel, c.Layers, c.Heads, tied)
	return nil
}
