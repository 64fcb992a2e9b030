package kerneltest

import (
	"math"

	"github.com/troupe-ml/troupe/kernels"
)

// Float64 reference implementations, written as directly from each
// kernels.Backend comment (and PyTorch's formulas) as possible, sharing
// nothing with any backend. Where a test needs a tolerance scale, the
// reference also returns mag: the same computation over absolute values,
// Σ|terms| rather than |Σ terms|, which bounds how far rounding can move
// the result.

// refGemm returns C after C = α·op(A)·op(B) + β·C over g's strides, and for
// each element of C |α|·Σ|a·b| + |β·c|. Elements of C outside the M×N
// matrices keep their value with magnitude 0. With β = 0, C is not read.
func refGemm(g kernels.GemmArgs, a, b, c []float32) (want, mag []float64) {
	g = g.Normalize()
	want, mag = widen(c), make([]float64, len(c))
	for bt := 0; bt < g.Batch; bt++ {
		oa, ob, oc := bt*g.StrideA, bt*g.StrideB, bt*g.StrideC
		for i := 0; i < g.M; i++ {
			for j := 0; j < g.N; j++ {
				var s, m float64
				for p := 0; p < g.K; p++ {
					var av, bv float64
					if g.TransA {
						av = float64(a[oa+p*g.LDA+i])
					} else {
						av = float64(a[oa+i*g.LDA+p])
					}
					if g.TransB {
						bv = float64(b[ob+j*g.LDB+p])
					} else {
						bv = float64(b[ob+p*g.LDB+j])
					}
					s += av * bv
					m += math.Abs(av * bv)
				}
				ci := oc + i*g.LDC + j
				alpha, beta := float64(g.Alpha), float64(g.Beta)
				if g.Beta == 0 {
					want[ci], mag[ci] = alpha*s, math.Abs(alpha)*m
				} else {
					want[ci] = alpha*s + beta*float64(c[ci])
					mag[ci] = math.Abs(alpha)*m + math.Abs(beta*float64(c[ci]))
				}
			}
		}
	}
	return want, mag
}

// phi is the standard normal CDF Φ, and pdf its density φ.
func phi(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }
func pdf(x float64) float64 { return math.Exp(-0.5*x*x) / math.Sqrt(2*math.Pi) }

// refGELU is PyTorch's exact GELU, x·(1 + erf(x/√2))/2 = x·Φ(x).
func refGELU(x float64) float64 { return x * phi(x) }

// refGELUGrad is d GELU/dx = Φ(x) + x·φ(x).
func refGELUGrad(x float64) float64 { return phi(x) + x*pdf(x) }

// refLayerNorm normalises each row of x with biased variance and returns y,
// the row means and rstd = 1/√(var + eps).
func refLayerNorm(x, gamma, beta []float32, eps float32) (y, mean, rstd []float64) {
	cols := len(gamma)
	rows := len(x) / cols
	y, mean, rstd = make([]float64, len(x)), make([]float64, rows), make([]float64, rows)
	for r := 0; r < rows; r++ {
		xr := widen(x[r*cols : (r+1)*cols])
		var m float64
		for _, v := range xr {
			m += v
		}
		m /= float64(cols)
		var v2 float64
		for _, v := range xr {
			v2 += (v - m) * (v - m)
		}
		rs := 1 / math.Sqrt(v2/float64(cols)+float64(eps))
		mean[r], rstd[r] = m, rs
		for c, v := range xr {
			y[r*cols+c] = (v-m)*rs*float64(gamma[c]) + float64(beta[c])
		}
	}
	return y, mean, rstd
}

