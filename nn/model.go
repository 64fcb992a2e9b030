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
	// TP is the model's tensor-parallel place (NoTP: whole layers).
	TP TP
	// VocabLo and VocabValid are the logit columns a vocabulary-parallel
	// GPT's last stage holds: [VocabLo, VocabLo+VocabValid) of the whole
	// vocabulary, then padding up to OutCols.
	VocabLo, VocabValid int
	// Describe is a one-line summary of the shape.
	Describe string
}

// Loss is the model's cross-entropy of logits (its last layer's output)
// against targets: vocabulary-parallel for a tensor-parallel GPT, whose
// logits are split by vocabulary, plain otherwise (see CrossEntropy).
func (m *Model) Loss(c *Ctx, logits Act, targets kernels.Index, gradScale float32) (float64, Act) {
	if m.Spec.GPT != nil && m.TP.On() {
		return VocabParallelCrossEntropy(c, logits, targets, gradScale, m.VocabLo, m.VocabValid)
	}
	return CrossEntropy(c, logits, targets, gradScale)
}

// BoundaryRows is the number of activation rows that cross a pipeline
// boundary of this model for a micro-batch of rows rows (tokens for the
// GPT): a sequence-parallel shard holds 1/TP.Size of them.
func (m *Model) BoundaryRows(rows int) int {
	if m.TP.SP {
		return rows / m.TP.Size
	}
	return rows
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
	return BuildShard(be, spec, seed, lo, hi, NoTP)
}

// BuildShard makes tensor-parallel shard tp of units [lo, hi) of the model
// spec on be. Every shard holds its part of the weights the whole model
// built with the same seed has.
func BuildShard(be kernels.Backend, spec Spec, seed uint64, lo, hi int, tp TP) (*Model, error) {
	m, err := plan(be, spec, seed, lo, hi, tp)
	if err != nil {
		return nil, err
	}
	m.Set.Finalize()
	return m, nil
}

// Layout lists the parameters shard tp of units [lo, hi) holds, in the
// order of its flat buffers (names, shapes, offsets, splits), without
// allocating them: what merging shards into the whole model needs.
func Layout(spec Spec, lo, hi int, tp TP) ([]*Param, error) {
	m, err := plan(nil, spec, 0, lo, hi, tp)
	if err != nil {
		return nil, err
	}
	return m.Set.Params(), nil
}

// plan builds the model's layers and registers its parameters.
func plan(be kernels.Backend, spec Spec, seed uint64, lo, hi int, tp TP) (*Model, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := spec.CheckTP(tp); err != nil {
		return nil, err
	}
	units := spec.Units()
	if lo < 0 || hi > units || lo >= hi {
		return nil, fmt.Errorf("%w: units [%d, %d) of a %s with %d", ErrConfig, lo, hi, spec.Name(), units)
	}
	m := &Model{Name: spec.Name(), Spec: spec, Set: NewParamSet(be, seed), Lo: lo, Hi: hi, Units: units, TP: tp}
	if spec.GPT != nil {
		buildGPT(m, *spec.GPT)
	} else {
		buildMLP(m, *spec.MLP)
	}
	span := ""
	if lo != 0 || hi != units {
		span = fmt.Sprintf(", units %d-%d of %d", lo, hi-1, units)
	}
	if tp.On() {
		sp := ""
		if tp.SP {
			sp = ", sequence-parallel"
		}
		span += fmt.Sprintf(", tensor-parallel shard %d of %d%s", tp.Rank, tp.Size, sp)
	}
	m.Describe += fmt.Sprintf("%s, %d parameters", span, m.Set.Len())
	return m, nil
}

// CheckTP checks that the architecture can be cut for the place t: the
// cut widths and heads divide by the shard count, and sequence
// parallelism has a sequence (the GPT) whose context the count divides.
func (s Spec) CheckTP(t TP) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if !t.On() {
		return nil
	}
	if s.GPT != nil {
		g := s.GPT
		switch {
		case g.Heads%t.Size != 0:
			return fmt.Errorf("%w: %d heads cannot be split among %d tensor-parallel shards", ErrConfig, g.Heads, t.Size)
		case t.SP && g.Context%t.Size != 0:
			return fmt.Errorf("%w: sequence parallelism splits the context %d among %d shards, which must divide it", ErrConfig, g.Context, t.Size)
		}
		return nil
	}
	if t.SP {
		return fmt.Errorf("%w: sequence parallelism needs a sequence model (the GPT), not the MLP", ErrConfig)
	}
	n := len(s.MLP.Sizes) - 1
	for u := range n {
		if mlpCut(u, n) == cutColumn && s.MLP.Sizes[u+1]%t.Size != 0 {
			return fmt.Errorf("%w: layer fc%d's %d outputs cannot be split among %d tensor-parallel shards", ErrConfig, u+1, s.MLP.Sizes[u+1], t.Size)
		}
	}
	return nil
}

