//go:build cuda

package cuda

import "github.com/troupe-ml/troupe/kernels"

// LayerNorm implements kernels.Backend: one block per row, mean and biased
// variance in two passes in double, as the CPU backend.
func (be *Backend) LayerNorm(y, mean, rstd, x, gamma, beta kernels.Buffer, eps float32) {
	const op = "LayerNorm"
	ys, ms, rs, xs, gs, bs := be.buf(op, y), be.buf(op, mean), be.buf(op, rstd), be.buf(op, x), be.buf(op, gamma), be.buf(op, beta)
	cols := gs.n
	rows := rowsOf(op, "x", xs.n, cols)
	mustLen(op, "y", ys.n, xs.n)
	mustLen(op, "beta", bs.n, cols)
	mustLen(op, "mean", ms.n, rows)
	mustLen(op, "rstd", rs.n, rows)
	be.launchRows(kLayerNorm, rows, argInt(rows), argInt(cols), ys.arg(), ms.arg(), rs.arg(), xs.arg(), gs.arg(), bs.arg(), argF32(eps))
}

// LayerNormBackward implements kernels.Backend: dx row by row, then dγ and
// dβ as column sums.
func (be *Backend) LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma kernels.Buffer) {
	const op = "LayerNormBackward"
	dxs, dgs, dbs, dys := be.buf(op, dx), be.buf(op, dgamma), be.buf(op, dbeta), be.buf(op, dy)
	xs, ms, rs, gs := be.saved(op, x), be.buf(op, mean), be.buf(op, rstd), be.buf(op, gamma)
	cols := gs.n
	rows := rowsOf(op, "x", xs.n, cols)
	mustLen(op, "dx", dxs.n, xs.n)
	mustLen(op, "dy", dys.n, xs.n)
	mustLen(op, "dgamma", dgs.n, cols)
	mustLen(op, "dbeta", dbs.n, cols)
	mustLen(op, "mean", ms.n, rows)
	mustLen(op, "rstd", rs.n, rows)
	be.launchRows(kLayerNormDx, rows, argInt(rows), argInt(cols), dxs.arg(), dys.arg(), xs.arg(), ms.arg(), rs.arg(), gs.arg(), uint64(xs.dt))
	if cols == 0 {
		return
	}
	be.launch(kLayerNormParams, [3]int{be.colGrid(cols), 1, 1}, [3]int{blockThreads, 1, 1},
		argInt(rows), argInt(cols), dgs.arg(), dbs.arg(), dys.arg(), xs.arg(), ms.arg(), rs.arg(), uint64(xs.dt))
}
