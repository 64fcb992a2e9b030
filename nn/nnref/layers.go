package nnref

import "math"

// Linear computes y[r, o] = Σ_i x[r, i]·W[o, i] + b[o]; b may be nil.
func Linear(x, w, b []float64, rows, in, out int) []float64 {
	y := make([]float64, rows*out)
	for r := 0; r < rows; r++ {
		for o := 0; o < out; o++ {
			s := 0.0
			if b != nil {
				s = b[o]
			}
			for i := 0; i < in; i++ {
				s += x[r*in+i] * w[o*in+i]
			}
			y[r*out+o] = s
		}
	}
	return y
}

// LinearBackward returns dx, dW and db (nil when hasBias is false).
func LinearBackward(x, w, dy []float64, rows, in, out int, hasBias bool) (dx, dw, db []float64) {
	dx = make([]float64, rows*in)
	dw = make([]float64, out*in)
	if hasBias {
		db = make([]float64, out)
	}
	for r := 0; r < rows; r++ {
		for o := 0; o < out; o++ {
			g := dy[r*out+o]
			if hasBias {
				db[o] += g
			}
			for i := 0; i < in; i++ {
				dx[r*in+i] += g * w[o*in+i]
				dw[o*in+i] += g * x[r*in+i]
			}
		}
	}
	return dx, dw, db
}

// ReLU is max(x, 0).
func ReLU(x []float64) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = math.Max(v, 0)
	}
	return y
}

// ReLUBackward passes dy where x > 0.
func ReLUBackward(x, dy []float64) []float64 {
	dx := make([]float64, len(x))
	for i, v := range x {
		if v > 0 {
			dx[i] = dy[i]
		}
	}
	return dx
}

// GELU is x·Φ(x) with the exact normal CDF.
func GELU(x []float64) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * 0.5 * (1 + math.Erf(v/math.Sqrt2))
	}
	return y
}

// GELUBackward is dy·(Φ(x) + x·φ(x)).
func GELUBackward(x, dy []float64) []float64 {
	dx := make([]float64, len(x))
	for i, v := range x {
		cdf := 0.5 * (1 + math.Erf(v/math.Sqrt2))
		pdf := math.Exp(-v*v/2) / math.Sqrt(2*math.Pi)
		dx[i] = dy[i] * (cdf + v*pdf)
	}
	return dx
}

// LayerNorm normalises rows of x with biased variance, then scales and
// shifts. It returns y and the per-row mean and 1/std for the backward pass.
func LayerNorm(x, gamma, beta []float64, rows, cols int, eps float64) (y, mean, rstd []float64) {
	y = make([]float64, rows*cols)
	mean, rstd = make([]float64, rows), make([]float64, rows)
	for r := 0; r < rows; r++ {
		row := x[r*cols : (r+1)*cols]
		m := 0.0
		for _, v := range row {
			m += v
		}
		m /= float64(cols)
		va := 0.0
		for _, v := range row {
			va += (v - m) * (v - m)
		}
		va /= float64(cols)
		rs := 1 / math.Sqrt(va+eps)
		mean[r], rstd[r] = m, rs
		for c, v := range row {
			y[r*cols+c] = (v-m)*rs*gamma[c] + beta[c]
		}
	}
	return y, mean, rstd
}

// LayerNormBackward returns dx, dgamma and dbeta.
func LayerNormBackward(x, gamma, mean, rstd, dy []float64, rows, cols int) (dx, dgamma, dbeta []float64) {
	dx = make([]float64, rows*cols)
	dgamma, dbeta = make([]float64, cols), make([]float64, cols)
	n := float64(cols)
	for r := 0; r < rows; r++ {
		xh := make([]float64, cols)
		g := make([]float64, cols)
		sumG, sumGX := 0.0, 0.0
		for c := 0; c < cols; c++ {
			xh[c] = (x[r*cols+c] - mean[r]) * rstd[r]
			d := dy[r*cols+c]
			dgamma[c] += d * xh[c]
			dbeta[c] += d
			g[c] = d * gamma[c]
			sumG += g[c]
			sumGX += g[c] * xh[c]
		}
		for c := 0; c < cols; c++ {
			dx[r*cols+c] = rstd[r] * (g[c] - sumG/n - xh[c]*sumGX/n)
		}
	}
	return dx, dgamma, dbeta
}

// Embedding gathers rows of table [num, dim].
func Embedding(table []float64, ids []int, dim int) []float64 {
	y := make([]float64, len(ids)*dim)
	for i, id := range ids {
		copy(y[i*dim:(i+1)*dim], table[id*dim:(id+1)*dim])
	}
	return y
}

// EmbeddingBackward scatters dy into a table gradient of num rows.
func EmbeddingBackward(dy []float64, ids []int, num, dim int) []float64 {
	d := make([]float64, num*dim)
	for i, id := range ids {
		for c := 0; c < dim; c++ {
			d[id*dim+c] += dy[i*dim+c]
		}
	}
	return d
}

// CrossEntropy returns the mean over non-negative targets of
// −log softmax(logits[r])[t_r], and its gradient with respect to logits.
func CrossEntropy(logits []float64, targets []int, classes int) (loss float64, dlogits []float64) {
	dlogits = make([]float64, len(logits))
	count := 0
	for _, t := range targets {
		if t >= 0 {
			count++
		}
	}
	if count == 0 {
		return 0, dlogits
	}
	for r, t := range targets {
		if t < 0 {
			continue
		}
		row := logits[r*classes : (r+1)*classes]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, v)
		}
		z := 0.0
		for _, v := range row {
			z += math.Exp(v - mx)
		}
		loss += -(row[t] - mx - math.Log(z))
		for c, v := range row {
			p := math.Exp(v-mx) / z
			if c == t {
				p--
			}
			dlogits[r*classes+c] = p / float64(count)
		}
	}
	return loss / float64(count), dlogits
}
