package cpu

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/hostops"
)

// The Llama kernels run hostops' loops over the buffers in place, split
// over rows (or elements, or columns for dw) as the other row-wise kernels;
// SwiGLU and its backward run AVX2 loops (ops_fastmath_amd64.s) where the
// CPU has them.

// RMSNorm implements kernels.Backend.
func (be *Backend) RMSNorm(y, rstd, x, w kernels.Buffer, eps float32) {
	ys, rs, xs, ws := F(y), F(rstd), F(x), F(w)
	cols := len(ws)
	rows := rowsOf("RMSNorm", "x", len(xs), cols)
	mustLenOf("RMSNorm", "y", len(ys), len(xs))
	mustLenOf("RMSNorm", "rstd", len(rs), rows)
	if be.serial(len(xs), grainSimple) {
		hostops.RMSNorm(ys, rs, xs, ws, eps, 0, rows)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainSimple, cols), func(lo, hi int) {
		hostops.RMSNorm(ys, rs, xs, ws, eps, lo, hi)
	})
}

// RMSNormBackward implements kernels.Backend: dx split over rows, dw over
// columns (so no two goroutines add into one column, in a fixed order).
func (be *Backend) RMSNormBackward(dx, dw, dy, x, rstd, w kernels.Buffer) {
	dxs, dws, dys, xs, rs, ws := F(dx), F(dw), F(dy), F(x), F(rstd), F(w)
	cols := len(ws)
	rows := rowsOf("RMSNormBackward", "x", len(xs), cols)
	mustLenOf("RMSNormBackward", "dx", len(dxs), len(xs))
	mustLenOf("RMSNormBackward", "dy", len(dys), len(xs))
	mustLenOf("RMSNormBackward", "dw", len(dws), cols)
	mustLenOf("RMSNormBackward", "rstd", len(rs), rows)
	if be.serial(len(xs), grainSimple) {
		hostops.RMSNormDx(dxs, dys, xs, rs, ws, 0, rows)
		hostops.RMSNormDw(dws, dys, xs, rs, 0, cols)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainSimple, cols), func(lo, hi int) {
		hostops.RMSNormDx(dxs, dys, xs, rs, ws, lo, hi)
	})
	parallelFor(cols, be.threads, rowGrain(grainSimple, rows), func(lo, hi int) {
		hostops.RMSNormDw(dws, dys, xs, rs, lo, hi)
	})
}

// SwiGLU implements kernels.Backend.
func (be *Backend) SwiGLU(y, gate, up kernels.Buffer) {
	ys, gs, us := F(y), F(gate), F(up)
	mustLenOf("SwiGLU", "gate", len(gs), len(ys))
	mustLenOf("SwiGLU", "up", len(us), len(ys))
	if be.serial(len(ys), grainExp) {
		swiglu(ys, gs, us)
		return
	}
	parallelFor(len(ys), be.threads, grainExp, func(lo, hi int) { swiglu(ys[lo:hi], gs[lo:hi], us[lo:hi]) })
}

// SwiGLUBackward implements kernels.Backend.
func (be *Backend) SwiGLUBackward(dgate, dup, dy, gate, up kernels.Buffer) {
	dgs, dus, dys, gs, us := F(dgate), F(dup), F(dy), F(gate), F(up)
	for _, b := range []struct {
		what string
		n    int
	}{{"dgate", len(dgs)}, {"dup", len(dus)}, {"gate", len(gs)}, {"up", len(us)}} {
		mustLenOf("SwiGLUBackward", b.what, b.n, len(dys))
	}
	if be.serial(len(dys), grainExp) {
		swigluBackward(dgs, dus, dys, gs, us)
		return
	}
	parallelFor(len(dys), be.threads, grainExp, func(lo, hi int) {
		swigluBackward(dgs[lo:hi], dus[lo:hi], dys[lo:hi], gs[lo:hi], us[lo:hi])
	})
}

// Rotary implements kernels.Backend.
func (be *Backend) Rotary(y, x, cos, sin kernels.Buffer, headDim int) {
	ys, xs, cs, ss := F(y), F(x), F(cos), F(sin)
	if headDim <= 0 || headDim%2 != 0 {
		panic(fmt.Sprintf("kernels/cpu: Rotary: head dimension %d is not a positive even number", headDim))
	}
	half := headDim / 2
	rows := rowsOf("Rotary", "cos", len(cs), half)
	mustLenOf("Rotary", "sin", len(ss), len(cs))
	mustLenOf("Rotary", "y", len(ys), len(xs))
	cols := 0
	if rows > 0 {
		cols = rowsOf("Rotary", "x", len(xs), rows)
	}
	if cols%headDim != 0 {
		panic(fmt.Sprintf("kernels/cpu: Rotary: rows of %d values are not heads of %d", cols, headDim))
	}
	if be.serial(len(xs), grainSimple) {
		hostops.Rotary(ys, xs, cs, ss, cols, headDim, 0, rows)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainSimple, cols), func(lo, hi int) {
		hostops.Rotary(ys, xs, cs, ss, cols, headDim, lo, hi)
	})
}

// CausalSoftmaxFrom implements kernels.Backend.
func (be *Backend) CausalSoftmaxFrom(y, x kernels.Buffer, rows, cols, pos0 int, scale float32) {
	ys, xs := F(y), F(x)
	mustLenOf("CausalSoftmaxFrom", "y", len(ys), len(xs))
	if rows <= 0 || cols <= 0 || pos0 < 0 || len(xs)%(rows*cols) != 0 {
		panic(fmt.Sprintf("kernels/cpu: CausalSoftmaxFrom: %d values are not [batch, %d, %d] (pos0 %d)", len(xs), rows, cols, pos0))
	}
	n := len(xs) / cols
	if be.serial(len(xs), grainExp) {
		hostops.CausalSoftmaxFrom(ys, xs, rows, cols, pos0, scale, 0, n)
		return
	}
	parallelFor(n, be.threads, rowGrain(grainExp, cols), func(lo, hi int) {
		hostops.CausalSoftmaxFrom(ys, xs, rows, cols, pos0, scale, lo, hi)
	})
}
