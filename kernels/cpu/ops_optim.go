package cpu

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/kernels"
)

// SGDStep implements kernels.Backend, following torch.optim.SGD's
// single-tensor loop: with momentum 0 the buffer is never touched (and may be
// nil), as in PyTorch, whatever Nesterov says.
func (be *Backend) SGDStep(p, g, buf kernels.Buffer, h kernels.SGDHyper, first bool) {
	ps, gs := F(p), F(g)
	mustLenOf("SGDStep", "g", len(gs), len(ps))
	var bs []float32
	if h.Momentum != 0 {
		if buf == nil {
			panic("kernels/cpu: SGDStep: momentum " + fmt.Sprint(h.Momentum) + " needs a momentum buffer, got nil")
		}
		bs = F(buf)
		mustLenOf("SGDStep", "buf", len(bs), len(ps))
	}
	if be.serial(len(ps), grainSimple) {
		sgdStep(ps, gs, bs, h, first)
		return
	}
	parallelFor(len(ps), be.threads, grainSimple, func(lo, hi int) {
		var b []float32
		if bs != nil {
			b = bs[lo:hi]
		}
		sgdStep(ps[lo:hi], gs[lo:hi], b, h, first)
	})
}

// sgdStep updates p in place; buf is nil when momentum is 0.
func sgdStep(p, g, buf []float32, h kernels.SGDHyper, first bool) {
	g = g[:len(p)]
	lr, wd, mom, damp := h.LR, h.WeightDecay, h.Momentum, 1-h.Dampening
	if buf == nil {
		for i, w := range p {
			p[i] = w - lr*(g[i]+wd*w)
		}
		return
	}
	buf = buf[:len(p)]
	if !first && !h.Nesterov {
		sgdMomentum(p, g, buf, lr, wd, mom, damp)
		return
	}
	for i, w := range p {
		d := g[i] + wd*w
		b := d
		if !first {
			b = mom*buf[i] + damp*d
		}
		buf[i] = b
		if h.Nesterov {
			d += mom * b
		} else {
			d = b
		}
		p[i] = w - lr*d
	}
}

// sgdMomentumGo is the momentum update after the first step, without
// Nesterov: sgdStep's loop for that case (ops_fastmath_amd64.s has the AVX2
// one, with the same rounding).
func sgdMomentumGo(p, g, buf []float32, lr, wd, mom, damp float32) {
	g, buf = g[:len(p)], buf[:len(p)]
	for i, w := range p {
		d := g[i] + wd*w
		b := mom*buf[i] + damp*d
		buf[i] = b
		p[i] = w - lr*b
	}
}

// AdamWStep implements kernels.Backend, following torch.optim.AdamW's
// single-tensor loop. The bias corrections 1 − β^t are formed in float64, as
// PyTorch does on the host: in float32, β2^t for β2 = 0.999 carries an error
// of t·6e-8, which is a relative error of 6e-5 in 1 − β2^t on step 5.
func (be *Backend) AdamWStep(p, g, m, v kernels.Buffer, h kernels.AdamWHyper, t int) {
	ps, gs, ms, vs := F(p), F(g), F(m), F(v)
	mustLenOf("AdamWStep", "g", len(gs), len(ps))
	mustLenOf("AdamWStep", "m", len(ms), len(ps))
	mustLenOf("AdamWStep", "v", len(vs), len(ps))
	if t < 1 {
		panic(fmt.Sprintf("kernels/cpu: AdamWStep: step %d, steps count from 1", t))
	}
	c := adamConsts{
		decay: float32(1 - float64(h.LR)*float64(h.WeightDecay)),
		b1:    h.Beta1, nb1: 1 - h.Beta1,
		b2: h.Beta2, nb2: 1 - h.Beta2,
		stepSize: float32(float64(h.LR) / (1 - math.Pow(float64(h.Beta1), float64(t)))),
		bc2Sqrt:  float32(math.Sqrt(1 - math.Pow(float64(h.Beta2), float64(t)))),
		eps:      h.Eps,
	}
	if be.serial(len(ps), grainSimple) {
		adamWStep(ps, gs, ms, vs, c)
		return
	}
	parallelFor(len(ps), be.threads, grainSimple, func(lo, hi int) {
		adamWStep(ps[lo:hi], gs[lo:hi], ms[lo:hi], vs[lo:hi], c)
	})
}

// adamConsts are an AdamW step's per-step scalars.
type adamConsts struct {
	decay, b1, nb1, b2, nb2, stepSize, bc2Sqrt, eps float32
}

func adamWStep(p, g, m, v []float32, c adamConsts) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	decay, b1, nb1, b2, nb2, stepSize, bc2Sqrt, eps := c.decay, c.b1, c.nb1, c.b2, c.nb2, c.stepSize, c.bc2Sqrt, c.eps
	for i, w := range p {
		gi := g[i]
		mi := b1*m[i] + nb1*gi
		vi := b2*v[i] + nb2*gi*gi
		m[i], v[i] = mi, vi
		denom := float32(math.Sqrt(float64(vi)))/bc2Sqrt + eps
		p[i] = w*decay - stepSize*mi/denom
	}
}
