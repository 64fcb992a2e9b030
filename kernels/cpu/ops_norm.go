package cpu

import (
	"math"

	"github.com/troupe-ml/troupe/kernels"
)

// LayerNorm implements kernels.Backend. Each row takes two passes: the mean,
// then the biased variance as the mean of squared deviations (not E[x²] −
// mean², which cancels catastrophically when |mean| ≫ std). Both sums run in
// float64, which costs nothing extra in scalar code.
func (be *Backend) LayerNorm(y, mean, rstd, x, gamma, beta kernels.Buffer, eps float32) {
	ys, ms, rs, xs, gs, bs := F(y), F(mean), F(rstd), F(x), F(gamma), F(beta)
	cols := len(gs)
	rows := rowsOf("LayerNorm", "x", len(xs), cols)
	mustLenOf("LayerNorm", "y", len(ys), len(xs))
	mustLenOf("LayerNorm", "beta", len(bs), cols)
	mustLenOf("LayerNorm", "mean", len(ms), rows)
	mustLenOf("LayerNorm", "rstd", len(rs), rows)
	if be.serial(len(xs), grainSimple) {
		layerNorm(ys, ms, rs, xs, gs, bs, eps, 0, rows)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainSimple, cols), func(lo, hi int) {
		layerNorm(ys, ms, rs, xs, gs, bs, eps, lo, hi)
	})
}

func layerNorm(y, mean, rstd, x, gamma, beta []float32, eps float32, lo, hi int) {
	cols := len(gamma)
	for r := lo; r < hi; r++ {
		xr, yr := x[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
		m := sum64(xr) / float64(cols)
		v := sumSqDev64(xr, m) / float64(cols)
		rs := float32(1 / math.Sqrt(v+float64(eps)))
		mf := float32(m)
		mean[r], rstd[r] = mf, rs
		for c, e := range xr {
			yr[c] = (e-mf)*rs*gamma[c] + beta[c]
		}
	}
}

// LayerNormBackward implements kernels.Backend. With x̂ = (x − mean)·rstd and
// g = dy·gamma, dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) row by row, split
// over rows; dgamma += Σ_r dy·x̂ and dbeta += Σ_r dy are column sums, split
// over column blocks with float64 accumulators (as SumRows), so that no two
// goroutines add into the same column and the order is fixed. x may be
// bf16 or fp16 (a saved activation, widened as it is read).
func (be *Backend) LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma kernels.Buffer) {
	dxs, dgs, dbs, dys, xs, ms, rs, gs := F(dx), F(dgamma), F(dbeta), F(dy), savedOf(x), F(mean), F(rstd), F(gamma)
	cols := len(gs)
	rows := rowsOf("LayerNormBackward", "x", xs.Len(), cols)
	mustLenOf("LayerNormBackward", "dx", len(dxs), xs.Len())
	mustLenOf("LayerNormBackward", "dy", len(dys), xs.Len())
	mustLenOf("LayerNormBackward", "dgamma", len(dgs), cols)
	mustLenOf("LayerNormBackward", "dbeta", len(dbs), cols)
	mustLenOf("LayerNormBackward", "mean", len(ms), rows)
	mustLenOf("LayerNormBackward", "rstd", len(rs), rows)
	blocks := (cols + colBlock - 1) / colBlock
	if be.serial(xs.Len(), grainSimple) {
		layerNormBackwardRows(dxs, dys, xs, ms, rs, gs, 0, rows)
		layerNormBackwardParams(dgs, dbs, dys, xs, ms, rs, 0, blocks)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainSimple, cols), func(lo, hi int) {
		layerNormBackwardRows(dxs, dys, xs, ms, rs, gs, lo, hi)
	})
	if blocks < 2 {
		layerNormBackwardParams(dgs, dbs, dys, xs, ms, rs, 0, blocks)
		return
	}
	parallelFor(blocks, be.threads, 1, func(lo, hi int) {
		layerNormBackwardParams(dgs, dbs, dys, xs, ms, rs, lo, hi)
	})
}

func layerNormBackwardRows(dx, dy []float32, x saved, mean, rstd, gamma []float32, lo, hi int) {
	cols := len(gamma)
	var stack [wideRow]float32
	scratch := x.row(cols, stack[:])
	for r := lo; r < hi; r++ {
		xr, dyr, dxr := x.at(r*cols, (r+1)*cols, scratch), dy[r*cols:(r+1)*cols], dx[r*cols:(r+1)*cols]
		m, rs := mean[r], rstd[r]
		// Σ g and Σ g·x̂ with g = dy·γ, two accumulators each so that the
		// float64 additions overlap.
		var sg0, sg1, sgx0, sgx1 float64
		c := 0
		for ; c+2 <= cols; c += 2 {
			g0, g1 := float64(dyr[c]*gamma[c]), float64(dyr[c+1]*gamma[c+1])
			sg0 += g0
			sg1 += g1
			sgx0 += g0 * float64((xr[c]-m)*rs)
			sgx1 += g1 * float64((xr[c+1]-m)*rs)
		}
		if c < cols {
			g := float64(dyr[c] * gamma[c])
			sg0 += g
			sgx0 += g * float64((xr[c]-m)*rs)
		}
		mg := float32((sg0 + sg1) / float64(cols))
		mgx := float32((sgx0 + sgx1) / float64(cols))
		for c, e := range xr {
			xh := (e - m) * rs
			dxr[c] = rs * (dyr[c]*gamma[c] - mg - xh*mgx)
		}
	}
}

// layerNormBackwardParams accumulates dgamma and dbeta for column blocks
// [blo, bhi).
func layerNormBackwardParams(dgamma, dbeta, dy []float32, x saved, mean, rstd []float32, blo, bhi int) {
	cols := len(dgamma)
	var ag, ab [colBlock]float64
	var wide [colBlock]float32
	for b := blo; b < bhi; b++ {
		c0, c1 := b*colBlock, min((b+1)*colBlock, cols)
		g, bb := ag[:c1-c0], ab[:c1-c0]
		clear(g)
		clear(bb)
		for r := range mean {
			m, rs := mean[r], rstd[r]
			xr, dyr := x.at(r*cols+c0, r*cols+c1, wide[:]), dy[r*cols+c0:r*cols+c1]
			for j, e := range xr {
				d := float64(dyr[j])
				g[j] += d * float64((e-m)*rs)
				bb[j] += d
			}
		}
		for j := range g {
			dgamma[c0+j] = float32(float64(dgamma[c0+j]) + g[j])
			dbeta[c0+j] = float32(float64(dbeta[c0+j]) + bb[j])
		}
	}
}
