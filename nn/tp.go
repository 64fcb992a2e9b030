package nn

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): a shard of a
// model holds a 1/T part of each large weight matrix, and the shards of a
// tensor-parallel group run every micro-batch together, exchanging
// activations inside each block through the group's collectives.
//
//   - A column-parallel linear holds rows (outputs) of W: its input is the
//     whole activation and its output a 1/T slice of the features.
//   - A row-parallel linear holds columns (inputs) of W: its input is such
//     a slice and its output a partial sum, completed by an all-reduce; its
//     bias is replicated and added after the sum.
//   - Between them the conjugate operators carry the activations: CopyToTP
//     (identity forward, all-reduce of the input gradient backward) before
//     a column-parallel layer, ReduceFromTP (all-reduce forward, identity
//     backward) after a row-parallel one. A block thus makes one all-reduce
//     forward and one backward for attention and one each for the MLP.
//   - With sequence parallelism (Korthikanti et al. 2022) the activations
//     between those regions are split along the token rows instead of being
//     replicated: GatherFromSeq (all-gather forward, reduce-scatter
//     backward) replaces CopyToTP, ScatterToSeq (reduce-scatter forward,
//     all-gather backward) replaces ReduceFromTP, and LayerNorm, the
//     residual stream and the row-parallel biases work on 1/T of the rows.
//     Their parameters' gradients are then partial sums over the group
//     (Param.PartialGrad), which the trainer all-reduces across it.
//   - The token embedding and the tied LM head are vocabulary-parallel:
//     each shard holds a 1/T slice of the vocabulary (padded when T does
//     not divide it), and the cross-entropy takes three all-reduces of one
//     value per row (the maximum, the target's logit and the sum of
//     exponentials) instead of gathering the logits.
//
// Layers reach the group through Ctx.TP. The group runs its collectives
// to completion before returning; a failure is kept by the group (its
// later calls return at once) and reported by the owner after the pass,
// so a layer never sees an error and a failed pass is thrown away whole.

// TP is a model's place in its tensor-parallel group: shard Rank of Size,
// with sequence parallelism or without.
type TP struct {
	Rank, Size int
	// SP splits the activations between the tensor-parallel regions along
	// the token rows.
	SP bool
}

// NoTP is the place of a model that is not sharded.
var NoTP = TP{Size: 1}

// On reports whether the model is sharded.
func (t TP) On() bool { return t.Size > 1 }

// Validate checks the place.
func (t TP) Validate() error {
	if t.Size < 1 || t.Rank < 0 || t.Rank >= t.Size {
		return fmt.Errorf("%w: tensor-parallel rank %d of %d", ErrConfig, t.Rank, t.Size)
	}
	if t.SP && t.Size == 1 {
		return fmt.Errorf("%w: sequence parallelism needs tensor parallelism (tp > 1)", ErrConfig)
	}
	return nil
}

// split is the Split of a parameter of shape full cut along dim into
// blocks blocks of t.Size pieces each, this shard's piece.
func (t TP) split(full []int, dim, blocks int) Split {
	return Split{Full: append([]int(nil), full...), Dim: dim, Blocks: blocks, Parts: t.Size, Index: t.Rank}
}

// TPReduce is how TPGroup.AllReduce combines the shards' values.
type TPReduce uint8

const (
	// TPSum adds them.
	TPSum TPReduce = iota
	// TPMax keeps the largest.
	TPMax
)

// TPGroup is the tensor-parallel group a sharded model's layers exchange
// activations with: Size shards, every one calling the same operations in
// the same order, as with NCCL. Each call returns when its operation is
// complete on this shard. After a failure the group keeps the error, does
// nothing on later calls (their outputs hold garbage) and its owner fails
// the whole pass.
type TPGroup interface {
	// Rank is this shard's index in the group, Size the group's size.
	Rank() int
	Size() int
	// AllReduce replaces x on every shard with the elementwise sum (or
	// maximum) over the group; every shard ends with the same bits.
	AllReduce(x kernels.Buffer, op TPReduce)
	// ReduceScatter sums x over the group and leaves this shard's chunk of
	// the sum in dst: x is Size equal chunks of dst.Len() values, and shard
	// r gets chunk r. x's contents are undefined afterwards.
	ReduceScatter(dst, x kernels.Buffer)
	// AllGather fills dst (Size chunks of x.Len() values) with every
	// shard's x, shard r's as chunk r.
	AllGather(dst, x kernels.Buffer)
}

// group returns the context's tensor-parallel group, which a sharded layer
// cannot run without.
func (c *Ctx) group() TPGroup {
	if c.TP == nil {
		panic("nn: a tensor-parallel layer ran without Ctx.TP")
	}
	return c.TP
}

// allGatherRows returns a new buffer with every shard's rows of x, in
// shard order (x stays the caller's).
func allGatherRows(c *Ctx, x Act) Act {
	g := c.group()
	full := c.Pool.Get(g.Size() * x.Rows * x.Cols)
	g.AllGather(full, x.X)
	return Act{X: full, Rows: g.Size() * x.Rows, Cols: x.Cols}
}

