//go:build cuda

package cuda

import "github.com/troupe-ml/troupe/kernels"

// Element-wise kernels: one thread per element in a grid-stride loop; an
// output may alias an input because each element is read before it is
// written, by the same thread.

// Axpy implements kernels.Backend.
func (be *Backend) Axpy(alpha float32, x, y kernels.Buffer) {
	xs, ys := be.buf("Axpy", x), be.buf("Axpy", y)
	mustLen("Axpy", "x", xs.n, ys.n)
	be.launch1(kAxpy, ys.n, argInt(ys.n), argF32(alpha), xs.arg(), ys.arg())
}

// Scale implements kernels.Backend.
func (be *Backend) Scale(x kernels.Buffer, alpha float32) {
	xs := be.buf("Scale", x)
	be.launch1(kScale, xs.n, argInt(xs.n), argF32(alpha), xs.arg())
}

// Add implements kernels.Backend.
func (be *Backend) Add(dst, a, b kernels.Buffer) {
	d, as, bs := be.buf("Add", dst), be.buf("Add", a), be.buf("Add", b)
	mustLen("Add", "a", as.n, d.n)
	mustLen("Add", "b", bs.n, d.n)
	be.launch1(kAdd, d.n, argInt(d.n), d.arg(), as.arg(), bs.arg())
}

// AddBias implements kernels.Backend.
func (be *Backend) AddBias(y, bias kernels.Buffer) {
	ys, bs := be.buf("AddBias", y), be.buf("AddBias", bias)
	rowsOf("AddBias", "y", ys.n, bs.n)
	be.launch1(kAddBias, ys.n, argInt(ys.n), argInt(bs.n), ys.arg(), bs.arg())
}

// ReLU implements kernels.Backend.
func (be *Backend) ReLU(y, x kernels.Buffer) {
	ys, xs := be.saved("ReLU", y), be.saved("ReLU", x)
	mustLen("ReLU", "x", xs.n, ys.n)
	be.launch1(kReLU, ys.n, argInt(ys.n), ys.arg(), xs.arg(), uint64(xs.dt), uint64(ys.dt))
}

// ReLUBackward implements kernels.Backend (x, dy and dx each fp32, bf16 or
// fp16).
func (be *Backend) ReLUBackward(dx, dy, x kernels.Buffer) {
	d, dys, xs := be.saved("ReLUBackward", dx), be.saved("ReLUBackward", dy), be.saved("ReLUBackward", x)
	mustLen("ReLUBackward", "dy", dys.n, d.n)
	mustLen("ReLUBackward", "x", xs.n, d.n)
	be.launch1(kReLUBackward, d.n, argInt(d.n), d.arg(), dys.arg(), xs.arg(), uint64(xs.dt), uint64(dys.dt), uint64(d.dt))
}

// GELU implements kernels.Backend: x·Φ(x) with Φ from erfcf.
func (be *Backend) GELU(y, x kernels.Buffer) {
	ys, xs := be.saved("GELU", y), be.saved("GELU", x)
	mustLen("GELU", "x", xs.n, ys.n)
	be.launch1(kGELU, ys.n, argInt(ys.n), ys.arg(), xs.arg(), uint64(xs.dt), uint64(ys.dt))
}

// GELUBackward implements kernels.Backend: dy·(Φ(x) + x·φ(x)), x, dy and
// dx each fp32, bf16 or fp16.
func (be *Backend) GELUBackward(dx, dy, x kernels.Buffer) {
	d, dys, xs := be.saved("GELUBackward", dx), be.saved("GELUBackward", dy), be.saved("GELUBackward", x)
	mustLen("GELUBackward", "dy", dys.n, d.n)
	mustLen("GELUBackward", "x", xs.n, d.n)
	be.launch1(kGELUBackward, d.n, argInt(d.n), d.arg(), dys.arg(), xs.arg(), uint64(xs.dt), uint64(dys.dt), uint64(d.dt))
}
