package kerneltest

import (
	"math"
)

// layerNormInputs are rows of N(3, 1.5²): the offset mean makes a variance
// computed as E[x²] − mean² lose digits, which the tolerances below admit
// only to the extent float32 forces it.
func (c *tcase) layerNormInputs(rows, cols int) (x, gamma, beta []float32) {
	return c.randn(rows*cols, 3, 1.5), c.randn(cols, 1, 0.5), c.randn(cols, 0, 0.5)
}

// testLayerNorm compares y, mean and rstd with a float64 two-pass reference.
// The row statistics are sums of cols terms, whose float32 rounding is at
// most cols·u relative to Σ|terms|; with 8 more roundings per element for
// the rest, tolerances are (cols+8)·u times:
//   - mean: mean|x|;
//   - rstd: rstd·(1 + mean²·rstd²), since the variance's error scales with
//     E[x²] = var + mean² if it is formed that way;
//   - y: |γ|·(|x̂| + mean|x|·rstd·(1 + |x̂|)) + |β|, the error of x − mean
//     being that of mean, magnified by rstd and by the error of rstd.
func testLayerNorm(s *suite) {
	const eps = 1e-5
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		s.run(shapeName(rows, cols), func(c *tcase) {
			x, gamma, beta := c.layerNormInputs(rows, cols)
			want, wantMean, wantRstd := refLayerNorm(x, gamma, beta, eps)
			k := float64(cols + 8)
			tol, tolMean, tolRstd := make([]float64, len(x)), make([]float64, rows), make([]float64, rows)
			for r := 0; r < rows; r++ {
				var absMean float64
				for _, v := range x[r*cols : (r+1)*cols] {
					absMean += math.Abs(float64(v))
				}
				absMean /= float64(cols)
				rs, m := wantRstd[r], wantMean[r]
				tolMean[r] = k * u * absMean
				tolRstd[r] = k * u * rs * (1 + m*m*rs*rs)
				for j := 0; j < cols; j++ {
					i := r*cols + j
					xh := math.Abs(float64(x[i])-m) * rs
					tol[i] = k * u * (math.Abs(float64(gamma[j]))*(xh+absMean*rs*(1+xh)) + math.Abs(float64(beta[j])))
				}
			}
			y, mean, rstd := c.be.Alloc(len(x)), c.be.Alloc(rows), c.be.Alloc(rows)
			c.be.LayerNorm(y, mean, rstd, c.up(x), c.up(gamma), c.up(beta), eps)
			c.check("mean", c.down(mean), wantMean, tolMean)
			c.check("rstd", c.down(rstd), wantRstd, tolRstd)
			c.check("y", c.down(y), want, tol)
		})
	}
	// A constant row has variance 0: rstd = 1/√eps and y = β.
	s.run("constant-rows", func(c *tcase) {
		const rows, cols = 3, 33
		x := make([]float32, rows*cols)
		for i := range x {
			x[i] = float32(i / cols)
		}
		_, gamma, beta := c.layerNormInputs(0, cols)
		want, wantMean, wantRstd := refLayerNorm(x, gamma, beta, eps)
		y, mean, rstd := c.be.Alloc(len(x)), c.be.Alloc(rows), c.be.Alloc(rows)
		c.be.LayerNorm(y, mean, rstd, c.up(x), c.up(gamma), c.up(beta), eps)
		c.check("mean", c.down(mean), wantMean, exact(rows))
		c.check("rstd", c.down(rstd), wantRstd, rel(2, wantRstd))
		c.check("y", c.down(y), want, rel(2, absAll(want)))
	})
}

// testLayerNormBackward feeds the float32 mean and rstd of the reference
// forward pass (what a forward pass would have saved) and accumulates onto
// non-zero dγ and dβ. dx sums two row reductions of cols terms:
// (cols+8)·u·rstd·(|g| + mean|g| + |x̂|·mean|g·x̂|); dγ and dβ are column
// sums of rows terms plus the old value: (rows+8)·u·(|old| + Σ|terms|).
func testLayerNormBackward(s *suite) {
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		s.run(shapeName(rows, cols), func(c *tcase) {
			x, gamma, _ := c.layerNormInputs(rows, cols)
			_, m64, rs64 := refLayerNorm(x, gamma, make([]float32, cols), 1e-5)
			mean, rstd := narrow(m64), narrow(rs64)
			dy, dg0, db0 := c.randn(rows*cols, 0, 1), c.randn(cols, 0, 1), c.randn(cols, 0, 1)
			wantDx, sumDg, sumDb, dxMag := refLayerNormBackward(dy, x, mean, rstd, gamma)
			wantDg, wantDb := widen(dg0), widen(db0)
			magDg, magDb := absAll(wantDg), absAll(wantDb)
			for i, d := range dy {
				j, r := i%cols, i/cols
				xh := (float64(x[i]) - float64(mean[r])) * float64(rstd[r])
				magDg[j] += math.Abs(float64(d) * xh)
				magDb[j] += math.Abs(float64(d))
			}
			for j := range wantDg {
				wantDg[j] += sumDg[j]
				wantDb[j] += sumDb[j]
			}
			dx, dg, db := c.be.Alloc(len(x)), c.up(dg0), c.up(db0)
			c.be.LayerNormBackward(dx, dg, db, c.up(dy), c.up(x), c.up(mean), c.up(rstd), c.up(gamma))
			c.check("dx", c.down(dx), wantDx, rel(float64(cols+8), dxMag))
			c.check("dgamma", c.down(dg), wantDg, rel(float64(rows+8), magDg))
			c.check("dbeta", c.down(db), wantDb, rel(float64(rows+8), magDb))
		})
	}
}

// narrow rounds float64 values to float32.
func narrow(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}