// cut is how tensor parallelism cuts one of the MLP's linears.
type cut uint8

const (
	cutWhole cut = iota
	cutColumn
	cutRow
)

// mlpCut pairs the MLP's n linears as Megatron-LM pairs a block's: fc1
// column-parallel and fc2 row-parallel, fc3 and fc4 alike, …; with an odd
// count the last (the classifier) stays whole on every shard.
func mlpCut(u, n int) cut {
	switch {
	case u%2 == 1:
		return cutRow
	case u+1 < n:
		return cutColumn
	}
	return cutWhole
}

func buildMLP(m *Model, cfg MLPConfig) {
	n := len(cfg.Sizes) - 1
	t := m.TP
	width := func(u int) int { // the activation width after unit u−1
		if u > 0 && mlpCut(u-1, n) == cutColumn && t.On() {
			return cfg.Sizes[u] / t.Size
		}
		return cfg.Sizes[u]
	}
	m.Features, m.Classes = cfg.Sizes[0], cfg.Sizes[n]
	m.Input, m.InCols, m.OutCols = DenseInput, width(m.Lo), width(m.Hi)
	if m.Lo > 0 {
		m.Input = ActInput
	}
	for u := m.Lo; u < m.Hi; u++ {
		in, out := cfg.Sizes[u], cfg.Sizes[u+1]
		bound := float32(1 / math.Sqrt(float64(in)))
		name := fmt.Sprintf("fc%d", u+1)
		var l *Linear
		var layer Layer
		switch mlpCut(u, n) {
		case cutColumn:
			l = newColumn(m.Set, name, in, out, 1, t, Uniform(-bound, bound), Uniform(-bound, bound))
			layer = columnLayer(l, t)
		case cutRow:
			l = newRow(m.Set, name, in, out, t, Uniform(-bound, bound), Uniform(-bound, bound))
			layer = rowLayer(l, t)
		default:
			l = NewLinear(m.Set, name, in, out, true)
			layer = l
		}
		l.SkipInputGrad = u == 0
		// dx goes to the ReLU before it, unless a column-parallel layer
		// sums it over the group first (in fp32).
		l.LowInputGrad = u > 0 && mlpCut(u, n) != cutColumn
		// y goes to a ReLU, unless a row-parallel layer sums it over
		// the group first (in fp32).
		l.LowOutput = u < n-1 && mlpCut(u, n) != cutRow
		if u < n-1 {
			m.Layers = append(m.Layers, Seq{layer, &ActLayer{Fn: ReLU}})
		} else {
			m.Layers = append(m.Layers, layer)
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
	s, t := m.Set, m.TP
	m.Classes, m.Context = cfg.Vocab, cfg.Context
	m.Input, m.InCols, m.OutCols = TokenInput, cfg.DModel, cfg.DModel
	if m.Lo > 0 {
		m.Input = ActInput
	}
	// A vocabulary-parallel shard holds vocabulary rows [lo, lo+rows),
	// the last ones padding when t.Size does not divide the vocabulary.
	vocab := Split{Full: []int{cfg.Vocab, cfg.DModel}, Blocks: 1, Parts: t.Size, Index: t.Rank}
	rows := vocab.Piece()
	m.VocabLo = t.Rank * rows
	m.VocabValid = max(0, min(rows, cfg.Vocab-m.VocabLo))
	if m.Last() {
		m.OutCols = rows
	}
	vocabParam := func(layer string) *Param {
		if !t.On() {
			return s.Add(layer+".weight", []int{cfg.Vocab, cfg.DModel}, Normal(0, std))
		}
		return s.AddShard(layer+".weight", vocab, Normal(0, std))
	}
	var tok *Param
	for u := m.Lo; u < m.Hi; u++ {
		switch {
		case u == 0:
			emb := &GPTEmbed{
				Context: cfg.Context,
				Tok:     &Embedding{Num: rows, Dim: cfg.DModel, Weight: vocabParam("tok")},
				Pos:     NewEmbedding(s, "pos", cfg.Context, cfg.DModel, std),
				TP:      t,
				lo:      m.VocabLo,
			}
			emb.Pos.Weight.PartialGrad = t.SP
			tok = emb.Tok.Weight
			m.Layers = append(m.Layers, emb)
		case u == cfg.Layers+1:
			head := &GPTHead{LN: newReplicatedLayerNorm(s, "lnf", cfg.DModel, t), Vocab: rows, DModel: cfg.DModel}
			switch {
			case cfg.Untied:
				head.Weight = vocabParam("head")
			case tok != nil:
				head.Weight, tok.Uses = tok, 2
			default:
				// The embeddings live on another stage: a copy of the same
				// tensor, kept equal by summing the two stages' gradients.
				head.Weight = vocabParam("tok")
				m.Tied = head.Weight
			}
			head.lin = &Linear{In: cfg.DModel, Out: rows, Weight: head.Weight}
			head.layer = columnLayer(head.lin, t)
			m.Layers = append(m.Layers, head)
		default:
			b, err := NewBlock(s, fmt.Sprintf("blocks.%d", u-1), cfg.DModel, cfg.Heads, cfg.Context, std, projStd, t)
			if err != nil {
				panic(err) // Validate and CheckTP checked the head count
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
// A tensor-parallel shard holds a slice of the token table (vocabulary
// rows [lo, lo+Tok.Num)); the shards' lookups are summed (ReduceFromTP),
// or reduce-scattered into row slices with sequence parallelism, before
// the positions are added.
type GPTEmbed struct {
	Context  int
	Tok, Pos *Embedding
	TP       TP
	lo       int
	posIDs   kernels.Index
	posKey   [2]int
}

// Params implements Layer.
func (e *GPTEmbed) Params() []*Param { return []*Param{e.Tok.Weight, e.Pos.Weight} }

// positions returns the position ids of rows rows starting at row first
// of a micro-batch.
func (e *GPTEmbed) positions(be kernels.Backend, rows, first int) kernels.Index {
	if e.posIDs == nil || e.posKey != [2]int{rows, first} {
		if e.posIDs != nil {
			be.FreeIndex(e.posIDs)
		}
		ids := make([]int32, rows)
		for i := range ids {
			ids[i] = int32((first + i) % e.Context)
		}
		e.posIDs, e.posKey = be.AllocIndex(rows), [2]int{rows, first}
		be.UploadIndex(e.posIDs, ids)
	}
	return e.posIDs
}

// firstRow is the micro-batch row where a shard's rows of rows start.
func (e *GPTEmbed) firstRow(rows int) int {
	if e.TP.SP {
		return e.TP.Rank * rows
	}
	return 0
}

// Forward implements Layer: x carries [batch·context] token ids.
func (e *GPTEmbed) Forward(c *Ctx, x Act) Act {
	if x.Rows%e.Context != 0 {
		panic(fmt.Sprintf("nn: %d tokens is not a multiple of the context %d", x.Rows, e.Context))
	}
	d := e.Tok.Dim
	y := Act{X: c.Pool.Get(x.Rows * d), Rows: x.Rows, Cols: d}
	switch {
	case !e.TP.On():
		c.Be.Embedding(y.X, e.Tok.Weight.W, x.Ids)
	case e.TP.SP:
		c.Be.ShardEmbedding(y.X, e.Tok.Weight.W, x.Ids, e.lo)
		y = ScatterToSeq{}.Forward(c, y)
	default:
		c.Be.ShardEmbedding(y.X, e.Tok.Weight.W, x.Ids, e.lo)
		y = ReduceFromTP{}.Forward(c, y)
	}
	p := c.Pool.Get(y.Rows * d)
	c.Be.Embedding(p, e.Pos.Weight.W, e.positions(c.Be, y.Rows, e.firstRow(y.Rows)))
	c.Be.Add(y.X, y.X, p)
	c.Pool.Put(p)
	c.saveIndex(x.Ids)
	return y
}

// Backward implements Layer.
func (e *GPTEmbed) Backward(c *Ctx, dy Act) Act {
	ids := c.Tape.PopIndex()
	rows := dy.Rows
	c.Be.EmbeddingBackward(e.Pos.Weight.G, dy.X, e.positions(c.Be, rows, e.firstRow(rows)))
	switch {
	case !e.TP.On():
		c.Be.EmbeddingBackward(e.Tok.Weight.G, dy.X, ids)
	case e.TP.SP:
		dy = ScatterToSeq{}.Backward(c, dy)
		c.Be.ShardEmbeddingBackward(e.Tok.Weight.G, dy.X, ids, e.lo)
	default:
		c.Be.ShardEmbeddingBackward(e.Tok.Weight.G, dy.X, ids, e.lo)
	}
	c.GradDone(e.Tok.Weight, e.Pos.Weight)
	c.Pool.Put(dy.X)
	return Act{Rows: dy.Rows}
}

// GPTHead is the final LayerNorm and the LM head (logits = x·Wᵀ, no bias).
// A tensor-parallel shard's head is column-parallel over its vocabulary
// slice: its logits are that slice's (see Model.Loss).
type GPTHead struct {
	LN            *LayerNorm
	Weight        *Param
	Vocab, DModel int
	lin           *Linear
	layer         Layer
}

// Params implements Layer.
func (h *GPTHead) Params() []*Param { return append(h.LN.Params(), h.Weight) }

// Forward implements Layer.
func (h *GPTHead) Forward(c *Ctx, x Act) Act {
	return h.layer.Forward(c, h.LN.Forward(c, x))
}

// Backward implements Layer.
func (h *GPTHead) Backward(c *Ctx, dy Act) Act {
	return h.LN.Backward(c, h.layer.Backward(c, dy))
}
