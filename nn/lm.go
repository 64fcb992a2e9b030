package nn

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// VocabShard is tensor-parallel place t's share of a vocabulary of vocab
// tokens embedded in dim columns: the split of a [vocab, dim] table by rows
// (the last rows padding when t.Size does not divide vocab), the first
// vocabulary id it holds, and how many of its rows are real tokens.
func VocabShard(vocab, dim int, t TP) (split Split, lo, valid int) {
	split = Split{Full: []int{vocab, dim}, Blocks: 1, Parts: t.Size, Index: t.Rank}
	rows := split.Piece()
	lo = t.Rank * rows
	return split, lo, max(0, min(rows, vocab-lo))
}

// AddVocab registers a [vocab, dim] table (a token embedding or an LM
// head) whole, or as place t's vocabulary shard when t is on.
func AddVocab(s *ParamSet, name string, vocab, dim int, t TP, init Init) *Param {
	if !t.On() {
		return s.Add(name, []int{vocab, dim}, init)
	}
	split, _, _ := VocabShard(vocab, dim, t)
	return s.AddShard(name, split, init)
}

// TokenEmbedding looks up token ids in a vocabulary table and, when Pos is
// set, adds learned position embeddings (position i%Context of a row i).
// A tensor-parallel shard holds a slice of the token table (vocabulary
// rows [Lo, Lo+Tok.Num)); the shards' lookups are summed (ReduceFromTP),
// or reduce-scattered into row slices with sequence parallelism, before
// the positions are added.
type TokenEmbedding struct {
	Context int
	Tok     *Embedding
	// Pos is nil for a model without learned positions (rotary ones are
	// applied in attention).
	Pos *Embedding
	TP  TP
	// Lo is the first vocabulary id of the shard's slice.
	Lo     int
	posIDs kernels.Index
	posKey [2]int
}

// NewTokenEmbedding registers the token table prefix.weight [vocab, dim]
// (place t's vocabulary shard) drawn from init, and, with posName set, a
// learned position table posName.weight [context, dim] drawn from posInit.
func NewTokenEmbedding(s *ParamSet, prefix string, vocab, dim, context int, t TP, init Init, posName string, posInit Init) *TokenEmbedding {
	_, lo, _ := VocabShard(vocab, dim, t)
	tok := AddVocab(s, prefix+".weight", vocab, dim, t, init)
	e := &TokenEmbedding{Context: context, Tok: &Embedding{Num: tok.Shape[0], Dim: dim, Weight: tok}, TP: t, Lo: lo}
	if posName != "" {
		e.Pos = &Embedding{Num: context, Dim: dim, Weight: s.Add(posName+".weight", []int{context, dim}, posInit)}
		e.Pos.Weight.PartialGrad = t.SP
	}
	return e
}

// Params implements Layer.
func (e *TokenEmbedding) Params() []*Param {
	if e.Pos == nil {
		return []*Param{e.Tok.Weight}
	}
	return []*Param{e.Tok.Weight, e.Pos.Weight}
}

