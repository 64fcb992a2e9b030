package nn

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// Ctx is what a layer needs to run one micro-batch: the backend, the
// activation pool, the micro-batch's tape, and the gradient-ready hook.
type Ctx struct {
	Be   kernels.Backend
	Pool *Pool
	Tape *Tape
	// Train is false for evaluation: layers then save nothing for backward
	// (their intermediate buffers go straight back to the pool).
	Train bool
	// OnGradReady, when set, is called once per parameter as soon as its
	// gradient for this backward pass is final (all its Uses contributed):
	// the hook that starts a gradient bucket's all-reduce while the rest of
	// the backward pass goes on.
	OnGradReady func(p *Param)
	// TP is the tensor-parallel group of a sharded model (nil otherwise).
	TP      TPGroup
	pending map[*Param]int
	// low is the compute type of mixed precision (F32: off; see
	// SetPrecision), lp the backend's kernels for it.
	low kernels.DType
	lp  kernels.LowPrecision
}

// SetPrecision makes the context compute in dt (kernels.BF16 or F16) with
// fp32 master weights, or in fp32 (kernels.F32, the default): GEMMs take
// their operands in dt (the weights' compute copies, Param.Low, and the
// activations rounded to dt) and accumulate in fp32; the activations
// saved for the backward pass are kept in dt (half the memory), and
// widened where an fp32 kernel needs them; LayerNorm, the activation
// functions, softmax and the loss compute in fp32.
func (c *Ctx) SetPrecision(dt kernels.DType) error {
	if dt == kernels.F32 {
		c.low, c.lp = dt, nil
		return nil
	}
	lp, ok := kernels.LowPrecisionOf(c.Be)
	if !ok || !dt.Low() {
		return fmt.Errorf("%w: the %s backend cannot compute in %v", ErrConfig, c.Be.Caps().Device, dt)
	}
	c.low, c.lp = dt, lp
	return nil
}

// Precision is the compute type (kernels.F32 without mixed precision).
func (c *Ctx) Precision() kernels.DType { return c.low }

// lower returns b in the compute type: b itself, or a copy rounded to it
// (b goes back to the pool).
func (c *Ctx) lower(b kernels.Buffer) kernels.Buffer {
	l := c.operand(b)
	if kernels.DTypeOf(l) != kernels.DTypeOf(b) {
		c.Pool.Put(b)
	}
	return l
}

// operand returns b as a GEMM operand in the compute type: b itself, or a
// rounded copy from the pool that release gives back (b stays).
func (c *Ctx) operand(b kernels.Buffer) kernels.Buffer {
	if c.low == kernels.F32 || kernels.DTypeOf(b) == c.low {
		return b
	}
	l := c.Pool.GetAs(b.Len(), c.low)
	c.lp.Convert(l, b)
	return l
}

// release gives back an operand made from orig.
func (c *Ctx) release(orig, op kernels.Buffer) {
	if kernels.DTypeOf(op) != kernels.DTypeOf(orig) {
		c.Pool.Put(op)
	}
}

// widen returns b in fp32: b itself, or a widened copy (b goes back to
// the pool).
func (c *Ctx) widen(b kernels.Buffer) kernels.Buffer {
	if kernels.DTypeOf(b) == kernels.F32 {
		return b
	}
	w := c.Pool.Get(b.Len())
	c.lp.Convert(w, b)
	c.Pool.Put(b)
	return w
}

// weight is p's weights as a GEMM operand: its compute copy under mixed
// precision, else W.
func (c *Ctx) weight(p *Param) kernels.Buffer {
	if c.low == kernels.F32 {
		return p.W
	}
	if p.Low == nil || kernels.DTypeOf(p.Low) != c.low {
		panic(fmt.Sprintf("nn: %s has no %v compute copy (RefreshLow)", p.Name, c.low))
	}
	return p.Low
}

// pop returns the last saved buffer in fp32 (widened if it was saved in
// the compute type).
func (c *Ctx) pop() kernels.Buffer { return c.widen(c.Tape.Pop()) }

// NewCtx returns a training context with its own tape.
func NewCtx(be kernels.Backend, pool *Pool) *Ctx {
	return &Ctx{Be: be, Pool: pool, Tape: &Tape{}, Train: true}
}

// save pushes buffers on the tape when training (in the compute type:
// activations), or returns them to the pool when evaluating.
func (c *Ctx) save(bs ...kernels.Buffer) {
	for _, b := range bs {
		c.keep(c.lower(b))
	}
}

// keep pushes a buffer on the tape as it is when training (small fp32
// statistics, or a buffer already in the compute type), or returns it to
// the pool when evaluating.
func (c *Ctx) keep(b kernels.Buffer) {
	if c.Train {
		c.Tape.Push(b)
		return
	}
	c.Pool.Put(b)
}

// saveIndex keeps an index buffer for backward when training.
func (c *Ctx) saveIndex(x kernels.Index) {
	if c.Train {
		c.Tape.PushIndex(x)
	}
}

// GradDone tells the context that a layer finished its contribution to
// p's gradient in this backward pass.
func (c *Ctx) GradDone(ps ...*Param) {
	if c.OnGradReady == nil {
		return
	}
	for _, p := range ps {
		if p.Uses <= 1 {
			c.OnGradReady(p)
			continue
		}
		if c.pending == nil {
			c.pending = map[*Param]int{}
		}
		n, ok := c.pending[p]
		if !ok {
			n = p.Uses
		}
		n--
		if n == 0 {
			delete(c.pending, p)
			c.OnGradReady(p)
		} else {
			c.pending[p] = n
		}
	}
}