// reduceScatterRows sums x over the group and returns this shard's rows of
// the sum in a new buffer; x goes back to the pool.
func reduceScatterRows(c *Ctx, x Act) Act {
	g := c.group()
	if x.Rows%g.Size() != 0 {
		panic(fmt.Sprintf("nn: %d rows cannot be split among %d sequence-parallel shards", x.Rows, g.Size()))
	}
	rows := x.Rows / g.Size()
	part := c.Pool.Get(rows * x.Cols)
	g.ReduceScatter(part, x.X)
	c.Pool.Put(x.X)
	return Act{X: part, Rows: rows, Cols: x.Cols}
}

// CopyToTP is Megatron-LM's f operator, placed before a column-parallel
// region: the identity forward, an all-reduce of the input's gradient
// backward (each shard's region saw the whole input and contributes a
// part of its gradient).
type CopyToTP struct{}

// Params implements Layer.
func (CopyToTP) Params() []*Param { return nil }

// Forward implements Layer.
func (CopyToTP) Forward(_ *Ctx, x Act) Act { return x }

// Backward implements Layer.
func (CopyToTP) Backward(c *Ctx, dy Act) Act {
	c.group().AllReduce(dy.X, TPSum)
	return dy
}

// ReduceFromTP is Megatron-LM's g operator, placed after a row-parallel
// region: an all-reduce of the shards' partial sums forward, the identity
// backward (every shard's partial sum gets the whole gradient).
type ReduceFromTP struct{}

// Params implements Layer.
func (ReduceFromTP) Params() []*Param { return nil }

// Forward implements Layer.
func (ReduceFromTP) Forward(c *Ctx, x Act) Act {
	c.group().AllReduce(x.X, TPSum)
	return x
}

// Backward implements Layer.
func (ReduceFromTP) Backward(_ *Ctx, dy Act) Act { return dy }

// GatherFromSeq replaces CopyToTP with sequence parallelism: the shards'
// row slices are all-gathered into the whole activation forward, and the
// whole gradient is reduce-scattered back into row slices backward.
type GatherFromSeq struct{}

// Params implements Layer.
func (GatherFromSeq) Params() []*Param { return nil }

// Forward implements Layer.
func (GatherFromSeq) Forward(c *Ctx, x Act) Act {
	full := allGatherRows(c, x)
	c.Pool.Put(x.X)
	return full
}

// Backward implements Layer.
func (GatherFromSeq) Backward(c *Ctx, dy Act) Act { return reduceScatterRows(c, dy) }

// ScatterToSeq replaces ReduceFromTP with sequence parallelism: the
// shards' partial sums are reduce-scattered into row slices forward, and
// the slices' gradients all-gathered backward.
type ScatterToSeq struct{}

// Params implements Layer.
func (ScatterToSeq) Params() []*Param { return nil }

// Forward implements Layer.
func (ScatterToSeq) Forward(c *Ctx, x Act) Act { return reduceScatterRows(c, x) }

// Backward implements Layer.
func (ScatterToSeq) Backward(c *Ctx, dy Act) Act {
	full := allGatherRows(c, dy)
	c.Pool.Put(dy.X)
	return full
}

// ColumnParallel runs a Linear that holds a slice of the outputs (rows of
// W and of the bias) of a wider layer: CopyToTP, then the Linear. With
// sequence parallelism its input is a row slice, gathered for the product;
// only the slice is kept for the backward pass, which gathers it again
// (Megatron-LM's choice: activation memory over one more all-gather).
type ColumnParallel struct {
	L  *Linear
	SP bool
}

// Params implements Layer.
func (l *ColumnParallel) Params() []*Param { return l.L.Params() }

// Forward implements Layer.
func (l *ColumnParallel) Forward(c *Ctx, x Act) Act {
	if !l.SP {
		return l.L.Forward(c, CopyToTP{}.Forward(c, x))
	}
	full := allGatherRows(c, x)
	y := l.L.product(c, full, true)
	c.Pool.Put(full.X)
	c.save(x.X)
	return y
}

// Backward implements Layer.
func (l *ColumnParallel) Backward(c *Ctx, dy Act) Act {
	if !l.SP {
		dx := l.L.Backward(c, dy)
		if l.L.SkipInputGrad {
			return dx
		}
		return CopyToTP{}.Backward(c, dx)
	}
	part := c.pop()
	full := allGatherRows(c, Act{X: part, Rows: dy.Rows / c.group().Size(), Cols: l.L.In})
	c.Pool.Put(part)
	d := c.operand(dy.X)
	l.L.weightGrads(c, dy.X, d, dy.Rows, full.X, true)
	dx := l.L.inputGrad(c, d, dy.Rows, full.X)
	c.release(dy.X, d)
	c.Pool.Put(dy.X)
	return reduceScatterRows(c, Act{X: dx, Rows: full.Rows, Cols: full.Cols})
}

// RowParallel runs a Linear that holds a slice of the inputs (columns of
// W) of a wider layer: the product, ReduceFromTP (or ScatterToSeq with
// sequence parallelism), then the bias, which every shard holds whole.
// The Linear's own Bias is that replicated bias.
type RowParallel struct {
	L  *Linear
	SP bool
}

