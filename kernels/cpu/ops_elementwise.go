package cpu

import "github.com/troupe-ml/troupe/kernels"

// Element-wise kernels. Each splits its flat index range into contiguous
// parts; every element is computed the same way whatever the split, so the
// results do not depend on the thread count.

// Axpy implements kernels.Backend.
func (be *Backend) Axpy(alpha float32, x, y kernels.Buffer) {
	xs, ys := F(x), F(y)
	mustLenOf("Axpy", "x", len(xs), len(ys))
	if be.serial(len(ys), grainSimple) {
		axpy(alpha, xs, ys)
		return
	}
	parallelFor(len(ys), be.threads, grainSimple, func(lo, hi int) { axpy(alpha, xs[lo:hi], ys[lo:hi]) })
}

func axpy(alpha float32, x, y []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += alpha * x[i]
	}
}

// Scale implements kernels.Backend.
func (be *Backend) Scale(x kernels.Buffer, alpha float32) {
	xs := F(x)
	if be.serial(len(xs), grainSimple) {
		scale(xs, alpha)
		return
	}
	parallelFor(len(xs), be.threads, grainSimple, func(lo, hi int) { scale(xs[lo:hi], alpha) })
}

func scale(x []float32, alpha float32) {
	for i := range x {
		x[i] *= alpha
	}
}

// Add implements kernels.Backend. dst may alias a or b: each element is read
// before it is written.
func (be *Backend) Add(dst, a, b kernels.Buffer) {
	d, as, bs := F(dst), F(a), F(b)
	mustLenOf("Add", "a", len(as), len(d))
	mustLenOf("Add", "b", len(bs), len(d))
	if be.serial(len(d), grainSimple) {
		add(d, as, bs)
		return
	}
	parallelFor(len(d), be.threads, grainSimple, func(lo, hi int) { add(d[lo:hi], as[lo:hi], bs[lo:hi]) })
}

// addGo is add's Go loop.
func addGo(d, a, b []float32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] + b[i]
	}
}

// AddBias implements kernels.Backend.
func (be *Backend) AddBias(y, bias kernels.Buffer) {
	ys, bs := F(y), F(bias)
	cols := len(bs)
	rows := rowsOf("AddBias", "y", len(ys), cols)
	if be.serial(len(ys), grainSimple) {
		addBias(ys, bs)
		return
	}
	parallelFor(rows, be.threads, rowGrain(grainSimple, cols), func(lo, hi int) { addBias(ys[lo*cols:hi*cols], bs) })
}

func addBias(y, bias []float32) {
	cols := len(bias)
	for r := 0; r+cols <= len(y); r += cols {
		row := y[r : r+cols]
		add(row, row, bias)
	}
}

// ReLU implements kernels.Backend.
func (be *Backend) ReLU(y, x kernels.Buffer) {
	ys, xs := savedOf(y), savedOf(x)
	mustLenOf("ReLU", "x", xs.Len(), ys.Len())
	if be.serial(ys.Len(), grainSimple) {
		xs.apply1(actReLU, ys, 0, ys.Len())
		return
	}
	parallelFor(ys.Len(), be.threads, grainSimple, func(lo, hi int) { xs.apply1(actReLU, ys, lo, hi) })
}

// reluGo is relu's Go loop (ops_fastmath_amd64.s has the AVX2 one).
func reluGo(y, x []float32) {
	x = x[:len(y)]
	for i, v := range x {
		// v > 0 rather than max(v, 0): NaN stays NaN, as in PyTorch.
		if v > 0 || v != v {
			y[i] = v
		} else {
			y[i] = 0
		}
	}
}

// ReLUBackward implements kernels.Backend.
// x may be bf16 or fp16 (a saved activation, widened as it is read), and
// so may dy (widened) and dx (rounded once).
func (be *Backend) ReLUBackward(dx, dy, x kernels.Buffer) {
	be.activationBackward("ReLUBackward", actReLU, grainSimple, dx, dy, x)
}

// reluBackwardGo is reluBackward's Go loop.
func reluBackwardGo(dx, dy, x []float32) {
	dy, x = dy[:len(dx)], x[:len(dx)]
	for i, v := range x {
		if v > 0 {
			dx[i] = dy[i]
		} else {
			dx[i] = 0
		}
	}
}

// GELU implements kernels.Backend: y = x·Φ(x), Φ the standard normal CDF,
// which is PyTorch's x·(1 + erf(x/√2))/2.
func (be *Backend) GELU(y, x kernels.Buffer) {
	ys, xs := savedOf(y), savedOf(x)
	mustLenOf("GELU", "x", xs.Len(), ys.Len())
	if be.serial(ys.Len(), grainExp) {
		xs.apply1(actGELU, ys, 0, ys.Len())
		return
	}
	parallelFor(ys.Len(), be.threads, grainExp, func(lo, hi int) { xs.apply1(actGELU, ys, lo, hi) })
}

// GELUBackward implements kernels.Backend: GELU'(x) = Φ(x) + x·φ(x), φ the
// standard normal density. x may be bf16 or fp16 (a saved activation,
// widened as it is read), and so may dy (widened) and dx (rounded once).
func (be *Backend) GELUBackward(dx, dy, x kernels.Buffer) {
	be.activationBackward("GELUBackward", actGELU, grainExp, dx, dy, x)
}

// activationBackward runs f's backward kernel, dx = dy·f'(x), over the
// whole buffers (each fp32 or 16-bit), split across threads in grains.
func (be *Backend) activationBackward(op string, f activation, grain int, dx, dy, x kernels.Buffer) {
	dxs, dys, xs := savedOf(dx), savedOf(dy), savedOf(x)
	n := dxs.Len()
	mustLenOf(op, "dy", dys.Len(), n)
	mustLenOf(op, "x", xs.Len(), n)
	if be.serial(n, grain) {
		xs.apply(f, dxs, dys, 0, n)
		return
	}
	parallelFor(n, be.threads, grain, func(lo, hi int) { xs.apply(f, dxs, dys, lo, hi) })
}