// refLayerNormBackward returns dx, dγ and dβ (the sums over rows alone, not
// yet accumulated) for the given saved mean and rstd, from the chain rule on
// y = x̂·γ + β, x̂ = (x − mean)·rstd:
// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·γ.
// dxMag bounds each dx term: rstd·(|g| + mean|g| + |x̂|·mean|g·x̂|).
func refLayerNormBackward(dy, x, mean, rstd, gamma []float32) (dx, dgamma, dbeta, dxMag []float64) {
	cols := len(gamma)
	rows := len(x) / cols
	dx, dxMag = make([]float64, len(x)), make([]float64, len(x))
	dgamma, dbeta = make([]float64, cols), make([]float64, cols)
	for r := 0; r < rows; r++ {
		m, rs := float64(mean[r]), float64(rstd[r])
		var sg, sgx, ag, agx float64
		for c := 0; c < cols; c++ {
			xh := (float64(x[r*cols+c]) - m) * rs
			g := float64(dy[r*cols+c]) * float64(gamma[c])
			sg += g
			sgx += g * xh
			ag += math.Abs(g)
			agx += math.Abs(g * xh)
			dgamma[c] += float64(dy[r*cols+c]) * xh
			dbeta[c] += float64(dy[r*cols+c])
		}
		n := float64(cols)
		for c := 0; c < cols; c++ {
			xh := (float64(x[r*cols+c]) - m) * rs
			g := float64(dy[r*cols+c]) * float64(gamma[c])
			dx[r*cols+c] = rs * (g - sg/n - xh*sgx/n)
			dxMag[r*cols+c] = rs * (math.Abs(g) + ag/n + math.Abs(xh)*agx/n)
		}
	}
	return dx, dgamma, dbeta, dxMag
}

// refSoftmax returns softmax(x) over a row with the max subtracted.
func refSoftmax(x []float64) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, v)
	}
	var s float64
	out := make([]float64, len(x))
	for j, v := range x {
		out[j] = math.Exp(v - mx)
		s += out[j]
	}
	for j := range out {
		out[j] /= s
	}
	return out
}

// refCrossEntropy returns a row's loss −log softmax(x)[t] (log-sum-exp form)
// and its softmax.
func refCrossEntropy(x []float64, t int) (loss float64, p []float64) {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, v)
	}
	var s float64
	for _, v := range x {
		s += math.Exp(v - mx)
	}
	return math.Log(s) - (x[t] - mx), refSoftmax(x)
}

// refTranspose permutes src's axes: dst axis i is src axis perm[i].
func refTranspose(src []float32, shape, perm []int) []float64 {
	nd := len(shape)
	srcStride := make([]int, nd)
	st := 1
	for i := nd - 1; i >= 0; i-- {
		srcStride[i] = st
		st *= shape[i]
	}
	dst := make([]float64, len(src))
	idx := make([]int, nd) // the destination index, last axis fastest
	for k := range dst {
		off := 0
		for i, p := range perm {
			off += idx[i] * srcStride[p]
		}
		dst[k] = float64(src[off])
		for i := nd - 1; i >= 0; i-- {
			idx[i]++
			if idx[i] < shape[perm[i]] {
				break
			}
			idx[i] = 0
		}
	}
	return dst
}

// refSGD is one torch.optim.SGD step on one element: it returns the new
// parameter and momentum buffer and their magnitudes.
func refSGD(p, g, buf float64, h kernels.SGDHyper, first bool) (np, nbuf, pMag, bufMag float64) {
	lr, wd, mom, damp := float64(h.LR), float64(h.WeightDecay), float64(h.Momentum), float64(h.Dampening)
	d := g + wd*p
	dMag := math.Abs(g) + math.Abs(wd*p)
	if mom != 0 {
		if first {
			buf, bufMag = d, dMag
		} else {
			bufMag = math.Abs(mom*buf) + math.Abs(1-damp)*dMag
			buf = mom*buf + (1-damp)*d
		}
		if h.Nesterov {
			d += mom * buf
			dMag += math.Abs(mom) * bufMag
		} else {
			d, dMag = buf, bufMag
		}
	}
	return p - lr*d, buf, math.Abs(p) + math.Abs(lr)*dMag, bufMag
}

// refAdamW is one torch.optim.AdamW step (t counts from 1) on one element.
// mMag bounds the terms of the new m, pMag those of the new p.
func refAdamW(p, g, m, v float64, h kernels.AdamWHyper, t int) (np, nm, nv, pMag, mMag float64) {
	lr, b1, b2, eps, wd := float64(h.LR), float64(h.Beta1), float64(h.Beta2), float64(h.Eps), float64(h.WeightDecay)
	p *= 1 - lr*wd
	mMag = math.Abs(b1*m) + math.Abs((1-b1)*g)
	m = b1*m + (1-b1)*g
	v = b2*v + (1-b2)*g*g
	mhat := m / (1 - math.Pow(b1, float64(t)))
	denom := math.Sqrt(v/(1-math.Pow(b2, float64(t)))) + eps
	upMag := lr * mMag / (1 - math.Pow(b1, float64(t))) / denom
	return p - lr*mhat/denom, m, v, math.Abs(p) + upMag, mMag
}