// positions returns the position ids of rows rows starting at row first
// of a micro-batch.
func (e *TokenEmbedding) positions(be kernels.Backend, rows, first int) kernels.Index {
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
func (e *TokenEmbedding) firstRow(rows int) int {
	if e.TP.SP {
		return e.TP.Rank * rows
	}
	return 0
}

// Forward implements Layer: x carries [batch·context] token ids.
func (e *TokenEmbedding) Forward(c *Ctx, x Act) Act {
	if x.Rows%e.Context != 0 {
		panic(fmt.Sprintf("nn: %d tokens is not a multiple of the context %d", x.Rows, e.Context))
	}
	d := e.Tok.Dim
	y := Act{X: c.Pool.Get(x.Rows * d), Rows: x.Rows, Cols: d}
	switch {
	case !e.TP.On():
		c.Be.Embedding(y.X, e.Tok.Weight.W, x.Ids)
	case e.TP.SP:
		c.Be.ShardEmbedding(y.X, e.Tok.Weight.W, x.Ids, e.Lo)
		y = ScatterToSeq{}.Forward(c, y)
	default:
		c.Be.ShardEmbedding(y.X, e.Tok.Weight.W, x.Ids, e.Lo)
		y = ReduceFromTP{}.Forward(c, y)
	}
	if e.Pos != nil {
		p := c.Pool.Get(y.Rows * d)
		c.Be.Embedding(p, e.Pos.Weight.W, e.positions(c.Be, y.Rows, e.firstRow(y.Rows)))
		c.Be.Add(y.X, y.X, p)
		c.Pool.Put(p)
	}
	c.saveIndex(x.Ids)
	return y
}

// Backward implements Layer.
func (e *TokenEmbedding) Backward(c *Ctx, dy Act) Act {
	ids := c.Tape.PopIndex()
	rows := dy.Rows
	if e.Pos != nil {
		c.Be.EmbeddingBackward(e.Pos.Weight.G, dy.X, e.positions(c.Be, rows, e.firstRow(rows)))
	}
	switch {
	case !e.TP.On():
		c.Be.EmbeddingBackward(e.Tok.Weight.G, dy.X, ids)
	case e.TP.SP:
		dy = ScatterToSeq{}.Backward(c, dy)
		c.Be.ShardEmbeddingBackward(e.Tok.Weight.G, dy.X, ids, e.Lo)
	default:
		c.Be.ShardEmbeddingBackward(e.Tok.Weight.G, dy.X, ids, e.Lo)
	}
	c.GradDone(e.Params()...)
	c.Pool.Put(dy.X)
	return Act{Rows: dy.Rows}
}

// LMHead is a language model's final normalisation and its LM head
// (logits = norm(x)·Wᵀ, no bias). A tensor-parallel shard's head is
// column-parallel over its vocabulary slice: its logits are that slice's
// (see VocabParallelLoss).
type LMHead struct {
	Norm   Layer
	Weight *Param
	// Vocab is the shard's logit columns; DModel the input width.
	Vocab, DModel int
	layer         Layer
}

// NewLMHead runs norm, then the head weight [vocab rows, dmodel] (place t's
// vocabulary shard when t is on: its Shape[0] rows).
func NewLMHead(norm Layer, weight *Param, dmodel int, t TP) *LMHead {
	rows := weight.Shape[0]
	lin := &Linear{In: dmodel, Out: rows, Weight: weight}
	return &LMHead{Norm: norm, Weight: weight, Vocab: rows, DModel: dmodel, layer: ColumnLayer(lin, t)}
}

// Params implements Layer.
func (h *LMHead) Params() []*Param { return append(h.Norm.Params(), h.Weight) }

// Forward implements Layer.
func (h *LMHead) Forward(c *Ctx, x Act) Act {
	return h.layer.Forward(c, h.Norm.Forward(c, x))
}

// Backward implements Layer.
func (h *LMHead) Backward(c *Ctx, dy Act) Act {
	return h.Norm.Backward(c, h.layer.Backward(c, dy))
}

// CrossEntropyLoss is the softmax cross-entropy Objective (CrossEntropy).
type CrossEntropyLoss struct{}

// Loss implements Objective.
func (CrossEntropyLoss) Loss(c *Ctx, out Act, t Targets, gradScale float32) (float64, Act) {
	return CrossEntropy(c, out, t.Ids, gradScale)
}

// VocabParallelLoss is the cross-entropy Objective of logits split by
// vocabulary among tensor-parallel shards (VocabParallelCrossEntropy):
// the shard holds columns [Lo, Lo+Valid) of the vocabulary, then padding.
type VocabParallelLoss struct {
	Lo, Valid int
}

// Loss implements Objective.
func (l VocabParallelLoss) Loss(c *Ctx, out Act, t Targets, gradScale float32) (float64, Act) {
	return VocabParallelCrossEntropy(c, out, t.Ids, gradScale, l.Lo, l.Valid)
}

// LMObjective is the cross-entropy of a language model's logits at place
// t over a vocabulary of vocab tokens: vocabulary-parallel when t is on.
func LMObjective(vocab, dim int, t TP) Objective {
	if !t.On() {
		return CrossEntropyLoss{}
	}
	_, lo, valid := VocabShard(vocab, dim, t)
	return VocabParallelLoss{Lo: lo, Valid: valid}
}

// ColumnLinear registers a Linear in → out (with bias) whose outputs t
// cuts into t.Size slices, this shard's slice; the output dimension is
// seen as blocks equal blocks each cut alike (3 for a fused qkv). The
// weight is drawn from wInit and the bias from bInit, as slices of the
// whole layer's. Run it with ColumnLayer.
func ColumnLinear(s *ParamSet, prefix string, in, out, blocks int, t TP, wInit, bInit Init) *Linear {
	return newColumn(s, prefix, in, out, blocks, t, wInit, bInit)
}

// RowLinear registers a Linear in → out (with bias) whose inputs t cuts
// into t.Size slices, this shard's slice; the bias is whole on every
// shard. Run it with RowLayer.
func RowLinear(s *ParamSet, prefix string, in, out int, t TP, wInit, bInit Init) *Linear {
	return newRow(s, prefix, in, out, t, wInit, bInit)
}

// ColumnLayer runs l as place t says: a plain Linear, or column-parallel
// (its input copied to the shards, its output their slices).
func ColumnLayer(l *Linear, t TP) Layer { return columnLayer(l, t) }

// RowLayer runs l as place t says: a plain Linear, or row-parallel (its
// input the shards' slices, its output summed over them).
func RowLayer(l *Linear, t TP) Layer { return rowLayer(l, t) }

// ReplicatedLayerNorm is a LayerNorm every tensor-parallel shard holds
// whole; with sequence parallelism it normalises a shard's rows only, so
// its gradients are partial (summed over the group before the update).
func ReplicatedLayerNorm(s *ParamSet, prefix string, dim int, t TP) *LayerNorm {
	return newReplicatedLayerNorm(s, prefix, dim, t)
}

// ReplicatedRMSNorm is an RMSNorm every tensor-parallel shard holds whole;
// with sequence parallelism it normalises a shard's rows only, so its
// gradient is partial (summed over the group before the update).
func ReplicatedRMSNorm(s *ParamSet, prefix string, dim int, eps float32, t TP) *RMSNorm {
	return newReplicatedRMSNorm(s, prefix, dim, eps, t)
}
