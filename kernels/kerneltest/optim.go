package kerneltest

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// optimSize is large enough for a backend to split an optimizer step, and
// odd.
const optimSize = 1<<17 + 5

// optimSteps consecutive steps run per configuration. Each step is checked
// against the reference applied to the backend's own state before the step
// (downloaded), so errors do not compound and the tolerance stays that of
// one step, while the state the backend carries between steps (momentum
// buffer, m, v) is checked every step too.
const optimSteps = 4

// testSGDStep: plain, momentum (first step copies d into the buffer, as
// PyTorch does), dampening, Nesterov, each with and without weight decay.
// One step is about ten roundings, each relative to one of the terms:
// 16u·(|p| + lr·Σ|terms of d|) for p, 16u·Σ|terms| for the buffer.
func testSGDStep(s *suite) {
	hypers := []kernels.SGDHyper{
		{LR: 0.1},
		{LR: 0.05, WeightDecay: 0.01},
		{LR: 0.1, Momentum: 0.9},
		{LR: 0.01, Momentum: 0.9, Dampening: 0.1, WeightDecay: 5e-4},
		{LR: 0.1, Momentum: 0.9, Nesterov: true},
		{LR: 0.02, Momentum: 0.8, Nesterov: true, WeightDecay: 0.1},
	}
	for _, h := range hypers {
		for _, n := range []int{1, 33, optimSize} {
			s.run(fmt.Sprintf("%d/%+v", n, h), func(c *tcase) {
				p := c.randn(n, 0, 1)
				pb := c.up(p)
				var bb kernels.Buffer
				buf := make([]float32, n)
				if h.Momentum != 0 {
					// Garbage that a first step must overwrite.
					bb = c.up(c.randn(n, 5, 1))
				}
				for step := 1; step <= optimSteps; step++ {
					g := c.randn(n, 0, 1)
					wantP, wantB := make([]float64, n), make([]float64, n)
					magP, magB := make([]float64, n), make([]float64, n)
					for i := range p {
						wantP[i], wantB[i], magP[i], magB[i] = refSGD(float64(p[i]), float64(g[i]), float64(buf[i]), h, step == 1)
					}
					c.be.SGDStep(pb, c.up(g), bb, h, step == 1)
					p = c.down(pb)
					c.check(fmt.Sprintf("step %d p", step), p, wantP, rel(16, magP))
					if bb != nil {
						buf = c.down(bb)
						c.check(fmt.Sprintf("step %d buf", step), buf, wantB, rel(16, magB))
					}
					if c.Failed() {
						return
					}
				}
			})
		}
	}
}

// testAdamWStep: torch defaults, a high learning rate with other betas, and
// strong weight decay, over consecutive steps from t = 1 (where the bias
// corrections matter most). Gradients include exact zeros, for which m and v
// stay 0 on the first step and the update must be 0, not NaN.
// Tolerances: m and v are two products and a sum, 4u of their terms; p gets
// 16u·(|p| + lr·Σ|terms of m̂|/denom), the update's dozen roundings relative
// to its size, with m's rounding magnified by any cancellation in m.
func testAdamWStep(s *suite) {
	hypers := []kernels.AdamWHyper{
		{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 1e-2},
		{LR: 0.1, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6},
		{LR: 3e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1},
	}
	for _, h := range hypers {
		for _, n := range []int{1, 33, optimSize} {
			s.run(fmt.Sprintf("%d/%+v", n, h), func(c *tcase) {
				p := c.randn(n, 0, 1)
				m, v := make([]float32, n), make([]float32, n)
				pb, mb, vb := c.up(p), c.up(m), c.up(v)
				for t := 1; t <= optimSteps; t++ {
					g := c.randn(n, 0, 0.1)
					for i := 0; i < n; i += 17 {
						g[i] = 0
					}
					wantP, wantM, wantV := make([]float64, n), make([]float64, n), make([]float64, n)
					magP, magM := make([]float64, n), make([]float64, n)
					for i := range p {
						wantP[i], wantM[i], wantV[i], magP[i], magM[i] = refAdamW(float64(p[i]), float64(g[i]), float64(m[i]), float64(v[i]), h, t)
					}
					c.be.AdamWStep(pb, c.up(g), mb, vb, h, t)
					p, m, v = c.down(pb), c.down(mb), c.down(vb)
					c.check(fmt.Sprintf("step %d p", t), p, wantP, rel(16, magP))
					c.check(fmt.Sprintf("step %d m", t), m, wantM, rel(4, magM))
					c.check(fmt.Sprintf("step %d v", t), v, wantV, rel(4, wantV))
					if c.Failed() {
						return
					}
				}
			})
		}
	}
}
