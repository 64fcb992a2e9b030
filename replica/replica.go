package replica

import (
	"fmt"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
)

// Replica is a model, its optimizer and the buffers to feed it.
//
// Threading: owned by one goroutine (a Worker actor's), like its backend.
type Replica struct {
	Be    kernels.Backend
	Model *nn.Model
	Opt   optim.Optimizer
	Pool  *nn.Pool
	ctx   *nn.Ctx

	ids, tgt kernels.Index
}

// New wraps a model and its optimizer.
func New(m *nn.Model, opt optim.Optimizer) *Replica {
	be := m.Set.Backend()
	pool := nn.NewPool(be)
	return &Replica{Be: be, Model: m, Opt: opt, Pool: pool, ctx: nn.NewCtx(be, pool)}
}

// Targets is the number of loss terms in rows [lo, hi) of b: one per row
// for a classifier, one per token for a language model (ignored targets,
// negative, excluded).
func Targets(b *data.Batch, lo, hi int, m *nn.Model) int {
	per := 1
	if m.Context > 0 { // a language model: one target per token
		per = m.Context
	}
	n := 0
	for _, y := range b.Y[lo*per : hi*per] {
		if y >= 0 {
			n++
		}
	}
	return n
}

// Result is what one forward (and backward) pass over some rows gives.
type Result struct {
	// LossSum is the sum of the per-target losses.
	LossSum float64
	// Targets is the number of loss terms.
	Targets int
	// Correct counts rows whose arg-max logit is the target (classifiers).
	Correct int
}

// input uploads rows [lo, hi) of b and returns the model's input and the
// targets on the device.
func (r *Replica) input(b *data.Batch, lo, hi int) (nn.Act, kernels.Index, error) {
	m := r.Model
	rows := hi - lo
	if lo < 0 || hi > b.Rows || rows <= 0 {
		return nn.Act{}, nil, fmt.Errorf("replica: rows [%d, %d) outside a batch of %d", lo, hi, b.Rows)
	}
	switch m.Input {
	case nn.DenseInput:
		f := len(b.X) / b.Rows
		if f != m.Features {
			return nn.Act{}, nil, fmt.Errorf("replica: data has %d features per row, %s wants %d", f, m.Name, m.Features)
		}
		x := r.Pool.Get(rows * f)
		r.Be.Upload(x, b.X[lo*f:hi*f])
		return nn.Act{X: x, Rows: rows, Cols: f}, r.targets(b.Y[lo:hi]), nil
	default:
		t := m.Context
		if len(b.Tokens) != b.Rows*t {
			return nn.Act{}, nil, fmt.Errorf("replica: data has %d tokens per row, %s wants context %d", len(b.Tokens)/b.Rows, m.Name, t)
		}
		n := rows * t
		if r.ids == nil || r.ids.Len() != n {
			if r.ids != nil {
				r.Be.FreeIndex(r.ids)
			}
			r.ids = r.Be.AllocIndex(n)
		}
		r.Be.UploadIndex(r.ids, b.Tokens[lo*t:hi*t])
		return nn.Act{Ids: r.ids, Rows: n}, r.targets(b.Y[lo*t : hi*t]), nil
	}
}

func (r *Replica) targets(y []int32) kernels.Index {
	if r.tgt == nil || r.tgt.Len() != len(y) {
		if r.tgt != nil {
			r.Be.FreeIndex(r.tgt)
		}
		r.tgt = r.Be.AllocIndex(len(y))
	}
	r.Be.UploadIndex(r.tgt, y)
	return r.tgt
}

// ForwardBackward runs rows [lo, hi) of b through the model and accumulates
// the gradient of gradScale·(sum of losses) into the parameters' gradients
// (which the caller zeroes at the start of an optimizer step). onGradReady,
// when not nil, is called for each parameter as soon as its gradient is final.
func (r *Replica) ForwardBackward(b *data.Batch, lo, hi int, gradScale float32, onGradReady func(*nn.Param)) (Result, error) {
	in, tgt, err := r.input(b, lo, hi)
	if err != nil {
		return Result{}, err
	}
	c := r.ctx
	c.Train = true
	c.OnGradReady = onGradReady
	logits := nn.Forward(c, r.Model.Layers, in)
	res := Result{Targets: Targets(b, lo, hi, r.Model)}
	if r.Model.Input == nn.DenseInput {
		res.Correct = r.Be.ArgmaxCorrect(logits.X, tgt)
	}
	sum, d := nn.CrossEntropy(c, logits, tgt, gradScale)
	res.LossSum = sum
	nn.Backward(c, r.Model.Layers, d)
	c.OnGradReady = nil
	return res, r.Be.Sync()
}

// Evaluate runs rows [lo, hi) of b forward only.
func (r *Replica) Evaluate(b *data.Batch, lo, hi int) (Result, error) {
	in, tgt, err := r.input(b, lo, hi)
	if err != nil {
		return Result{}, err
	}
	c := r.ctx
	c.Train = false
	defer func() { c.Train = true }()
	logits := nn.Forward(c, r.Model.Layers, in)
	res := Result{Targets: Targets(b, lo, hi, r.Model)}
	if r.Model.Input == nn.DenseInput {
		res.Correct = r.Be.ArgmaxCorrect(logits.X, tgt)
	}
	res.LossSum, _ = nn.CrossEntropy(c, logits, tgt, 0)
	return res, r.Be.Sync()
}

// ZeroGrads clears the gradients before a new optimizer step.
func (r *Replica) ZeroGrads() { r.Model.Set.ZeroGrads() }

// Update clips the gradients to maxNorm (≤ 0: no clipping) and applies one
// optimizer step with learning rate lr. It returns the gradient norm before
// clipping (0 when not clipping, to spare the reduction).
func (r *Replica) Update(lr float64, maxNorm float64) (float64, error) {
	var norm float64
	if maxNorm > 0 {
		norm = optim.ClipGradNorm(r.Model.Set, maxNorm)
	}
	r.Opt.Step(float32(lr))
	return norm, r.Be.Sync()
}
