package nn

import "github.com/troupe-ml/troupe/kernels"

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
}

// NewCtx returns a training context with its own tape.
func NewCtx(be kernels.Backend, pool *Pool) *Ctx {
	return &Ctx{Be: be, Pool: pool, Tape: &Tape{}, Train: true}
}

// save pushes buffers on the tape when training, or returns them to the
// pool when evaluating.
func (c *Ctx) save(bs ...kernels.Buffer) {
	if c.Train {
		c.Tape.Push(bs...)
		return
	}
	for _, b := range bs {
		c.Pool.Put(b)
	}
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
