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

// State is one named optimizer buffer, flat over the parameter set, so a
// checkpoint can store it and a resharded load can slice it.
type State struct {
	// Name is the torch state key: momentum_buffer, exp_avg, exp_avg_sq.
	Name string
	Buf  kernels.Buffer
}

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
	if err := c.Validate(); err != nil {
		return nil, err
	}
	be := s.Backend()
	switch c.Name {
	case "sgd":
		o := &sgd{set: s, cfg: c}
		if c.Momentum != 0 {
			o.buf = be.Alloc(s.Len())
		}
		return o, nil
	default:
		return &adamw{set: s, cfg: c, m: be.Alloc(s.Len()), v: be.Alloc(s.Len())}, nil
	}
}

type sgd struct {
	set *nn.ParamSet
	cfg Config
	buf kernels.Buffer
	t   int
}

func (o *sgd) Step(lr float32) {
	h := kernels.SGDHyper{LR: lr, Momentum: o.cfg.Momentum, Dampening: o.cfg.Dampening, WeightDecay: o.cfg.WeightDecay, Nesterov: o.cfg.Nesterov}
	o.set.Backend().SGDStep(o.set.Weights(), o.set.Grads(), o.buf, h, o.t == 0)
	o.t++
}

func (o *sgd) Steps() int     { return o.t }
func (o *sgd) SetSteps(n int) { o.t = n }
func (o *sgd) Config() Config { return o.cfg }
func (o *sgd) States() []State {
	if o.buf == nil {
		return nil
	}
	return []State{{Name: "momentum_buffer", Buf: o.buf}}
}

type adamw struct {
	set  *nn.ParamSet
	cfg  Config
	m, v kernels.Buffer
	t    int
}

func (o *adamw) Step(lr float32) {
	o.t++
	h := kernels.AdamWHyper{LR: lr, Beta1: o.cfg.Beta1, Beta2: o.cfg.Beta2, Eps: o.cfg.Eps, WeightDecay: o.cfg.WeightDecay}
	o.set.Backend().AdamWStep(o.set.Weights(), o.set.Grads(), o.m, o.v, h, o.t)
}

func (o *adamw) Steps() int     { return o.t }
func (o *adamw) SetSteps(n int) { o.t = n }
func (o *adamw) Config() Config { return o.cfg }
func (o *adamw) States() []State {
	return []State{{Name: "exp_avg", Buf: o.m}, {Name: "exp_avg_sq", Buf: o.v}}
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
