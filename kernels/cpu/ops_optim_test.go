package cpu

import (
	"math"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
)

// TestSGDHandWorked: p = 1, g = 0.5, wd = 0.1 gives d = 0.6. Momentum 0.9,
// dampening 0.5: the first step stores buf = d (no dampening, as PyTorch),
// p = 1 − 0.1·0.6 = 0.94; the second (same g) has d = 0.5 + 0.094 = 0.594,
// buf = 0.9·0.6 + 0.5·0.594 = 0.837, p = 0.94 − 0.0837 = 0.8563.
func TestSGDHandWorked(t *testing.T) {
	be := New(1)
	p, buf := Buf{1}, Buf{123}
	h := kernels.SGDHyper{LR: 0.1, Momentum: 0.9, Dampening: 0.5, WeightDecay: 0.1}
	be.SGDStep(p, Buf{0.5}, buf, h, true)
	if !near(p[0], 0.94) || !near(buf[0], 0.6) {
		t.Errorf("step 1: p, buf = %v, %v; want 0.94, 0.6", p[0], buf[0])
	}
	be.SGDStep(p, Buf{0.5}, buf, h, false)
	if !near(p[0], 0.8563) || !near(buf[0], 0.837) {
		t.Errorf("step 2: p, buf = %v, %v; want 0.8563, 0.837", p[0], buf[0])
	}
	// Nesterov, first step: d = 0.6 + 0.9·0.6 = 1.14, p = 1 − 0.114.
	p, buf = Buf{1}, Buf{0}
	h.Dampening, h.Nesterov = 0, true
	be.SGDStep(p, Buf{0.5}, buf, h, true)
	if !near(p[0], 0.886) {
		t.Errorf("nesterov: p = %v, want 0.886", p[0])
	}
}

// TestAdamWHandWorked: on step 1 the bias corrections cancel the (1 − β)
// factors, so m̂ = g and v̂ = g²: p = p·(1 − lr·wd) − lr·g/(|g| + eps).
func TestAdamWHandWorked(t *testing.T) {
	p, m, v := Buf{2, -1, 0.5}, make(Buf, 3), make(Buf, 3)
	g := Buf{0.3, -4, 0}
	h := kernels.AdamWHyper{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1}
	New(1).AdamWStep(p, g, m, v, h, 1)
	for i, p0 := range []float64{2, -1, 0.5} {
		gi := float64(g[i])
		want := p0*(1-0.01*0.1) - 0.01*gi/(math.Abs(gi)+1e-8)
		if !near(p[i], want) {
			t.Errorf("p[%d] = %v, want %v", i, p[i], want)
		}
	}
}

// near is equality to 2e-7 relative (a few float32 ulp).
func near(got float32, want float64) bool {
	return math.Abs(float64(got)-want) <= 2e-7*math.Abs(want)
}

func TestOptimBadArgs(t *testing.T) {
	be := New(1)
	b := make(Buf, 3)
	mustPanicWith(t, "SGDStep: momentum 0.9 needs a momentum buffer, got nil", func() {
		be.SGDStep(b, b, nil, kernels.SGDHyper{LR: 1, Momentum: 0.9}, true)
	})
	mustPanicWith(t, "AdamWStep: step 0, steps count from 1", func() {
		be.AdamWStep(b, b, b, b, kernels.AdamWHyper{LR: 1}, 0)
	})
	// Momentum 0 never touches the buffer, so nil is fine.
	be.SGDStep(b, b, nil, kernels.SGDHyper{LR: 1, Nesterov: true}, false)
}

func TestOptimNoAllocs(t *testing.T) {
	be := New(4)
	p, g, m, v := make(Buf, 1000), make(Buf, 1000), make(Buf, 1000), make(Buf, 1000)
	mustNotAlloc(t, "SGDStep", func() { be.SGDStep(p, g, m, kernels.SGDHyper{LR: 0.1, Momentum: 0.9}, false) })
	mustNotAlloc(t, "AdamWStep", func() { be.AdamWStep(p, g, m, v, kernels.AdamWHyper{LR: 0.1, Beta1: 0.9, Beta2: 0.99}, 3) })
}
