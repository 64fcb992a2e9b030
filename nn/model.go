package nn

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// InputKind says what a model (or a pipeline stage of one) reads.
type InputKind int

const (
	// DenseInput is a [rows, features] float matrix.
	DenseInput InputKind = iota
	// TokenInput is [batch, context] token ids.
	TokenInput
	// ActInput is the previous pipeline stage's [rows, cols] activations.
	ActInput
)

// Targets are a micro-batch's targets on the backend: one class id per
// output row (Ids; negative: ignored), or Cols real values per output row
// (Values, a regression dataset's).
type Targets struct {
	Ids    kernels.Index
	Values kernels.Buffer
	Cols   int
}

// Model is a model built from a Spec, or the contiguous range of units
// [Lo, Hi) of one that a pipeline stage holds, or a tensor-parallel shard
// of that: its parameters and its layers in order. When Hi is the last
// unit, the last layer's output goes to the Objective.
type Model struct {
	// Name is the registered name of the Spec.
	Name string
	Spec Spec
	// Input is what the first layer reads.
	Input  InputKind
	Set    *ParamSet
	Layers []Layer
	// Lo and Hi are the units held, of Units.
	Lo, Hi, Units int
	// InCols is the width of an ActInput; OutCols the width of the output
	// (the shard's logit columns on the last stage).
	InCols, OutCols int
	// Classes is the number of logits per row (classes, or vocabulary).
	Classes int
	// Features is a DenseInput's width.
	Features int
	// Context is a TokenInput's sequence length (0 for dense models): the
	// output rows of a sample.
	Context int
	// Tied is a tied parameter of which this stage holds only one use (a
	// token embedding whose LM head is on another stage): its gradient is
	// summed with the stage holding the other use before the update
	// (Megatron-LM's embedding group).
	Tied *Param
	// TP is the model's tensor-parallel place (NoTP: whole layers).
	TP TP
	// Objective is the loss of the last stage's output (nil: CrossEntropy).
	Objective Objective
	// Accuracy says the outputs are class scores whose argmax the trainer
	// counts as correct or not (a classifier; off for a language model).
	Accuracy bool
	// Describe is a one-line summary of the shape.
	Describe string
}

// Loss is the Objective's loss of the last layer's output against targets.
func (m *Model) Loss(c *Ctx, out Act, targets Targets, gradScale float32) (float64, Act) {
	if m.Objective == nil {
		return CrossEntropy(c, out, targets.Ids, gradScale)
	}
	return m.Objective.Loss(c, out, targets, gradScale)
}

// BoundaryRows is the number of activation rows that cross a pipeline
// boundary of this model for a micro-batch of rows rows (tokens of a
// sequence model): a sequence-parallel shard holds 1/TP.Size of them.
func (m *Model) BoundaryRows(rows int) int {
	if m.TP.SP {
		return rows / m.TP.Size
	}
	return rows
}

// First reports whether the model reads the data (holds unit 0).
func (m *Model) First() bool { return m.Lo == 0 }

// Last reports whether the model produces the output the loss reads.
func (m *Model) Last() bool { return m.Hi == m.Units }

// Build makes units [lo, hi) of the model spec on be. Every parameter gets
// the weights it has in the whole model built with the same seed.
func Build(be kernels.Backend, spec Spec, seed uint64, lo, hi int) (*Model, error) {
	return BuildShard(be, spec, seed, lo, hi, NoTP)
}

// BuildWhole makes the whole model spec on be.
func BuildWhole(be kernels.Backend, spec Spec, seed uint64) (*Model, error) {
	return Build(be, spec, seed, 0, spec.Units())
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

// Describe is the whole model's one-line summary with its parameter
// count (Model.Describe), without allocating its weights.
func Describe(spec Spec) (string, error) {
	if spec == nil {
		return "", fmt.Errorf("%w: no model", ErrConfig)
	}
	m, err := plan(nil, spec, 0, 0, spec.Units(), NoTP)
	if err != nil {
		return "", err
	}
	return m.Describe, nil
}

// plan builds the model's layers and registers its parameters.
func plan(be kernels.Backend, spec Spec, seed uint64, lo, hi int, tp TP) (*Model, error) {
	if spec == nil {
		return nil, fmt.Errorf("%w: no model", ErrConfig)
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := tp.Validate(); err != nil {
		return nil, err
	}
	if tp.On() {
		if err := spec.CheckTP(tp); err != nil {
			return nil, err
		}
	}
	units := spec.Units()
	if lo < 0 || hi > units || lo >= hi {
		return nil, fmt.Errorf("%w: units [%d, %d) of a %s with %d", ErrConfig, lo, hi, spec.Name(), units)
	}
	m := &Model{Name: spec.Name(), Spec: spec, Set: NewParamSet(be, seed), Lo: lo, Hi: hi, Units: units, TP: tp}
	if err := spec.Build(m); err != nil {
		return nil, err
	}
	if m.Lo > 0 {
		m.Input = ActInput
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

// CheckTPOf is spec.CheckTP for the place t, after checking t itself; a
// place that is not sharded fits every model.
func CheckTPOf(spec Spec, t TP) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if !t.On() {
		return nil
	}
	return spec.CheckTP(t)
}
