//go:build cuda

package cuda

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/hostops"
)

// The Llama kernels (RMSNorm, SwiGLU, rotary embeddings, the offset causal
// softmax) are not in kernels.cu yet: these methods copy their inputs to
// the host, run kernels/hostops there (the CPU backend's loops, so the
// results are the CPU's bits) and copy the outputs back. Each call waits
// for the stream (Download does): correct everywhere, slow on a GPU.

// host downloads fp32 buffers.
func (be *Backend) host(op string, bs ...kernels.Buffer) [][]float32 {
	out := make([][]float32, len(bs))
	for i, b := range bs {
		d := be.buf(op, b)
		out[i] = make([]float32, d.n)
		be.Download(out[i], b)
	}
	return out
}

// RMSNorm implements kernels.Backend on the host.
func (be *Backend) RMSNorm(y, rstd, x, w kernels.Buffer, eps float32) {
	const op = "RMSNorm"
	h := be.host(op, x, w)
	xs, ws := h[0], h[1]
	rows := rowsOf(op, "x", len(xs), len(ws))
	mustLen(op, "y", be.buf(op, y).n, len(xs))
	mustLen(op, "rstd", be.buf(op, rstd).n, rows)
	ys, rs := make([]float32, len(xs)), make([]float32, rows)
	hostops.RMSNorm(ys, rs, xs, ws, eps, 0, rows)
	be.Upload(y, ys)
	be.Upload(rstd, rs)
}

// RMSNormBackward implements kernels.Backend on the host.
func (be *Backend) RMSNormBackward(dx, dw, dy, x, rstd, w kernels.Buffer) {
	const op = "RMSNormBackward"
	h := be.host(op, dw, dy, x, rstd, w)
	dws, dys, xs, rs, ws := h[0], h[1], h[2], h[3], h[4]
	cols := len(ws)
	rows := rowsOf(op, "x", len(xs), cols)
	mustLen(op, "dx", be.buf(op, dx).n, len(xs))
	mustLen(op, "dy", len(dys), len(xs))
	mustLen(op, "dw", len(dws), cols)
	mustLen(op, "rstd", len(rs), rows)
	dxs := make([]float32, len(xs))
	hostops.RMSNormDx(dxs, dys, xs, rs, ws, 0, rows)
	hostops.RMSNormDw(dws, dys, xs, rs, 0, cols)
	be.Upload(dx, dxs)
	be.Upload(dw, dws)
}

// SwiGLU implements kernels.Backend on the host.
func (be *Backend) SwiGLU(y, gate, up kernels.Buffer) {
	const op = "SwiGLU"
	h := be.host(op, gate, up)
	gs, us := h[0], h[1]
	mustLen(op, "y", be.buf(op, y).n, len(gs))
	mustLen(op, "up", len(us), len(gs))
	ys := make([]float32, len(gs))
	hostops.SwiGLU(ys, gs, us, 0, len(ys))
	be.Upload(y, ys)
}

// SwiGLUBackward implements kernels.Backend on the host.
func (be *Backend) SwiGLUBackward(dgate, dup, dy, gate, up kernels.Buffer) {
	const op = "SwiGLUBackward"
	h := be.host(op, dy, gate, up)
	dys, gs, us := h[0], h[1], h[2]
	mustLen(op, "dgate", be.buf(op, dgate).n, len(dys))
	mustLen(op, "dup", be.buf(op, dup).n, len(dys))
	mustLen(op, "gate", len(gs), len(dys))
	mustLen(op, "up", len(us), len(dys))
	dgs, dus := make([]float32, len(dys)), make([]float32, len(dys))
	hostops.SwiGLUBackward(dgs, dus, dys, gs, us, 0, len(dys))
	be.Upload(dgate, dgs)
	be.Upload(dup, dus)
}

// Rotary implements kernels.Backend on the host.
func (be *Backend) Rotary(y, x, cos, sin kernels.Buffer, headDim int) {
	const op = "Rotary"
	if headDim <= 0 || headDim%2 != 0 {
		panic(fmt.Sprintf("kernels/cuda: Rotary: head dimension %d is not a positive even number", headDim))
	}
	h := be.host(op, x, cos, sin)
	xs, cs, ss := h[0], h[1], h[2]
	rows := rowsOf(op, "cos", len(cs), headDim/2)
	mustLen(op, "sin", len(ss), len(cs))
	mustLen(op, "y", be.buf(op, y).n, len(xs))
	cols := 0
	if rows > 0 {
		cols = rowsOf(op, "x", len(xs), rows)
	}
	if cols%headDim != 0 {
		panic(fmt.Sprintf("kernels/cuda: Rotary: rows of %d values are not heads of %d", cols, headDim))
	}
	ys := make([]float32, len(xs))
	hostops.Rotary(ys, xs, cs, ss, cols, headDim, 0, rows)
	be.Upload(y, ys)
}

// CausalSoftmaxFrom implements kernels.Backend on the host.
func (be *Backend) CausalSoftmaxFrom(y, x kernels.Buffer, rows, cols, pos0 int, scale float32) {
	const op = "CausalSoftmaxFrom"
	xs := be.host(op, x)[0]
	mustLen(op, "y", be.buf(op, y).n, len(xs))
	if rows <= 0 || cols <= 0 || pos0 < 0 || len(xs)%(rows*cols) != 0 {
		panic(fmt.Sprintf("kernels/cuda: CausalSoftmaxFrom: %d values are not [batch, %d, %d] (pos0 %d)", len(xs), rows, cols, pos0))
	}
	ys := make([]float32, len(xs))
	hostops.CausalSoftmaxFrom(ys, xs, rows, cols, pos0, scale, 0, len(xs)/cols)
	be.Upload(y, ys)
}
