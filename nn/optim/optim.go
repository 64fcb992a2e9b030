package optim

import (
	"fmt"
	"math"
	"strings"

	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
)

// ErrConfig reports invalid optimizer settings.
var ErrConfig = failure.New(failure.Config, "optim: invalid config")

// Config selects and tunes an optimizer. Zero values take torch's defaults
// (see DefaultConfig).
type Config struct {
	// Name is "sgd" or "adamw".
	Name string
	// Momentum and Dampening are SGD's; Nesterov uses Nesterov momentum.
	Momentum, Dampening float32
	Nesterov            bool
	// Beta1, Beta2 and Eps are AdamW's.
	Beta1, Beta2, Eps float32
	// WeightDecay: SGD adds wd·p to the gradient; AdamW decays decoupled.
	WeightDecay float32
}

// DefaultConfig returns torch's defaults for the named optimizer: AdamW
// betas (0.9, 0.999), eps 1e-8, weight decay 0.01; SGD no momentum.
func DefaultConfig(name string) Config {
	c := Config{Name: strings.ToLower(name)}
	if c.Name == "adamw" {
		c.Beta1, c.Beta2, c.Eps, c.WeightDecay = 0.9, 0.999, 1e-8, 0.01
	}
	return c
}

// Validate checks the settings.
func (c Config) Validate() error {
	switch c.Name {
	case "sgd":
		if c.Momentum < 0 || c.Dampening < 0 || c.WeightDecay < 0 {
			return fmt.Errorf("%w: SGD momentum, dampening and weight decay must be ≥ 0", ErrConfig)
		}
		if c.Nesterov && (c.Momentum <= 0 || c.Dampening != 0) {
			return fmt.Errorf("%w: Nesterov momentum needs momentum > 0 and zero dampening", ErrConfig)
		}
	case "adamw":
		if c.Beta1 < 0 || c.Beta1 >= 1 || c.Beta2 < 0 || c.Beta2 >= 1 {
			return fmt.Errorf("%w: AdamW betas must be in [0, 1), got %v, %v", ErrConfig, c.Beta1, c.Beta2)
		}
		if c.Eps <= 0 || c.WeightDecay < 0 {
			return fmt.Errorf("%w: AdamW eps must be > 0 and weight decay ≥ 0", ErrConfig)
		}
	default:
		return fmt.Errorf("%w: unknown optimizer %q (want sgd or adamw)", ErrConfig, c.Name)
	}
	return nil
}

// State is one named optimizer buffer: flat over the parameter set, or,
// for a sharded optimizer, over its Ranges of the set's flat buffers laid
// end to end, so a checkpoint can store it and a resharded load can slice
// it.
type State struct {
	// Name is the torch state key: momentum_buffer, exp_avg, exp_avg_sq.
	Name string
	Buf  kernels.Buffer
	// Ranges are the flat ranges of the parameter set the buffer holds, in
	// its order (nil: the whole set).
	Ranges []Range
}

// Range is the flat element range [Lo, Hi) of a parameter set's buffers.
type Range struct{ Lo, Hi int }

// Len is the number of elements.
func (r Range) Len() int { return r.Hi - r.Lo }

// Optimizer updates a parameter set from its gradients.
//
// Threading: owned by the goroutine that owns the parameter set.
type Optimizer interface {
	// Step applies one update with learning rate lr.
	Step(lr float32)
	// Steps is the number of updates applied so far.
	Steps() int
	// SetSteps restores the update count (from a checkpoint).
	SetSteps(n int)
	// States lists the optimizer's buffers (empty for plain SGD).
	States() []State
	// Config is the optimizer's configuration.
	Config() Config
}

// New builds the configured optimizer over s.
func New(s *nn.ParamSet, c Config) (Optimizer, error) {
	return NewShard(s, c, nil)
}

// NewShard builds the configured optimizer over the flat ranges of s only
// (nil: all of s): its state buffers hold those elements, and Step updates
// only them, reading only their gradients. It is ZeRO's optimizer-state
// sharding: the ranks of a data-parallel group each update their own
// ranges. Every update is element-wise, so a shard's elements get exactly
// the whole optimizer's values. Ranges must be disjoint and inside s.
func NewShard(s *nn.ParamSet, c Config, ranges []Range) (Optimizer, error) {
	return NewShardWith(s, c, ranges, nil, nil)
}