// Params implements Layer.
func (l *RowParallel) Params() []*Param { return l.L.Params() }

// Forward implements Layer.
func (l *RowParallel) Forward(c *Ctx, x Act) Act {
	x.X = c.lower(x.X)
	y := l.L.product(c, x, false)
	c.keep(x.X)
	if l.SP {
		y = ScatterToSeq{}.Forward(c, y)
	} else {
		y = ReduceFromTP{}.Forward(c, y)
	}
	if l.L.Bias != nil {
		c.Be.AddBias(y.X, l.L.Bias.W)
	}
	return y
}

// Backward implements Layer.
func (l *RowParallel) Backward(c *Ctx, dy Act) Act {
	if l.L.Bias != nil {
		c.Be.SumRows(l.L.Bias.G, dy.X)
		c.GradDone(l.L.Bias)
	}
	if l.SP {
		dy = ScatterToSeq{}.Backward(c, dy)
	} else {
		dy = ReduceFromTP{}.Backward(c, dy)
	}
	x := c.Tape.Pop()
	d := c.operand(dy.X)
	l.L.weightGrads(c, dy.X, d, dy.Rows, x, false)
	dx := l.L.inputGrad(c, d, dy.Rows, x)
	c.release(dy.X, d)
	c.Pool.Put(dy.X)
	return Act{X: dx, Rows: dy.Rows, Cols: l.L.In}
}

// VocabParallelCrossEntropy is CrossEntropy over logits split by
// vocabulary: logits holds columns [lo, lo+Cols) of the whole, of which
// the first valid are real (the rest pad a vocabulary the group size does
// not divide). Its only communication is three all-reduces of one value
// per row: the row maximum, the target's shifted logit and the sum of
// exponentials. Every shard returns the same loss sum and the gradient of
// its own columns. It takes ownership of logits.X.
func VocabParallelCrossEntropy(c *Ctx, logits Act, targets kernels.Index, gradScale float32, lo, valid int) (sum float64, dlogits Act) {
	g, be, rows := c.group(), c.Be, logits.Rows
	mx, sumExp, picked := c.Pool.Get(rows), c.Pool.Get(rows), c.Pool.Get(rows)
	be.RowMax(mx, logits.X, valid)
	g.AllReduce(mx, TPMax)
	be.ShardLogitStats(sumExp, picked, logits.X, mx, targets, lo, valid)
	g.AllReduce(picked, TPSum)
	g.AllReduce(sumExp, TPSum)
	losses := c.Pool.Get(rows)
	var d kernels.Buffer
	if c.Train {
		d = c.Pool.Get(rows * logits.Cols)
	}
	be.ShardCrossEntropy(losses, d, logits.X, mx, sumExp, picked, targets, lo, valid, gradScale)
	sum = be.Sum(losses)
	for _, b := range []kernels.Buffer{mx, sumExp, picked, losses, logits.X} {
		c.Pool.Put(b)
	}
	if !c.Train {
		return sum, Act{}
	}
	return sum, Act{X: d, Rows: rows, Cols: logits.Cols}
}

// newColumn registers a Linear in → out whose outputs t cuts into
// t.Size slices, this shard's slice, the output dimension seen as blocks
// equal blocks each cut alike (3 for a fused qkv). The weight is drawn
// from wInit and the bias from bInit, as slices of the whole layer's.
func newColumn(s *ParamSet, prefix string, in, out, blocks int, t TP, wInit, bInit Init) *Linear {
	if !t.On() {
		l := NewLinear(s, prefix, in, out, true)
		l.Weight.init, l.Bias.init = wInit, bInit
		return l
	}
	l := &Linear{In: in, Out: out / t.Size}
	l.Weight = s.AddShard(prefix+".weight", t.split([]int{out, in}, 0, blocks), wInit)
	l.Bias = s.AddShard(prefix+".bias", t.split([]int{out}, 0, blocks), bInit)
	return l
}

// newRow registers a Linear in → out whose inputs t cuts into t.Size
// slices, this shard's slice; the bias is whole on every shard (a partial
// gradient with sequence parallelism).
func newRow(s *ParamSet, prefix string, in, out int, t TP, wInit, bInit Init) *Linear {
	if !t.On() {
		l := NewLinear(s, prefix, in, out, true)
		l.Weight.init, l.Bias.init = wInit, bInit
		return l
	}
	l := &Linear{In: in / t.Size, Out: out}
	l.Weight = s.AddShard(prefix+".weight", t.split([]int{out, in}, 1, 1), wInit)
	l.Bias = s.Add(prefix+".bias", []int{out}, bInit)
	l.Bias.PartialGrad = t.SP
	return l
}

// columnLayer and rowLayer run l as its place t says: a plain Linear, or
// column- or row-parallel.
func columnLayer(l *Linear, t TP) Layer {
	if !t.On() {
		return l
	}
	return &ColumnParallel{L: l, SP: t.SP}
}

func rowLayer(l *Linear, t TP) Layer {
	if !t.On() {
		return l
	}
	return &RowParallel{L: l, SP: t.SP}
}
