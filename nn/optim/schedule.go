package optim

import (
	"fmt"
	"math"
)

// Schedule is a learning-rate schedule: linear warm-up from 0 to Base over
// Warmup steps, then constant, or cosine decay to Base·MinFactor at Total
// steps (nanoGPT's get_lr).
type Schedule struct {
	// Base is the peak learning rate.
	Base float64
	// Kind is "constant" or "cosine".
	Kind string
	// Warmup is the number of warm-up steps (0: none).
	Warmup int
	// Total is the step at which cosine decay reaches its floor.
	Total int
	// MinFactor is the floor as a fraction of Base (cosine only).
	MinFactor float64
}

// Validate checks the schedule.
func (s Schedule) Validate() error {
	if s.Base <= 0 || math.IsNaN(s.Base) || math.IsInf(s.Base, 0) {
		return fmt.Errorf("%w: learning rate must be a positive number, got %v", ErrConfig, s.Base)
	}
	if s.Warmup < 0 {
		return fmt.Errorf("%w: warm-up steps must be ≥ 0, got %d", ErrConfig, s.Warmup)
	}
	switch s.Kind {
	case "constant":
	case "cosine":
		if s.MinFactor < 0 || s.MinFactor > 1 {
			return fmt.Errorf("%w: cosine floor factor must be in [0, 1], got %v", ErrConfig, s.MinFactor)
		}
	default:
		return fmt.Errorf("%w: unknown LR schedule %q (want constant or cosine)", ErrConfig, s.Kind)
	}
	return nil
}

// LR is the learning rate for the 0-based optimizer step.
func (s Schedule) LR(step int) float64 {
	if s.Warmup > 0 && step < s.Warmup {
		return s.Base * float64(step+1) / float64(s.Warmup)
	}
	if s.Kind != "cosine" || s.Total <= s.Warmup {
		return s.Base
	}
	if step >= s.Total {
		return s.Base * s.MinFactor
	}
	ratio := float64(step-s.Warmup) / float64(s.Total-s.Warmup)
	coeff := 0.5 * (1 + math.Cos(math.Pi*ratio))
	return s.Base * (s.MinFactor + coeff*(1-s.MinFactor))
}

// LinearScaling is the linear LR-scaling rule (Goyal et al.): keeping the
// per-rank batch while the world goes from oldWorld to newWorld ranks
// multiplies the learning rate by newWorld/oldWorld.
func LinearScaling(lr float64, oldWorld, newWorld int) float64 {
	if oldWorld <= 0 {
		return lr
	}
	return lr * float64(newWorld) / float64(oldWorld)
}