// NewShardWith is NewShard reading the gradients of its ranges from grads
// and updating their weights in weights, where they lie end to end as the
// state buffers hold them, instead of in the set's buffers (ZeRO-2 keeps
// only those gradients, ZeRO-3 those weights too); nil takes the set's.
func NewShardWith(s *nn.ParamSet, c Config, ranges []Range, grads, weights kernels.Buffer) (Optimizer, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	n := s.Len()
	if ranges != nil {
		n = 0
		for i, r := range ranges {
			if r.Lo < 0 || r.Hi > s.Len() || r.Lo > r.Hi {
				return nil, fmt.Errorf("%w: range %d [%d, %d) outside the %d parameters", ErrConfig, i, r.Lo, r.Hi, s.Len())
			}
			n += r.Len()
		}
	}
	for _, b := range []kernels.Buffer{grads, weights} {
		if b != nil && (ranges == nil || b.Len() != n) {
			return nil, fmt.Errorf("%w: a buffer of %d values for ranges of %d", ErrConfig, b.Len(), n)
		}
	}
	be := s.Backend()
	b := base{set: s, cfg: c, ranges: ranges, grads: grads, weights: weights}
	switch c.Name {
	case "sgd":
		o := &sgd{base: b}
		if c.Momentum != 0 {
			o.buf = be.Alloc(n)
		}
		return o, nil
	default:
		return &adamw{base: b, m: be.Alloc(n), v: be.Alloc(n)}, nil
	}
}

// base is what both optimizers share: the set, the ranges they update and
// the step count.
type base struct {
	set    *nn.ParamSet
	cfg    Config
	ranges []Range
	grads  kernels.Buffer // the ranges' gradients end to end (nil: the set's)
	// weights holds the ranges' weights end to end (nil: the set's).
	weights kernels.Buffer
	t       int
}

func (o *base) Steps() int     { return o.t }
func (o *base) SetSteps(n int) { o.t = n }
func (o *base) Config() Config { return o.cfg }

// each calls f with views of the weights and gradients of every range and
// the offset of its elements in the state buffers.
func (o *base) each(f func(w, g kernels.Buffer, off, n int)) {
	if o.ranges == nil {
		f(o.set.Weights(), o.set.Grads(), 0, o.set.Len())
		return
	}
	be, off := o.set.Backend(), 0
	for _, r := range o.ranges {
		if r.Len() > 0 {
			g, w := o.grads, o.weights
			if g == nil {
				g = be.View(o.set.Grads(), r.Lo, r.Len())
			} else {
				g = be.View(g, off, r.Len())
			}
			if w == nil {
				w = be.View(o.set.Weights(), r.Lo, r.Len())
			} else {
				w = be.View(w, off, r.Len())
			}
			f(w, g, off, r.Len())
		}
		off += r.Len()
	}
}

// state is a state buffer's view for a range (the buffer itself for the
// whole set).
func (o *base) state(buf kernels.Buffer, off, n int) kernels.Buffer {
	if buf == nil || o.ranges == nil {
		return buf
	}
	return o.set.Backend().View(buf, off, n)
}

type sgd struct {
	base
	buf kernels.Buffer
}

func (o *sgd) Step(lr float32) {
	h := kernels.SGDHyper{LR: lr, Momentum: o.cfg.Momentum, Dampening: o.cfg.Dampening, WeightDecay: o.cfg.WeightDecay, Nesterov: o.cfg.Nesterov}
	be := o.set.Backend()
	o.each(func(w, g kernels.Buffer, off, n int) { be.SGDStep(w, g, o.state(o.buf, off, n), h, o.t == 0) })
	o.t++
}

func (o *sgd) States() []State {
	if o.buf == nil {
		return nil
	}
	return []State{{Name: "momentum_buffer", Buf: o.buf, Ranges: o.ranges}}
}

type adamw struct {
	base
	m, v kernels.Buffer
}

func (o *adamw) Step(lr float32) {
	o.t++
	h := kernels.AdamWHyper{LR: lr, Beta1: o.cfg.Beta1, Beta2: o.cfg.Beta2, Eps: o.cfg.Eps, WeightDecay: o.cfg.WeightDecay}
	be := o.set.Backend()
	o.each(func(w, g kernels.Buffer, off, n int) {
		be.AdamWStep(w, g, o.state(o.m, off, n), o.state(o.v, off, n), h, o.t)
	})
}

func (o *adamw) States() []State {
	return []State{{Name: "exp_avg", Buf: o.m, Ranges: o.ranges}, {Name: "exp_avg_sq", Buf: o.v, Ranges: o.ranges}}
}

// ClipGradNorm scales every gradient of s so that their global L2 norm is
// at most maxNorm (torch.nn.utils.clip_grad_norm_) and returns the norm
// before clipping. maxNorm ≤ 0 only measures.
func ClipGradNorm(s *nn.ParamSet, maxNorm float64) float64 {
	be := s.Backend()
	norm := math.Sqrt(be.SumSquares(s.Grads()))
	if maxNorm > 0 && norm > maxNorm {
		be.Scale(s.Grads(), float32(maxNorm/(norm+1e-6)))
	}
	return norm
}
